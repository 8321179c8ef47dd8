"""Reductions: reduce, reduce_window, select_and_scatter.

A region that is a single ``add``/``max``/``min``/``multiply``/``and``/``or``/``xor`` of its two arguments runs
as a numpy reduction; any other region (argmax's pair of reductions, custom combiners) is folded step by step,
vectorised over the kept dimensions. Float sums accumulate in fp32, as the Vector engine does, and round
once to the result type.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from trnsim.ir.graph import Graph, Node
from trnsim.ir.interp import Interpreter
from trnsim.ir.rules import semantics
from trnsim.ir.semantics._util import compute, ieee_max, ieee_min, is_float, to

Arrays = list[np.ndarray]

_UFUNCS: dict[str, np.ufunc] = {
    "add": np.add, "maximum": np.maximum, "minimum": np.minimum, "multiply": np.multiply,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
}
_BOOL_UFUNCS: dict[str, np.ufunc] = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor,
                                     "add": np.logical_or, "maximum": np.logical_or, "minimum": np.logical_and,
                                     "multiply": np.logical_and}


def simple_combiner(region: Graph) -> str | None:
    """The op name if ``region`` is ``return op(arg0, arg1)`` (either argument order), else None."""
    if len(region.params) != 2 or len(region.nodes) != 1 or len(region.results) != 1:
        return None
    node = region.nodes[0]
    ids = {v.id for v in node.inputs}
    if node.op in _UFUNCS and ids == {p.id for p in region.params} and region.results[0] is node.out:
        return node.op
    return None


def _ufunc(op: str, dt: np.dtype) -> np.ufunc:
    return _BOOL_UFUNCS[op] if dt == np.bool_ else _UFUNCS[op]


def combine(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``op(a, b)`` elementwise, with IEEE signed zeros for float max/min."""
    if op in ("maximum", "minimum") and is_float(np.result_type(a, b)):
        return ieee_max(a, b) if op == "maximum" else ieee_min(a, b)
    return _ufunc(op, np.result_type(a, b))(a, b)


def reduce_array(op: str, x: np.ndarray, axis: tuple[int, ...]) -> np.ndarray:
    """``op`` folded over ``axis``; float max/min give +0 over {-0, +0} for max and -0 for min (IEEE)."""
    out = _ufunc(op, x.dtype).reduce(x, axis=axis)
    if op in ("maximum", "minimum") and is_float(x.dtype) and x.size:
        zero = x == 0
        want_neg = (zero & np.signbit(x)) if op == "minimum" else (zero & ~np.signbit(x))
        has = np.any(want_neg, axis=axis)
        is_zero = out == 0
        if op == "minimum":
            out = np.where(is_zero, np.where(has, -0.0, 0.0).astype(out.dtype), out)
        else:
            out = np.where(is_zero, np.where(has, 0.0, -0.0).astype(out.dtype), out)
    return out


def scatter_at(op: str, out: np.ndarray, targets: np.ndarray, values: np.ndarray) -> None:
    """``out[targets] = op(out[targets], values)`` applied in order (repeated targets combine), in place."""
    signed_zeros = op in ("maximum", "minimum") and is_float(out.dtype)
    orig = out.copy() if signed_zeros else out
    _ufunc(op, out.dtype).at(out, targets, values)
    if signed_zeros:
        # the sign of a zero result: max is +0 if any +0 took part, min is -0 if any -0 did
        neg = op == "minimum"
        took = (orig == 0) & (np.signbit(orig) == neg)
        np.logical_or.at(took, targets, (values == 0) & (np.signbit(values) == neg))
        zero = out == 0
        out[zero & took] = -0.0 if neg else 0.0
        out[zero & ~took] = 0.0 if neg else -0.0


@semantics("reduce", kind="reduce")
def _reduce(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """results = fold(body, init_values, operands along ``dimensions``)"""
    n = len(args) // 2
    operands, inits = args[:n], args[n:]
    dims = tuple(node.attrs["dimensions"])
    body = node.regions[0]
    op = simple_combiner(body) if n == 1 else None
    if op is not None:
        x = compute(operands[0])
        init = compute(inits[0])
        if op == "add" and x.dtype.kind == "f":
            total = np.add.reduce(x.astype(np.float64), axis=dims) + init.astype(np.float64)
            return [to(node.outputs[0], total.astype(np.float32) if x.dtype == np.float32 else total)]
        return [to(node.outputs[0], combine(op, init, reduce_array(op, x, dims)) if x.size else
                   np.broadcast_to(init, node.outputs[0].type.shape))]
    return _fold(node, body, operands, inits, dims, interp)


def _fold(node: Node, body: Graph, operands: Sequence[np.ndarray], inits: Sequence[np.ndarray],
          dims: tuple[int, ...], interp: Interpreter) -> Arrays:
    keep = [d for d in range(operands[0].ndim) if d not in dims]
    out_shape = tuple(operands[0].shape[d] for d in keep)
    reduced = int(np.prod([operands[0].shape[d] for d in dims], dtype=np.int64))   # (not -1: sizes may be 0)
    moved = [np.transpose(x, list(dims) + keep).reshape((reduced, *out_shape)) for x in operands]
    acc = [np.broadcast_to(i, out_shape).copy() for i in inits]
    for step in range(moved[0].shape[0]):
        acc = interp.call(body, [*acc, *(m[step] for m in moved)], vectorized=True)
        acc = [np.broadcast_to(a, out_shape) for a in acc]
    return [to(v, a) for v, a in zip(node.outputs, acc, strict=True)]


def _window_views(x: np.ndarray, init: np.ndarray, node: Node, out_shape: tuple[int, ...]) -> list[np.ndarray]:
    """One strided view of the padded, dilated operand per window offset, each of ``out_shape``."""
    a = node.attrs
    rank = x.ndim
    win = tuple(a["window_dimensions"])
    strides = tuple(a.get("window_strides") or (1,) * rank)
    base = tuple(a.get("base_dilations") or (1,) * rank)
    wdil = tuple(a.get("window_dilations") or (1,) * rank)
    pad = np.asarray(a.get("padding") if a.get("padding") is not None else np.zeros((rank, 2), np.int64))
    pad = pad.reshape(rank, 2)
    dil_shape = tuple((d - 1) * b + 1 if d else 0 for d, b in zip(x.shape, base, strict=True))
    full = tuple(d + int(lo) + int(hi) for d, (lo, hi) in zip(dil_shape, pad, strict=True))
    padded = np.full(tuple(max(f, 0) for f in full), init, dtype=x.dtype)
    # place the dilated operand, cropping where padding is negative
    src = tuple(slice(None, None, 1) for _ in range(rank))
    dst_parts: list[slice] = []
    src_parts: list[slice] = []
    for d in range(rank):
        lo = int(pad[d][0])
        positions = np.arange(x.shape[d]) * base[d] + lo
        ok = (positions >= 0) & (positions < full[d])
        first = int(np.argmax(ok)) if ok.any() else 0
        count = int(ok.sum())
        src_parts.append(slice(first, first + count))
        start = first * base[d] + lo
        dst_parts.append(slice(start, start + (count - 1) * base[d] + 1 if count else start, base[d]))
    del src
    padded[tuple(dst_parts)] = x[tuple(src_parts)]
    views = []
    for offset in itertools.product(*(range(w) for w in win)):
        index = tuple(slice(o * wd, o * wd + (n - 1) * s + 1, s) for o, wd, n, s in zip(offset, wdil, out_shape,
                                                                                          strides, strict=True))
        views.append(padded[index])
    return views


@semantics("reduce_window", kind="reduce")
def _reduce_window(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """results[i] = fold(body, init_values, the window of operands at i·stride (after padding and dilation))"""
    n = len(args) // 2
    operands, inits = args[:n], args[n:]
    out_shape = node.outputs[0].type.shape
    if 0 in out_shape:                  # no window fits (a slice's stop (n - 1)·s + 1 would count from the end)
        return [to(v, np.broadcast_to(compute(i), out_shape)) for v, i in zip(node.outputs, inits, strict=True)]
    views = [_window_views(compute(x), compute(i), node, out_shape) for x, i in zip(operands, inits, strict=True)]
    body = node.regions[0]
    op = simple_combiner(body) if n == 1 else None
    if op is not None:
        # NOTE: window elements combine one at a time in fp32, in window order (as XLA does for cumsum)
        acc = np.broadcast_to(compute(inits[0]), out_shape)
        for v in views[0]:
            acc = combine(op, acc, v)
        return [to(node.outputs[0], acc)]
    accs = [np.broadcast_to(compute(i), out_shape) for i in inits]
    for k in range(len(views[0])):
        new = interp.call(body, [*accs, *(v[k] for v in views)], vectorized=True)
        accs = [np.broadcast_to(a, out_shape) for a in new]
    return [to(v, a) for v, a in zip(node.outputs, accs, strict=True)]


@semantics("select_and_scatter", kind="reduce")
def _select_and_scatter(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """For each window of operand, pick one element with ``select`` (the first that no later element beats),
    then combine source[window] into result[picked] with ``scatter``; result starts at init_value."""
    operand, source, init = args
    select, scatter = node.regions
    rank = operand.ndim
    out_shape = source.shape
    a = node.attrs
    pad = np.asarray(a.get("padding") if a.get("padding") is not None else np.zeros((rank, 2), np.int64))
    pad = pad.reshape(rank, 2)
    win = tuple(a["window_dimensions"])
    strides = tuple(a.get("window_strides") or (1,) * rank)
    # positions of each window element in the operand (without padding); padding is never selected
    best_val: np.ndarray | None = None
    best_pos: np.ndarray | None = None
    have = np.zeros(out_shape, bool)
    grids = np.meshgrid(*(np.arange(n) for n in out_shape), indexing="ij")
    for offset in itertools.product(*(range(w) for w in win)):
        pos = np.stack([g * s + o - int(p[0]) for g, s, o, p in zip(grids, strides, offset, pad, strict=True)])
        inside = np.all((pos >= 0) & (pos < np.asarray(operand.shape).reshape((rank,) + (1,) * rank)), axis=0)
        clipped = np.clip(pos, 0, np.asarray(operand.shape).reshape((rank,) + (1,) * rank) - 1)
        val = operand[tuple(clipped)]
        if best_val is None or best_pos is None:
            best_val, best_pos, have = val.copy(), np.where(inside, clipped, -1), inside.copy()
            continue
        keep = interp.call(select, [best_val, val], vectorized=True)[0]
        take = inside & (~have | ~keep.astype(bool))
        best_val = np.where(take, val, best_val)
        best_pos = np.where(take, clipped, best_pos)
        have = have | inside
    result = np.broadcast_to(init, operand.shape).copy()
    assert best_pos is not None
    flat = np.ravel_multi_index(tuple(np.maximum(best_pos, 0)), operand.shape).ravel()
    valid = (best_pos[0] >= 0).ravel()
    src = source.ravel()
    op = simple_combiner(scatter)
    if op is not None:
        acc = compute(result).ravel()
        scatter_at(op, acc, flat[valid], compute(src)[valid])
        return [to(node.out, acc.reshape(operand.shape))]
    acc = result.ravel()
    for i in np.flatnonzero(valid):
        acc[flat[i]] = interp.call(scatter, [acc[flat[i]], src[i]])[0]
    return [acc.reshape(operand.shape)]
