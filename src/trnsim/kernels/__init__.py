"""The kernel library, written in ``trnsim.dsl``: each kernel is a ``@trnsim.kernel`` function plus a host
function that prepares numpy inputs, runs it on a simulated NeuronCore and returns numpy outputs.

    >>> import numpy as np
    >>> from trnsim import kernels
    >>> kernels.matmul(np.eye(4), np.arange(16.0).reshape(4, 4), "bf16")[1].tolist()
    [4.0, 5.0, 6.0, 7.0]
"""

from trnsim.kernels.attention import flash_attention as flash_attention
from trnsim.kernels.attention import flash_attention_backward as flash_attention_backward
from trnsim.kernels.attention import flash_attention_backward_kernel as flash_attention_backward_kernel
from trnsim.kernels.attention import flash_attention_kernel as flash_attention_kernel
from trnsim.kernels.conv import conv2d as conv2d
from trnsim.kernels.conv import conv_kernel as conv_kernel
from trnsim.kernels.embeddings import embedding as embedding
from trnsim.kernels.embeddings import embedding_backward as embedding_backward
from trnsim.kernels.embeddings import embedding_backward_kernel as embedding_backward_kernel
from trnsim.kernels.embeddings import embedding_kernel as embedding_kernel
from trnsim.kernels.gemm import matmul as matmul
from trnsim.kernels.gemm import matmul_kernel as matmul_kernel
from trnsim.kernels.losses import cross_entropy as cross_entropy
from trnsim.kernels.losses import cross_entropy_kernel as cross_entropy_kernel
from trnsim.kernels.norms import layernorm as layernorm
from trnsim.kernels.norms import layernorm_kernel as layernorm_kernel
from trnsim.kernels.norms import rmsnorm as rmsnorm
from trnsim.kernels.norms import rmsnorm_kernel as rmsnorm_kernel
from trnsim.kernels.operands import MatmulOperands as MatmulOperands
from trnsim.kernels.operands import prepare_matmul as prepare_matmul
from trnsim.kernels.optim import adamw as adamw
from trnsim.kernels.optim import adamw_kernel as adamw_kernel
from trnsim.kernels.pool import pool_gather_kernel as pool_gather_kernel
from trnsim.kernels.pool import pool_grad_kernel as pool_grad_kernel
from trnsim.kernels.pool import pool_kernel as pool_kernel
from trnsim.kernels.pool import reduce_window as reduce_window
from trnsim.kernels.pool import select_and_gather as select_and_gather
from trnsim.kernels.pool import select_and_scatter as select_and_scatter
from trnsim.kernels.rowwise import activation_kernel as activation_kernel
from trnsim.kernels.rowwise import gelu as gelu
from trnsim.kernels.rowwise import silu as silu
from trnsim.kernels.rowwise import softmax as softmax
from trnsim.kernels.rowwise import softmax_kernel as softmax_kernel
from trnsim.kernels.selection import argmax as argmax
from trnsim.kernels.selection import argmax_kernel as argmax_kernel
from trnsim.kernels.selection import topk as topk
from trnsim.kernels.selection import topk_kernel as topk_kernel
from trnsim.kernels.sort import sort as sort
from trnsim.kernels.sort import sort_kernel as sort_kernel
from trnsim.kernels.transposes import transpose as transpose
from trnsim.kernels.transposes import transpose_kernel as transpose_kernel
