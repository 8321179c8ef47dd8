"""``trnsim.dsl``: an NKI-style kernel language that traces Python into NeuronCore programs.

A kernel is a Python function over HBM tensors, decorated with ``@trnsim.kernel``. Running it traces it:
its Python runs once, loops unroll, and every DSL call appends ISA instructions to the engine streams of a
``trnsim.isa.Program``; ``trnsim.run_kernel`` runs that program on a simulated device.

    import numpy as np, trnsim
    from trnsim import dsl

    @trnsim.kernel
    def scaled_softmax(x, *, scale=1.0):                 # x: an HBM tensor [R, C]; scale: a constant
        R, C = x.shape
        out = dsl.hbm_tensor((R, C), x.dtype)            # outputs are declared, then returned
        for r in range(0, R, 128):                       # static loop: unrolled at trace time
            n = min(128, R - r)
            t = dsl.load(x[r:r + n, :])                  # DMA HBM → SBUF tile [n, C]
            neg_max = dsl.reduce_max(t, negate=True)     # VectorE: [n, 1] of -max(row)
            e, s = dsl.activation_reduce("exp", t, scale=scale, bias=dsl.multiply(neg_max, scale))
            y = dsl.multiply(e, dsl.reciprocal(s))       # ScalarE 1/s, VectorE e * (1/s) per row
            dsl.store(out[r:r + n, :], y)                # DMA SBUF → HBM (casts to out's dtype)
        return out

    res = trnsim.run_kernel(scaled_softmax, np.random.rand(300, 64).astype(np.float32), scale=0.5)
    res.outputs[0]            # numpy array; res.program is the traced Program (print(res.program))

Inputs are numpy arrays (ISA dtype from the numpy dtype), ``typed(array, "bf16")`` for ISA dtypes numpy
lacks (bf16, fp8, MX element codes, int4), or ``None`` for an optional input; keyword arguments are
compile-time constants. ``kernel.compile(*shape_descriptions, **constants)`` traces without data (anything
with ``.shape`` and ``.dtype``) and returns the ``Compiled`` program; programs are cached per shapes,
dtypes and constants. Outputs come back as float32 values (int64 for integer dtypes), in return order.

Tensors (``Tensor``): HBM tensors (kernel inputs, ``hbm_tensor`` outputs) and tiles
(``sbuf(shape, dtype)``, ``psum(shape)``, ``ndarray(shape, dtype, buffer=...)``, ``zeros``, ``full``,
``iota``). Dimension 0 of a tile is its partition dimension (≤ 128; ``tile_size()`` gives the target's
limits by NKI's names). Slicing, integer indexing, ``None`` (new axis), ``.T`` (HBM), ``broadcast_to``
and ``bitcast`` give views (a slice past a dimension is an error, not clamped as numpy would); ops take views
anywhere a tensor goes.

Operations (names follow NKI where it has them):

* data movement (``data``): ``load(view)`` / ``load(tile, view)``, ``store(view, tile)``, ``dma_copy``,
  ``dma_gather(tile, table, index)`` / ``dma_scatter(table, tile, index)`` / ``dma_scatter_add(table, tile,
  index)`` (indirect rows),
  ``copy(t, dtype=)`` (engine copy/cast, e.g. out of PSUM), ``memset``, ``release``;
* TensorE (``tensor_engine``): ``matmul(acc, stationary, moving, accumulate=, stationary_scale=,
  moving_scale=, sparsity=, stationary_index=)``, ``transpose(t)``;
* elementwise (``compute``): ``add subtract multiply divide maximum minimum power fmod``, comparisons
  ``equal … less_equal``, bitwise ops, all taking tiles, numbers or [P, 1] tiles (VectorE
  ``tensor_tensor``/``tensor_scalar``); activations on ScalarE ``exp log tanh sigmoid gelu
  gelu_apprx_tanh silu relu rsqrt sqrt reciprocal square softplus erf absolute negative identity`` as
  ``f(x, scale=, bias=)``, or ``activation(func, x, ..., reduce_res=)`` / ``activation_reduce``;
  ``where`` (select), ``affine_select`` (masks);
* reductions (``reductions``): ``reduce(op, x, axis)``, ``reduce_sum/max/min/prod``, ``partition_reduce``,
  ``max8`` / ``find_index8`` / ``match_replace8`` (top-k selection),
  ``partition_broadcast``, ``bn_stats``, ``bn_aggr``.

Results are new SBUF tiles unless ``out=`` names one; their dtype is the first operand's (fp32 out of
PSUM) unless ``dtype=`` says otherwise. Engines are picked per op (VectorE for ALU ops, ScalarE for
activation functions, GpSimd for iota/masks/partition ops, TensorE for matmul; ``engine=`` where the ISA
allows a choice); DMAs are issued from the ``sync`` engine, round-robin over the DMA queues.

Synchronisation is automatic (``deps``): every instruction signals the semaphore of its engine (or DMA
queue) and waits for the earlier instructions of other engines whose memory it reads or overwrites.
Allocation is automatic (``alloc``): a tile is freed when the kernel drops its last reference (or at
``release``), and a new tile takes the memory freed longest ago (never-used memory first), so a loop that
rebinds a name keeps its DMAs ahead of its compute, and PSUM accumulators rotate through the 8 banks;
running out of SBUF/PSUM is a ``KernelError`` at the kernel line that asked, naming the sizes and the
largest live tiles. Errors in kernels point at the kernel's line and say how to fix it; faults at run
time (``SimError``) name the kernel line of the faulting instruction.
"""

from trnsim.dsl.compute import ACTIVATION_FUNCS as ACTIVATION_FUNCS
from trnsim.dsl.compute import BINARY_OPS as BINARY_OPS
from trnsim.dsl.compute import absolute as absolute
from trnsim.dsl.compute import activation as activation
from trnsim.dsl.compute import activation_reduce as activation_reduce
from trnsim.dsl.compute import add as add
from trnsim.dsl.compute import affine_select as affine_select
from trnsim.dsl.compute import binary as binary
from trnsim.dsl.compute import bitwise_and as bitwise_and
from trnsim.dsl.compute import bitwise_or as bitwise_or
from trnsim.dsl.compute import bitwise_xor as bitwise_xor
from trnsim.dsl.compute import divide as divide
from trnsim.dsl.compute import equal as equal
from trnsim.dsl.compute import erf as erf
from trnsim.dsl.compute import exp as exp
from trnsim.dsl.compute import fmod as fmod
from trnsim.dsl.compute import gelu as gelu
from trnsim.dsl.compute import gelu_apprx_tanh as gelu_apprx_tanh
from trnsim.dsl.compute import greater as greater
from trnsim.dsl.compute import greater_equal as greater_equal
from trnsim.dsl.compute import identity as identity
from trnsim.dsl.compute import left_shift as left_shift
from trnsim.dsl.compute import less as less
from trnsim.dsl.compute import less_equal as less_equal
from trnsim.dsl.compute import log as log
from trnsim.dsl.compute import maximum as maximum
from trnsim.dsl.compute import minimum as minimum
from trnsim.dsl.compute import multiply as multiply
from trnsim.dsl.compute import negative as negative
from trnsim.dsl.compute import not_equal as not_equal
from trnsim.dsl.compute import power as power
from trnsim.dsl.compute import reciprocal as reciprocal
from trnsim.dsl.compute import relu as relu
from trnsim.dsl.compute import right_shift as right_shift
from trnsim.dsl.compute import rsqrt as rsqrt
from trnsim.dsl.compute import sigmoid as sigmoid
from trnsim.dsl.compute import silu as silu
from trnsim.dsl.compute import softplus as softplus
from trnsim.dsl.compute import sqrt as sqrt
from trnsim.dsl.compute import square as square
from trnsim.dsl.compute import subtract as subtract
from trnsim.dsl.compute import tanh as tanh
from trnsim.dsl.compute import tensor_scalar as tensor_scalar
from trnsim.dsl.compute import tensor_tensor as tensor_tensor
from trnsim.dsl.compute import where as where
from trnsim.dsl.data import copy as copy
from trnsim.dsl.data import dma_copy as dma_copy
from trnsim.dsl.data import dma_gather as dma_gather
from trnsim.dsl.data import dma_scatter as dma_scatter
from trnsim.dsl.data import dma_scatter_add as dma_scatter_add
from trnsim.dsl.data import full as full
from trnsim.dsl.data import hbm_tensor as hbm_tensor
from trnsim.dsl.data import iota as iota
from trnsim.dsl.data import load as load
from trnsim.dsl.data import memset as memset
from trnsim.dsl.data import ndarray as ndarray
from trnsim.dsl.data import psum as psum
from trnsim.dsl.data import release as release
from trnsim.dsl.data import sbuf as sbuf
from trnsim.dsl.data import store as store
from trnsim.dsl.data import zeros as zeros
from trnsim.dsl.errors import KernelError as KernelError
from trnsim.dsl.jit import Compiled as Compiled
from trnsim.dsl.jit import Kernel as Kernel
from trnsim.dsl.jit import KernelResult as KernelResult
from trnsim.dsl.jit import Typed as Typed
from trnsim.dsl.jit import kernel as kernel
from trnsim.dsl.jit import run_kernel as run_kernel
from trnsim.dsl.jit import typed as typed
from trnsim.dsl.reductions import bn_aggr as bn_aggr
from trnsim.dsl.reductions import bn_stats as bn_stats
from trnsim.dsl.reductions import find_index8 as find_index8
from trnsim.dsl.reductions import match_replace8 as match_replace8
from trnsim.dsl.reductions import max8 as max8
from trnsim.dsl.reductions import partition_broadcast as partition_broadcast
from trnsim.dsl.reductions import partition_reduce as partition_reduce
from trnsim.dsl.reductions import reduce as reduce
from trnsim.dsl.reductions import reduce_max as reduce_max
from trnsim.dsl.reductions import reduce_min as reduce_min
from trnsim.dsl.reductions import reduce_prod as reduce_prod
from trnsim.dsl.reductions import reduce_sum as reduce_sum
from trnsim.dsl.tensor import Tensor as Tensor
from trnsim.dsl.tensor_engine import matmul as matmul
from trnsim.dsl.tensor_engine import transpose as transpose
from trnsim.dsl.trace import TileSize as TileSize
from trnsim.dsl.trace import tile_size as tile_size
