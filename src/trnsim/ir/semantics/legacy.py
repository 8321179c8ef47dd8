"""Ops JAX no longer emits but older StableHLO (and MHLO-era) programs contain: ``broadcast``, ``map``,
``torch_index_select``, and the batch-norm family (XLA's fused ops; JAX lowers batch norm to plain ops).

The batch-norm ops are computed in f64 and rounded once to the result type (each is a short chain of
exact-ish arithmetic, so this is within 1 ulp of any fp32 evaluation order).
"""

from __future__ import annotations

import numpy as np

from trnsim.ir.graph import Node
from trnsim.ir.interp import Interpreter
from trnsim.ir.rules import semantics
from trnsim.ir.semantics._util import compute, to

Arrays = list[np.ndarray]


@semantics("broadcast", kind="data")
def _broadcast(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """(legacy) result[i..., j...] = operand[j...] for the new leading dims ``broadcast_sizes``"""
    return [np.broadcast_to(args[0], node.out.type.shape)]


@semantics("map", kind="elementwise")
def _map(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result[i] = computation(operands[0][i], ..., operands[n][i]) over every index (``dimensions`` are all the
    dims); the computation is applied to whole tensors at once, which is the same for elementwise bodies"""
    outs = interp.call(node.regions[0], list(args), vectorized=True)
    return [to(v, np.broadcast_to(o, v.type.shape)) for v, o in zip(node.outputs, outs, strict=True)]


@semantics("torch_index_select", kind="index")
def _torch_index_select(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = operand indexed along ``dim`` by index (shape: operand[:dim] + index[batch_dims:] +
    operand[dim+1:]), the first ``batch_dims`` dims shared; indices clamp into range"""
    operand, index = args
    dim, batch = int(node.attrs["dim"]), int(node.attrs.get("batch_dims", 0))
    idx = np.clip(index.astype(np.int64), 0, operand.shape[dim] - 1)
    if batch == 0:
        return [np.take(operand, idx, axis=dim)]
    lead = operand.shape[:batch]
    flat_op = operand.reshape(-1, *operand.shape[batch:])
    flat_idx = idx.reshape(-1, *idx.shape[batch:])
    parts = [np.take(o, i, axis=dim - batch) for o, i in zip(flat_op, flat_idx, strict=True)]
    return [np.stack(parts).reshape(*lead, *parts[0].shape) if parts else
            np.zeros(node.out.type.shape, operand.dtype)]


def _feature_view(node: Node, x: np.ndarray) -> tuple[int, tuple[int, ...], list[int]]:
    f = int(node.attrs["feature_index"])
    axes = tuple(d for d in range(x.ndim) if d != f)
    shape = [1] * x.ndim
    shape[f] = x.shape[f]
    return f, axes, shape


@semantics("batch_norm_inference", kind="elementwise")
def _batch_norm_inference(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = (operand - mean) / sqrt(variance + epsilon) * scale + offset, per feature"""
    x, scale, offset, mean, var = (compute(a).astype(np.float64) for a in args)
    _, _, shape = _feature_view(node, x)
    eps = float(node.attrs["epsilon"])
    mean, var, scale, offset = (v.reshape(shape) for v in (mean, var, scale, offset))
    return [to(node.out, (x - mean) / np.sqrt(var + eps) * scale + offset)]


@semantics("batch_norm_training", kind="reduce")
def _batch_norm_training(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """(output, batch_mean, batch_var): mean and (biased) variance over all dims but ``feature_index``, output
    = (operand - mean) / sqrt(var + epsilon) * scale + offset"""
    x, scale, offset = (compute(a).astype(np.float64) for a in args)
    _, axes, shape = _feature_view(node, x)
    eps = float(node.attrs["epsilon"])
    mean = x.mean(axis=axes)
    var = ((x - mean.reshape(shape)) ** 2).mean(axis=axes)
    out = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * scale.reshape(shape) + offset.reshape(shape)
    return [to(node.outputs[0], out), to(node.outputs[1], mean), to(node.outputs[2], var)]


@semantics("batch_norm_grad", kind="reduce")
def _batch_norm_grad(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """(grad_operand, grad_scale, grad_offset) of batch_norm_training at (operand, scale, mean, variance):
    n = elements per feature, x̂ = (operand - mean) / sqrt(variance + epsilon),
    grad_offset = Σ dy, grad_scale = Σ dy·x̂, grad_operand = scale / sqrt(variance + epsilon) ·
    (dy - grad_offset / n - x̂ · grad_scale / n)"""
    x, scale, mean, var, dy = (compute(a).astype(np.float64) for a in args)
    _, axes, shape = _feature_view(node, x)
    eps = float(node.attrs["epsilon"])
    n = x.size // max(x.shape[int(node.attrs["feature_index"])], 1)
    std = np.sqrt(var + eps)
    xhat = (x - mean.reshape(shape)) / std.reshape(shape)
    g_offset = dy.sum(axis=axes)
    g_scale = (dy * xhat).sum(axis=axes)
    g_x = (scale / std).reshape(shape) * (dy - g_offset.reshape(shape) / n - xhat * g_scale.reshape(shape) / n)
    return [to(node.outputs[0], g_x), to(node.outputs[1], g_scale), to(node.outputs[2], g_offset)]
