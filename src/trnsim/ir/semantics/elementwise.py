"""Elementwise ops: arithmetic, math functions, comparisons, bit operations, conversions.

Floats: computed in fp32 (narrower inputs widened), rounded once to the result type. Transcendentals are
computed in f64 and rounded once, so each result is the correctly rounded value of the true function.
Integers wrap modulo 2^bits; StableHLO/XLA conventions for undefined C cases are spelled out per rule.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from trnsim.ir.graph import Node
from trnsim.ir.interp import Interpreter
from trnsim.ir.rules import semantics
from trnsim.ir.semantics._util import bit_pattern, compute, ieee_max, ieee_min, int_range, is_float, precise, to

Arrays = list[np.ndarray]


def _float_unary(fn: Callable[[np.ndarray], np.ndarray], *, transcendental: bool) -> Callable[..., Arrays]:
    def evaluate(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
        x = compute(args[0])
        # f32 results: evaluate in f64 and round once; narrower results: fp32 is already exact enough
        x = precise(x) if transcendental and node.out.type.dtype == "f32" else x
        return [to(node.out, fn(x))]

    evaluate.__doc__ = f"result = {fn.__name__}(x)"
    return evaluate


def _cbrt(x: np.ndarray) -> np.ndarray:
    return np.cbrt(x)


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1.0 / np.sqrt(x)


def _logistic(x: np.ndarray) -> np.ndarray:
    return 0.5 * np.tanh(0.5 * x) + 0.5  # exact form of 1/(1+e^-x) without overflow in e^-x


def _round_afz(x: np.ndarray) -> np.ndarray:
    return np.copysign(np.floor(np.abs(x) + 0.5), x) if x.dtype != np.float32 else _round_afz32(x)


def _round_afz32(x: np.ndarray) -> np.ndarray:
    # NOTE: floor(|x| + 0.5) is wrong for 0.49999997f (the sum rounds up to 1); widen first
    return np.copysign(np.floor(np.abs(x.astype(np.float64)) + 0.5), x).astype(np.float32)


_TRANSCENDENTAL: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exponential": np.exp, "exponential_minus_one": np.expm1, "log": np.log, "log_plus_one": np.log1p,
    "logistic": _logistic, "tanh": np.tanh, "sine": np.sin, "cosine": np.cos, "tan": np.tan,
    "sqrt": np.sqrt, "rsqrt": _rsqrt, "cbrt": _cbrt,
}
_EXACT: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "floor": np.floor, "ceil": np.ceil, "round_nearest_even": np.rint, "round_nearest_afz": _round_afz,
}
for _name, _fn in _TRANSCENDENTAL.items():
    semantics(_name, kind="elementwise")(_float_unary(_fn, transcendental=True))
for _name, _fn in _EXACT.items():
    semantics(_name, kind="elementwise")(_float_unary(_fn, transcendental=False))


@semantics("abs", kind="elementwise")
def _abs(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = |x| (integers: |INT_MIN| wraps to INT_MIN)"""
    return [to(node.out, np.abs(compute(args[0])))]


@semantics("negate", kind="elementwise")
def _negate(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = -x (integers wrap; unsigned: 2^bits - x)"""
    x = compute(args[0])
    return [to(node.out, np.negative(x))]


@semantics("sign", kind="elementwise")
def _sign(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = -1, 0 or 1 (floats: ±0 keep their sign, NaN stays NaN)"""
    x = compute(args[0])
    if is_float(x.dtype):
        s = np.sign(x)
        s = np.where(x == 0, x, s)
        return [to(node.out, s)]
    return [to(node.out, np.sign(x))]


@semantics("is_finite", kind="elementwise")
def _is_finite(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = x is neither ±inf nor NaN"""
    return [np.isfinite(compute(args[0]))]


@semantics("not", kind="elementwise")
def _not(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = ~x (bitwise; logical for i1)"""
    x = compute(args[0])
    return [to(node.out, np.logical_not(x) if x.dtype == np.bool_ else np.invert(x))]


@semantics("popcnt", kind="elementwise")
def _popcnt(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = number of bits set in x (its two's-complement bits, within the type's width)"""
    u, _ = bit_pattern(args[0])
    return [to(node.out, np.bitwise_count(u).astype(np.int64))]


@semantics("count_leading_zeros", kind="elementwise")
def _clz(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = number of leading zero bits of x within the type's width (the width for x = 0)"""
    u, bits = bit_pattern(args[0])
    length = np.zeros(u.shape, np.int64)
    for shift in (32, 16, 8, 4, 2, 1):
        if shift >= bits:
            continue
        big = (u >> np.uint64(shift)) != 0
        length += np.where(big, shift, 0)
        u = np.where(big, u >> np.uint64(shift), u)
    length += (u != 0).astype(np.int64)
    return [to(node.out, bits - length)]


@semantics("real", kind="elementwise")
def _real(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = x (real part of a real tensor)"""
    return [to(node.out, args[0])]


@semantics("imag", kind="elementwise")
def _imag(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = 0 (imaginary part of a real tensor)"""
    return [np.zeros(node.out.type.shape, node.out.type.np_dtype)]


# ---- binary ----------------------------------------------------------------------------------------------

def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray], doc: str) -> Callable[..., Arrays]:
    def evaluate(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
        return [to(node.out, fn(compute(args[0]), compute(args[1])))]

    evaluate.__doc__ = doc
    return evaluate


def _bool_or_bits(logical: Callable[[np.ndarray, np.ndarray], np.ndarray],
                  bitwise: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[np.ndarray, np.ndarray],
                                                                                       np.ndarray]:
    def fn(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return logical(a, b) if a.dtype == np.bool_ else bitwise(a, b)

    return fn


for _name, _fn, _doc in (
    ("add", np.add, "result = lhs + rhs"),
    ("subtract", np.subtract, "result = lhs - rhs"),
    ("multiply", np.multiply, "result = lhs * rhs"),
    ("maximum", ieee_max, "result = max(lhs, rhs), NaN if either is NaN, max(-0, +0) = +0"),
    ("minimum", ieee_min, "result = min(lhs, rhs), NaN if either is NaN, min(-0, +0) = -0"),
    ("and", _bool_or_bits(np.logical_and, np.bitwise_and), "result = lhs & rhs"),
    ("or", _bool_or_bits(np.logical_or, np.bitwise_or), "result = lhs | rhs"),
    ("xor", _bool_or_bits(np.logical_xor, np.bitwise_xor), "result = lhs ^ rhs"),
):
    semantics(_name, kind="elementwise")(_binary(_fn, _doc))


@semantics("atan2", kind="elementwise")
def _atan2(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = atan2(lhs, rhs)"""
    return [to(node.out, np.arctan2(precise(compute(args[0])), precise(compute(args[1]))))]


@semantics("divide", kind="elementwise")
def _divide(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = lhs / rhs; integers truncate toward zero, x / 0 = -1 (all bits set), INT_MIN / -1 = INT_MIN"""
    a, b = compute(args[0]), compute(args[1])
    if is_float(a.dtype):
        return [to(node.out, a / b)]
    q, _ = _int_divmod(a, b)
    return [to(node.out, q)]


@semantics("remainder", kind="elementwise")
def _remainder(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = lhs - trunc(lhs / rhs) * rhs (sign of lhs); integers: x % 0 = x, INT_MIN % -1 = 0"""
    a, b = compute(args[0]), compute(args[1])
    if is_float(a.dtype):
        if a.dtype == np.float32:
            return [to(node.out, np.fmod(a.astype(np.float64), b.astype(np.float64)))]  # fmod is exact
        return [to(node.out, np.fmod(a, b))]
    _, r = _int_divmod(a, b)
    return [to(node.out, r)]


def _int_divmod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.broadcast_arrays(a, b)
    zero = b == 0
    if a.dtype.kind == "u":
        safe = np.where(zero, 1, b).astype(a.dtype)
        q = a // safe
        r = a % safe
        q = np.where(zero, np.iinfo(a.dtype).max, q).astype(a.dtype)
        return q, np.where(zero, a, r).astype(a.dtype)
    minus_one = b == -1
    safe = np.where(zero | minus_one, 1, b).astype(a.dtype)
    r = np.fmod(a, safe)
    q = (a - r) // safe
    q = np.where(minus_one, np.negative(a), q)           # wraps: INT_MIN / -1 = INT_MIN
    q = np.where(zero, -1, q).astype(a.dtype)
    r = np.where(minus_one, 0, r)
    r = np.where(zero, a, r).astype(a.dtype)
    return q, r


@semantics("power", kind="elementwise")
def _power(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = lhs ** rhs; integers: exact modulo 2^bits, negative exponents give 0 (1 and -1 excepted)"""
    a, b = compute(args[0]), compute(args[1])
    if is_float(a.dtype):
        return [to(node.out, np.power(precise(a), precise(b)))]
    a, b = np.broadcast_arrays(a, b)
    result = np.ones(a.shape, a.dtype)
    base = a.copy()
    exp = b.astype(np.int64) if b.dtype.kind == "i" else b.astype(np.uint64)
    negative = exp < 0
    e = np.where(negative, 0, exp).astype(np.uint64)
    while (e != 0).any():
        odd = (e & np.uint64(1)) == 1
        result = np.where(odd, result * base, result).astype(a.dtype)
        base = (base * base).astype(a.dtype)
        e = e >> np.uint64(1)
    if a.dtype.kind == "i":
        neg_result = np.where(a == 1, 1, np.where(a == -1, np.where(exp % 2 == 0, 1, -1), 0))
        result = np.where(negative, neg_result, result).astype(a.dtype)
    return [to(node.out, result)]


def _shift(kind: str) -> Callable[..., Arrays]:
    def evaluate(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
        a, s = np.broadcast_arrays(args[0], args[1])
        ua, bits = bit_pattern(a)
        amount, _ = bit_pattern(s)                       # the amount is read as unsigned
        valid = amount < bits
        amt = np.where(valid, amount, 0).astype(np.uint64)
        if kind == "left":
            out = np.where(valid, ua << amt, 0)
        elif kind == "logical":
            out = np.where(valid, ua >> amt, 0)
        else:
            # the bit pattern read as signed (an unsigned type's top bit is its sign here, as in XLA)
            if bits < 64:
                pattern = ua.astype(np.int64)
                signed = np.where(pattern >= (1 << (bits - 1)), pattern - (1 << bits), pattern)
            else:
                signed = ua.view(np.int64)
            out = np.where(valid, signed >> amt.astype(np.int64), np.where(signed < 0, -1, 0))
        # wrap the low ``bits`` bits into the result type (sign-extending signed types)
        out = np.asarray(out).astype(np.uint64) & np.uint64((1 << bits) - 1 if bits < 64 else ~0 & (2**64 - 1))
        lo, _ = int_range(a.dtype)
        wide = out.astype(np.int64) if bits < 64 else out.view(np.int64)
        if lo < 0 and bits < 64:
            wide = np.where(wide >= (1 << (bits - 1)), wide - (1 << bits), wide)
        return [to(node.out, wide if lo < 0 else (out if bits == 64 else wide))]

    evaluate.__doc__ = f"result = shift {kind}; shifts by >= the bit width give 0 (arithmetic: the sign)"
    return evaluate


semantics("shift_left", kind="elementwise")(_shift("left"))
semantics("shift_right_logical", kind="elementwise")(_shift("logical"))
semantics("shift_right_arithmetic", kind="elementwise")(_shift("arithmetic"))


# ---- compare, select, clamp ------------------------------------------------------------------------------

_COMPARE: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal, "GT": np.greater,
    "GE": np.greater_equal,
}


def total_order_key(x: np.ndarray) -> np.ndarray:
    """A signed integer per float that sorts as IEEE totalOrder: -NaN < -inf < ... < -0 < +0 < ... < NaN."""
    sdt = np.dtype(f"i{x.dtype.itemsize}")   # the native bits: bf16 and f16 order as int16
    i = x.view(sdt)
    return np.where(i < 0, i ^ np.iinfo(sdt).max, i)


@semantics("compare", kind="elementwise")
def _compare(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = lhs <direction> rhs; compare_type TOTALORDER orders floats by IEEE totalOrder"""
    a, b = compute(args[0]), compute(args[1])
    if node.attrs.get("compare_type") == "TOTALORDER" and is_float(a.dtype):
        a, b = total_order_key(args[0]), total_order_key(args[1])
    return [_COMPARE[node.attrs["comparison_direction"]](a, b)]


@semantics("select", kind="elementwise")
def _select(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = pred ? on_true : on_false (pred scalar or elementwise)"""
    return [np.where(args[0], args[1], args[2])]


@semantics("clamp", kind="elementwise")
def _clamp(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = min(max(operand, lo), hi)"""
    lo, x, hi = (compute(a) for a in args)
    return [to(node.out, ieee_min(ieee_max(x, lo), hi))]


# ---- conversions -----------------------------------------------------------------------------------------

@semantics("convert", kind="elementwise")
def _convert(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = operand in the result type: floats round to nearest even; float → int truncates toward zero,
    saturates at the integer range and maps NaN to 0; x → i1 is x != 0"""
    x = args[0]
    out = node.out.type
    odt = out.np_dtype
    if out.dtype == "i1":
        return [compute(x) != 0]
    if is_float(x.dtype) and out.dt.is_int:
        return [_float_to_int(compute(x), odt)]
    if x.dtype.kind in "iub" and out.dt.is_float:
        wide = x.astype(np.float64) if x.dtype.itemsize < 8 else _int64_to_f64_odd(x)
        return [to(node.out, wide)]
    if x.dtype.kind in "iub" or x.dtype in (np.dtype("i1"),):
        return [compute(x).astype(compute(np.zeros(0, odt)).dtype).astype(odt)]
    return [to(node.out, compute(x))]


def _float_to_int(x: np.ndarray, odt: np.dtype) -> np.ndarray:
    idt = compute(np.zeros(0, odt)).dtype               # int4 → int8
    lo, hi = int_range(odt)                             # the type's own range (int4: -8..7)
    f = np.trunc(x.astype(np.float64))
    f = np.where(np.isnan(f), 0.0, f)
    too_big = f >= float(hi) + 1.0
    too_small = f < float(lo)
    safe = np.where(too_big | too_small, 0.0, f).astype(idt)
    result = np.where(too_big, hi, np.where(too_small, lo, safe)).astype(idt)
    return result.astype(odt)


def _int64_to_f64_odd(x: np.ndarray) -> np.ndarray:
    # NOTE: int64 → f64 rounds; round to odd so the later rounding to f32/bf16 is exact (no double rounding)
    f = x.astype(np.float64)
    back = np.where(np.abs(f) >= 2.0**63, np.where(f > 0, np.iinfo(x.dtype).max, np.iinfo(x.dtype).min),
                    f).astype(x.dtype)
    inexact = back != x
    if not inexact.any():
        return f
    bits = f.view(np.uint64).copy()
    toward_zero = inexact & ((back > x) == (x > 0))
    bits[toward_zero] -= np.uint64(1)
    bits[inexact] |= np.uint64(1)
    return bits.view(np.float64)


@semantics("bitcast_convert", kind="elementwise")
def _bitcast_convert(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = the bits of operand reinterpreted as the result type (a trailing dimension absorbs a change of
    width)"""
    x = np.ascontiguousarray(args[0])
    odt = node.out.type.np_dtype
    return [x.view(odt).reshape(node.out.type.shape)]


# the IEEE formats whose reduce_precision works on their bits: numpy dtype name → (exponent, mantissa) bits
_IEEE_FIELDS: dict[str, tuple[int, int]] = {"float16": (5, 10), "bfloat16": (8, 7), "float32": (8, 23),
                                            "float64": (11, 52)}


@semantics("reduce_precision", kind="elementwise")
def _reduce_precision(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = operand rounded (RNE) to a float with ``exponent_bits`` and ``mantissa_bits`` and back, as XLA
    and the StableHLO reference interpreter do it, on the operand's own bits: the mantissa field rounded to
    ``mantissa_bits`` (a carry may raise the exponent, up to ±inf); then, only if the format's exponent is
    narrower than the operand's, exponents beyond its range go to ±inf and those at or below its smallest
    normal one to ±0 (the narrow format has no subnormals); NaN stays the operand's NaN. With the operand's own
    exponent width nothing flushes: its subnormals keep their (rounded) mantissa field."""
    x = np.ascontiguousarray(args[0])
    fields = _IEEE_FIELDS.get(x.dtype.name)
    if fields is None:
        return [to(node.out, _reduce_precision_values(x, node.attrs["exponent_bits"], node.attrs["mantissa_bits"]))]
    src_e, src_m = fields
    e_bits, m_bits = node.attrs["exponent_bits"], node.attrs["mantissa_bits"]
    width = 8 * x.dtype.itemsize
    raw = x.view(f"u{x.dtype.itemsize}")
    bits = raw.astype(np.uint64)
    full = np.uint64((1 << width) - 1)
    if m_bits < src_m:
        shift = src_m - m_bits
        last = np.uint64(1 << shift)
        bias = (bits & last) >> np.uint64(shift)          # ties to even: half, plus the kept last bit
        bits = (bits + bias + np.uint64((1 << (shift - 1)) - 1)) & ~(last - np.uint64(1)) & full
    if e_bits < src_e:
        exponent = np.uint64(((1 << src_e) - 1) << src_m)
        src_bias, red_bias = (1 << (src_e - 1)) - 1, (1 << (e_bits - 1)) - 1
        field = bits & exponent
        sign = bits & np.uint64(1 << (width - 1))
        bits = np.where(field > np.uint64((src_bias + red_bias) << src_m), sign | exponent,
                        np.where(field <= np.uint64((src_bias - red_bias) << src_m), sign, bits))
    out = np.where(np.isnan(x), raw, bits.astype(raw.dtype))
    return [out.view(x.dtype).reshape(node.out.type.shape)]


def _reduce_precision_values(x: np.ndarray, e_bits: int, m_bits: int) -> np.ndarray:
    """``reduce_precision`` by value, for operand formats without IEEE fields (the fp8 variants): rounded to
    nearest even; overflow to ±inf, values below the narrow format's smallest normal to ±0, NaN kept."""
    wide = compute(x).astype(np.float64)
    bias = 2 ** (e_bits - 1) - 1
    m, e = np.frexp(wide)                   # x = m * 2^e, 0.5 <= |m| < 1
    scaled = np.ldexp(np.rint(np.ldexp(m, m_bits + 1)), e - m_bits - 1)
    max_normal = (2 - 2.0 ** -m_bits) * 2.0 ** bias
    out = np.where(np.abs(scaled) > max_normal, np.copysign(np.inf, wide), scaled)
    out = np.where(np.abs(out) < 2.0 ** (1 - bias), np.copysign(0.0, wide), out)
    return np.where(np.isfinite(wide), out, wide)

