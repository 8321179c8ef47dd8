"""Operator tables: every ALU op, reduction and activation function the engines offer, name → semantics.

The functions here *are* the semantics (the simulator calls them; the verifier and the text form use the
names). Arithmetic ops take and return float32 arrays, as Vector/Scalar/GpSimd compute in fp32; bitwise
ops act on the int64 values of integer operands (the verifier rejects them on float dtypes).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
from numpy.typing import NDArray

F32 = NDArray[np.float32]
Binary = Callable[[NDArray[Any], NDArray[Any]], NDArray[Any]]
OpKind = Literal["arith", "compare", "bitwise"]


@dataclass(frozen=True)
class AluOp:
    """``out = fn(a, b)``; ``kind`` says which operand types it accepts (bitwise: integers only)."""

    name: str
    fn: Binary
    kind: OpKind = "arith"


def _f32(fn: Callable[[Any, Any], Any]) -> Binary:
    def apply(a: NDArray[Any], b: NDArray[Any]) -> NDArray[Any]:
        with np.errstate(all="ignore"):  # inf/NaN results are data, as on the hardware
            return np.asarray(fn(a, b), dtype=np.float32)
    return apply


def _cmp(fn: Callable[[Any, Any], Any]) -> Binary:
    return _f32(lambda a, b: fn(a, b).astype(np.float32))  # 1.0 where true, 0.0 where false


def _int(fn: Callable[[Any, Any], Any]) -> Binary:
    return lambda a, b: np.asarray(fn(a.astype(np.int64), b.astype(np.int64)), dtype=np.int64)


ALU_OPS: dict[str, AluOp] = {
    op.name: op
    for op in (
        AluOp("add", _f32(np.add)),
        AluOp("sub", _f32(np.subtract)),
        AluOp("mul", _f32(np.multiply)),
        AluOp("div", _f32(np.divide)),
        AluOp("max", _f32(np.maximum)),
        AluOp("min", _f32(np.minimum)),
        AluOp("pow", _f32(np.power)),
        AluOp("mod", _f32(np.fmod)),
        AluOp("abs_max", _f32(lambda a, b: np.maximum(np.abs(a), np.abs(b)))),
        AluOp("bypass", _f32(lambda a, b: a + np.zeros_like(b))),  # keep the data operand
        AluOp("eq", _cmp(np.equal), "compare"),
        AluOp("ne", _cmp(np.not_equal), "compare"),
        AluOp("gt", _cmp(np.greater), "compare"),
        AluOp("ge", _cmp(np.greater_equal), "compare"),
        AluOp("lt", _cmp(np.less), "compare"),
        AluOp("le", _cmp(np.less_equal), "compare"),
        AluOp("and", _int(np.bitwise_and), "bitwise"),
        AluOp("or", _int(np.bitwise_or), "bitwise"),
        AluOp("xor", _int(np.bitwise_xor), "bitwise"),
        AluOp("shl", _int(np.left_shift), "bitwise"),
        AluOp("shr", _int(np.right_shift), "bitwise"),  # arithmetic shift on the signed value
    )
}


@dataclass(frozen=True)
class ReduceOp:
    """A reduction ``ufunc.reduce`` over axes; bitwise ones need integer operands."""

    name: str
    ufunc: np.ufunc
    kind: OpKind = "arith"


REDUCE_OPS: dict[str, ReduceOp] = {
    r.name: r
    for r in (
        ReduceOp("add", np.add),
        ReduceOp("max", np.maximum),
        ReduceOp("min", np.minimum),
        ReduceOp("mul", np.multiply),
        ReduceOp("and", np.bitwise_and, "bitwise"),
        ReduceOp("or", np.bitwise_or, "bitwise"),
    )
}

# Comparisons of affine_select's predicate against 0.
COMPARES: dict[str, Callable[[NDArray[Any], int], NDArray[np.bool_]]] = {
    "eq": lambda v, z: v == z,
    "ne": lambda v, z: v != z,
    "gt": lambda v, z: v > z,
    "ge": lambda v, z: v >= z,
    "lt": lambda v, z: v < z,
    "le": lambda v, z: v <= z,
}

_erf = np.vectorize(math.erf, otypes=[np.float64])


class ActivationFn(Protocol):
    def __call__(self, x: F32, out: F32 | None = None) -> F32: ...


ACT_CHUNK = 8192  # elements per float64 pass of an activation: the temporary stays in cache (64 KiB)


def _act(fn: Callable[[NDArray[np.float64]], Any]) -> ActivationFn:
    """Evaluate in float64 and round once to float32: the reference for ScalarE's function units. Every
    function is elementwise: a ufunc on fp32 runs in numpy's buffered loop (``dtype=float64``: widened,
    evaluated and rounded a buffer at a time, the same bits), the others over ``ACT_CHUNK`` elements at a
    time: the same values as one pass, without a float64 copy of the whole tile, whose fresh pages cost more
    than the function (a [128, 1024] tile's exp: 1.0 ms in one pass, 0.2 ms in chunks)."""
    def apply(x: F32, out: F32 | None = None) -> F32:
        """``fn(x)`` as fp32, into ``out`` if given (contiguous fp32 of ``x``'s shape; ``x`` itself allowed)."""
        flat = np.asarray(x).reshape(-1)
        res = np.empty(flat.shape, dtype=np.float32) if out is None else out.reshape(-1)
        with np.errstate(all="ignore"):
            if isinstance(fn, np.ufunc) and flat.dtype == np.float32:  # numpy's own buffered loop: the same
                fn(flat, out=res, dtype=np.float64, casting="same_kind")  # widen, evaluate, round; no Python loop
                return res.reshape(np.shape(x))
            for i in range(0, flat.size, ACT_CHUNK):
                wide = flat[i : i + ACT_CHUNK].astype(np.float64)
                res[i : i + ACT_CHUNK] = fn(wide, out=wide) if isinstance(fn, np.ufunc) else fn(wide)
        return res.reshape(np.shape(x))
    return apply


def _gelu_tanh(x: NDArray[np.float64]) -> NDArray[np.float64]:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


ACTIVATIONS: dict[str, ActivationFn] = {
    "identity": _act(lambda x: x),
    "exp": _act(np.exp),
    "log": _act(np.log),
    "tanh": _act(np.tanh),
    "sigmoid": _act(lambda x: 1.0 / (1.0 + np.exp(-x))),
    "gelu": _act(lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))),
    "gelu_tanh": _act(_gelu_tanh),
    "silu": _act(lambda x: x / (1.0 + np.exp(-x))),
    "relu": _act(lambda x: np.maximum(x, 0.0)),
    "rsqrt": _act(lambda x: 1.0 / np.sqrt(x)),
    "sqrt": _act(np.sqrt),
    "reciprocal": _act(lambda x: 1.0 / x),
    "square": _act(np.square),
    "softplus": _act(lambda x: np.logaddexp(0.0, x)),
    "erf": _act(_erf),
    "abs": _act(np.abs),
    "neg": _act(np.negative),
    # NOTE: neuron.md §1 "Scalar Engine (ScalarE)" documents the function table as extensible ("new functions
    # can be added by SDK update") and §2.4 names these only among nki.language's maths "and others"; named as
    # NKI does (``sin``, ``cos``, ``tan``, ``arctan``), numpy's names where NKI has none (``log1p``, ``expm1``,
    # ``cbrt``). Their cost is every function's: neuron.md §1 gives ScalarE one pipeline rate, no per-function
    # one, and sim.timing.costs ("VectorE / ScalarE / GpSimd") charges it per element whatever the function.
    "sin": _act(np.sin),
    "cos": _act(np.cos),
    "tan": _act(np.tan),
    "arctan": _act(np.arctan),
    "log1p": _act(np.log1p),
    "expm1": _act(np.expm1),
    "cbrt": _act(np.cbrt),
}
