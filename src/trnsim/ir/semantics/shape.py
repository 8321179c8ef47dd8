"""Layout and data-movement ops: constants, iota, broadcasts, reshapes, transposes, slices, padding."""

from __future__ import annotations

import numpy as np

from trnsim.ir.graph import Node
from trnsim.ir.interp import Interpreter
from trnsim.ir.rules import semantics
from trnsim.ir.semantics._util import to

Arrays = list[np.ndarray]


@semantics("constant", kind="source")
def _constant(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = value"""
    return [node.attrs["value"]]


@semantics("iota", kind="source")
def _iota(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result[i0, ..., in] = i_{iota_dimension}"""
    t = node.out.type
    dim = node.attrs["iota_dimension"]
    shape = [1] * t.rank
    shape[dim] = t.shape[dim]
    ramp = np.arange(t.shape[dim], dtype=np.float64 if t.dt.is_float else np.int64).reshape(shape)
    return [to(node.out, np.broadcast_to(ramp, t.shape))]


@semantics("broadcast_in_dim", kind="data")
def _broadcast_in_dim(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result[i] = operand[i[broadcast_dimensions]] (size-1 operand dims repeat)"""
    x = args[0]
    t = node.out.type
    dims = node.attrs["broadcast_dimensions"]
    shape = [1] * t.rank
    for src, dst in enumerate(dims):
        shape[dst] = x.shape[src]
    order = np.argsort(dims, kind="stable")
    x = np.transpose(x, order) if len(dims) > 1 else x
    return [np.broadcast_to(x.reshape(shape), t.shape)]


@semantics("reshape", kind="data")
def _reshape(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = operand in row-major order with the result shape"""
    return [np.reshape(args[0], node.out.type.shape)]


@semantics("transpose", kind="data")
def _transpose(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result[i] = operand[i permuted by ``permutation``^-1]"""
    return [np.transpose(args[0], node.attrs["permutation"])]


@semantics("reverse", kind="data")
def _reverse(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = operand reversed along ``dimensions``"""
    return [np.flip(args[0], axis=tuple(node.attrs["dimensions"]))]


@semantics("slice", kind="data")
def _slice(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = operand[start:limit:stride] per dimension"""
    a = node.attrs
    index = tuple(slice(s, e, st) for s, e, st in zip(a["start_indices"], a["limit_indices"], a["strides"],
                                                       strict=True))
    return [args[0][index]]


@semantics("concatenate", kind="data")
def _concatenate(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = the operands joined along ``dimension``"""
    return [np.concatenate(args, axis=node.attrs["dimension"])]


@semantics("pad", kind="data")
def _pad(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = operand with ``interior_padding`` between elements and edge padding (negative: cropping),
    filled with padding_value"""
    x, value = args
    a = node.attrs
    lo, hi, interior = a["edge_padding_low"], a["edge_padding_high"], a["interior_padding"]
    t = node.out.type
    # dilate by the interior padding, pad the edges by max(0, pad), then crop the negative edges
    dilated_shape = tuple(d + max(d - 1, 0) * i for d, i in zip(x.shape, interior, strict=True))
    full_shape = tuple(d + max(low, 0) + max(high, 0) for d, low, high in zip(dilated_shape, lo, hi, strict=True))
    out = np.full(full_shape, value, dtype=t.np_dtype)
    place = tuple(slice(max(low, 0), max(low, 0) + d, i + 1) for low, d, i in zip(lo, dilated_shape, interior,
                                                                                   strict=True))
    out[place] = x
    crop = tuple(slice(max(-low, 0), full - max(-high, 0)) for low, high, full in zip(lo, hi, full_shape,
                                                                                      strict=True))
    return [out[crop]]


def _clamped_starts(starts: list[np.ndarray], operand: tuple[int, ...], sizes: tuple[int, ...]) -> list[int]:
    """Start indices clamped so the window lies inside the operand (StableHLO dynamic_slice semantics)."""
    return [int(min(max(int(s), 0), d - n)) for s, d, n in zip(starts, operand, sizes, strict=True)]


@semantics("dynamic_slice", kind="data")
def _dynamic_slice(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = operand[start:start+slice_sizes], starts clamped into [0, dim - size]"""
    x, starts = args[0], args[1:]
    sizes = tuple(node.attrs["slice_sizes"])
    begin = _clamped_starts(starts, x.shape, sizes)
    return [x[tuple(slice(b, b + n) for b, n in zip(begin, sizes, strict=True))]]


@semantics("dynamic_update_slice", kind="data")
def _dynamic_update_slice(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = operand with update written at the (clamped) start indices"""
    x, update, starts = args[0], args[1], args[2:]
    begin = _clamped_starts(starts, x.shape, update.shape)
    out = x.copy()
    out[tuple(slice(b, b + n) for b, n in zip(begin, update.shape, strict=True))] = update
    return [out]


@semantics("optimization_barrier", kind="data")
def _optimization_barrier(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """results = operands (a scheduling fence, e.g. from jax.checkpoint)"""
    return list(args)
