"""Gathers and scatter-adds of one element per row along the last axis, as one-hot selects in a recipe."""

from __future__ import annotations

from trnsim.compiler.tilegen.recipe import DSL_DTYPE, MAX_ROW, Recipe, Step
from trnsim.ir.graph import Node


def index_recipe(node: Node) -> Recipe | None:
    """A gather or scatter-add of one element per row along the last axis (cross-entropy's
    ``take_along_axis`` of the label's logit, and its gradient) as a one-hot select on VectorE, or None.

    NOTE: a vocabulary-sized last axis is in SBUF already in the row layout, and an indirect DMA of 4-byte
    elements (one descriptor per row, neuron.md §2.6: DMAs want ≥ 2 KiB contiguous) would be slower than
    three VectorE passes: ``mask = (iota_j == index[p])`` (``tensor_scalar``), ``select``, then the row sum
    (gather) or ``select(mask, x + update[p], x)`` (scatter-add). Rows index one element each (batching
    dims are all the leading axes), so the one-hot form is exact for indices in ``[0, V)``; one outside
    selects nothing where StableHLO clamps it (a cross-entropy's labels are wrapped into range first)."""
    from trnsim.ir.semantics.reduce import simple_combiner

    if node.op not in ("gather", "scatter") or len(node.outputs) != 1:
        return None
    x, idx = node.inputs[0].type, node.inputs[1].type
    r = x.rank
    lead = tuple(range(r - 1))
    if r < 2 or x.dtype not in ("f32", "bf16", "f16") or idx.dtype not in ("i32", "ui32") or x.shape[-1] > MAX_ROW \
            or x.size == 0:
        return None
    rows, cols = x.size // x.shape[-1], x.shape[-1]
    if idx.size != rows:
        return None
    dt = DSL_DTYPE[x.dtype]
    iota: Step = ("iota", "", (("imm", 1.0), ("imm", float(cols))), "int32")
    if node.op == "gather":
        dn = node.attrs["dimension_numbers"]
        if dn["collapsed_slice_dims"] != (r - 1,) or dn["start_index_map"] != (r - 1,) or \
                tuple(dn["operand_batching_dims"]) != lead or tuple(dn["start_indices_batching_dims"]) != lead or \
                dn["offset_dims"] or tuple(node.attrs["slice_sizes"]) != (1,) * r or node.out.type.size != rows:
            return None
        steps: tuple[Step, ...] = (iota, ("alu", "eq", (("tmp", 0), ("in", 1)), "uint8"),
                                   ("const", "", (("imm", 0.0),), dt),
                                   ("select", "select", (("tmp", 1), ("in", 0), ("tmp", 2)), dt),
                                   ("reduce", "add", (("tmp", 3),), DSL_DTYPE[node.out.type.dtype]))
        return Recipe(x.size, ((dt, "full"), ("int32", "row")), steps, ((("tmp", 4), dt),), cols, ("row",),
                      ("pre", "block", "pre", "block", "block"))
    dn = node.attrs["scatter_dimension_numbers"]
    if len(node.inputs) != 3 or simple_combiner(node.regions[0]) != "add" or dn["update_window_dims"] or \
            dn["inserted_window_dims"] != (r - 1,) or dn["scatter_dims_to_operand_dims"] != (r - 1,) or \
            tuple(dn["input_batching_dims"]) != lead or tuple(dn["scatter_indices_batching_dims"]) != lead or \
            node.inputs[2].type.size != rows or node.inputs[2].type.dtype != x.dtype:
        return None
    steps = (iota, ("alu", "eq", (("tmp", 0), ("in", 1)), "uint8"),
             ("alu", "add", (("in", 0), ("in", 2)), dt),
             ("select", "select", (("tmp", 1), ("tmp", 2), ("in", 0)), dt))
    return Recipe(x.size, ((dt, "full"), ("int32", "row"), (dt, "row")), steps, ((("tmp", 3), dt),), cols,
                  ("full",), ("pre", "block", "block", "block"))
