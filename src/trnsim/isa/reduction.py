"""Reductions, statistics and data movement across the lanes of VectorE and GpSimd."""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.isa.ap import AccessPattern
from trnsim.isa.base import Instruction

BN_STATS_FMAX = 512  # bn_stats free-size limit (reference/neuron.md §1.2)
BN_STATS_WIDTH = 3  # bn_stats record: (count, mean, M2)
SELECT_WIDTH = 8  # values per partition of max8 / find_index8 / match_replace8 (reference/neuron.md §2.3)
NOT_FOUND = 0xFFFFFFFF  # find_index8's index for a value with no (further) occurrence (assumption: all ones)


@dataclass(frozen=True)
class TensorReduce(Instruction):
    """Reduce free axes of ``src`` (``axes`` index its free dimensions, 0 = outermost).

        r = REDUCE_OPS[op].reduce(src, over free axes in `axes`)    # fp32 (int64 for bitwise ops)
        dst = round(-r if negate else r, dst.dtype)                 # dst holds the remaining elements
    """

    mnemonic = "tensor_reduce"
    engines = ("vector", "gpsimd")

    dst: AccessPattern
    src: AccessPattern
    op: str
    axes: tuple[int, ...] = (0,)
    negate: bool = False


@dataclass(frozen=True)
class BnStats(Instruction):
    """Per-partition statistics of ``src[P, F ≤ 512]`` for batch/layer norm.

        dst[p, :] = (F, mean(src[p]), Σ (src[p] - mean)²)          # fp32 record (count, mean, M2)
    """

    mnemonic = "bn_stats"
    engines = ("vector",)

    dst: AccessPattern
    src: AccessPattern


@dataclass(frozen=True)
class BnAggr(Instruction):
    """Combine ``G`` bn_stats records ``src[P, 3·G]`` into ``dst[P, 2] = (mean, variance)``.

        n = Σ count_g;  mean = Σ count_g·mean_g / n
        M2 = Σ (M2_g + count_g · (mean_g - mean)²);   variance = M2 / n     (population variance)
    """

    mnemonic = "bn_aggr"
    engines = ("vector",)

    dst: AccessPattern
    src: AccessPattern


@dataclass(frozen=True)
class Transpose32(Instruction):
    """VectorE transpose of each 32×32 block of ``src[P, F]`` (P, F multiples of 32), bit-exact.

        dst[32·a + j, 32·b + i] = src[32·a + i, 32·b + j]
    """

    mnemonic = "transpose32"
    engines = ("vector",)

    dst: AccessPattern
    src: AccessPattern


@dataclass(frozen=True)
class PartitionReduce(Instruction):
    """Reduce across partitions (GpSimd): ``dst[0, f] = REDUCE_OPS[op] over p of src[p, f]``."""

    mnemonic = "partition_reduce"
    engines = ("gpsimd",)

    dst: AccessPattern
    src: AccessPattern
    op: str = "add"


@dataclass(frozen=True)
class PartitionBroadcast(Instruction):
    """Copy one partition to many (GpSimd): ``dst[p, f] = round(src[0, f], dst.dtype)`` for every p."""

    mnemonic = "partition_broadcast"
    engines = ("gpsimd",)

    dst: AccessPattern
    src: AccessPattern


# The selection family of reference/neuron.md §2.3 (``max8``, ``nc_find_index8``, ``nc_match_replace8``): the
# reference lists the names only, so the order and tie rules below are this simulator's, chosen to make the
# three compose into top-k with the results of ``jax.lax.top_k`` (ties: the lower index first).
#
# Values compare in the IEEE-754 total order: -NaN < -inf < … < -0.0 < +0.0 < … < +inf < +NaN (NaNs by
# payload), the order XLA's sort and top-k use; "equal" means the same fp32 bits.


@dataclass(frozen=True)
class Max8(Instruction):
    """The 8 largest values of each partition of ``src[P, F ≥ 8]``, largest first (VectorE).

        dst[p, :] = sorted(src[p, :], total order, descending)[:8]      # fp32 compare, rounded to dst.dtype
    """

    mnemonic = "max8"
    engines = ("vector",)

    dst: AccessPattern
    src: AccessPattern


@dataclass(frozen=True)
class FindIndex8(Instruction):
    """Where each of 8 values ``vals[P, 8]`` first occurs in each partition of ``data[P, F]`` (VectorE).

        for j in 0..7:  dst[p, j] = min{ f : data[p, f] ≡ vals[p, j], f ∉ dst[p, :j] }   else NOT_FOUND
        # ≡: the same fp32 bits; a value given twice finds its next occurrence (integer dst)
    """

    mnemonic = "find_index8"
    engines = ("vector",)

    dst: AccessPattern
    data: AccessPattern
    vals: AccessPattern


@dataclass(frozen=True)
class MatchReplace8(Instruction):
    """``data[P, F]`` with the first occurrence of each of 8 values ``vals[P, 8]`` replaced by ``imm``.

        dst[p, :] = data[p, :]
        for j in 0..7:  f = min{ f : data[p, f] ≡ vals[p, j], f not replaced yet };  dst[p, f] = imm
    """

    mnemonic = "match_replace8"
    engines = ("vector",)

    dst: AccessPattern
    data: AccessPattern
    vals: AccessPattern
    imm: float = float("-inf")
