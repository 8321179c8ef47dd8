"""How ``Device.run`` uses the timing model: timing-only runs (shapes, no data) and functional+timing runs.

* timing-only: inputs are optional shape descriptions (``TensorSpec``, anything with ``.shape`` and
  ``.dtype``; an array only lends its shape). No memory is allocated or touched.
* functional+timing: the scheduler runs first; then every instruction's semantics runs in the order its
  results land on the timeline (``Timeline.order``). That order respects every semaphore and every engine's
  order, so a correctly synchronised program computes what the plain functional run computes, and a racy
  one computes what its timeline implies.

Both modes produce the same timeline for the same program: timing never depends on data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from trnsim.errors import SimError
from trnsim.hw import ChipSpec
from trnsim.isa.program import Program, TensorDecl
from trnsim.sim.context import Context
from trnsim.sim.device import Executed, run_instruction
from trnsim.sim.profile import Labels, Profile, build_profile
from trnsim.sim.tensorspec import TensorSpec, is_shape_description
from trnsim.sim.timing.schedule import simulate


def check_shapes(program: Program, inputs: Mapping[str, object] | Sequence[object]) -> dict[str, tuple[int, ...]]:
    """Each given input's shape, checked against its declaration (same number of elements). Only the shape
    is read: the declared dtype is what the program computes with, as in a functional run."""
    decls = program.role("input")
    if isinstance(inputs, Mapping):
        known = {d.name: d for d in program.tensors}
        unknown = sorted(set(inputs) - set(known))
        if unknown:
            raise SimError(f"no tensor named {unknown[0]!r}", hint=f"inputs: {[d.name for d in decls]}")
        pairs: list[tuple[TensorDecl, object]] = [(known[name], v) for name, v in inputs.items()]
    else:
        if len(inputs) > len(decls):
            raise SimError(f"{len(inputs)} inputs for {len(decls)} input tensors", hint="pass one per input")
        pairs = list(zip(decls, inputs, strict=False))
    out: dict[str, tuple[int, ...]] = {}
    for decl, value in pairs:
        shape = TensorSpec.like(value).shape if is_shape_description(value) else getattr(value, "shape", None)
        if not isinstance(shape, tuple):
            raise SimError(f"input {decl.name}: {type(value).__name__} is not a shape description",
                           hint="pass trnsim.TensorSpec(shape, dtype), an object with .shape and .dtype, or an array")
        shape = tuple(int(d) for d in shape)  # pyright: ignore[reportUnknownArgumentType]
        if math.prod(shape) != decl.size:
            raise SimError(f"input {decl.name}: shape {shape} for a tensor of shape {decl.shape}",
                           hint="describe each input with its declared shape")
        out[decl.name] = shape
    return out


def time_program(program: Program, spec: ChipSpec, inputs: Mapping[str, object] | Sequence[object] = (),
                 *, labels: Labels | None = None) -> Profile:
    """Timing-only: the profile of ``program`` on one core of ``spec``; no data anywhere."""
    check_shapes(program, inputs)
    return build_profile(simulate(program, spec), _labels(program, labels))


def execute_timed(program: Program, ctx: Context, spec: ChipSpec,
                  labels: Labels | None = None) -> tuple[tuple[Executed, ...], Profile]:
    """Functional+timing: simulate, then run the semantics in timeline order; the log is in that order."""
    tl = simulate(program, spec)
    log: list[Executed] = []
    for g in tl.order():
        engine, i, ins = tl.engine[g], tl.index[g], tl.instruction[g]
        run_instruction(ctx, engine, i, ins)
        log.append(Executed(len(log), engine, i, ins))
    ctx.finish()
    return tuple(log), build_profile(tl, _labels(program, labels))


def _labels(program: Program, labels: Labels | None) -> Labels | None:
    """The labels given to the run, else the program's own (``program.labels``) if it carries any."""
    own = getattr(program, "labels", None)
    return labels if labels is not None else own if isinstance(own, Mapping) else None
