"""The sort kernel (a bitonic network on VectorE, one row a partition): bit-exact against ``jax.lax.sort`` /
``jnp.sort`` / ``jnp.argsort`` over dtypes, axes, several operands and keys, ties (stable), NaNs of any sign
and payload, ±0, ±inf and lengths that are not powers of two; descending against a stable Python sort by
the comparator ``GT`` describes."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trnsim.dsl.errors import KernelError
from trnsim.kernels import sort, sort_kernel
from trnsim.kernels.sort import fits

NAN, INF = float("nan"), float("inf")
NP_DTYPES: dict[str, Any] = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16, "fp16": np.float16, "int8": np.int8,
                             "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16, "int32": np.int32,
                             "uint32": np.uint32}
FLOATS = ("fp32", "bf16", "fp16")


def _values(rng: np.random.Generator, dtype: str, shape: tuple[int, ...], spread: int) -> np.ndarray:
    """Values of ``dtype`` with ties (``spread`` 2); floats also ±inf, ±0 and NaNs of either sign and payload;
    integers their extremes."""
    kind = NP_DTYPES[dtype]
    if dtype not in FLOATS:
        info = np.iinfo(kind)
        lo, hi = (info.min, info.max) if spread > 2 else (max(info.min, -spread), min(info.max, spread))
        x = rng.integers(lo, hi, shape, dtype=np.int64, endpoint=True).astype(kind)
        x[rng.random(shape) < 0.05] = info.max
        x[rng.random(shape) < 0.05] = info.min
        return x
    x = (rng.integers(-spread, spread + 1, shape) / 4).astype(np.float32)
    specials = np.array([INF, -INF, -0.0, 0.0, NAN, -NAN, np.uint32(0x7FC12345).view(np.float32)], np.float32)
    hits = rng.random(shape) < 0.1
    x[hits] = specials[rng.integers(0, len(specials), int(hits.sum()))]
    return x.astype(kind)


def _descending(keys: list[np.ndarray], axis: int) -> np.ndarray:
    """Positions of a stable sort of each row by ``GT`` over canonical keys: NaNs first, -0.0 == +0.0."""
    rows = [np.moveaxis(k, axis, -1) for k in keys]
    perm = np.zeros(rows[0].shape, np.int64)
    for at in np.ndindex(perm.shape[:-1]):
        def key(i: int, at: tuple[int, ...] = at) -> list[float]:
            out: list[float] = []
            for r in rows:
                v = float(r[at][i]) if r.dtype.kind == "f" or r.dtype == ml_dtypes.bfloat16 else int(r[at][i])
                out += [0.0, 0.0] if v != v else [1.0, -v]
            return out
        perm[at] = sorted(range(perm.shape[-1]), key=key)
    return np.moveaxis(perm, -1, axis)


def _reference(ops: list[np.ndarray], axis: int, num_keys: int, descending: bool) -> list[np.ndarray]:
    """The sorted operands, then the positions."""
    if not descending:
        iota = jax.lax.broadcasted_iota(jnp.int32, ops[0].shape, axis)
        out = jax.lax.sort([jnp.asarray(o) for o in ops] + [iota], dimension=axis, num_keys=num_keys,
                           is_stable=True)
        return [np.asarray(o) for o in out]
    perm = _descending(ops[:num_keys], axis)
    return [np.take_along_axis(o, perm, axis) for o in ops] + [perm]


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    """Bit for bit (NaN payloads, the sign of zero) in ``want``'s dtype."""
    want = np.ascontiguousarray(want)
    return np.array_equal(np.asarray(got).astype(want.dtype).view(np.uint8), want.view(np.uint8))


@settings(max_examples=80, deadline=None)
@given(shape=st.lists(st.integers(1, 24), min_size=1, max_size=3), axis_pick=st.integers(0, 2),
       dtypes=st.lists(st.sampled_from(sorted(NP_DTYPES)), min_size=1, max_size=3), keys_pick=st.integers(0, 2),
       descending=st.booleans(), spread=st.sampled_from([2, 1000]), values=st.booleans(),
       seed=st.integers(0, 2**16))
def test_sort_equals_lax_sort(shape: list[int], axis_pick: int, dtypes: list[str], keys_pick: int,
                              descending: bool, spread: int, values: bool, seed: int) -> None:
    """Several operands, the first ``num_keys`` keys; positions always, the sorted operands or none."""
    rng = np.random.default_rng(seed)
    axis = axis_pick % len(shape)
    num_keys = 1 + keys_pick % len(dtypes)
    ops = [_values(rng, d, tuple(shape), spread) for d in dtypes]
    names = tuple("bf16" if d == "bf16" else None for d in dtypes)
    got = sort(*ops, axis=axis, num_keys=num_keys, descending=descending, dtypes=names, positions=True,
               values=values)
    want = _reference(ops, axis, num_keys, descending)
    want = want if values else want[-1:]
    assert len(got) == len(want)
    assert all(_same(g, w) for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize("dtype", sorted(NP_DTYPES))
def test_values_alone_are_jnp_sort(dtype: str) -> None:
    """No positions read: integer keys drop the position level (ties cannot show), floats keep it (±0 and
    NaN payloads keep their stable order)."""
    rng = np.random.default_rng(3)
    x = _values(rng, dtype, (130, 37), 3)
    (got,) = sort(x, dtypes=("bf16" if dtype == "bf16" else None,))
    assert _same(got, np.asarray(jnp.sort(x, axis=-1)))


def test_nans_zeros_and_infinities_order_as_jnp() -> None:
    x = np.array([[NAN, 1.0, -0.0, INF, 0.0, -NAN, -INF, -0.0, 0.0, 1.0, NAN]], np.float32)
    x[0, 5] = np.uint32(0xFFC01234).view(np.float32)
    values, positions = sort(x, positions=True)
    assert _same(values, np.asarray(jnp.sort(x))) and _same(positions, np.asarray(jnp.argsort(x)))
    assert positions.tolist() == [[6, 2, 4, 7, 8, 1, 9, 3, 0, 5, 10]]
    (down,) = sort(x, descending=True, positions=True, values=False)
    assert down.tolist() == [[0, 5, 10, 3, 1, 9, 2, 4, 7, 8, 6]]


@pytest.mark.parametrize("cols", [1, 2, 3, 255, 1000, 4999, 5000])
def test_long_and_odd_rows_argsort(cols: int) -> None:
    """Rows padded to a power of two (sentinels after every value, NaNs included)."""
    rng = np.random.default_rng(cols)
    x = rng.integers(-20, 20, (3, cols)).astype(np.float32)
    x[:, ::7] = NAN
    (got,) = sort(x, positions=True, values=False)
    assert np.array_equal(got, np.asarray(jnp.argsort(x, axis=-1)))


def test_32_bit_integers_and_payloads_keep_every_bit() -> None:
    """Keys beyond fp32's integers (two halves) and payloads through bit-transparent views."""
    x = np.array([[2**24 + 1, 2**24, -2**31, 2**31 - 1, 0, -1, 2**24 + 1, 65536, 65535]], np.int32)
    y = np.array([[1, 2, 3, 4, 5, 6, 7, 8, 9]], np.uint32) * np.uint32(0x10001) + np.uint32(2**31)
    z = np.array([[1e-45, NAN, -0.0, 3.0, 2.0, 1.0, 0.0, -NAN, INF]], np.float32)
    got = sort(x, y, z, positions=True)
    want = _reference([x, y, z], 1, 1, False)
    assert all(_same(g, w) for g, w in zip(got, want, strict=True))


def test_transposed_rows_sort_along_a_middle_axis() -> None:
    rng = np.random.default_rng(5)
    x = _values(rng, "bf16", (2, 33, 150), 3)      # I = 150: two tiles of rows at each o
    got = sort(x, axis=1, dtypes=("bf16",), positions=True)
    want = _reference([x], 1, 1, False)
    assert all(_same(g, w) for g, w in zip(got, want, strict=True))


@pytest.mark.parametrize("dtypes,num_keys,descending,cols", [
    (("fp32",), 1, False, 9000),                  # 16384 positions in chunks of 2048, NaNs and -0.0
    (("bf16", "int32"), 1, True, 9000),           # a payload, downwards
    (("uint16",), 1, False, 40000),               # 8 chunks of 8192: three merge levels through HBM
])
def test_long_rows_merge_chunks_through_hbm(dtypes: tuple[str, ...], num_keys: int, descending: bool,
                                            cols: int) -> None:
    """Rows too long for one tile: chunks sorted in SBUF, the long-distance stages as passes over pairs."""
    rng = np.random.default_rng(cols)
    ops = [_values(rng, d, (2, cols), 2 if d in FLOATS else 1000) for d in dtypes]
    names = tuple("bf16" if d == "bf16" else None for d in dtypes)
    got = sort(*ops, num_keys=num_keys, descending=descending, dtypes=names, positions=True)
    want = _reference(ops, 1, num_keys, descending)
    assert all(_same(g, w) for g, w in zip(got, want, strict=True))


def test_what_the_kernel_refuses() -> None:
    assert fits(("fp32",), 5000, keep=(), positions=True) and fits(("bf16",), 50257)
    assert not fits(("fp32",), 2**22) and not fits(("fp64",), 10) and not fits(("fp32",) * 5, 10)
    with pytest.raises(KernelError, match="rows below 2\\*\\*22 values"):
        sort_kernel.compile(np.zeros((1, 2**22, 1), np.float32))


@pytest.mark.parametrize("rows,cols", [(1000, 5), (4097, 2), (300, 64), (129, 1)])
def test_short_rows_pack_several_to_a_partition(rows: int, cols: int) -> None:
    """Full tiles of 128 partitions × ``pack`` rows, one of fewer rows a partition, the rest one a partition."""
    rng = np.random.default_rng(rows)
    x = _values(rng, "fp32", (rows, cols), 2)
    y = _values(rng, "int32", (rows, cols), 1000)
    got = sort(x, y, positions=True)
    want = _reference([x, y], 1, 1, False)
    assert all(_same(g, w) for g, w in zip(got, want, strict=True))


def test_bad_axes_and_operands_are_kernel_errors() -> None:
    from trnsim.kernels import argmax

    for call, message in [(lambda: sort(np.zeros((4, 5), np.float32), axis=2), "axis 2 of a 2-D array"),
                          (lambda: sort(np.zeros((4, 5)), np.zeros((4, 4))), "operands of shapes"),
                          (lambda: sort(np.float32(1.0)), "a sort of an array of shape ()"),
                          (lambda: argmax(np.zeros((4, 5), np.float32), axis=-3), "axis -3 of a 2-D array")]:
        with pytest.raises(KernelError) as err:
            call()
        assert message in err.value.render()
