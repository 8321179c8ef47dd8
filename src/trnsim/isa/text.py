"""The text form of programs: one line per instruction; ``parse(str(p)) == p``.

    # trnsim program
    program rounding=rne seed=0
    tensor a (128,64) bf16 input
    engine sync
      dma_copy dst=sbuf:bf16[0:128,+0,64x1] src=hbm:a:bf16[0:128/64,+0,64x1] signal=a_in
    engine tensor
      matmul dst=psum:fp32[0:64,+0,64x1] stationary=… moving=… wait=a_in>=1

An instruction is its mnemonic then ``field=value`` for every field that differs from its default.
Values are written by type (table ``_FORMATTERS``) and read back by the field's annotation (``_PARSERS``):
access patterns as in ``ap.format_ap``, floats by ``repr`` (exact), booleans ``true``/``false``, integer
tuples ``(1,-1)``, waits ``sem>=n,…``, signals ``sem,…``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import typing
from collections.abc import Callable
from typing import Any

from trnsim.isa.ap import AccessPattern, format_ap, parse_ap
from trnsim.isa.base import ENGINES, INSTRUCTIONS, Engine, Instruction, Wait
from trnsim.isa.dtypes import VerifyError
from trnsim.isa.program import ROLES, Program, Role, TensorDecl


def _format_value(name: str, value: Any) -> str:
    if name == "wait":
        return ",".join(f"{s}>={n}" for s, n in value)
    if name == "signal":
        return ",".join(value)
    if isinstance(value, AccessPattern):
        return format_ap(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "-nan" if math.isnan(value) and math.copysign(1.0, value) < 0 else repr(value)  # repr drops the sign
    if isinstance(value, tuple):
        return "(" + ",".join(str(v) for v in typing.cast(tuple[int, ...], value)) + ")"
    return str(value)


def format_instruction(ins: Instruction) -> str:
    parts = [ins.mnemonic]
    # operands first, synchronisation last: the line reads "what, then when"
    fields = sorted(dataclasses.fields(ins), key=lambda f: f.name in ("wait", "signal"))
    for f in fields:
        value = getattr(ins, f.name)
        if f.default is not dataclasses.MISSING and value == f.default and type(value) is type(f.default):
            continue
        parts.append(f"{f.name}={_format_value(f.name, value)}")
    return " ".join(parts)


def format_program(p: Program) -> str:
    lines = ["# trnsim program", f"program rounding={p.rounding} seed={p.seed}"]
    for t in p.tensors:
        lines.append(f"tensor {t.name} ({','.join(map(str, t.shape))}) {t.dtype} {t.role}")
    for engine, stream in p.streams.items():
        lines.append(f"engine {engine}")
        lines.extend(f"  {format_instruction(ins)}" for ins in stream)
    return "\n".join(lines) + "\n"


def _scalar(text: str) -> float | AccessPattern:
    return parse_ap(text) if text.split(":", 1)[0] in ("hbm", "sbuf", "psum") else float(text)


def _bool(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError(f"expected true or false, got {text!r}")
    return text == "true"


def _ints(text: str) -> tuple[int, ...]:
    inner = text.removeprefix("(").removesuffix(")")
    return tuple(int(v) for v in inner.split(",") if v)


def _waits(text: str) -> tuple[Wait, ...]:
    out: list[Wait] = []
    for item in text.split(","):
        sem, _, n = item.partition(">=")
        out.append((sem, int(n)))
    return tuple(out)


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split(","))


# Field annotation → parser of its text (the inverse of _format_value).
_PARSERS: dict[object, Callable[[str], Any]] = {
    AccessPattern: parse_ap,
    AccessPattern | None: parse_ap,
    float | AccessPattern: _scalar,
    bool: _bool,
    int: int,
    float: float,
    str: str,
    str | None: str,
    tuple[int, ...]: _ints,
    tuple[Wait, ...]: _waits,
    tuple[str, ...]: _names,
}


@functools.cache
def _field_types(cls: type[Instruction]) -> dict[str, object]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def parse_instruction(line: str) -> Instruction:
    """Parse one instruction line (inverse of ``format_instruction``)."""
    mnemonic, *items = line.split()
    cls = INSTRUCTIONS.get(mnemonic)
    if cls is None:
        raise VerifyError(f"unknown instruction {mnemonic!r}", hint=f"known: {', '.join(sorted(INSTRUCTIONS))}")
    types = _field_types(cls)
    kwargs: dict[str, Any] = {}
    for item in items:
        key, eq, text = item.partition("=")
        if not eq or key not in types:
            raise VerifyError(f"{mnemonic} has no field {key!r}", hint=f"fields: {', '.join(types)}")
        try:
            kwargs[key] = _PARSERS[types[key]](text)
        except ValueError as e:
            raise VerifyError(f"bad value for {mnemonic} {key}: {text!r} ({e})") from None
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise VerifyError(f"{mnemonic}: {e}", hint="every operand without a default must be given") from None


_TENSOR_RE = re.compile(r"^tensor (\w+) \(([\d,]*)\) (\w+) (\w+)$")


def parse(text: str) -> Program:
    """Parse a program from its text form; errors name the line."""
    tensors: list[TensorDecl] = []
    streams: dict[Engine, list[Instruction]] = {}
    options: dict[str, str] = {}
    engine: Engine | None = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            head = line.split()[0]
            if head == "program":
                for item in line.split()[1:]:
                    key, _, value = item.partition("=")
                    options[key] = value
            elif head == "tensor":
                m = _TENSOR_RE.match(line)
                if m is None or m[4] not in ROLES:
                    raise VerifyError(f"bad tensor line {line!r}",
                                      hint="tensor NAME (D0,D1,…) DTYPE input|output|scratch")
                role = typing.cast(Role, m[4])
                tensors.append(TensorDecl(m[1], tuple(int(d) for d in m[2].split(",") if d), m[3], role))
            elif head == "engine":
                name = line.split()[1]
                if name not in ENGINES:
                    raise VerifyError(f"unknown engine {name!r}", hint=f"engines: {', '.join(ENGINES)}")
                engine = name
                streams.setdefault(engine, [])
            elif engine is None:
                raise VerifyError("instruction before any 'engine' line", hint="start a stream with 'engine NAME'")
            else:
                streams[engine].append(parse_instruction(line))
        except VerifyError as e:
            raise VerifyError(e.message, where=f"line {n}", hint=e.hint) from None
    return Program(tuple(tensors), {e: tuple(s) for e, s in streams.items()},
                   options.get("rounding", "rne"), int(options.get("seed", "0")))
