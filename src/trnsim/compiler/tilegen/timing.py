"""Timing a recipe: its kernel traced and run by the instruction-level model in timing-only mode."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from math import gcd
from typing import Any

from trnsim.compiler.kernel_timing import TileTime, extrapolate, linear_fit, time_kernel
from trnsim.compiler.tilegen.emit import forget_traces, kernel
from trnsim.compiler.tilegen.recipe import (
    PARTITIONS,
    PREFETCH,
    QUEUES,
    REPEATED,
    TILE_COLS,
    Recipe,
    block_dmas,
    input_shapes,
    output_shapes,
    pieces,
    pipeline,
    space,
)

SAMPLE_BLOCKS = 8         # larger kernels are timed on two samples of at least 8 and 16 tiles, extrapolated


def fused_time(target: str, recipe: Recipe, *, sample: bool = True) -> TileTime:
    """The generated kernel's time for ``recipe`` (timing-only, no data).

    NOTE: tracing dominates a compile (the GPT step's two attention-shaped kernels of 32 tiles took 150 ms of
    0.47 s), and a generated kernel streams: once the blocks loaded ahead (``recipe.pipeline``) are in
    flight, the time per tile repeats with the DMA queues' round robin (a tile whose DMA reuses a queue waits
    for the queue's last transfer). A kernel of more than ``2 * a`` tiles is timed on its first ``a`` and
    ``2 * a`` tiles and extrapolated linearly in elements (``kernel_timing.linear_fit``, as for large
    matmuls): the difference is the cost per tile, the rest the fixed part (the work before and after the
    loop, pipeline fill and drain), which is not scaled. ``a`` is the first multiple of that period from
    ``SAMPLE_BLOCKS`` whose tiles issue at least ``2 * QUEUES`` DMAs and hold twice the blocks loaded ahead:
    with fewer the pipeline has not settled (8 and 16 tiles of an exp-sum over [8192, 256], a load of 128
    KiB and a store per tile, 4 blocks ahead, overestimated the whole kernel by 18%; with 16 blocks ahead,
    16 and 32 tiles underestimated it by 12%). Measured against whole kernels: within 3% (tests). A recipe
    whose iotas have a period longer than the small sample is timed whole (its index arithmetic differs
    there). ``sample=False`` times the whole kernel."""
    per_block = PARTITIONS * (recipe.cols or TILE_COLS)
    blocks = -(-recipe.elements // per_block)
    period, per_tile = _queue_period(recipe), _dmas_per_tile(recipe)
    # NOTE: a tile of rows in chunks is several passes with loads only in the first: the time per tile varies
    # by 10% over the first 16 tiles of a [*, 8192] log-softmax, then settles; samples of 16 and 32 tiles
    ahead = PREFETCH if recipe.chunk else pipeline(recipe)[0]
    least = max(SAMPLE_BLOCKS * (2 if recipe.chunk else 1), -(-2 * QUEUES // max(per_tile, 1)), 2 * ahead)
    a = -(-least // period) * period
    small, large = a * per_block, 2 * a * per_block
    # an iota of the flat element index has a mod only when its period is shorter than the space (a sample's)
    periods = [int(ops[0][1] * ops[1][1]) for kind, form, ops, _ in recipe.steps if kind == "iota" and form == "flat"]
    if not sample or blocks <= 2 * a or max(periods, default=0) >= small:
        return _timed(target, recipe)

    a, b = _timed(target, _sample(recipe, small)), _timed(target, _sample(recipe, large))
    fit = linear_fit(small, large, recipe.elements)
    return extrapolate(a, b, fit)


def _queue_period(recipe: Recipe) -> int:
    """Tiles after which the DMAs of the tile loop are back on the same queues (``QUEUES`` when the
    number per tile varies: a table whose period does not divide a tile), or 1 when they wrap often enough
    that any sample size will do (the GPT step's attention kernel, 5 DMAs a tile: 8 and 16 tiles are within
    0.8% of the whole kernel)."""
    shapes = input_shapes(recipe)
    if any(kind == "per" and PARTITIONS % shape[0] for (_, kind), shape in zip(recipe.inputs, shapes, strict=True)):
        return QUEUES
    for i, ((_, kind), shape) in enumerate(zip(recipe.inputs, shapes, strict=True)):
        rows_per_table_row = recipe.repeats[i] * shape[1] // (recipe.cols if kind == "rep" else 1) \
            if kind in REPEATED else 0
        if rows_per_table_row and PARTITIONS % rows_per_table_row:
            return QUEUES        # a table broadcast along middle axes whose DMAs per tile vary (``repeat_runs``)
    per_tile = _dmas_per_tile(recipe)
    if per_tile * SAMPLE_BLOCKS >= 2 * QUEUES:
        return 1                 # the queues wrap at least twice in the smaller sample: the phase hardly matters
    return QUEUES // gcd(per_tile, QUEUES) if per_tile else 1


def _dmas_per_tile(recipe: Recipe) -> int:
    """The loads and stores of one tile of the loop, in pieces (``recipe.pipeline``)."""
    loads, stores = block_dmas(recipe)
    if recipe.chunk:
        return (len(loads) + len(stores)) * -(-recipe.cols // recipe.chunk)   # a load and a store per chunk
    split = pipeline(recipe)[1]
    return sum(pieces(b, split) for b in (*loads, *stores))


def _sample(recipe: Recipe, elements: int) -> Recipe:
    """``recipe`` over the first ``elements`` of its iteration space (tables and results keep their shapes)."""
    sample = replace(recipe, elements=elements)
    rows, cols = space(sample)

    def fit(kind: str, shape: tuple[int, int]) -> tuple[int, int]:
        """A shape per row of the space keeps its width; tables keep their shape."""
        return {"full": (rows, cols), "row": (rows, 1), "mid": (rows, shape[1])}.get(kind, shape)

    inputs = tuple(fit(k, shape) for shape, (_, k) in zip(input_shapes(recipe), recipe.inputs, strict=True))
    kinds = recipe.output_kinds or ("full",) * len(recipe.outputs)
    outputs = tuple(fit(k, shape) for shape, k in zip(output_shapes(recipe), kinds, strict=True))
    return replace(sample, input_shapes=inputs, output_shapes=outputs)


@lru_cache(maxsize=1024)
def _timed(target: str, recipe: Recipe) -> TileTime:
    """Trace the generated kernel for ``recipe`` and time it (timing-only, no data)."""
    return time_kernel(kernel(), *_specs(recipe), target=target, recipe=recipe)


def kernel_program(target: str, recipe: Recipe) -> Any:
    """The traced, verifiable NeuronCore ``Program`` of a recipe (for inspection and tests)."""
    specs = _specs(recipe)
    return kernel().compile_specs([(s.shape, s.dtype) for s in specs], target, {"recipe": recipe}).program


def _specs(recipe: Recipe) -> list[Any]:
    import trnsim

    return [trnsim.TensorSpec(shape, dt) for shape, (dt, _) in zip(input_shapes(recipe), recipe.inputs, strict=True)]


def clear_memo() -> None:
    _timed.cache_clear()
    forget_traces()
