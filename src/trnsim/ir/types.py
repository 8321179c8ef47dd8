"""Element types and tensor types of the graph IR, named as StableHLO spells them.

One table, ``DTYPES``, says for each element type its numpy dtype, its kind and whether the NeuronCore runs
it natively, emulates it, or cannot run it at all (``reference/neuron.md`` §1: the engines compute in
fp32/bf16/fp16/fp8/int8–int32; there is no fp64 or complex datapath).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Literal

import ml_dtypes
import numpy as np

Kind = Literal["float", "signed", "unsigned", "bool"]
Support = Literal["native", "emulated", "unsupported"]


@dataclass(frozen=True)
class DType:
    name: str            # StableHLO spelling: f32, bf16, ui8, f8E4M3FN, i1
    np_dtype: np.dtype
    kind: Kind
    bits: int
    support: Support
    why: str = ""        # for unsupported types: why, and what to use instead

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("signed", "unsigned")


_NO_F64 = "the NeuronCore has no fp64 datapath; compute in f32 (leave jax_enable_x64 off) or bf16"
_NO_COMPLEX = "the NeuronCore has no complex arithmetic; split the real and imaginary parts into two f32 tensors"


def _t(name: str, dt: object, kind: Kind, bits: int, support: Support = "native", why: str = "") -> DType:
    return DType(name, np.dtype(dt), kind, bits, support, why)  # type: ignore[call-overload]


DTYPES: dict[str, DType] = {d.name: d for d in (
    _t("f32", np.float32, "float", 32),
    _t("bf16", ml_dtypes.bfloat16, "float", 16),
    _t("f16", np.float16, "float", 16),
    _t("f8E4M3FN", ml_dtypes.float8_e4m3fn, "float", 8),
    _t("f8E5M2", ml_dtypes.float8_e5m2, "float", 8),
    _t("f8E4M3", ml_dtypes.float8_e4m3, "float", 8),
    _t("f8E3M4", ml_dtypes.float8_e3m4, "float", 8),
    _t("f6E2M3FN", ml_dtypes.float6_e2m3fn, "float", 6),
    _t("f6E3M2FN", ml_dtypes.float6_e3m2fn, "float", 6),
    _t("f4E2M1FN", ml_dtypes.float4_e2m1fn, "float", 4),
    _t("f8E8M0FNU", ml_dtypes.float8_e8m0fnu, "float", 8),
    _t("i1", np.bool_, "bool", 1),
    _t("i2", ml_dtypes.int2, "signed", 2, "emulated"),
    _t("i4", ml_dtypes.int4, "signed", 4),
    _t("i8", np.int8, "signed", 8),
    _t("i16", np.int16, "signed", 16),
    _t("i32", np.int32, "signed", 32),
    # NOTE: 64-bit integers appear in JAX programs as indices and shapes; the Neuron compiler emulates them
    # with 32-bit pairs, so they are exact here too.
    _t("i64", np.int64, "signed", 64, "emulated"),
    _t("ui2", ml_dtypes.uint2, "unsigned", 2, "emulated"),
    _t("ui4", ml_dtypes.uint4, "unsigned", 4),
    _t("ui8", np.uint8, "unsigned", 8),
    _t("ui16", np.uint16, "unsigned", 16),
    _t("ui32", np.uint32, "unsigned", 32),
    _t("ui64", np.uint64, "unsigned", 64, "emulated"),
    _t("f64", np.float64, "float", 64, "unsupported", _NO_F64),
    _t("complex<f32>", np.complex64, "float", 64, "unsupported", _NO_COMPLEX),
    _t("complex<f64>", np.complex128, "float", 128, "unsupported", _NO_COMPLEX),
)}

_BY_NUMPY: dict[np.dtype, DType] = {}
for _d in DTYPES.values():
    _BY_NUMPY.setdefault(_d.np_dtype, _d)


# element type → the ISA dtype (``isa.dtypes``) an engine holds its values in, for the types kernels take; each
# kernel's compiler module picks the ones it computes exactly (``isa_dtypes``)
ISA_DTYPE: dict[str, str] = {"f32": "fp32", "bf16": "bf16", "f16": "fp16", "f8E4M3FN": "fp8_e4m3",
                             "f8E5M2": "fp8_e5m2", "i8": "int8", "ui8": "uint8", "i16": "int16", "ui16": "uint16",
                             "i32": "int32", "ui32": "uint32"}
FLOATS = ("f32", "bf16", "f16")                     # the engines' arithmetic float types
INTS = ("i8", "ui8", "i16", "ui16", "i32", "ui32")  # and integer types


def isa_dtypes(*names: str) -> dict[str, str]:
    """``ISA_DTYPE`` for these element types only."""
    return {n: ISA_DTYPE[n] for n in names}


def dtype(name: str) -> DType:
    """The element type called ``name`` (StableHLO spelling); KeyError if trnsim has never heard of it."""
    return DTYPES[name]


def dtype_of_numpy(dt: np.dtype) -> DType:
    """The element type of a numpy dtype (int64 → i64, bfloat16 → bf16, ...)."""
    return _BY_NUMPY[np.dtype(dt)]


@dataclass(frozen=True)
class TensorType:
    """``tensor<2x3xf32>``: a static shape and an element type."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def dt(self) -> DType:
        return DTYPES[self.dtype]

    @property
    def np_dtype(self) -> np.dtype:
        return DTYPES[self.dtype].np_dtype

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return (self.size * DTYPES[self.dtype].bits + 7) // 8

    def __str__(self) -> str:
        return "tensor<" + "".join(f"{d}x" for d in self.shape) + self.dtype + ">"

    @staticmethod
    def of(array: np.ndarray) -> TensorType:
        return TensorType(tuple(array.shape), dtype_of_numpy(array.dtype).name)
