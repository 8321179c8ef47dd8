"""Compiler options, validated on construction (neuronx-cc's names where it has one)."""

from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass
from typing import Any

from trnsim.errors import ConfigError, SpecError
from trnsim.hw.units import parse_bytes

AUTO_CAST = ("none", "matmul", "all")
AUTO_CAST_TYPES = ("bf16", "fp8_e4m3", "fp8_e5m2", "mxfp8", "mxfp6", "mxfp4", "int4")
SPARSITY = ("none", "2:4", "4:8")
HBM_OVERFLOW = ("remat+spill", "remat", "error")


@dataclass(frozen=True)
class CompileOptions:
    """``auto_cast``: which ops run in a narrower type — none, matmul (dot_general/convolution operands),
    all (also elementwise math in bf16). ``auto_cast_type``: that type; fp8 casts scale each tensor by its
    amax, MX types scale blocks of 32. ``sparsity``: prune weight operands of dot_general to 2:4 or 4:8.
    ``fold_limit``: largest constant (elements) the compiler folds at compile time. ``hbm_limit_bytes``: the
    HBM the memory plan may use (0: the chip's), in bytes or as a size string like the CLI's ``"24 GiB"``.
    ``hbm_overflow``: what ``allocate`` does when the peak does
    not fit — recompute cheap values then spill to host memory (remat+spill), only recompute (remat), or
    fail (error)."""

    auto_cast: str = "none"
    auto_cast_type: str = "bf16"
    sparsity: str = "none"
    fold_limit: int = 1 << 16
    hbm_limit_bytes: int = 0
    hbm_overflow: str = "remat+spill"

    def __post_init__(self) -> None:
        for name, value, allowed in (("auto_cast", self.auto_cast, AUTO_CAST),
                                     ("auto_cast_type", self.auto_cast_type, AUTO_CAST_TYPES),
                                     ("sparsity", self.sparsity, SPARSITY),
                                     ("hbm_overflow", self.hbm_overflow, HBM_OVERFLOW)):
            if value not in allowed:
                raise ConfigError(f"{name}={value!r} is not one of {', '.join(allowed)}", where=f"option {name}",
                                  hint=f"use {name}={allowed[0]!r} or one of the others listed")
        if isinstance(self.hbm_limit_bytes, str):
            try:
                object.__setattr__(self, "hbm_limit_bytes", parse_bytes(self.hbm_limit_bytes))
            except SpecError as exc:
                raise ConfigError(exc.message, where="option hbm_limit_bytes",
                                  hint='give a number of bytes or a size such as "24 GiB"') from None
        for name, hint in (("fold_limit", "the largest constant, in elements, to fold (e.g. 65536)"),
                           ("hbm_limit_bytes", 'bytes (or a size such as "24 GiB"); 0 for the chip\'s capacity')):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ConfigError(f"{name}={value!r} must be an integer, not {type(value).__name__}",
                                  where=f"option {name}", hint=f"give {hint}")
            object.__setattr__(self, name, int(value))  # numpy integers too
        if self.fold_limit < 0:
            raise ConfigError(f"fold_limit={self.fold_limit} must be ≥ 0", where="option fold_limit")
        if self.hbm_limit_bytes < 0:
            raise ConfigError(f"hbm_limit_bytes={self.hbm_limit_bytes} must be ≥ 0", where="option hbm_limit_bytes",
                              hint="give the bytes of HBM the program may use, or 0 for the chip's capacity")

    @staticmethod
    def from_kwargs(options: dict[str, Any]) -> CompileOptions:
        known = set(CompileOptions.__dataclass_fields__)
        unknown = sorted(set(options) - known)
        if unknown:
            import difflib

            near = difflib.get_close_matches(unknown[0], known, n=1)
            raise ConfigError(f"unknown compile option {unknown[0]!r}", where="trnsim.compile",
                              hint=(f"did you mean {near[0]!r}? " if near else "") +
                                   f"options: {', '.join(sorted(known))}")
        return CompileOptions(**options)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
