"""A NeuronCore program: HBM tensor declarations and one in-order instruction stream per engine.

Engines run their streams concurrently and independently; the only cross-engine ordering is through
semaphores (see ``base``). The program also fixes how engines round on write (``rounding`` ``rne`` or
``stochastic``, with ``seed``), so a run is reproducible.

    >>> from trnsim.isa import ProgramBuilder, DmaCopy, tile
    >>> b = ProgramBuilder()
    >>> x = b.tensor("x", (4, 8), "fp32", "input"); y = b.tensor("y", (4, 8), "fp32", "output")
    >>> t = tile("sbuf", "fp32", (4, 8))
    >>> b.emit("sync", DmaCopy(t, x.ap(), signal=("x_in",)))
    >>> b.emit("sync", DmaCopy(y.ap(), t, wait=(("x_in", 1),)))
    >>> len(b.build().stream("sync"))
    2
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from trnsim.isa.ap import AccessPattern, hbm
from trnsim.isa.base import ENGINES, Engine, Instruction
from trnsim.isa.dtypes import get_dtype

if TYPE_CHECKING:
    from trnsim.hw import ChipSpec

Role = Literal["input", "output", "scratch"]
ROLES: tuple[Role, ...] = ("input", "output", "scratch")
ROUNDINGS = ("rne", "stochastic")
HBM_ALIGN = 4096  # tensors start on page boundaries, so their layout never depends on rounding of sizes


@dataclass(frozen=True)
class TensorDecl:
    """An HBM tensor, row-major, of ``shape`` and ISA ``dtype``."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    role: Role = "input"

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * get_dtype(self.dtype).itemsize

    def ap(self, rows: tuple[int, int] | None = None) -> AccessPattern:
        """The tensor (or rows[a:b] of it) as an HBM access pattern: rows × the remaining dims."""
        shape = self.shape if len(self.shape) >= 2 else (1, *self.shape)
        return hbm(self.name, self.dtype, shape, rows=rows)


@dataclass(frozen=True)
class Program:
    """Tensors, per-engine streams and rounding mode. Streams are stored in engine order, empty ones
    dropped, so two programs with the same instructions compare equal."""

    tensors: tuple[TensorDecl, ...] = ()
    streams: Mapping[Engine, tuple[Instruction, ...]] = field(default_factory=lambda: {})
    rounding: str = "rne"
    seed: int = 0

    def __post_init__(self) -> None:
        ordered = {e: tuple(self.streams[e]) for e in ENGINES if self.streams.get(e)}
        object.__setattr__(self, "streams", ordered)

    def stream(self, engine: Engine) -> tuple[Instruction, ...]:
        return self.streams.get(engine, ())

    def instructions(self) -> Iterator[tuple[Engine, int, Instruction]]:
        """Every instruction with its engine and index in that engine's stream."""
        for engine, stream in self.streams.items():
            for i, ins in enumerate(stream):
                yield engine, i, ins

    def tensor(self, name: str) -> TensorDecl:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    def role(self, role: Role) -> tuple[TensorDecl, ...]:
        return tuple(t for t in self.tensors if t.role == role)

    def layout(self) -> dict[str, int]:
        """HBM base address of every tensor: declaration order, each on a ``HBM_ALIGN`` boundary."""
        bases: dict[str, int] = {}
        addr = 0
        for t in self.tensors:
            bases[t.name] = addr
            addr += -(-t.nbytes // HBM_ALIGN) * HBM_ALIGN
        return bases

    def verify(self, spec: ChipSpec) -> None:
        """Raise ``VerifyError`` naming the first illegal instruction (see ``isa.verify``)."""
        from trnsim.isa.verify import verify

        verify(self, spec)

    def __str__(self) -> str:
        from trnsim.isa.text import format_program

        return format_program(self)


def where(engine: str, index: int, ins: Instruction) -> str:
    """How errors name an instruction: ``vector[3] tensor_copy dst=… src=…``."""
    return f"{engine}[{index}] {ins}"


class ProgramBuilder:
    """Accumulates tensors and instructions, then freezes them into a ``Program``."""

    def __init__(self) -> None:
        self._tensors: list[TensorDecl] = []
        self._streams: dict[Engine, list[Instruction]] = {e: [] for e in ENGINES}

    def tensor(self, name: str, shape: tuple[int, ...], dtype: str, role: Role = "input") -> TensorDecl:
        decl = TensorDecl(name, tuple(shape), dtype, role)
        self._tensors.append(decl)
        return decl

    def emit(self, engine: Engine, *instructions: Instruction) -> None:
        self._streams[engine].extend(instructions)

    def build(self, rounding: str = "rne", seed: int = 0) -> Program:
        return Program(tuple(self._tensors), {e: tuple(s) for e, s in self._streams.items()}, rounding, seed)
