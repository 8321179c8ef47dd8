"""The simulator's fast fp32/bf16/fp16 encoders and decoders equal the general numerics path."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from trnsim.sim import values


def _patterns() -> np.ndarray:
    rng = np.random.default_rng(0)
    bits = np.concatenate([
        rng.integers(0, 1 << 32, 300_000, dtype=np.uint64).astype(np.uint32),
        np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0x7FA00000, 0x7F800001, 0xFFA00000, 0x0, 0x80000000,
                  0x00000001, 0x7F7FFFFF, 0x477FF000, 0x477FE000], dtype=np.uint32),
    ])
    return bits.view(np.float32)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_fast_encode_equals_general(dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    x = _patterns()
    fast = values.encode_values(x, dtype)
    monkeypatch.setattr(values, "_ENCODE_RNE", {})
    general = values.encode_values(x, dtype)
    assert np.array_equal(fast, general)


@pytest.mark.parametrize("dtype,bits", [("bf16", 16), ("fp16", 16), ("fp8_e4m3", 8), ("fp32", 32)])
def test_fast_decode_equals_general(dtype: str, bits: int) -> None:
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 1 << bits, 100_000, dtype=np.uint64).astype({8: np.uint8, 16: np.uint16, 32: np.uint32}[bits])
    fast = values.decode_raw32(raw, dtype)
    with np.errstate(invalid="ignore"):
        general = values.decode_raw(raw, dtype).astype(np.float32)
    same = (fast.view(np.uint32) == general.view(np.uint32)) | (np.isnan(fast) & np.isnan(general))
    assert same.all()


def _general_bf16(x: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> np.ndarray:
    with monkeypatch.context() as m:
        m.setattr(values, "_ENCODE_RNE", {})
        return values.encode_values(x, "bf16")


@pytest.mark.parametrize("size", [0, 1, values.CHUNK - 1, values.CHUNK, 2 * values.CHUNK + 3])
def test_bf16_encoder_chunks_nans_and_shapes(size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The chunked encoder: NaNs (both signs, payloads that would read as inf) at chunk edges, odd sizes."""
    x = _patterns()[:size].copy()
    nans = np.array([0x7F800001, 0xFF800001, 0x7FC00000, 0xFFFFFFFF], dtype=np.uint32).view(np.float32)
    for i, pos in enumerate([0, values.CHUNK - 1, values.CHUNK, size - 1]):
        if 0 <= pos < size:
            x[pos] = nans[i]
    assert np.array_equal(values.encode_values(x, "bf16"), _general_bf16(x, monkeypatch))


def test_bf16_encoder_keeps_shape_and_reads_strided_input(monkeypatch: pytest.MonkeyPatch) -> None:
    x = _patterns()[: 64 * 300].reshape(64, 300)[:, ::3]
    fast = values.encode_values(x, "bf16")
    assert fast.shape == x.shape and np.array_equal(fast, _general_bf16(np.ascontiguousarray(x), monkeypatch))
    without_nans = np.nan_to_num(x, nan=1.0)
    assert np.array_equal(values.encode_values(without_nans, "bf16"), _general_bf16(without_nans, monkeypatch))


@pytest.mark.parametrize("inexact_from", [0, values.CHUNK - 1, values.CHUNK, 2 * values.CHUNK + 2, None])
def test_bf16_encoder_exact_chunks_then_inexact(inexact_from: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Values already exact in bf16 (shifted only) up to an inexact one, then the carry trick; NaNs and
    infinities whose low bits are zero among the exact ones."""
    codes = np.random.default_rng(8).integers(0, 2**16, 2 * values.CHUNK + 3, dtype=np.uint32)
    codes[[1, values.CHUNK + 1]] = [0x7F80, 0xFF81]  # +inf, a signalling NaN: exact, so shifted only
    x = (codes << 16).view(np.float32)
    if inexact_from is not None:
        x[inexact_from:] = _patterns()[: x.size - inexact_from]
    assert np.array_equal(values.encode_values(x, "bf16"), _general_bf16(x, monkeypatch))


@pytest.mark.parametrize("dtype,raw_type", [("bf16", np.uint16), ("fp16", np.uint16), ("fp32", np.uint32)])
def test_decode_into_equals_decode_raw32_on_strided_views(dtype: str, raw_type: type) -> None:
    raw = np.random.default_rng(9).integers(0, 2**32, (64, 300), dtype=np.uint64).astype(raw_type)[:, ::3]
    out = np.empty(raw.shape, dtype=np.float32)
    assert values.can_decode_into(dtype) and not values.can_decode_into("fp8_e4m3")
    values.decode_into(raw, dtype, out)
    assert np.array_equal(out.view(np.uint32), values.decode_raw32(raw, dtype).view(np.uint32))


@pytest.mark.parametrize("dtype,raw_type", [("bf16", np.uint16), ("fp16", np.uint16), ("fp8_e4m3", np.uint8)])
def test_encode_into_equals_encode_values(dtype: str, raw_type: type) -> None:
    x = _patterns()[: 3 * values.CHUNK + 5]
    out = np.empty(x.size, dtype=raw_type)
    values.encode_into(x, dtype, out)
    assert np.array_equal(out, values.encode_values(x, dtype))


def test_encode_into_takes_every_bfloat16_code_as_its_fp32_value_would_encode() -> None:
    """ml_dtypes' bfloat16 inputs are copied code for code: the same codes as encoding their fp32 values
    (the route ``run_kernel`` took before), for all 65,536 codes, NaN payloads included."""
    codes = np.arange(2**16, dtype=np.uint16)
    out = np.empty(codes.size, dtype=np.uint16)
    values.encode_into(codes.view(ml_dtypes.bfloat16), "bf16", out)
    assert np.array_equal(out, codes)
    assert np.array_equal(values.encode_values(codes.view(ml_dtypes.bfloat16).astype(np.float32), "bf16"), codes)


@pytest.mark.parametrize("raw_type", [np.uint16, np.uint32])
def test_bf16_decoders_widen_every_code_bit_for_bit(raw_type: type) -> None:
    """Both bf16 decoders (ml_dtypes' widening for uint16 codes, the shift otherwise) give ``code << 16`` for
    all 65,536 codes, NaN payloads and signs included, from contiguous and strided memory."""
    codes = np.arange(2**16, dtype=np.uint32)
    expect = codes << 16
    wide = np.empty((256, 512), dtype=raw_type)
    wide[:, ::2] = codes.reshape(256, 256)
    for raw in (codes.astype(raw_type).reshape(256, 256), wide[:, ::2]):
        assert np.array_equal(values.decode_raw32(raw, "bf16").view(np.uint32), expect.reshape(256, 256))
        out = np.empty((256, 768), dtype=np.float32)[:, ::3]
        values.decode_into(raw, "bf16", out)
        assert np.array_equal(out.view(np.uint32), expect.reshape(256, 256))
