"""Timing a recipe: its kernel traced and run by the instruction-level model in timing-only mode."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from trnsim.compiler.tilegen.emit import forget_traces, kernel
from trnsim.compiler.tilegen.recipe import PARTITIONS, TILE_COLS, Recipe, input_shapes, output_shapes, space


@dataclass(frozen=True)
class TileTime:
    seconds: float
    busy: dict[str, float]
    instructions: int
    by_engine: dict[str, int] = field(default_factory=dict[str, int])    # instructions per engine ("dma")


MAX_TIMED_BLOCKS = 64     # larger groups are timed on 64 blocks and scaled: a streaming kernel is linear


def fused_time(target: str, recipe: Recipe) -> TileTime:
    """The generated kernel's time for ``recipe`` (timing-only, no data); groups of more than
    ``MAX_TIMED_BLOCKS`` tiles are timed on that many and scaled linearly (steady-state streaming; the
    once-per-kernel work before and after the loop is scaled with it, a small overestimate)."""
    per_block = PARTITIONS * (recipe.cols or TILE_COLS)
    blocks = -(-recipe.elements // per_block)
    if blocks <= MAX_TIMED_BLOCKS:
        return _timed(target, recipe)
    sample = _sample(recipe, MAX_TIMED_BLOCKS * per_block)
    t = _timed(target, sample)
    f = blocks / MAX_TIMED_BLOCKS
    from trnsim.compiler.kernel_timing import scale_counts

    return TileTime(t.seconds * f, {e: b * f for e, b in t.busy.items()}, round(t.instructions * f),
                    scale_counts(t.by_engine, f))


def _sample(recipe: Recipe, elements: int) -> Recipe:
    """``recipe`` over the first ``elements`` of its iteration space (tables and results keep their shapes)."""
    sample = replace(recipe, elements=elements)
    rows, cols = space(sample)
    fit = {"full": (rows, cols), "row": (rows, 1)}
    inputs = tuple(fit.get(k, shape) for shape, (_, k) in zip(input_shapes(recipe), recipe.inputs, strict=True))
    kinds = recipe.output_kinds or ("full",) * len(recipe.outputs)
    outputs = tuple(fit.get(k, shape) for shape, k in zip(output_shapes(recipe), kinds, strict=True))
    return replace(sample, input_shapes=inputs, output_shapes=outputs)


@lru_cache(maxsize=1024)
def _timed(target: str, recipe: Recipe) -> TileTime:
    """Trace the generated kernel for ``recipe`` and time it (timing-only, no data)."""
    import trnsim
    from trnsim.sim.profile import Profile

    specs = _specs(recipe)
    result = trnsim.run_kernel(kernel(), *specs, target=target, timing=True, recipe=recipe)
    profile = result.profile
    assert isinstance(profile, Profile)
    busy = {e: t for e, t in profile.engine_busy.items() if e in ("tensor", "vector", "scalar", "gpsimd") and t > 0}
    from trnsim.compiler.kernel_timing import engine_counts

    return TileTime(profile.total_seconds, busy, profile.instructions, engine_counts(profile))


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
