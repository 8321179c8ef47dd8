"""Elementwise operations: ALU ops on VectorE, activation functions on ScalarE, selects and masks on GpSimd.

Every operation computes in fp32 and rounds once to its result's dtype. Results are new SBUF tiles of the
first tensor operand's shape and dtype (fp32 when it is in PSUM) unless ``dtype=`` or ``out=`` say
otherwise. Which instruction runs is decided by the operands, not the caller:

    add(x, y)           x, y tiles of one shape            TensorTensor  (VectorE; engine="gpsimd" allowed)
    add(x, 2.0)         a number                           TensorScalar  immediate
    add(x, m)           m a [P, 1] tile                    TensorScalar  per-partition scalar
    exp(x, scale=s, bias=b)                                Activation    func(x * s + b) on ScalarE, with
                                                                         b a number or a [P, 1] tile
    exp(x, bias=neg_max, reduce_res=row_sum)               ... and the row sums of the result, fused

The binary operations and activation functions are generated from two tables (``BINARY_OPS``,
``ACTIVATION_FUNCS``) over the ISA's ``ALU_OPS`` and ``ACTIVATIONS``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from trnsim.dsl.data import result, same_shape
from trnsim.dsl.errors import fail
from trnsim.dsl.tensor import Tensor
from trnsim.dsl.trace import current
from trnsim.isa.ap import AccessPattern
from trnsim.isa.base import Engine
from trnsim.isa.elementwise import Activation, AffineSelect, Select, TensorScalar, TensorTensor
from trnsim.isa.ops import ACTIVATIONS, ALU_OPS, COMPARES, REDUCE_OPS

Operand = Tensor | float | int


def _is_column(t: Tensor, ref: Tensor) -> bool:
    """A [P, 1] per-partition scalar operand for a larger tile ``ref``."""
    return t.size == t.shape[0] and t.shape[0] == ref.shape[0] and ref.size > ref.shape[0]


def _scalar(v: Operand | None, ref: Tensor, what: str) -> tuple[float | AccessPattern, list[Tensor]]:
    """An instruction's scalar operand (an immediate or a [P, 1] pattern) and the tiles it reads."""
    if v is None:
        return 0.0, []
    if isinstance(v, Tensor):
        if v.shape[0] != ref.shape[0] or v.size != v.shape[0]:
            fail(f"{what}: a per-partition scalar is [{ref.shape[0]}, 1], not {v.shape}",
                 f"pass a number or a [{ref.shape[0]}, 1] tile")
        return v.ap(), [v]
    return float(v), []


def tensor_tensor(x: Tensor, y: Tensor, op: str, *, dtype: str | None = None, out: Tensor | None = None,
                  engine: Engine = "vector") -> Tensor:
    """``op(x, y)`` elementwise (``op`` an ISA ALU op name)."""
    same_shape(x, y, f"tensor_tensor {op}")
    dst = result(x, dtype, out)
    d, a, b = dst.ap(), x.ap(), y.ap()
    current().emit(engine, lambda w, s: TensorTensor(d, a, b, op, wait=w, signal=s), [x, y], [dst])
    return dst


def tensor_scalar(
    x: Tensor, op0: str, scalar0: Operand, op1: str | None = None, scalar1: Operand | None = None, *,
    reverse0: bool = False, reverse1: bool = False, dtype: str | None = None, out: Tensor | None = None,
    engine: Engine = "vector",
) -> Tensor:
    """``(x op0 scalar0) op1 scalar1`` (``reverse``: ``scalar op x``); scalars are numbers or [P, 1] tiles."""
    s0, r0 = _scalar(scalar0, x, "scalar0")
    s1, r1 = _scalar(scalar1, x, "scalar1")
    dst = result(x, dtype, out)
    d, a = dst.ap(), x.ap()
    current().emit(engine, lambda w, s: TensorScalar(d, a, op0, s0, op1, s1, reverse0, reverse1, wait=w, signal=s),
                   [x, *r0, *r1], [dst])
    return dst


def binary(op: str, x: Operand, y: Operand, *, dtype: str | None = None, out: Tensor | None = None,
           engine: Engine = "vector") -> Tensor:
    """``op(x, y)`` choosing TensorTensor or TensorScalar from the operands (module docstring)."""
    if op not in ALU_OPS:
        fail(f"unknown ALU op {op!r}", f"use one of: {', '.join(ALU_OPS)}")
    if isinstance(x, Tensor) and isinstance(y, Tensor):
        if _is_column(y, x):
            return tensor_scalar(x, op, y, dtype=dtype, out=out, engine=engine)
        if _is_column(x, y):
            return tensor_scalar(y, op, x, reverse0=True, dtype=dtype, out=out, engine=engine)
        return tensor_tensor(x, y, op, dtype=dtype, out=out, engine=engine)
    if isinstance(x, Tensor):
        return tensor_scalar(x, op, y, dtype=dtype, out=out, engine=engine)
    if isinstance(y, Tensor):
        return tensor_scalar(y, op, x, reverse0=True, dtype=dtype, out=out, engine=engine)
    fail(f"{op} of two numbers", "at least one operand is a tile; compute constants in Python")


class BinaryOp(Protocol):
    def __call__(self, x: Operand, y: Operand, *, dtype: str | None = None, out: Tensor | None = None,
                 engine: Engine = "vector") -> Tensor: ...


def _binary(name: str, op: str) -> BinaryOp:
    def fn(x: Operand, y: Operand, *, dtype: str | None = None, out: Tensor | None = None,
           engine: Engine = "vector") -> Tensor:
        return binary(op, x, y, dtype=dtype, out=out, engine=engine)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``{op}(x, y)`` elementwise (ISA ALU op ``{op}``); see ``binary``."
    return fn


# DSL name (numpy/NKI) → ISA ALU op
BINARY_OPS: dict[str, str] = {
    "add": "add", "subtract": "sub", "multiply": "mul", "divide": "div", "maximum": "max", "minimum": "min",
    "power": "pow", "fmod": "mod", "equal": "eq", "not_equal": "ne", "greater": "gt", "greater_equal": "ge",
    "less": "lt", "less_equal": "le", "bitwise_and": "and", "bitwise_or": "or", "bitwise_xor": "xor",
    "left_shift": "shl", "right_shift": "shr",
}
add, subtract, multiply, divide = (_binary(n, BINARY_OPS[n]) for n in ("add", "subtract", "multiply", "divide"))
maximum, minimum, power, fmod = (_binary(n, BINARY_OPS[n]) for n in ("maximum", "minimum", "power", "fmod"))
equal, not_equal, greater, greater_equal, less, less_equal = (
    _binary(n, BINARY_OPS[n]) for n in ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal"))
bitwise_and, bitwise_or, bitwise_xor, left_shift, right_shift = (
    _binary(n, BINARY_OPS[n]) for n in ("bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"))


def activation(
    func: str, x: Tensor, *, scale: Operand = 1.0, bias: Operand | None = None, dtype: str | None = None,
    out: Tensor | None = None, reduce_op: str = "add", reduce_res: Tensor | None = None,
) -> Tensor:
    """ScalarE: ``func(x * scale + bias)``; with ``reduce_res`` (a [P, 1] tile) also its ``reduce_op``
    over the free axis of each partition, fused."""
    if func not in ACTIVATIONS:
        fail(f"unknown activation {func!r}", f"use one of: {', '.join(ACTIVATIONS)}")
    if reduce_op not in REDUCE_OPS:
        fail(f"unknown reduce op {reduce_op!r}", f"use one of: {', '.join(REDUCE_OPS)}")
    sc, rs = _scalar(scale, x, "scale")
    bi, rb = _scalar(bias, x, "bias")
    dst = result(x, dtype, out)
    acc: list[Tensor] = []
    if reduce_res is not None:
        _scalar(reduce_res, x, "reduce_res")
        acc = [reduce_res]
    d, a = dst.ap(), x.ap()
    r = reduce_res.ap() if reduce_res is not None else None
    current().emit("scalar", lambda w, s: Activation(d, a, func, sc, bi, r, reduce_op, wait=w, signal=s),
                   [x, *rs, *rb], [dst, *acc])
    return dst


def activation_reduce(
    func: str, x: Tensor, reduce_op: str = "add", *, scale: Operand = 1.0, bias: Operand | None = None,
    dtype: str | None = None, out: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """``activation`` plus a new fp32 [P, 1] tile of the reduction: ``(y, reduced)``."""
    red = current().allocate("sbuf", (x.shape[0], 1), "fp32")
    y = activation(func, x, scale=scale, bias=bias, dtype=dtype, out=out, reduce_op=reduce_op, reduce_res=red)
    return y, red


class UnaryOp(Protocol):
    def __call__(self, x: Tensor, *, scale: Operand = 1.0, bias: Operand | None = None, dtype: str | None = None,
                 out: Tensor | None = None) -> Tensor: ...


def _unary(name: str, func: str) -> UnaryOp:
    def fn(x: Tensor, *, scale: Operand = 1.0, bias: Operand | None = None, dtype: str | None = None,
           out: Tensor | None = None) -> Tensor:
        return activation(func, x, scale=scale, bias=bias, dtype=dtype, out=out)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``{func}(x * scale + bias)`` on ScalarE (activation ``{func}``)."
    return fn


# DSL name (NKI) → ISA activation function
ACTIVATION_FUNCS: dict[str, str] = {
    "exp": "exp", "log": "log", "tanh": "tanh", "sigmoid": "sigmoid", "gelu": "gelu",
    "gelu_apprx_tanh": "gelu_tanh", "silu": "silu", "relu": "relu", "rsqrt": "rsqrt", "sqrt": "sqrt",
    "reciprocal": "reciprocal", "square": "square", "softplus": "softplus", "erf": "erf", "abs": "abs",
    "negative": "neg", "identity": "identity",
}
exp, log, tanh, sigmoid = (_unary(n, ACTIVATION_FUNCS[n]) for n in ("exp", "log", "tanh", "sigmoid"))
gelu, gelu_apprx_tanh, silu, relu = (_unary(n, ACTIVATION_FUNCS[n]) for n in ("gelu", "gelu_apprx_tanh", "silu",
                                                                             "relu"))
rsqrt, sqrt, reciprocal, square = (_unary(n, ACTIVATION_FUNCS[n]) for n in ("rsqrt", "sqrt", "reciprocal", "square"))
softplus, erf, absolute, negative = (_unary(n, ACTIVATION_FUNCS[n]) for n in ("softplus", "erf", "abs", "negative"))
identity = _unary("identity", "identity")


def where(pred: Tensor, on_true: Tensor, on_false: Tensor, *, dtype: str | None = None, out: Tensor | None = None,
          engine: Engine = "vector") -> Tensor:
    """``on_true`` where ``pred`` is non-zero, else ``on_false`` (Select)."""
    same_shape(pred, on_true, "where on_true")
    same_shape(pred, on_false, "where on_false")
    dst = result(on_true, dtype, out)
    d, p, t, f = dst.ap(), pred.ap(), on_true.ap(), on_false.ap()
    current().emit(engine, lambda w, s: Select(d, p, t, f, wait=w, signal=s), [pred, on_true, on_false], [dst])
    return dst


def affine_select(
    x: Tensor, cmp: str, fill: float, *, offset: int = 0, channel_multiplier: int = 0,
    steps: Sequence[int] | None = None, dtype: str | None = None, out: Tensor | None = None,
) -> Tensor:
    """Keep ``x`` where ``offset + channel_multiplier * p + Σ steps[k] * i_k  cmp  0`` holds, else ``fill``
    (GpSimd). A causal mask of scores ``[q, k]`` keeps ``k ≤ q``: ``affine_select(s, "ge", -inf,
    channel_multiplier=1, steps=[-1])``."""
    if cmp not in COMPARES:
        fail(f"unknown comparison {cmp!r}", f"use one of: {', '.join(COMPARES)}")
    src = x.ap(exact=True)
    st = tuple(int(v) for v in steps) if steps is not None else (1,) * len(src.free)
    if len(st) != len(src.free):
        fail(f"{len(st)} steps for {len(src.free)} free dimensions", "give one step per free dimension")
    dst = result(x, dtype, out)
    d = dst.ap()
    current().emit("gpsimd", lambda w, s: AffineSelect(d, src, cmp, float(fill), offset, channel_multiplier, st,
                                                       wait=w, signal=s), [x], [dst])
    return dst
