"""32-bit integer arithmetic in generated tile code: VectorE computes in fp32, exact only up to 2**24, so the
recipe builder bounds every integer value (``tilegen.ranges``) and computes 32-bit add, subtract, multiply,
max, min, compare and select of values beyond that bound with ``intmath``'s exact word forms (16-bit halves,
byte limbs, selects by bits). JAX's default RNG (threefry: u32 adds, rotations, xors; a u64 counter iota; the
mantissa bits bit-cast to f32) is the program this exists for."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.extend.random import threefry_2x32

import trnsim
from test_compiler_tilegen import _bit_exact, _compile, _exact
from trnsim.compiler.tilegen.ranges import EXACT, Ranges, exact


def _rotl(x: jax.Array, r: int) -> jax.Array:
    return (x << jnp.uint32(r)) | (x >> jnp.uint32(32 - r))


def _threefry(key: jax.Array, x0: jax.Array, x1: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Threefry-2x32 with 20 rounds, unrolled (JAX's own runs its rounds in a while loop)."""
    k0, k1 = key[0], key[1]
    ks = [k0, k1, k0 ^ k1 ^ jnp.uint32(0x1BD11BDA)]
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for i in range(5):
        for r in ((13, 15, 26, 6), (17, 29, 16, 24))[i % 2]:
            x0 = x0 + x1
            x1 = _rotl(x1, r) ^ x0
        x0, x1 = x0 + ks[(i + 1) % 3], x1 + ks[(i + 2) % 3] + jnp.uint32(i + 1)
    return x0, x1


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300))
def test_threefry_rounds_are_generated_and_bit_exact(seed: int, n: int) -> None:
    """The unrolled rounds equal JAX's threefry, and their kernel gives them bit for bit (the sums wrap
    modulo 2**32 far beyond 2**24)."""
    rng = np.random.default_rng(seed)
    key = rng.integers(0, 2**32, 2, dtype=np.uint64).astype(np.uint32)
    x = rng.integers(0, 2**32, (2, n), dtype=np.uint64).astype(np.uint32)
    want = np.asarray(threefry_2x32(key, x.reshape(-1)))
    assert np.array_equal(np.concatenate([np.asarray(a) for a in _threefry(key, x[0], x[1])]), want)
    recipes = _exact(_threefry, key, x[0], x[1])
    assert sum(s[:2] == ("word", "add") for r in recipes for s in r.steps) >= 20


@pytest.mark.parametrize("sampler", ["uniform", "bernoulli", "normal"])
def test_jax_random_outside_its_rounds_is_generated_and_bit_exact(sampler: str) -> None:
    """``jax.random``'s counter (a u64 iota times the row length plus a u64 iota, split into two u32 words:
    computed as int32, every value below 2**24) and its floats (the top 23 bits or-ed with 1.0's, bit-cast to
    f32, minus 1): every step but the threefry while loop's (unrolled above) is generated and exact."""
    fns = {"uniform": lambda k: jax.random.uniform(k, (48, 130)),
           "bernoulli": lambda k: jax.random.bernoulli(k, 0.9, (48, 130)),
           "normal": lambda k: jax.random.normal(k, (48, 130))}
    key = jax.random.key_data(jax.random.key(3))
    program = _compile(lambda k: fns[sampler](jax.random.wrap_key_data(k)), key)
    kinds = [s.kernel for s in program.plan.steps]
    assert "control" in kinds and "fused_elementwise" not in kinds
    for step in program.plan.steps:
        for sub in step.sub:
            assert all(s.kernel != "fused_elementwise" for s in sub.steps), [s.ops for s in sub.steps]
    if sampler != "normal":               # (erf_inv's polynomial rounds as the interpreter's only within ulps)
        _bit_exact(program, [np.asarray(key)])


def test_32_bit_bitcasts_copy_the_bits_and_nextafter_is_exact() -> None:
    """f32 ↔ u32 / i32 bitcasts (an integer ``or 0``: exact), and ``nextafter`` of f32, whose ±1 runs on bit
    patterns far beyond 2**24: NaNs, infinities, signed zeros, subnormals, the largest finite."""
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4028235e38, -3.4028235e38, 1.0,
                        -1.0, 1.1754944e-38, 0.1, -7.5, 1e10, 2.0**24], np.float32)
    x, y = (m.reshape(16, 16) for m in np.meshgrid(special, special))
    recipes = _exact(lambda x, y: (jnp.nextafter(x, y), jax.lax.bitcast_convert_type(x, jnp.uint32) >> 3,
                                   jax.lax.bitcast_convert_type(jax.lax.bitcast_convert_type(y, jnp.int32) - 1,
                                                                jnp.float32)), x, y)
    assert any(s[0] == "bitcast" for r in recipes for s in r.steps)
    assert any(s[0] == "word" for r in recipes for s in r.steps)


def test_index_arithmetic_stays_one_instruction_per_op() -> None:
    """Values bounded below 2**24 (iotas, their sums and products with small constants) keep the fp32
    instructions: a row index times the row length plus the column, compared with an int32 input of any
    value (fp32 rounding keeps the order against an exact operand)."""
    labels = np.random.default_rng(0).integers(-2**31, 2**31, (64, 1), dtype=np.int64).astype(np.int32)
    labels[::3] = 7

    def f(labels: jax.Array) -> jax.Array:
        index = jax.lax.broadcasted_iota(jnp.int32, (64, 100), 0) * 100 + jax.lax.broadcasted_iota(
            jnp.int32, (64, 100), 1)
        return (index % 100 == labels) | (index > labels)

    (recipe,) = _exact(f, labels)
    assert not any(s[0] == "word" for s in recipe.steps)


@pytest.mark.parametrize("dtype", ["uint32", "int32"])
def test_32_bit_division_and_remainder_are_exact_beyond_2_24(dtype: str) -> None:
    """Every pair of edge values (INT_MIN / -1 wraps, x / 0 is all ones and x % 0 = x, divisors at and above
    2**30, where the quotient is at most 3), and random quotients times random divisors plus 0, ±1, ±2 or
    d - 1 (remainders at the boundaries the fp32 estimates must be corrected across); divisors that are
    numbers too."""
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    edges = np.array(sorted({lo, hi, lo + 1, 0, 1, 2, 3, 7, 255, 4095, 65535, 65536, 65537, 2**24 + 1, 2**30 - 1,
                             2**30, 2**30 + 5, 2**31 - 1, hi // 3, 123456789, *((-1, -7, -2**30) if lo else ())}),
                     np.int64)
    a, b = (m.reshape(-1).astype(dtype) for m in np.meshgrid(edges, edges))
    rng = np.random.default_rng(11)
    d = rng.integers(lo, hi + 1, 4000, dtype=np.int64) >> rng.integers(0, 32, 4000)
    n = (rng.integers(0, 2**32, 4000, dtype=np.int64) >> rng.integers(0, 33, 4000)) * d + \
        rng.choice([0, 1, -1, 2, -2], 4000) + rng.choice([0, 1], 4000) * (d - 1)
    n = np.where((n < lo) | (n > hi), rng.integers(lo, hi + 1, 4000, dtype=np.int64), n)
    seven, big = jnp.asarray(7, dtype), jnp.asarray(1000003, dtype)
    for x, y in ((a, b), (n.astype(dtype).reshape(40, 100), d.astype(dtype).reshape(40, 100))):
        recipes = _exact(lambda a, b: (jax.lax.div(a, b), jax.lax.rem(a, b), jax.lax.div(a, seven),
                                       jax.lax.rem(a, big), jax.lax.div(jnp.asarray(hi, dtype), b)), x, y)
        assert {s[1] for r in recipes for s in r.steps if s[0] == "word"} == {"div", "rem"}


def test_ranges_bound_the_values_of_jax_s_counter() -> None:
    """The u64 counter of ``jax.random`` over a [256, 1024] shape: below 2**18, so computed as int32."""
    program = _compile(lambda k: jax.random.bits(jax.random.wrap_key_data(k), (256, 1024)),
                       np.asarray(jax.random.key_data(jax.random.key(0))))
    nodes = program.graph.nodes
    ranges = Ranges(nodes)
    iotas = [n.out for n in nodes if n.op == "iota" and n.out.type.dtype == "ui64"]
    assert iotas and all(exact(ranges.of(v)) for v in iotas)
    sums = [n.out for n in nodes if n.op == "add" and n.out.type.dtype == "ui64"]
    assert sums and all(ranges.of(v) == (0, 256 * 1024 - 1) for v in sums)
    assert EXACT == 2**24


def test_clamp_with_bounds_out_of_order_and_immediate_operands() -> None:
    """``clamp(lo, x, hi)`` is ``min(max(x, lo), hi)``: with ``lo > hi`` the result is ``hi`` (found by a
    fuzzer: the interval was ``max(min(x, hi), lo)``'s); a constant ``x`` and ``lo`` (both immediates) fold
    before the word form's ``min``."""
    x = np.random.default_rng(0).integers(-2**31, 2**31, (200,), dtype=np.int64).astype(np.int32)

    def f(x: jax.Array) -> tuple[jax.Array, ...]:
        iota = jax.lax.broadcasted_iota(jnp.int32, (200,), 0)
        full = lambda v: jnp.full((200,), v, jnp.int32)  # noqa: E731
        return (jax.lax.clamp(full(-27634652), full(2), iota), jax.lax.clamp(full(28844485), full(4), iota),
                jax.lax.clamp(full(0), full(0), x), jax.lax.clamp(x, full(7), x // 3))

    _exact(f, x)


def test_fuzzer_found_integer_cases() -> None:
    """A compare of -2**24 (exact) with -2**24 - 1 (which fp32 rounds onto it) takes the word form; an
    arithmetic shift of negative values by varying amounts moves toward -1 (its interval's corners); an 8-bit
    sum over a middle axis folds in int32 and wraps (its folds in int8 saturated at 127)."""
    x = np.array([-2**24 - 1, -2**24, -2**24 + 1, 2**24 + 1, 2**24, 5, -7, 0] * 16, np.int32).reshape(8, 16)
    small = np.arange(-64, 64, dtype=np.int8).reshape(8, 16)

    def f(x: jax.Array, small: jax.Array) -> tuple[jax.Array, ...]:
        iota = jax.lax.broadcasted_iota(jnp.int32, (8, 16), 1) % 8
        return (jnp.where(jnp.int32(-2**24) <= x, iota, x), x < jnp.int32(2**24),
                jax.lax.shift_right_arithmetic(jnp.minimum(jnp.int32(-2), x), iota))

    _exact(f, x, small)
    y = np.full((3, 4, 128), 100, np.int8)
    y[2, :, -1] = [127, 127, 100, 90]
    (recipe,) = _exact(lambda y: jnp.sum(y, axis=1, keepdims=True, dtype=jnp.int8), y)
    assert any(s[0] == "middle" and s[3] == "int32" for s in recipe.steps)
    # an int8 iota of 200 wraps (128 → -128; the iota's int32 index written to int8 saturated at 127)
    _exact(lambda z: jax.lax.broadcasted_iota(jnp.int8, (200,), 0) + z, np.arange(200).astype(np.int8))
    # a 32-bit constant tile beyond 2**24 is made exactly (a memset rounded 2**31 - 1 to 2**31)
    _exact(lambda: jax.lax.broadcasted_iota(jnp.uint32, (3, 4, 128), 2) +
           jnp.min(jnp.full((3, 4, 128), jnp.uint32(2**31 - 1)), axis=2, keepdims=True))


def test_a_64_bit_value_beyond_int32_keeps_the_analytic_cost() -> None:
    """``min(u64 iota, 2**64 - 1)`` is bounded by the iota, but its constant operand is not an int32: no
    64-bit datapath, so the step keeps the analytic cost (a fuzzer found it crashing the word form)."""
    jax.config.update("jax_enable_x64", True)
    try:
        program = _compile(lambda z: jnp.minimum(jax.lax.broadcasted_iota(jnp.uint64, (200,), 0),
                                                 jnp.uint64(2**64 - 1)).astype(jnp.uint16) + z,
                           np.zeros(200, np.uint16))
    finally:
        jax.config.update("jax_enable_x64", False)
    assert "fused_elementwise" in [s.kernel for s in program.plan.steps]


def test_integer_reductions_without_an_exact_fp32_form_are_their_own_kernel() -> None:
    """A 32-bit sum or maximum of values that may pass 2**24, or an integer product, is not fused with the
    elementwise ops before it (the group would keep the analytic cost): those are generated, the reduction is
    the ``int_reduce`` kernel; a sum of a 0/1 mask is bounded and stays fused."""
    shape = jax.ShapeDtypeStruct((64, 100), np.int32)
    cases = {lambda x: jnp.sum(x * 3 + 1, axis=1, dtype=jnp.int32): ["generated_elementwise", "int_reduce"],
             lambda x: jnp.prod(x + 1, axis=0, dtype=jnp.int32): ["generated_elementwise", "int_reduce"],
             lambda x: jnp.max(x ^ 5, axis=1): ["generated_elementwise", "int_reduce"],
             lambda x: jnp.sum((x > 0).astype(jnp.int32), axis=1): ["generated_elementwise"]}
    x = np.random.default_rng(0).integers(-2**31, 2**31, (64, 100), dtype=np.int64).astype(np.int32)
    for fn, kernels in cases.items():
        program = trnsim.compile(jax.jit(fn).lower(shape), cache=False)
        assert [s.kernel for s in program.plan.steps] == kernels
        np.testing.assert_array_equal(np.asarray(program.run(x)[0]), np.asarray(jax.jit(fn)(x)))
