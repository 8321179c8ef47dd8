"""``Device``: run ISA programs on simulated chips, functionally (real data, no timing).

Per chip a sparse HBM (pages on first write); per core an SBUF and a PSUM allocated on first use. A run
verifies the program, writes the inputs into their HBM tensors (rounded to the declared dtype), executes the
engine streams and reads the outputs back.

Execution order is deterministic: engines are separate in-order streams; at each step the lowest-numbered
engine (tensor, vector, scalar, gpsimd, sync) whose next instruction's waits hold runs that instruction,
which then signals. If no engine can run while instructions remain, the run fails with ``SimError`` naming
the blocked instructions. A correct program synchronises every cross-engine dependency with semaphores, so
its result does not depend on this order.

    >>> import numpy as np, trnsim
    >>> from trnsim.isa import ProgramBuilder, DmaCopy, tile
    >>> b = ProgramBuilder(); x = b.tensor("x", (2, 3), "bf16"); y = b.tensor("y", (2, 3), "bf16", "output")
    >>> t = tile("sbuf", "bf16", (2, 3))
    >>> b.emit("sync", DmaCopy(t, x.ap()), DmaCopy(y.ap(), t))
    >>> trnsim.Device().run(b.build(), [np.ones((2, 3))]).outputs["y"].tolist()
    [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import hw
from trnsim.errors import SimError
from trnsim.isa.base import Engine, Instruction
from trnsim.isa.dtypes import get_dtype
from trnsim.isa.program import Program, TensorDecl, where
from trnsim.isa.verify import verify
from trnsim.sim import fastpath
from trnsim.sim.context import Context
from trnsim.sim.memory import RAW, DenseMemory, Fault, SparseMemory
from trnsim.sim.semantics import SEMANTICS
from trnsim.sim.values import decode_raw, decode_raw32, encode_into

if TYPE_CHECKING:
    from trnsim.sim.profile import Labels, Profile


@dataclass(frozen=True)
class Executed:
    """One executed instruction, in execution order."""

    step: int
    engine: Engine
    index: int
    instruction: Instruction


@dataclass(frozen=True)
class RunResult:
    """Output tensors by name (declaration order), the execution log and, with ``timing=True``, the profile."""

    outputs: dict[str, NDArray[Any]]
    log: tuple[Executed, ...]
    profile: Profile | None = None

    def __getitem__(self, name: str) -> NDArray[Any]:
        return self.outputs[name]


@dataclass
class Core:
    sbuf: DenseMemory
    psum: DenseMemory


class Chip:
    """One chip's HBM and its NeuronCores (created on first use)."""

    def __init__(self, index: int, spec: hw.ChipSpec, *, flags: bool = True) -> None:
        self.index, self.spec, self.flags = index, spec, flags  # flags: memories keep written flags
        self.hbm = SparseMemory(f"chip{index}.hbm", spec.hbm_bytes, flags=flags)
        self._cores: dict[int, Core] = {}

    def core(self, i: int) -> Core:
        core_spec = self.spec.core
        assert core_spec is not None
        cores = self.spec.cores or 0
        if not 0 <= i < cores:
            raise SimError(f"core {i} does not exist", hint=f"{self.spec.name} has cores 0..{cores - 1}")
        if i not in self._cores:
            sb, ps = core_spec.sbuf, core_spec.psum
            self._cores[i] = Core(DenseMemory(f"core{i}.sbuf", sb.partitions, sb.bytes_per_partition,
                                              flags=self.flags),
                                  DenseMemory(f"core{i}.psum", ps.partitions, ps.banks * ps.bank_bytes,
                                              flags=self.flags))
        return self._cores[i]


class Device:
    """``chips`` simulated chips of ``target`` (a hardware preset name). ``strict_reads``: reading
    never-written memory faults. ``fast_paths=False`` runs the plain reference semantics only (default:
    ``sim.fastpath.ENABLED``, true; ``sim.fastpath`` describes what the fast paths skip and why results match)."""

    def __init__(self, target: str = "trn3", chips: int = 1, *, strict_reads: bool = False,
                 fast_paths: bool | None = None) -> None:
        self.spec = hw.get(target)
        if self.spec.core is None:
            raise SimError(f"{target} has no NeuronCore to simulate", hint="use a Trainium preset, e.g. trn3")
        if chips < 1:
            raise SimError(f"chips={chips}", hint="a device has at least one chip")
        self.chips = [Chip(i, self.spec, flags=strict_reads) for i in range(chips)]  # the flags' one reader
        self._strict_reads = strict_reads
        self.fast_paths = fastpath.ENABLED if fast_paths is None else fast_paths

    @property
    def strict_reads(self) -> bool:
        """Fixed for the device's life: only a strict device keeps the per-byte written flags."""
        return self._strict_reads

    @overload
    def run(self, program: Program, inputs: Mapping[str, ArrayLike] | Sequence[ArrayLike] = (), *more_inputs: Any,
            core: int = 0,
            chip: int = 0, check: bool = True, timing: bool = False, timing_only: Literal[False] = False,
            labels: Labels | None = None) -> RunResult: ...

    @overload
    def run(self, program: Program, inputs: Mapping[str, object] | Sequence[object] = (), *more_inputs: Any,
            core: int = 0,
            chip: int = 0, check: bool = True, timing: bool = False, timing_only: Literal[True],
            labels: Labels | None = None) -> Profile: ...

    def run(
        self,
        program: Program | Any,
        inputs: Mapping[str, Any] | Sequence[Any] = (),
        *more_inputs: Any,
        core: int = 0,
        chip: int = 0,
        check: bool = True,
        timing: bool = False,
        timing_only: bool = False,
        labels: Labels | None = None,
    ) -> RunResult | Profile:
        """Run ``program`` on one core. ``check=False`` skips the verifier (faults then surface at run time).

        ``timing=True`` also times it (``RunResult.profile``); ``timing_only=True`` only times it and returns
        the ``Profile``: inputs may be omitted or be shape descriptions (``trnsim.TensorSpec``), no memory is
        touched. ``labels`` maps ``(engine, index)`` to a label for the profile's per-kernel breakdown.

        ``program`` may also be a compiled program (``trnsim.compile``) or the path of its ``.neff`` artifact,
        run as ``device.run(artifact, *inputs)``: outputs in order (``output0``, ...) and the profile."""
        if not isinstance(program, Program):
            from trnsim.runtime.program import run_compiled

            arrays = [inputs, *more_inputs] if more_inputs or not isinstance(inputs, list | tuple) else list(inputs)
            return run_compiled(self.spec.name, program, arrays, timing=timing or not timing_only)
        if more_inputs:
            raise SimError(f"{1 + len(more_inputs)} input arguments for an ISA program", where="Device.run",
                           hint="pass the inputs as one sequence or a mapping by tensor name")
        if check:
            verify(program, self.spec)
        if timing_only:
            from trnsim.sim.timing.run import time_program

            return time_program(program, self.spec, inputs, labels=labels)
        if not 0 <= chip < len(self.chips):
            raise SimError(f"chip {chip} does not exist", hint=f"the device has chips 0..{len(self.chips) - 1}")
        target = self.chips[chip]
        cores = target.core(core)
        layout = program.layout()
        tensors = {t.name: (layout[t.name], t.nbytes) for t in program.tensors}
        if program.tensors:  # one segment for them all, not one per first touch merged later
            target.hbm.reserve(0, max(base + nbytes for base, nbytes in tensors.values()))
        core_spec = self.spec.core
        assert core_spec is not None
        ctx = Context(target.hbm, cores.sbuf, cores.psum, tensors, strict_reads=self.strict_reads,
                      rounding=program.rounding, rng=np.random.default_rng(program.seed),
                      bank_bytes=core_spec.psum.bank_bytes, fast_paths=self.fast_paths)
        for decl, value in _bind_inputs(program, inputs).items():
            self._store(target.hbm, decl, layout[decl.name], value, mark=self.strict_reads)
        profile = None
        if timing:
            from trnsim.sim.timing.run import execute_timed

            log, profile = execute_timed(program, ctx, self.spec, labels)
        else:
            log = execute(program, ctx)
        outputs = {t.name: self._load(target.hbm, t, layout[t.name]) for t in program.role("output")}
        return RunResult(outputs, log, profile)

    @staticmethod
    def _tensor_codes(mem: SparseMemory, decl: TensorDecl,
                      base: int) -> tuple[NDArray[Any], NDArray[np.bool_] | None]:
        """The tensor's element codes and per-byte written flags (if kept), as views of its HBM segment."""
        seg = mem.reserve(base, base + decl.nbytes)
        lo = base - seg.base
        raw_type = RAW[get_dtype(decl.dtype).itemsize]
        written = None if seg.written is None else seg.written[lo : lo + decl.nbytes]
        return seg.data[lo : lo + decl.nbytes].view(raw_type), written

    @classmethod
    def _store(cls, mem: SparseMemory, decl: TensorDecl, base: int, value: NDArray[Any], *, mark: bool) -> None:
        codes, written = cls._tensor_codes(mem, decl, base)
        encode_into(value.reshape(-1), decl.dtype, codes)
        if mark:
            assert written is not None
            written[...] = True

    @classmethod
    def _load(cls, mem: SparseMemory, decl: TensorDecl, base: int) -> NDArray[Any]:
        d = get_dtype(decl.dtype)
        codes = cls._tensor_codes(mem, decl, base)[0]
        if d.kind == "int":
            return decode_raw(codes, d.name).astype(np.int64).reshape(decl.shape)
        return decode_raw32(codes, d.name).reshape(decl.shape)  # exact: every float dtype fits fp32


def _bind_inputs(
    program: Program, inputs: Mapping[str, ArrayLike] | Sequence[ArrayLike]
) -> dict[TensorDecl, NDArray[Any]]:
    decls = program.role("input")
    if isinstance(inputs, Mapping):
        unknown = set(inputs) - {d.name for d in program.tensors}
        if unknown:
            raise SimError(f"no tensor named {sorted(unknown)[0]!r}", hint=f"inputs: {[d.name for d in decls]}")
        pairs = [(program.tensor(name), np.asarray(v)) for name, v in inputs.items()]
    else:
        if len(inputs) > len(decls):
            raise SimError(f"{len(inputs)} inputs for {len(decls)} input tensors", hint="pass one array per input")
        pairs = [(d, np.asarray(v)) for d, v in zip(decls, inputs, strict=False)]
    for decl, value in pairs:
        if value.size != decl.size:
            raise SimError(f"input {decl.name}: shape {value.shape} for a tensor of shape {decl.shape}",
                           hint="pass an array of the declared shape")
    return dict(pairs)


def execute(program: Program, ctx: Context) -> tuple[Executed, ...]:
    """Run the engine streams in the deterministic order described in the module docstring."""
    count: Counter[str] = Counter()
    pc: dict[Engine, int] = dict.fromkeys(program.streams, 0)
    log: list[Executed] = []
    streams = list(program.streams.items())
    while True:
        for engine, stream in streams:
            i = pc[engine]
            if i < len(stream) and all(count[s] >= n for s, n in stream[i].wait):
                ins = stream[i]
                run_instruction(ctx, engine, i, ins)
                for s in ins.signal:
                    count[s] += 1
                pc[engine] = i + 1
                log.append(Executed(len(log), engine, i, ins))
                break
        else:
            ctx.finish()
            blocked = [(e, pc[e], s[pc[e]]) for e, s in program.streams.items() if pc[e] < len(s)]
            if not blocked:
                return tuple(log)
            raise SimError("deadlock: " + "; ".join(
                f"{where(e, i, ins)} waits for " + ",".join(f"{s}>={n} (at {count[s]})" for s, n in ins.wait
                                                            if count[s] < n) for e, i, ins in blocked),
                where=where(*blocked[0]), hint="every wait needs enough signals issued before it can block")


def run_instruction(ctx: Context, engine: Engine, i: int, ins: Instruction) -> None:
    """Instruction ``i`` of ``engine``'s stream. A fault becomes a ``SimError`` naming it, raised after what
    is pending has been applied (``Context.finish``), so memory holds what the plain path leaves."""
    try:
        SEMANTICS[type(ins)](ctx, ins)
        ctx.between()
    except Fault as e:
        ctx.finish()
        raise SimError(e.message, where=where(engine, i, ins), hint=e.hint) from None


__all__ = ["Device", "Executed", "RunResult"]
