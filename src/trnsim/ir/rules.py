"""The table of op semantics: StableHLO op name → how to evaluate it on numpy arrays.

This table is the compiler's specification, as the ISA executor is the chip's (STYLE.md rule 4): plain
numpy, with the NeuronCore's numerics: engines compute in fp32 and round once, to nearest even, when they
write a narrower float (ARCHITECTURE.md "Numerics"); TensorE multiplies in the operand format and
accumulates in fp32. Integer ops wrap modulo 2^bits and follow StableHLO's (XLA's) conventions for the
cases C leaves undefined (division by zero, shifts past the width, float→int overflow).

Each rule is registered with ``@semantics("op", kind=...)``; ``kind`` groups ops for the compiler
(elementwise ops fuse, ``matmul`` goes to TensorE, ``data`` is layout movement, ``control`` has regions).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from trnsim.errors import UnsupportedError

if TYPE_CHECKING:
    from trnsim.ir.graph import Node
    from trnsim.ir.interp import Interpreter

OpKind = Literal["elementwise", "matmul", "reduce", "data", "index", "control", "source", "sort", "conv", "random"]
Evaluate = Callable[["Node", list[np.ndarray], "Interpreter"], Sequence[np.ndarray]]


@dataclass(frozen=True)
class OpSemantics:
    name: str
    evaluate: Evaluate
    kind: OpKind
    doc: str


SEMANTICS: dict[str, OpSemantics] = {}

# Ops we know of and reject, with what to do instead (the nearest supported alternative).
REJECTED: dict[str, str] = {
    "fft": "the NeuronCore has no FFT unit and trnsim no complex types; express the transform as a matmul with "
           "a real DFT matrix",
    "complex": "complex types are not supported; keep real and imaginary parts as separate f32 tensors",
    "infeed": "pass the data as a program argument",
    "outfeed": "return the data as a program result",
    "send": "use collectives (all_reduce, all_gather) in a multi-device program",
    "recv": "use collectives (all_reduce, all_gather) in a multi-device program",
    "uniform_quantize": "quantize with trnsim's auto_cast option (fp8, MX or int4) instead of !quant types",
    "uniform_dequantize": "quantize with trnsim's auto_cast option (fp8, MX or int4) instead of !quant types",
    "dynamic_broadcast_in_dim": "export with static shapes (no shape polymorphism)",
    "dynamic_reshape": "export with static shapes (no shape polymorphism)",
    "dynamic_iota": "export with static shapes (no shape polymorphism)",
    "dynamic_pad": "export with static shapes (no shape polymorphism)",
    "dynamic_gather": "export with static shapes (no shape polymorphism)",
    "dynamic_conv": "export with static shapes (no shape polymorphism)",
    "real_dynamic_slice": "export with static shapes (no shape polymorphism)",
    "get_dimension_size": "export with static shapes (no shape polymorphism)",
    "set_dimension_size": "export with static shapes (no shape polymorphism)",
}


def semantics(*names: str, kind: OpKind) -> Callable[[Evaluate], Evaluate]:
    """Register ``fn`` as the evaluation rule of the StableHLO ops ``names``."""

    def register(fn: Evaluate) -> Evaluate:
        for name in names:
            if name in SEMANTICS:
                raise RuntimeError(f"semantics for {name!r} registered twice")
            SEMANTICS[name] = OpSemantics(name, fn, kind, (fn.__doc__ or "").strip())
        return fn

    return register


def lookup(op: str, *, where: str) -> OpSemantics:
    """The rule for ``op``, or UnsupportedError naming the op, where it is and the nearest alternative."""
    _load_rules()
    rule = SEMANTICS.get(op)
    if rule is not None:
        return rule
    if op in REJECTED:
        raise UnsupportedError(f"op `{op}` is not supported", where=where, hint=REJECTED[op])
    near = difflib.get_close_matches(op, SEMANTICS.keys(), n=2, cutoff=0.6)
    hint = (f"the nearest supported ops are {', '.join(near)}; " if near else "") + \
        "see `python -m trnsim.conformance --ops` for the full list"
    raise UnsupportedError(f"op `{op}` is not supported", where=where, hint=hint)


_loaded = False


def _load_rules() -> None:
    global _loaded
    if not _loaded:
        from trnsim.ir.semantics import load_all

        load_all()
        _loaded = True
