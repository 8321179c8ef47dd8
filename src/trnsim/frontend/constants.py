"""Decoding ``dense<...>`` constants into numpy arrays of the right element type.

``np.array(attr)`` works for i1/i8–i64/f16/f32/f64 only (reference/frontend_numerics.md §A3); bf16, fp8,
fp6/fp4 and 4-bit integers are decoded from the attribute's text: decimal elements, per-element hex bit
patterns (``0x7FC0``), or one hex blob of raw little-endian bytes (``"0x..."``).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from trnsim.errors import UnsupportedError
from trnsim.ir.types import DTYPES

# NOTE: constants are materialised as numpy arrays at import; a larger one (usually a splat such as
# dense<0.0> : tensor<100000000000xf32>) would exhaust host memory before any HBM check could report it
MAX_CONSTANT_BYTES = 1 << 32

_TOKEN = re.compile(r"0x[0-9A-Fa-f]+|[-+]?(?:inf|nan|\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)|true|false")


def decode_dense(a: Any, where: str) -> np.ndarray:
    from jaxlib.mlir import ir

    rt = ir.RankedTensorType(a.type)
    name = str(rt.element_type)
    dt = DTYPES.get(name)
    if dt is None or dt.support == "unsupported":
        raise UnsupportedError(f"constant of element type {name} is not supported", where=where,
                               hint=dt.why if dt else "use f32, bf16, f16, fp8 or an integer type")
    shape = tuple(rt.shape)
    nbytes = math.prod(shape) * max(1, dt.np_dtype.itemsize)
    if nbytes > MAX_CONSTANT_BYTES:
        raise UnsupportedError(
            f"constant of type {rt} is {nbytes / 2**30:,.1f} GiB; trnsim supports constants up to "
            f"{MAX_CONSTANT_BYTES / 2**30:g} GiB", where=where,
            hint="pass the tensor as an argument, or build it in the program (e.g. broadcast_in_dim of a scalar)")
    if name in ("i1", "i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64", "f16", "f32"):
        try:
            arr = np.array(a)
            if arr.dtype != object:
                return np.array(np.broadcast_to(arr, shape), dtype=dt.np_dtype, order="C")
        except (TypeError, ValueError, RuntimeError):
            pass
    return _from_text(str(a), shape, dt.np_dtype, dt.bits, where)


def _from_text(text: str, shape: tuple[int, ...], np_dtype: np.dtype, bits: int, where: str) -> np.ndarray:
    body = text[text.index("<") + 1: text.rindex(":")].rstrip().removesuffix(">")
    count = int(np.prod(shape))
    blob = re.fullmatch(r'\s*"0x([0-9A-Fa-f]*)"\s*', body)
    if blob:
        raw = bytes.fromhex(blob.group(1))
        itemsize = np_dtype.itemsize
        if len(raw) == itemsize:                  # a splat
            return np.full(shape, np.frombuffer(raw, np_dtype)[0], np_dtype)
        if len(raw) != count * itemsize:
            raise UnsupportedError(f"constant has {len(raw)} bytes, its type needs {count * itemsize}",
                                   where=where, hint="the module is malformed")
        return np.frombuffer(raw, np_dtype).reshape(shape).copy()
    tokens = _TOKEN.findall(body)
    if np_dtype.itemsize <= 2 and bits <= 16 and any(t.startswith("0x") for t in tokens):
        code = np.dtype(f"u{np_dtype.itemsize}")
        values = np.array([_element(t) for t in tokens], dtype=object)
        out = np.empty(len(tokens), np_dtype)
        for i, (t, v) in enumerate(zip(tokens, values, strict=True)):
            out[i] = np.array(int(t, 16), code).view(np_dtype) if t.startswith("0x") else np_dtype.type(v)
        flat = out
    elif tokens and tokens[0] in ("true", "false"):
        flat = np.array([t == "true" for t in tokens], np_dtype)
    else:
        kind_int = np_dtype.kind in "iu" or (np_dtype.kind == "V" and "int" in np_dtype.name)
        if kind_int:
            flat = np.array([int(t, 0) for t in tokens], np.int64).astype(np_dtype)
        else:
            flat = np.array([float(t) for t in tokens], np.float32).astype(np_dtype)
    if flat.size == 1 and count != 1:
        return np.full(shape, flat[0], np_dtype)
    if flat.size != count:
        raise UnsupportedError(f"constant has {flat.size} elements, its type needs {count}", where=where,
                               hint="the module is malformed")
    return flat.reshape(shape)


def _element(token: str) -> float:
    return float(int(token, 16)) if token.startswith("0x") else float(token)
