"""Integer quantization with scales, and N:M structured sparsity."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import trnsim.numerics as tn
from trnsim.errors import NumericsError
from trnsim.numerics.packing import pack_codes, unpack_codes


@pytest.mark.parametrize("fmt,qmax", [("int8", 127), ("int4", 7)])
def test_symmetric_per_tensor(fmt: str, qmax: int) -> None:
    x = np.float32([-2.0, -0.5, 0.0, 0.3, 1.0])
    q = tn.quantize_int(x, fmt)
    assert q.values.min() == -qmax and q.zero_point.item() == 0
    assert q.scale.item() == np.float32(2.0 / qmax)
    assert np.abs(q.dequantize() - x).max() <= q.scale.item() / 2 * (1 + 1e-6)
    assert q.dequantize()[2] == 0.0


def test_asymmetric_uses_full_range_and_keeps_zero_exact() -> None:
    x = np.float32([0.0, 0.5, 1.0, 3.0])
    q = tn.quantize_int(x, "int4", symmetric=False)
    assert q.values.min() == -8 and q.values.max() == 7
    assert q.dequantize()[0] == 0.0
    assert np.abs(q.dequantize() - x).max() <= q.scale.item() / 2 * (1 + 1e-6)


def test_per_channel_and_per_group_shapes() -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 256)).astype(np.float32)
    ch = tn.quantize_int(w, "int8", "channel", axis=0)
    assert ch.scale.shape == (16, 1)
    np.testing.assert_allclose(ch.scale[:, 0], np.abs(w).max(axis=1) / 127, rtol=1e-6)
    gr = tn.quantize_int(w, "int4", "group", axis=1, group_size=64)
    assert gr.scale.shape == (16, 4)
    np.testing.assert_allclose(gr.scale, np.abs(w.reshape(16, 4, 64)).max(axis=2) / 7, rtol=1e-6)
    assert np.abs(gr.dequantize() - w).max() <= gr.scale.max() / 2 * (1 + 1e-6)
    assert len(gr.to_bytes()) == w.size // 2
    g0 = tn.quantize_int(w.T.copy(), "int4", "group", axis=0, group_size=64)
    assert np.array_equal(g0.dequantize(), gr.dequantize().T)


def test_int_errors() -> None:
    with pytest.raises(NumericsError, match="does not divide"):
        tn.quantize_int(np.ones((4, 100)), "int4", "group", group_size=64)
    with pytest.raises(NumericsError, match="NaN"):
        tn.quantize_int(np.float32([np.nan]), "int8")
    with pytest.raises(NumericsError, match="granularity"):
        tn.quantize_int(np.ones(4), "int8", "row")
    with pytest.raises(NumericsError, match="int8 and int4"):
        tn.quantize_int(np.ones(4), "fp8_e4m3")


@settings(max_examples=100, deadline=None)
@given(hnp.arrays(np.float32, st.integers(1, 64), elements=st.floats(-1e4, 1e4, width=32)), st.booleans(),
       st.sampled_from(["int8", "int4"]))
def test_int_quantization_error_bound(x: np.ndarray, symmetric: bool, fmt: str) -> None:
    q = tn.quantize_int(x, fmt, symmetric=symmetric)
    err = np.abs(q.dequantize().astype(np.float64) - x)
    assert (err <= q.scale.item() * 0.5 * (1 + 1e-5) + 1e-30).all()


def _reference_prune(w: np.ndarray, n: int, m: int) -> np.ndarray:
    """Per group along the last axis: keep the n largest |w|, lower index first among equals."""
    out = np.zeros_like(w)
    for idx in np.ndindex(*w.shape[:-1]):
        row = w[idx]
        for g in range(0, row.size, m):
            grp = [(-abs(float(v)), i) for i, v in enumerate(row[g : g + m])]
            for _, i in sorted(grp)[:n]:
                out[idx][g + i] = row[g + i]
    return out


@pytest.mark.parametrize("n,m", [(2, 4), (4, 8)])
def test_prune_matches_reference_and_pattern(n: int, m: int) -> None:
    rng = np.random.default_rng(n)
    w = rng.standard_normal((6, 5, 48)).astype(np.float32)
    w[0, 0, :8] = 1.0  # ties: lowest indices win
    pruned = tn.prune(w, n, m)
    assert np.array_equal(pruned, _reference_prune(w, n, m))
    assert tn.satisfies(pruned, n, m) and not tn.satisfies(w, n, m)
    assert np.array_equal(pruned[0, 0, :4], [1.0, 1.0, 0.0, 0.0][: 4] if m == 4 else [1.0] * 4)


@pytest.mark.parametrize("n,m,bits", [(2, 4, 2), (4, 8, 3)])
def test_compress_round_trip_and_metadata_size(n: int, m: int, bits: int) -> None:
    rng = np.random.default_rng(m)
    w = tn.prune(rng.standard_normal((64, 128)).astype(np.float32), n, m, axis=0)
    values, meta = tn.compress(w, n, m, axis=0)
    assert values.shape == (64 * n // m, 128)
    assert meta.bits == bits and len(meta.packed) == -(-(64 // m) * n * 128 * bits // 8)
    assert np.array_equal(tn.decompress(values, meta), w)
    assert (np.diff(meta.positions(), axis=-1) > 0).all()  # ascending, distinct


def test_compress_pads_sparser_groups_and_rejects_denser() -> None:
    w = np.float32([[0, 0, 0, 5, 1, 2, 0, 0]])
    values, meta = tn.compress(w, 2, 4)
    assert values.tolist() == [[0.0, 5.0, 1.0, 2.0]]
    assert meta.positions().tolist() == [[[0, 3], [0, 1]]]
    with pytest.raises(NumericsError, match="prune"):
        tn.compress(np.float32([[1, 2, 3, 0]]), 2, 4)
    with pytest.raises(NumericsError, match="multiple"):
        tn.prune(np.ones((3, 6)), 2, 4)
    with pytest.raises(NumericsError, match="pattern"):
        tn.prune(np.ones((3, 6)), 3, 6)
    with pytest.raises(NumericsError, match="shape"):
        tn.decompress(values[:, :2], meta)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.integers(1, 6), st.sampled_from([(2, 4), (4, 8)]), st.integers(0, 1))
def test_sparsity_round_trip_property(rows: int, groups: int, nm: tuple[int, int], axis: int) -> None:
    n, m = nm
    rng = np.random.default_rng(rows * 10 + groups)
    shape = (rows, groups * m) if axis == 1 else (groups * m, rows)
    w = rng.integers(-3, 4, shape).astype(np.float32)  # many ties and zeros
    pruned = tn.prune(w, n, m, axis=axis)
    assert tn.satisfies(pruned, n, m, axis=axis)
    assert np.count_nonzero(pruned) <= w.size * n // m
    values, meta = tn.compress(pruned, n, m, axis=axis)
    assert np.array_equal(tn.decompress(values, meta), pruned)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 8), hnp.arrays(np.uint8, st.integers(0, 50), elements=st.integers(0, 255)))
def test_packing_round_trip(bits: int, codes: np.ndarray) -> None:
    codes = codes & ((1 << bits) - 1)
    packed = pack_codes(codes, bits)
    assert len(packed) == -(-codes.size * bits // 8)
    assert np.array_equal(unpack_codes(packed, bits, codes.size), codes)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("fmt", ["int8", "int4"])
def test_int_quantization_of_subnormal_ranges_keeps_a_nonzero_scale(fmt: str, symmetric: bool) -> None:
    """A range of subnormals divided by the code range underflows to 0 in fp32: the scale is then the
    smallest subnormal, so codes stay finite (no NaN cast) and values dequantize within half a step."""
    x = np.array([[1e-45, -1e-45, 0.0, 4e-45], [2.8e-45, 0.0, -5.6e-45, 1e-45]], np.float32)
    with np.errstate(divide="raise", invalid="raise"):  # (the scale's own underflow is the case tested)
        q = tn.quantize_int(x, fmt, symmetric=symmetric)
    assert (q.scale > 0).all()
    assert np.abs(q.dequantize() - x).max() <= 0.5 * float(q.scale.max())
