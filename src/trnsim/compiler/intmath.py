"""Exact integer combiners on VectorE's fp32 ALU: add, max, min and multiply of 8-, 16- and 32-bit integers,
wrapped modulo 2**N as StableHLO's integer arithmetic wraps, built from ALU ops that stay exact.

VectorE computes in fp32 (``reference/neuron.md`` §1.5: "integer inputs are computed in FP32"), exact for
integers below 2**24, and its bitwise ops (``and``/``or``/``xor``/``shl``/``shr``; NKI's bitwise operators,
§2.4) act on exact integers (``isa.ops.ALU_OPS``). So:

- 8- and 16-bit integer max/min are one ALU op (``alu``); their add, and 8-bit multiply, are made exactly in
  int32 (a 16-bit sum is below 2**17, an 8-bit product below 2**16), then their low bits kept (``wrapped``);
- 32-bit integers are split into two exact 16-bit halves, as the pool and top-k kernels split them: add
  carries from the low halves' sum (``split_add``); max/min compare by the difference of the high halves
  times 2**16 plus that of the low ones, whose fp32 rounding keeps the sign of ``b - a`` (``split_pick``);
- 16- and 32-bit multiply is schoolbook over byte limbs whose column sums stay below 2**19 (``limb_mul``).

A combiner takes ``(a, b, valid, op, dt)``: tiles (or views) ``a`` and ``b`` of the DSL dtype ``dt``, and
``valid`` (a number or a ``[P, 1]`` tile, 1.0 where the result is wanted); it returns ``(new, valid)``:
``new`` the combined values where it computes them (``alu``, ``wrapped``, ``split_add``, ``limb_mul``: the
``valid`` passed in), or ``b`` and the mask of where ``b`` wins (``split_pick``: ``valid`` times ``b``
beats ``a``), which the caller selects by bits (``select_bits``: an fp32 select would round a 32-bit value).
``ARITH`` maps ``(combiner, KIND of dtype)`` to its combiner; ``compiler.dmascatter`` (``[P, 1]`` columns)
and ``compiler.intreduce`` (whole tiles: ``then``) share it (``ieee``, the float one, takes columns only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# the operand dtypes by how the kernels combine them (``ARITH``): floats in the fp32 ALU; 8- and 16-bit
# integers are exact in fp32; 32-bit ones are not above 2**24 (isa.ops: VectorE computes in fp32)
KIND: dict[str, str] = {"fp32": "float", "bf16": "float", "fp16": "float", "int8": "byte", "uint8": "byte",
                        "int16": "short", "uint16": "short", "int32": "word", "uint32": "word"}
UNSIGNED_TWIN: dict[str, str] = {"int8": "uint8", "uint8": "uint8", "int16": "uint16", "uint16": "uint16",
                                 "int32": "uint32", "uint32": "uint32"}
BITS: dict[str, int] = {"int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "int32": 32, "uint32": 32}
WORD32 = ("int32", "uint32")                            # moved exactly by DMA, not by an fp32 select


def then(x: Any, op0: str, scalar: Any, op1: str, y: Any, dtype: str, middle: str = "int32") -> Any:
    """``(x op0 scalar) op1 y``: one instruction when ``y`` is a per-partition ``[P, 1]`` column as ``x`` is
    (the scatter kernel's tiles), else an exact intermediate in ``middle`` and a second one (whole tiles)."""
    from trnsim import dsl

    if y.size == y.shape[0] == x.shape[0] and (not hasattr(scalar, "shape") or scalar.size == scalar.shape[0]):
        return dsl.tensor_scalar(x, op0, scalar, op1, y, dtype=dtype)
    if hasattr(scalar, "shape"):
        return dsl.tensor_tensor(dsl.tensor_tensor(x, scalar, op0, dtype=middle), y, op1, dtype=dtype)
    return dsl.tensor_tensor(dsl.tensor_scalar(x, op0, scalar, dtype=middle), y, op1, dtype=dtype)


def alu(old: Any, values: Any, valid: Any, op: str, dt: str) -> tuple[Any, Any]:
    """One fp32 ALU op rounded once to ``dt``: float add/mul, max/min of 8- and 16-bit integers (exact)."""
    from trnsim import dsl

    return dsl.tensor_tensor(old, values, op), valid


def ieee(old: Any, values: Any, valid: Any, op: str, dt: str) -> tuple[Any, Any]:
    """Float max/min, following IEEE-754 on signed zeros as the interpreter does (max of -0 and +0 is +0, min
    is -0), whatever the ALU returns on ties: where the result is a zero, max adds the two orders' results
    (``+0`` unless both are ``-0``) and min negates the sum of their negations."""
    from trnsim import dsl

    first = dsl.tensor_tensor(old, values, op)
    second = dsl.tensor_tensor(values, old, op)
    if op == "max":
        zero = dsl.tensor_scalar(first, "add", second)
    else:
        zero = dsl.tensor_scalar(dsl.tensor_scalar(first, "mul", -1.0, "sub", second), "mul", -1.0)
    return dsl.where(dsl.tensor_scalar(first, "eq", 0.0, dtype="fp32"), zero, first), valid


def wrapped(old: Any, values: Any, valid: Any, op: str, dt: str) -> tuple[Any, Any]:
    """Add of 8- and 16-bit integers, multiply of 8-bit ones, wrapped as StableHLO's: made exactly in int32
    through the fp32 ALU (a 16-bit sum is below 2**17, an 8-bit product below 2**16), then the low bits kept by
    an ``and`` into the unsigned twin."""
    from trnsim import dsl

    exact = dsl.tensor_tensor(old, values, op, dtype="int32")
    twin = UNSIGNED_TWIN[dt]
    low = dsl.tensor_scalar(exact, "and", float((1 << BITS[dt]) - 1), dtype=twin)
    return (low if twin == dt else low.bitcast(dt)), valid


def split_add(old: Any, values: Any, valid: Any, op: str, dt: str) -> tuple[Any, Any]:
    """32-bit integer add, wrapped mod 2**32, as two exact 16-bit halves (the pool and top-k kernels' split,
    ``kernels.pool_grad``): each step is an exact integer below 2**24 or a bitwise op on exact integers
    (isa.ops.ALU_OPS), where one fp32 add of the words would round above 2**24 (neuron.md §1.5: integers are
    computed in FP32)::

        lo  = (a & 0xFFFF) + (b & 0xFFFF)                 < 2**17
        hi  = (a >> 16) + (b >> 16) + (lo >> 16)          |hi| < 2**17 (halves signed for int32, the carry ≤ 1)
        out = ((hi & 0xFFFF) << 16) | (lo & 0xFFFF)       as uint32, bit-cast to ``dt``
    """
    from trnsim import dsl

    low_a = dsl.tensor_scalar(old, "and", 65535.0, dtype="int32")
    lo = then(values, "and", 65535.0, "add", low_a, "int32")
    high_a = dsl.tensor_scalar(old, "shr", 16.0, dtype="int32")
    high = then(values, "shr", 16.0, "add", high_a, "int32")
    hi = then(lo, "shr", 16.0, "add", high, "int32")
    top = dsl.tensor_scalar(hi, "and", 65535.0, "shl", 16.0, dtype="uint32")
    out = then(lo, "and", 65535.0, "or", top, "uint32")
    return (out if dt == "uint32" else out.bitcast(dt)), valid


def split_pick(old: Any, values: Any, valid: Any, op: str, dt: str) -> tuple[Any, Any]:
    """32-bit integer max/min as the update where it wins, compared by halves (the shift is arithmetic on the
    signed value, isa.ops: int32's high half is signed, uint32's unsigned; the low halves are unsigned)::

        h   = (b >> 16) - (a >> 16)               |h| < 2**16, exact (h · 2**16 too)
        l   = (b & 0xFFFF) - (a & 0xFFFF)         |l| < 2**16, exact
        d   = h · 2**16 + l                       b - a rounded once to fp32: h · 2**16 is exact, and the
                                                  rounding of a non-zero integer keeps its sign
        pick = (d > 0) · valid                    (d < 0 for min); ties keep ``old``, the same bits
    """
    from trnsim import dsl

    high_a = dsl.tensor_scalar(old, "shr", 16.0, dtype="int32")
    low_a = dsl.tensor_scalar(old, "and", 65535.0, dtype="int32")
    h = then(values, "shr", 16.0, "sub", high_a, "fp32")
    low = then(values, "and", 65535.0, "sub", low_a, "fp32")
    d = then(h, "mul", 65536.0, "add", low, "fp32", middle="fp32")
    return values, dsl.tensor_scalar(d, "gt" if op == "max" else "lt", 0.0, "mul", valid, dtype="fp32")


def limb_mul(old: Any, values: Any, valid: Any, op: str, dt: str) -> tuple[Any, Any]:
    """16- and 32-bit integer multiply, wrapped mod 2**N, as ``n = N / 8`` byte limbs (schoolbook, the columns
    of weight 2**(8k) ≥ 2**N dropped), every partial sum an exact integer below 2**24 in the fp32 ALU::

        a_i = (a >> 8i) & 0xFF,  b_j = (b >> 8j) & 0xFF        (the top limb's bits of a signed value too)
        c_k = Σ_{i+j=k} a_i · b_j                            ≤ 4 · 255² < 2**18
        r_0 = c_0,  r_k = c_k + (r_{k-1} >> 8)               < 2**19
        out = Σ_k (r_k & 0xFF) << 8k                          as the unsigned twin, bit-cast to ``dt``
    """
    from trnsim import dsl

    n = BITS[dt] // 8
    limbs = [[dsl.tensor_scalar(x, "shr", 8.0 * i, "and", 255.0, dtype="int32") if i else
              dsl.tensor_scalar(x, "and", 255.0, dtype="int32") for i in range(n)] for x in (old, values)]
    twin = UNSIGNED_TWIN[dt]
    out, carry = None, None
    for k in range(n):
        column = carry
        for i in range(k + 1):
            a, b = limbs[0][i], limbs[1][k - i]
            column = dsl.tensor_tensor(a, b, "mul", dtype="int32") if column is None else \
                then(a, "mul", b, "add", column, "int32")
        assert column is not None
        byte = dsl.tensor_scalar(column, "and", 255.0, "shl", 8.0 * k, dtype=twin)
        out = byte if out is None else dsl.tensor_tensor(out, byte, "or")
        if k + 1 < n:
            carry = dsl.tensor_scalar(column, "shr", 8.0, dtype="int32")
    assert out is not None
    return (out if twin == dt else out.bitcast(dt)), valid


def select_bits(old: Any, new: Any, pick: Any) -> Any:
    """``new`` where the fp32 0/1 tile ``pick`` (of their shape) is 1, else ``old``, selected by bits (an
    fp32 select would round 32-bit integers above 2**24): ``old ^ ((new ^ old) & -pick)``."""
    from trnsim import dsl

    mask = dsl.tensor_scalar(pick, "mul", -1.0, dtype="int32")
    return dsl.tensor_tensor(dsl.tensor_tensor(dsl.tensor_tensor(new, old, "xor"), mask, "and"), old, "xor")


Combine = Callable[[Any, Any, Any, str, str], tuple[Any, Any]]
# (combiner, KIND) → the exact combiner (module docstring); a pair not here has none
ARITH: dict[tuple[str, str], Combine] = {
    ("add", "float"): alu, ("mul", "float"): alu, ("max", "float"): ieee, ("min", "float"): ieee,
    ("add", "byte"): wrapped, ("add", "short"): wrapped, ("mul", "byte"): wrapped,
    ("max", "byte"): alu, ("min", "byte"): alu, ("max", "short"): alu, ("min", "short"): alu,
    ("add", "word"): split_add, ("max", "word"): split_pick, ("min", "word"): split_pick,
    ("mul", "short"): limb_mul, ("mul", "word"): limb_mul,
}
PICKS = frozenset({split_pick})       # combiners that return ``(b, where b wins)``, selected by ``select_bits``
