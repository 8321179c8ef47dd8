"""The instruction base class, the engines, and the registry of instruction kinds.

Synchronisation design: **every instruction carries its own semaphore waits and signals** (as NeuronCore
instructions do), rather than separate wait/signal instructions. ``wait=(("s", 2),)`` holds the
instruction until semaphore ``s`` has value ≥ 2; ``signal=("t",)`` increments ``t`` by one when the
instruction completes. Semaphores are named, start at 0 and only count up. ``Nop`` carries waits/signals
with no work, for a pure barrier. Operands are found generically: ``reads()``/``writes()`` return the access
patterns, ``engines`` the engines allowed to run the instruction — enough for a verifier, tracer or timing
model to treat every instruction alike.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from trnsim.isa.ap import AccessPattern

Engine = Literal["tensor", "vector", "scalar", "gpsimd", "sync"]
# Numbered in this order: the functional simulator prefers the lowest-numbered ready engine.
ENGINES: tuple[Engine, ...] = ("tensor", "vector", "scalar", "gpsimd", "sync")
Wait = tuple[str, int]

INSTRUCTIONS: dict[str, type[Instruction]] = {}


@dataclass(frozen=True)
class Instruction:
    """Base of all instructions. Subclasses set ``mnemonic`` (text form), ``engines`` (where they may
    run) and ``write_fields`` (operand fields that are destinations; every other AP field is read)."""

    mnemonic: ClassVar[str] = ""
    engines: ClassVar[tuple[Engine, ...]] = ENGINES
    write_fields: ClassVar[tuple[str, ...]] = ("dst",)

    wait: tuple[Wait, ...] = field(default=(), kw_only=True)
    signal: tuple[str, ...] = field(default=(), kw_only=True)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.mnemonic:
            INSTRUCTIONS[cls.mnemonic] = cls

    def operands(self) -> dict[str, AccessPattern]:
        """Every access-pattern operand by field name."""
        return {f.name: v for f in dataclasses.fields(self) if isinstance(v := getattr(self, f.name), AccessPattern)}

    def reads(self) -> tuple[AccessPattern, ...]:
        return tuple(ap for name, ap in self.operands().items() if name not in self.write_fields)

    def writes(self) -> tuple[AccessPattern, ...]:
        return tuple(ap for name, ap in self.operands().items() if name in self.write_fields)

    def __str__(self) -> str:
        from trnsim.isa.text import format_instruction

        return format_instruction(self)


@dataclass(frozen=True)
class Nop(Instruction):
    """Does nothing; carries waits and signals (a barrier between engine streams).

        wait until sem[s] >= n for each (s, n) in wait
        sem[t] += 1 for each t in signal
    """

    mnemonic = "nop"
    write_fields = ()
