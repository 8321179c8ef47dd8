"""Shape descriptions: a tensor's shape and dtype without its data, for timing-only runs.

``TensorSpec(shape, dtype)`` is trnsim's own; any object with ``.shape`` and ``.dtype`` that is not a numpy
array (``jax.ShapeDtypeStruct``, a torch meta tensor, …) is read as one by ``TensorSpec.like``. Dtypes are
ISA names (``"bf16"``) or numpy/ml_dtypes/JAX names (``"bfloat16"``, ``np.float32``), mapped by ``DTYPE_NAMES``.

    >>> TensorSpec.like(TensorSpec((128, 64), "bfloat16"))
    TensorSpec(shape=(128, 64), dtype='bf16')
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from trnsim.errors import SimError
from trnsim.isa.dtypes import DTYPES

# numpy / ml_dtypes / JAX dtype name → ISA dtype name (ISA names map to themselves).
DTYPE_NAMES: dict[str, str] = {
    "float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8_e4m3", "float8_e4m3": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2", "float6_e2m3fn": "fp6_e2m3", "float6_e3m2fn": "fp6_e3m2", "float4_e2m1fn": "fp4_e2m1",
    "float8_e8m0fnu": "e8m0", "int4": "int4", "int8": "int8", "uint8": "uint8", "int16": "int16", "uint16": "uint16",
    "int32": "int32", "uint32": "uint32",
}


def isa_dtype(dtype: object) -> str:
    """The ISA name of a dtype given as an ISA name, a numpy/JAX dtype or a dtype's name."""
    name = getattr(dtype, "name", None)
    if not isinstance(name, str):
        name = getattr(dtype, "__name__", None) if isinstance(dtype, type) else None
    text = name if isinstance(name, str) else str(dtype)
    if text in DTYPES:
        return text
    if text in DTYPE_NAMES:
        return DTYPE_NAMES[text]
    raise SimError(f"unknown dtype {text!r} in a shape description",
                   hint=f"use an ISA dtype ({', '.join(DTYPES)}) or one of: {', '.join(DTYPE_NAMES)}")


@dataclass(frozen=True)
class TensorSpec:
    """A tensor's ``shape`` and ISA ``dtype``, without data."""

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", isa_dtype(self.dtype))
        if any(d < 0 for d in self.shape):
            raise SimError(f"negative dimension in shape {self.shape}", hint="dimensions are sizes (≥ 0)")

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * DTYPES[self.dtype].itemsize

    @classmethod
    def like(cls, obj: Any) -> TensorSpec:
        """A ``TensorSpec`` from anything with ``.shape`` and ``.dtype`` (an array's own shape and dtype too)."""
        if isinstance(obj, TensorSpec):
            return obj
        if not (hasattr(obj, "shape") and hasattr(obj, "dtype")):
            raise SimError(f"{type(obj).__name__} is not a shape description",
                           hint="pass trnsim.TensorSpec(shape, dtype) or an object with .shape and .dtype")
        dtype = obj.dtype
        if isinstance(obj, np.ndarray):
            dtype = np.dtype(dtype).name
        return cls(tuple(obj.shape), dtype)


def is_shape_description(obj: object) -> bool:
    """True for a ``TensorSpec`` or another object with ``.shape`` and ``.dtype`` that is not an ndarray."""
    return isinstance(obj, TensorSpec) or (
        hasattr(obj, "shape") and hasattr(obj, "dtype") and not isinstance(obj, np.ndarray))
