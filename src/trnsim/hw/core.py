"""One NeuronCore: its engines (TensorE, VectorE, ScalarE, GpSimd), on-core memories (SBUF, PSUM) and DMA.

The structure is the one ``reference/neuron.md`` §1.1 describes for NeuronCore-v2/v3/v4: four engines with
their own instruction streams, two software-managed 2-D SRAMs of 128 partitions, and DMA queues. A chip's
TensorE peak is *derived* from this geometry (``rows × cols × 2 FLOP × clock × rate``), never typed in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from trnsim.errors import SpecError
from trnsim.hw.schema import FieldIssue, canonical_dtype, doc


def check_sparse_pattern(text: str) -> None:
    """An N:M structured-sparsity pattern: at most N non-zeros in every block of M (0 < N < M)."""
    n, sep, m = text.partition(":")
    if not (sep and n.isdigit() and m.isdigit() and 0 < int(n) < int(m)):
        raise ValueError("expected an N:M sparsity pattern with 0 < N < M, e.g. '2:4' or '4:8'")


@dataclass(frozen=True)
class EngineSpec:
    """A Vector, Scalar or GpSimd engine: ``lanes`` partitions in parallel at ``clock``."""

    clock: float = field(metadata=doc("engine clock", dim="Hz"))
    lanes: int = field(metadata=doc("parallel lanes (one per SBUF partition)"))
    elements_per_cycle: int = field(metadata=doc("elements processed per cycle, all lanes, default dtype"))
    dtype_elements_per_cycle: Mapping[str, int] = field(
        default_factory=dict[str, int],
        metadata=doc("elements per cycle for dtypes that run faster than the default", dtype=True))

    def throughput(self, dtype: str) -> float:
        """Elements per second for ``dtype`` (data-path width × clock)."""
        width = self.dtype_elements_per_cycle.get(canonical_dtype(dtype), self.elements_per_cycle)
        return width * self.clock


@dataclass(frozen=True)
class TensorEngineSpec:
    """The systolic array: ``rows`` (contraction, one per partition) × ``cols`` PEs, one MAC per PE per
    cycle at the bf16 rate; other dtypes run at ``rate[dtype]`` times that."""

    rows: int = field(metadata=doc("PE rows (contraction dimension)"))
    cols: int = field(metadata=doc("PE columns (stationary free dimension)"))
    clock: float = field(metadata=doc("TensorE clock", dim="Hz"))
    rate: Mapping[str, float] = field(
        metadata=doc("dense rate multiplier per dtype, relative to bf16", dtype=True))
    sparse_multiplier: Mapping[str, float] = field(
        default_factory=dict[str, float],
        metadata=doc("structured-sparse speed-up over dense, per dtype (absent: none)", dtype=True))
    sparse_patterns: tuple[str, ...] = field(
        default=(), metadata=doc("N:M sparsity patterns the array accelerates", check=check_sparse_pattern))

    def __post_init__(self) -> None:
        if self.rate.get("bf16") != 1:
            raise FieldIssue("rate.bf16", "rate multipliers are relative to bf16, so bf16 = 1 is required",
                             hint="add `bf16 = 1` and scale the other multipliers to it")
        for dtype, mult in self.sparse_multiplier.items():
            if dtype not in self.rate:
                raise FieldIssue(f"sparse_multiplier.{dtype}", f"{dtype} has a sparse rate but no dense rate",
                                 hint=f"add {dtype} to rate, or remove it here")
            if mult < 1:
                raise FieldIssue(f"sparse_multiplier.{dtype}", f"{mult} < 1: sparsity never slows TensorE")
        if bool(self.sparse_multiplier) != bool(self.sparse_patterns):
            raise FieldIssue("sparse_patterns", "give sparse_multiplier and sparse_patterns together",
                             hint="list the accelerated N:M patterns, or drop both keys")

    @property
    def macs_per_cycle(self) -> int:
        return self.rows * self.cols

    def flops(self, dtype: str, sparse: bool = False) -> float:
        """Peak FLOP/s of one array: rows × cols × 2 (mul + add) × clock × rate (× sparse speed-up)."""
        name = canonical_dtype(dtype)
        if name not in self.rate:
            raise SpecError(f"TensorE does not support {name}", hint=f"supported: {', '.join(self.rate)}")
        mult = self.sparse_multiplier.get(name, 1.0) if sparse else 1.0
        return self.macs_per_cycle * 2 * self.clock * self.rate[name] * mult


@dataclass(frozen=True)
class SbufSpec:
    """State buffer: the main on-core SRAM, ``partitions`` rows of ``bytes / partitions`` each."""

    partitions: int = field(metadata=doc("partitions (rows)"))
    bytes: int = field(metadata=doc("capacity per core", dim="bytes"))

    def __post_init__(self) -> None:
        if self.bytes % self.partitions:
            raise FieldIssue("bytes", f"{self.bytes} B is not divisible by {self.partitions} partitions",
                             hint="every partition has the same size; check the capacity and partition count")

    @property
    def bytes_per_partition(self) -> int:
        return self.bytes // self.partitions


@dataclass(frozen=True)
class PsumSpec:
    """Partial-sum buffer: TensorE's accumulator, ``partitions × banks × bank_bytes``."""

    partitions: int = field(metadata=doc("partitions (rows)"))
    banks: int = field(metadata=doc("accumulation banks per partition"))
    bank_bytes: int = field(metadata=doc("bytes per bank per partition", dim="bytes"))
    bytes: int = field(metadata=doc("capacity per core (= partitions × banks × bank_bytes)", dim="bytes"))

    def __post_init__(self) -> None:
        product = self.partitions * self.banks * self.bank_bytes
        if product != self.bytes:
            raise FieldIssue("bytes", f"{self.bytes} B ≠ {self.partitions} × {self.banks} × "
                             f"{self.bank_bytes} B = {product} B", hint="fix the total or the geometry")

    @property
    def fp32_per_bank(self) -> int:
        """fp32 accumulators per bank per partition: the moving-tile free-size limit (512 on all v2–v4)."""
        return self.bank_bytes // 4


@dataclass(frozen=True)
class DmaSpec:
    """DMA queues: a transfer costs ``latency + bytes / queue_bandwidth``; all queues share HBM."""

    queues: int = field(metadata=doc("DMA queues (engines) per core"))
    queue_bandwidth: float = field(metadata=doc("bandwidth of one queue", dim="bytes/s"))
    latency: float = field(metadata=doc("fixed cost per transfer", dim="s"))
    chip_bandwidth: float = field(metadata=doc("total DMA bandwidth of the chip", dim="bytes/s"))


@dataclass(frozen=True)
class CoreSpec:
    """One NeuronCore."""

    name: str = field(metadata=doc("core generation, e.g. NeuronCore-v4"))
    tensor: TensorEngineSpec = field(metadata=doc("Tensor Engine"))
    vector: EngineSpec = field(metadata=doc("Vector Engine"))
    scalar: EngineSpec = field(metadata=doc("Scalar Engine"))
    gpsimd: EngineSpec = field(metadata=doc("GpSimd Engine"))
    sbuf: SbufSpec = field(metadata=doc("state buffer"))
    psum: PsumSpec = field(metadata=doc("partial-sum buffer"))
    dma: DmaSpec = field(metadata=doc("DMA"))

    def __post_init__(self) -> None:
        # NOTE: TensorE reads its contraction dimension one row per SBUF partition and writes one PSUM
        # partition per column (neuron.md §1.2), so the array and the memories must agree.
        if self.tensor.rows > self.sbuf.partitions:
            raise FieldIssue("tensor.rows", f"{self.tensor.rows} PE rows but SBUF has {self.sbuf.partitions} "
                             "partitions", hint="TensorE contracts over SBUF partitions: rows ≤ partitions")
        if self.tensor.cols > self.psum.partitions:
            raise FieldIssue("tensor.cols", f"{self.tensor.cols} PE columns but PSUM has "
                             f"{self.psum.partitions} partitions", hint="each column writes a PSUM partition")
