"""Reductions, statistics and data movement across the lanes of VectorE and GpSimd."""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.isa.ap import AccessPattern
from trnsim.isa.base import Instruction

BN_STATS_FMAX = 512  # bn_stats free-size limit (reference/neuron.md §1.2)
BN_STATS_WIDTH = 3  # bn_stats record: (count, mean, M2)


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
