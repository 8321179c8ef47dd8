"""Run a few on-chip instructions against numpy data: the scaffolding of tests and kernel experiments.

``run_on_tiles`` builds the whole program around the instructions you care about: DMA every input from
HBM into its tile, run the instructions in order (each waits for the previous one, across engines, by
semaphores), DMA every output tile back to HBM, and return the outputs.

    >>> import numpy as np
    >>> from trnsim.isa import TensorScalar, tile
    >>> x = tile("sbuf", "fp32", (2, 2))
    >>> run_on_tiles([("vector", TensorScalar(x, x, "mul", 3.0))], {"x": (np.ones((2, 2)), x)}, {"y": x})["y"]
    array([[3., 3.],
           [3., 3.]], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from numpy.typing import ArrayLike

from trnsim.isa.ap import AccessPattern
from trnsim.isa.base import Engine, Instruction
from trnsim.isa.dma import DmaCopy
from trnsim.isa.program import Program, ProgramBuilder
from trnsim.sim.device import Device, RunResult


def tile_program(
    compute: Sequence[tuple[Engine, Instruction]],
    inputs: Mapping[str, AccessPattern],
    outputs: Mapping[str, AccessPattern],
    *,
    rounding: str = "rne",
    seed: int = 0,
) -> Program:
    """The program ``run_on_tiles`` runs: HBM tensors shaped ``[partitions, free_size]`` like their tiles."""
    b = ProgramBuilder()
    for name, ap in inputs.items():
        decl = b.tensor(name, (ap.partitions, ap.free_size), ap.dtype, "input")
        b.emit("sync", DmaCopy(ap, decl.ap(), signal=("loaded",)))
    for step, (engine, ins) in enumerate(compute):
        wait = (("loaded", len(inputs)),) if step == 0 else (("step", step),)
        b.emit(engine, replace(ins, wait=(*wait, *ins.wait), signal=(*ins.signal, "step")))
    for name, ap in outputs.items():
        decl = b.tensor(name, (ap.partitions, ap.free_size), ap.dtype, "output")
        b.emit("sync", DmaCopy(decl.ap(), ap, wait=(("step", len(compute)),)))
    return b.build(rounding, seed)


def run_on_tiles(
    compute: Sequence[tuple[Engine, Instruction]],
    inputs: Mapping[str, tuple[ArrayLike, AccessPattern]],
    outputs: Mapping[str, AccessPattern],
    *,
    device: Device | None = None,
    **options: Any,
) -> RunResult:
    """Load ``inputs`` (name → (data, tile)), run ``compute`` in order, return ``outputs`` (name → tile)."""
    program = tile_program(compute, {n: ap for n, (_, ap) in inputs.items()}, outputs, **options)
    return (device or Device()).run(program, {n: data for n, (data, _) in inputs.items()})
