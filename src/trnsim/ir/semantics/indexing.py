"""gather and scatter, in StableHLO's full generality (batching dims, index_vector_dim, windows).

gather clamps each start index so its slice lies inside the operand; scatter skips any update whose
window would fall outside (both per the StableHLO spec). Scatter applies its combiner in row-major order of
the updates, rounding after each application, exactly as the spec's sequential definition reads; a simple
combiner (add, max, min, multiply, ...) or a plain replacement runs as a numpy scatter.
"""

from __future__ import annotations

import numpy as np

from trnsim.ir.graph import Graph, Node
from trnsim.ir.interp import Interpreter
from trnsim.ir.rules import semantics
from trnsim.ir.semantics._util import to
from trnsim.ir.semantics.reduce import scatter_at, simple_combiner

Arrays = list[np.ndarray]


def _index_vectors(indices: np.ndarray, index_vector_dim: int) -> np.ndarray:
    """indices with the index vector moved last: shape (*batch, K)."""
    indices = indices[..., None] if index_vector_dim == indices.ndim else np.moveaxis(indices, index_vector_dim, -1)
    return indices.astype(np.int64)


@semantics("gather", kind="index")
def _gather(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result[b, o] = operand[clamp(start(b)) + o] over slices of ``slice_sizes``; collapsed and batching
    dims dropped, offset dims at ``offset_dims``"""
    operand, indices = args
    dn = node.attrs["dimension_numbers"]
    sizes = tuple(node.attrs["slice_sizes"])
    rank = operand.ndim
    vec = _index_vectors(indices, dn["index_vector_dim"])
    batch_shape = vec.shape[:-1]
    starts = np.zeros((*batch_shape, rank), np.int64)
    for k, d in enumerate(dn["start_index_map"]):
        starts[..., d] = vec[..., k]
    # batching dims: the operand's i-th batching dim is indexed by the indices' batch position
    idx_batch_dims = [d for d in range(indices.ndim) if d != dn["index_vector_dim"]]
    for op_dim, ind_dim in zip(dn.get("operand_batching_dims", ()), dn.get("start_indices_batching_dims", ()),
                               strict=True):
        axis = idx_batch_dims.index(ind_dim)
        shape = [1] * len(batch_shape)
        shape[axis] = batch_shape[axis]
        starts[..., op_dim] = np.arange(batch_shape[axis]).reshape(shape)
    limit = np.asarray(operand.shape) - np.asarray(sizes)
    starts = np.clip(starts, 0, np.maximum(limit, 0))
    nb = len(batch_shape)
    index = []
    for d in range(rank):
        ramp = np.arange(sizes[d]).reshape((1,) * nb + tuple(sizes[d] if e == d else 1 for e in range(rank)))
        index.append(starts[..., d].reshape(batch_shape + (1,) * rank) + ramp)
    sliced = operand[tuple(index)]                      # (*batch, *slice_sizes)
    dropped = sorted(set(dn["collapsed_slice_dims"]) | set(dn.get("operand_batching_dims", ())))
    sliced = sliced.reshape(batch_shape + tuple(s for d, s in enumerate(sizes) if d not in dropped))
    out_rank = node.out.type.rank
    offset_dims = list(dn["offset_dims"])
    batch_positions = [d for d in range(out_rank) if d not in offset_dims]
    # axes of `sliced` are (batch..., offsets...); place them at batch_positions and offset_dims
    perm = [0] * out_rank
    for i, d in enumerate(batch_positions):
        perm[d] = i
    for i, d in enumerate(offset_dims):
        perm[d] = nb + i
    return [np.transpose(sliced, perm)]


def is_replace(region: Graph) -> bool:
    """The scatter body returns its update unchanged: a plain replacement."""
    return not region.nodes and len(region.results) == 1 and region.results[0] is region.params[-1]


@semantics("scatter", kind="index")
def _scatter(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """results = inputs; for each update index u (row-major): i = start(u) + window(u); if i is inside,
    results[i] = update_computation(results[i], updates[u])"""
    n = (len(args) - 1) // 2
    inputs, indices, updates = args[:n], args[n], args[n + 1:]
    dn = node.attrs["scatter_dimension_numbers"]
    rank = inputs[0].ndim
    upd = updates[0]
    window_dims = list(dn["update_window_dims"])
    scatter_dims = [d for d in range(upd.ndim) if d not in window_dims]
    vec = _index_vectors(indices, dn["index_vector_dim"])
    # full index per update element: (*upd.shape, rank)
    full = np.zeros((*upd.shape, rank), np.int64)
    grids = np.indices(upd.shape, sparse=True)
    scatter_index = tuple(grids[d] for d in scatter_dims)
    starts = vec[scatter_index] if scatter_dims else np.broadcast_to(vec, (1,) * upd.ndim + vec.shape[-1:])
    for k, d in enumerate(dn["scatter_dims_to_operand_dims"]):
        full[..., d] += starts[..., k]
    idx_batch_dims = [d for d in range(indices.ndim) if d != dn["index_vector_dim"]]
    for op_dim, ind_dim in zip(dn.get("input_batching_dims", ()), dn.get("scatter_indices_batching_dims", ()),
                               strict=True):
        full[..., op_dim] += grids[scatter_dims[idx_batch_dims.index(ind_dim)]]
    skipped = set(dn["inserted_window_dims"]) | set(dn.get("input_batching_dims", ()))
    window_operand_dims = [d for d in range(rank) if d not in skipped]
    for w, d in zip(window_dims, window_operand_dims, strict=True):
        full[..., d] += grids[w]
    if inputs[0].size == 0 or upd.size == 0:   # nothing to update, or nowhere to: every window is skipped
        return [x.copy() for x in inputs]
    shape = np.asarray(inputs[0].shape)
    inside = np.all((full >= 0) & (full < shape), axis=-1)
    # NOTE: the spec skips an update when any element of its *window* is out of bounds, not just itself
    if window_dims:
        window_axes = tuple(window_dims)
        inside = np.broadcast_to(np.all(inside, axis=window_axes, keepdims=True), inside.shape)
    flat = np.ravel_multi_index(tuple(np.moveaxis(np.where(inside[..., None], full, 0), -1, 0)), inputs[0].shape)
    order = np.flatnonzero(inside.ravel())
    targets = flat.ravel()[order]
    region = node.regions[0]
    results = [x.copy().ravel() for x in inputs]
    if n == 1 and is_replace(region):
        results[0][targets] = updates[0].ravel()[order]     # numpy keeps the last write: row-major order
        return [to(node.outputs[0], results[0].reshape(inputs[0].shape))]
    op = simple_combiner(region) if n == 1 else None
    if op is not None:
        out = results[0]
        # NOTE: in the operand's own dtype, so each application rounds (bf16 adds stay bf16), as specified
        scatter_at(op, out, targets, updates[0].ravel()[order])
        return [out.reshape(inputs[0].shape)]
    flat_updates = [u.ravel() for u in updates]
    for t, u in zip(targets, order, strict=True):
        new = interp.call(region, [*(r[t] for r in results), *(fu[u] for fu in flat_updates)])
        for r, v in zip(results, new, strict=True):
            r[t] = v
    return [r.reshape(x.shape) for r, x in zip(results, inputs, strict=True)]
