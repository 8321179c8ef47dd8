"""OCP Microscaling (MX v1.0) block formats: 32 elements share one E8M0 power-of-two scale.

Rule (``reference/frontend_numerics.md`` §B1, the spec's §6.3 as implementations that cite it apply it):

    shared_exp = floor(log2(amax)) − emax_elem, clamped to [−127, 127]   (above 127: the NaN scale 0xFF)
    X          = 2^shared_exp
    P_i        = round_to_element(V_i / X), ties to even, saturating at ±max_elem

Other scale rules are selectable by name (``SCALE_RULES``): ``ceil`` (+1 when amax is not a power of two)
and ``rceil`` (the smallest X with amax / X ≤ max_elem: cuBLAS' UE8M0 recipe, Transformer Engine's MXFP8).

Special values (§B3 lists how references disagree; trnsim follows microxcaling): a block holding a NaN or
an infinity gets the NaN scale and dequantizes to NaN everywhere; an all-zero block gets shared_exp −127
and zero elements. ``scale_exponents`` are unbiased, with 128 standing for the NaN scale (E8M0 code 0xFF).
Blocks run along ``axis`` (default the last: the contraction dimension of a matmul operand); a ragged last
block is scaled on its own elements (as if padded with zeros).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim.errors import NumericsError
from trnsim.numerics._parallel import for_chunks
from trnsim.numerics.formats import FloatFormat, Format, MXFormat, get_format
from trnsim.numerics.packing import pack_codes, packed_size, unpack_codes
from trnsim.numerics.quantize import (
    CHUNK,
    as_float_array,
    class_tables,
    decode,
    encode_exact,
    make_rng,
    quantize_element,
    take_classes,
)

SCALE_MIN, SCALE_MAX, SCALE_NAN = -127, 127, 128

ScaleRule = Callable[[NDArray[np.float64], FloatFormat], NDArray[np.int64]]


def _floor_log2(a: NDArray[np.float64]) -> NDArray[np.int64]:
    """floor(log2(a)) exactly, for finite a > 0 (a = 0 gives a very small number)."""
    _, exp = np.frexp(a)
    return np.where(a > 0, exp.astype(np.int64) - 1, -(1 << 20))


def _scale_floor(amax: NDArray[np.float64], elem: FloatFormat) -> NDArray[np.int64]:
    return _floor_log2(amax) - elem.emax


def _scale_ceil(amax: NDArray[np.float64], elem: FloatFormat) -> NDArray[np.int64]:
    fl = _floor_log2(amax)
    not_pow2 = amax > np.ldexp(1.0, np.clip(fl, -1100, 1100).astype(np.int32))
    return fl + not_pow2 - elem.emax


def _scale_rceil(amax: NDArray[np.float64], elem: FloatFormat) -> NDArray[np.int64]:
    """Smallest e with amax / 2^e <= max_elem (compared exactly: max_elem * 2^e is exact in float64)."""
    e = _floor_log2(amax) - _floor_log2(np.array(elem.max)) - 1
    for _ in range(2):
        e = e + (amax > np.ldexp(elem.max, np.clip(e, -1100, 1100).astype(np.int32)))
    return e


SCALE_RULES: dict[str, ScaleRule] = {"floor": _scale_floor, "ceil": _scale_ceil, "rceil": _scale_rceil}


def shared_exponents(amax: NDArray[np.floating], elem: FloatFormat, rule: str = "floor") -> NDArray[np.int32]:
    """Unbiased E8M0 exponent per block from its absolute maximum (NaN/inf amax → the NaN scale)."""
    scale_rule = SCALE_RULES.get(rule)
    if scale_rule is None:
        raise NumericsError(f"unknown MX scale rule {rule!r}", hint=f"use one of: {', '.join(SCALE_RULES)}")
    a = np.asarray(amax, dtype=np.float64)
    finite = np.isfinite(a)
    se = scale_rule(np.where(finite, a, 1.0), elem)
    se = np.where(se > SCALE_MAX, SCALE_NAN, np.maximum(se, SCALE_MIN))
    return np.where(finite, se, SCALE_NAN).astype(np.int32)


def _pow2(se: NDArray[np.int32], dtype: type[np.floating] = np.float32) -> NDArray[np.floating]:
    """2^se for se in [-127, 127] (exact in float32: 2^-127 is its one subnormal power), NaN for 128."""
    bits = (np.asarray(se, dtype=np.int32) + 127) << 23
    bits = np.where(se == SCALE_MIN, 1 << 22, np.where(se == SCALE_NAN, 0x7FC00000, bits))
    return bits.astype(np.uint32).view(np.float32).astype(dtype, copy=False)


@dataclass(frozen=True)
class MXArray:
    """An MX-quantized tensor: element values (before scaling) and one scale exponent per block."""

    format: MXFormat
    elements: NDArray[np.float32]  # same shape as the input
    scale_exponents: NDArray[np.int32]  # input shape with `axis` replaced by the number of blocks
    axis: int

    @property
    def shape(self) -> tuple[int, ...]:
        return self.elements.shape

    def block_scales(self) -> NDArray[np.float32]:
        """Each element's scale 2^shared_exp (NaN for NaN-scale blocks), broadcast to ``shape``."""
        per_block = _pow2(self.scale_exponents, np.float32)
        n = self.shape[self.axis]
        return np.repeat(per_block, self.format.block, axis=self.axis).take(np.arange(n), axis=self.axis)

    def dequantize(self) -> NDArray[np.float32]:
        """Element × scale, in float32 (exact: a format value times a power of two)."""
        elems = np.moveaxis(self.elements, self.axis, -1)
        scales = _pow2(np.moveaxis(self.scale_exponents, self.axis, -1), np.float32)
        n, k = elems.shape[-1], self.format.block
        full = n - n % k
        out = np.empty(elems.shape, dtype=np.float32)
        head = elems[..., :full].reshape(*elems.shape[:-1], -1, k)
        np.multiply(head, scales[..., : full // k, None], out=out[..., :full].reshape(head.shape))
        if full < n:
            out[..., full:] = elems[..., full:] * scales[..., -1:]
        return np.moveaxis(out, -1, self.axis)

    def element_codes(self) -> NDArray[np.uint8]:
        """Bit codes of the elements (NaN-scale blocks hold zeros)."""
        return encode_exact(np.nan_to_num(self.elements, nan=0.0), self.format.element)

    def scale_codes(self) -> NDArray[np.uint8]:
        """E8M0 codes: biased exponents, 0xFF for NaN."""
        return (self.scale_exponents + 127).astype(np.uint8)

    @property
    def nbytes(self) -> int:
        """Storage: packed element bits plus one scale byte per block."""
        return packed_size(self.elements.size, self.format.element.bits) + self.scale_exponents.size

    def to_bytes(self) -> bytes:
        """Scale bytes (C order) followed by the element codes bit-packed, little-endian within a byte."""
        return self.scale_codes().tobytes() + pack_codes(self.element_codes(), self.format.element.bits)

    @classmethod
    def from_bytes(cls, data: bytes, fmt: str | Format, shape: tuple[int, ...], axis: int = -1) -> MXArray:
        mxf = _mx_format(fmt)
        ax = _normalize_axis(axis, len(shape))
        scale_shape = list(shape)
        scale_shape[ax] = -(-shape[ax] // mxf.block)
        nscale = int(np.prod(scale_shape))
        nelem = int(np.prod(shape))
        expected = nscale + packed_size(nelem, mxf.element.bits)
        if len(data) != expected:
            raise NumericsError(
                f"MX buffer has {len(data)} bytes, expected {expected} for {mxf.name} of shape {shape}",
                hint="check the shape, axis and format the buffer was written with",
            )
        scales = np.frombuffer(data[:nscale], dtype=np.uint8).astype(np.int32) - 127
        codes = unpack_codes(data[nscale:], mxf.element.bits, nelem)
        elements = decode(codes, mxf.element).reshape(shape)
        return cls(mxf, elements, scales.reshape(scale_shape), ax)


def _mx_format(fmt: str | Format) -> MXFormat:
    f = get_format(fmt)
    if not isinstance(f, MXFormat):
        raise NumericsError(f"{f.name!r} is not an MX format", hint="use mxfp8_e4m3, mxfp6_e2m3, mxfp4_e2m1, ...")
    return f


def _normalize_axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise NumericsError(f"axis {axis} is out of range for an array of {ndim} dimensions")
    return axis % ndim


def _blocked(arr: NDArray[np.floating], ax: int, k: int) -> NDArray[np.floating]:
    """``arr`` as (pre, blocks, k, post) without moving data (zero-padding a ragged last block)."""
    n = arr.shape[ax]
    if n % k:
        pad = [(0, 0)] * arr.ndim
        pad[ax] = (0, -n % k)
        arr = np.pad(arr, pad)
    pre = int(np.prod(arr.shape[:ax], dtype=np.int64))
    post = int(np.prod(arr.shape[ax + 1 :], dtype=np.int64))
    return np.ascontiguousarray(arr).reshape(pre, arr.shape[ax] // k, k, post)


def _unblocked(b4: NDArray[Any], shape: tuple[int, ...], ax: int) -> NDArray[Any]:
    padded = list(shape)
    padded[ax] = b4.shape[1] * b4.shape[2]
    out = b4.reshape(padded)
    return out if padded[ax] == shape[ax] else out.take(np.arange(shape[ax]), axis=ax)


def _scale_shape(shape: tuple[int, ...], ax: int, k: int) -> tuple[int, ...]:
    s = list(shape)
    s[ax] = -(-shape[ax] // k)
    return tuple(s)


def _prepare(x: ArrayLike, fmt: str | Format, axis: int, block: int | None) -> tuple[MXFormat, NDArray[Any], int]:
    mxf = _mx_format(fmt)
    if block is not None and block != mxf.block:
        if block < 1:
            raise NumericsError(f"MX block size must be positive, got {block}")
        mxf = MXFormat(mxf.name, mxf.element, block)
    arr = as_float_array(x)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    return mxf, arr, _normalize_axis(axis, arr.ndim)


def mx_quantize(
    x: ArrayLike,
    fmt: str | Format,
    axis: int = -1,
    block: int = 32,
    *,
    scale_rule: str = "floor",
    rounding: str = "rne",
    seed: int | None = None,
) -> MXArray:
    """Quantize ``x`` to the MX format ``fmt`` with one shared E8M0 scale per ``block`` elements along
    ``axis`` (default 32, the OCP block size)."""
    mxf, arr, ax = _prepare(x, fmt, axis, block)
    elements, se = _mx_blocks(_blocked(arr, ax, mxf.block), mxf.element, scale_rule, rounding, seed, False)
    scale_shape = _scale_shape(arr.shape, ax, mxf.block)
    return MXArray(mxf, _unblocked(elements, arr.shape, ax), se.reshape(scale_shape), ax)


def mx_fake_quantize(
    x: ArrayLike,
    fmt: str | Format,
    axis: int = -1,
    *,
    scale_rule: str = "floor",
    rounding: str = "rne",
    seed: int | None = None,
) -> NDArray[np.float32]:
    """``mx_quantize(...).dequantize()`` in one pass: the values an MX operand carries into a matmul."""
    mxf, arr, ax = _prepare(x, fmt, axis, None)
    values, _ = _mx_blocks(_blocked(arr, ax, mxf.block), mxf.element, scale_rule, rounding, seed, True)
    return _unblocked(values, arr.shape, ax)


def _mx_blocks(
    b4: NDArray[np.floating], elem: FloatFormat, scale_rule: str, rounding: str, seed: int | None,
    dequantize: bool,
) -> tuple[NDArray[np.float32], NDArray[np.int32]]:
    """Elements (or dequantized values) of shape (pre, blocks, k, post) and exponents (pre, blocks, post)."""
    if b4.dtype == np.float32 and scale_rule == "floor" and rounding == "rne" and elem.bits <= 8:
        return _mx_blocks_fast(b4, elem, dequantize)
    with np.errstate(invalid="ignore"):
        amax = np.max(np.abs(b4), axis=2)
    amax = np.where(np.isnan(b4).any(axis=2), np.nan, amax)
    se = shared_exponents(amax, elem, scale_rule)
    finite_se = np.where(se == SCALE_NAN, 0, se)
    scaled = b4 * _pow2(-finite_se, b4.dtype.type)[:, :, None, :]
    rng = make_rng(seed) if rounding == "stochastic" else None
    elements = quantize_element(scaled, elem, rounding=rounding, saturate=True, rng=rng)
    if dequantize:
        return (elements * _pow2(se, np.float32)[:, :, None, :]).astype(np.float32), se
    elements[np.broadcast_to((se == SCALE_NAN)[:, :, None, :], elements.shape)] = 0.0
    return elements, se


def _mx_blocks_fast(
    b4: NDArray[np.float32], elem: FloatFormat, dequantize: bool
) -> tuple[NDArray[np.float32], NDArray[np.int32]]:
    """floor rule, round-to-nearest-even, float32 input: the same result, from exponent bits and the
    class table, a cache-sized chunk of block rows at a time on every core."""
    pre, nb, k, post = b4.shape
    rows = b4.reshape(pre * nb, k, post)
    out = np.empty(rows.shape, dtype=np.float32)
    se_all = np.empty((pre * nb, post), dtype=np.int32)
    table = class_tables(elem, "rne", True)[0]
    row_starts = np.arange(0, min(rows.shape[0], max(1, CHUNK // (k * post))) * k, k)

    def work(start: int, stop: int) -> None:
        blk, o = rows[start:stop], out[start:stop]
        mag = np.bitwise_and(blk.view(np.uint32), 0x7FFFFFFF)  # integer order = float order; NaN/inf on top
        if post == 1:  # NOTE: reduceat over the flat run beats an axis reduce over many 32-element rows
            amax_bits = np.maximum.reduceat(mag.reshape(-1), row_starts[: stop - start]).reshape(-1, 1)
        else:
            amax_bits = mag.max(axis=1)
        e_field = (amax_bits >> 23).view(np.int32)  # floor(log2 amax) + 127; 0 for zero/subnormal
        se = np.maximum(e_field - (127 + elem.emax), SCALE_MIN)  # finite: e_field <= 254, so se < 127
        # NOTE: 2^-se = 2^(127 - se - 127) stays a normal float32 since se >= -127 and se <= 127 - emax
        np.multiply(blk, ((127 - se) << 23).view(np.float32)[:, None, :], out=o)
        take_classes(o, table, o)
        nonfinite = e_field == 255
        if nonfinite.any():
            se[nonfinite] = SCALE_NAN
        if dequantize:
            scale = ((127 + se) << 23).view(np.float32)
            if (se == SCALE_MIN).any() or nonfinite.any():  # 2^-127 is subnormal; NaN scale
                scale = _pow2(se)
            np.multiply(o, scale[:, None, :], out=o)
        elif nonfinite.any():
            o[np.broadcast_to(nonfinite[:, None, :], o.shape)] = 0.0
        se_all[start:stop] = se

    for_chunks(rows.shape[0], max(1, CHUNK // (k * post)), work)
    return out.reshape(b4.shape), se_all.reshape(pre, nb, post)
