"""How fast one chip runs one op: a roofline with documented efficiencies.

A matmul takes ``max(compute, memory)``::

    compute = FLOPs / (peak(dtype, dense) × MAMF × q)       memory = bytes / (HBM bandwidth × MEMORY_EFFICIENCY)

- MAMF is the *measured max achievable matmul FLOP/s* as a fraction of the dense peak
  (accelerators_cluster_cost.md §1.2, [ML-ENG-ACC]); chips without a measurement use ``DEFAULT_MAMF`` and
  the estimate says so. The BF16 fraction is applied to every dtype (no low-precision MAMF is published).
- ``q`` is tile quantisation: a GEMM dimension ``x`` executed in tiles of ``T`` does ``x / (⌈x/T⌉·T)`` useful
  work. NeuronCore TensorE: the contraction runs over 128 SBUF partitions (PE rows) and the stationary
  (weight) operand fills 128 PE columns, so k and n tile to 128, while the moving operand streams column by
  column (any m; neuron.md §1.2, §2.6). GPUs: the output is computed in CTA tiles; ``GPU_TILE`` = 128×128 is
  assumed for m and n (assumption: one tile for every shape; 128x128 is the middle of the cuBLAS tile sizes that
  NVIDIA's guide below lists, 256x128 "most efficient" to 64x64 "least efficient").
- on GPUs ``q`` also has *wave quantisation*: the ``T_m×T_n`` output tiles (× batch) run in waves of one tile
  per SM (``cores`` in the preset), and a last, partly filled wave leaves SMs idle, so the useful fraction is
  ``tiles / (⌈tiles/SMs⌉·SMs)`` (NVIDIA Deep Learning Performance documentation, "Matrix Multiplication
  Background User's Guide", sections "Tile Quantization" and "Wave Quantization": "an NVIDIA A100 GPU has 108
  SMs; in the particular case of 256x128 thread block tiles, it can execute one thread block per SM, leading
  to a wave size of 108 tiles"). MAMF is the best case over a sweep of shapes, where both quantisations are
  nearly whole, so it multiplies them. Presets without ``cores`` (and NeuronCores, whose TensorE runs one
  matmul at a time) get no wave term; a TPU's two TensorCores count as a wave of two (a negligible term).
- the memory term moves every operand and result once, 16-bit (``Gemm.elements`` × 2 B); it makes the
  efficiency rise with the GEMM's smallest dimension (arithmetic intensity ≈ that dimension, in FLOP/B).

A memory-bound op takes ``bytes / (HBM bandwidth × MEMORY_EFFICIENCY)``; on NeuronCore targets also at least
``elements / (VectorE + ScalarE element rate × cores)``, the engines' documented data-path widths.

Until the timing simulator exists, NeuronCore targets use this same roofline with their TensorE peaks.
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.cluster._cache import per_spec
from trnsim.cluster.ops import Gemm, Pointwise
from trnsim.hw.spec import ChipSpec

# Preset name → (MAMF fraction of the dense BF16 peak, source). Data, not code: one line per measured chip.
MAMF: dict[str, tuple[float, str]] = {
    "h100": (0.803, "accelerators_cluster_cost.md §1.2 [ML-ENG-ACC]: MAMF BF16 794.5 TFLOPS = 80.3% of 989"),
    "h200": (0.803, "derived: H200 has the H100's compute ([ML-ENG-ACC] note 16), so the H100's MAMF 80.3%"),
    "b200": (0.776, "accelerators_cluster_cost.md §1.2 [ML-ENG-ACC]: MAMF BF16 1745.0 TFLOPS = 77.6% of 2250"),
    "mi300x": (0.514, "accelerators_cluster_cost.md §1.2 [ML-ENG-ACC]: MAMF BF16 668.4 TFLOPS = 51.4% of 1300"),
}
DEFAULT_MAMF = (0.769, "assumption: no MAMF measurement for this chip in reference/; the mean of the NVIDIA "
                       "measurements there (H100 80.3%, B200 77.6%, GB200 72.9%)")
# Assumption: streaming kernels reach ~85% of datasheet HBM bandwidth (STREAM-like copies on HBM GPUs); no
# measurement in reference/.
MEMORY_EFFICIENCY = 0.85
GPU_TILE = 128
ACTIVATION_BYTES = 2  # 16-bit activations and weights in HBM (low-precision GEMMs quantise on the fly)


@dataclass(frozen=True, slots=True)
class Roofline:
    """The few numbers of a chip the op costs need (hashable, so per-op costs can be cached)."""

    name: str
    peak: float
    mamf: float
    mamf_source: str
    hbm_bandwidth: float
    neuron: bool
    tile_k: int
    tile_n: int
    tile_m: int
    pointwise_rate: float  # elements/s of the vector engines (inf where not modelled)
    wave: int = 0  # output tiles that run at once (GPU SMs, one tile each); 0: no wave quantisation

    @classmethod
    def of(cls, spec: ChipSpec, dtype: str) -> Roofline:
        """The roofline of ``spec`` for matmuls in ``dtype`` (cached per spec object)."""
        return per_spec(spec, "roofline:" + dtype, lambda: cls._build(spec, dtype))

    @classmethod
    def _build(cls, spec: ChipSpec, dtype: str) -> Roofline:
        mamf, source = MAMF.get(spec.name, DEFAULT_MAMF)
        if spec.core is not None and spec.cores is not None:
            core = spec.core
            rate = (core.vector.throughput("bf16") + core.scalar.throughput("bf16")) * spec.cores
            return cls(spec.name, spec.peak_flops(dtype), mamf, source, spec.hbm_bandwidth, True,
                       core.tensor.rows, core.tensor.cols, 1, rate)
        return cls(spec.name, spec.peak_flops(dtype), mamf, source, spec.hbm_bandwidth, False, 1, GPU_TILE,
                   GPU_TILE, float("inf"), spec.cores or 0)

    @property
    def matmul_rate(self) -> float:
        """Achievable FLOP/s of a large, well-tiled GEMM: peak × MAMF."""
        return self.peak * self.mamf

    @property
    def memory_rate(self) -> float:
        return self.hbm_bandwidth * MEMORY_EFFICIENCY


def _q(x: int, tile: int) -> float:
    return x / (-(-x // tile) * tile) if tile > 1 else 1.0


def _wave(tiles: int, wave: int) -> float:
    """Useful fraction of the waves that run ``tiles`` tiles, ``wave`` at a time (1 when not modelled)."""
    return tiles / (-(-tiles // wave) * wave) if wave > 0 else 1.0


def gemm_quantisation(r: Roofline, m: int, n: int, k: int, batch: int = 1) -> float:
    """Tile × wave quantisation of ``batch`` [m,k]·[k,n] products (module docstring)."""
    q = _q(m, r.tile_m) * _q(n, r.tile_n) * _q(k, r.tile_k)
    if r.wave:
        q *= _wave(-(-m // r.tile_m) * -(-n // r.tile_n) * batch, r.wave)
    return q


def gemm_time(r: Roofline, m: int, n: int, k: int, batch: int, flops: float, elements: int) -> float:
    """Seconds for ``batch`` [m,k]·[k,n] products doing ``flops`` and moving ``elements`` 16-bit values."""
    q = gemm_quantisation(r, m, n, k, batch)
    compute = flops / (r.matmul_rate * q)
    return max(compute, elements * ACTIVATION_BYTES / r.memory_rate)


def forward_time(r: Roofline, g: Gemm) -> float:
    return gemm_time(r, g.m, g.n, g.k, g.batch, g.flops, g.elements)


def backward_time(r: Roofline, g: Gemm, weight_grad: bool = True) -> float:
    """Data gradient dA[m,k] = dC[m,n]·Bᵀ and weight (or second data) gradient dB[k,n] = Aᵀ·dC, each with
    the forward's FLOPs on its own shape; ``g.bwd`` / 2 scales for flash attention's recomputed scores."""
    scale = g.bwd / 2.0
    dgrad = gemm_time(r, g.m, g.k, g.n, g.batch, g.flops, g.elements)
    wgrad = gemm_time(r, g.k, g.n, g.m, g.batch, g.flops, g.elements) if weight_grad or not g.weight else 0.0
    return scale * (dgrad + wgrad)


def pointwise_time(r: Roofline, p: Pointwise, backward: bool = False) -> float:
    moved = p.elements * (p.bwd if backward else p.fwd)
    if moved == 0:  # a backward-only (or forward-only) op does not run in the other pass
        return 0.0
    return max(moved / r.memory_rate, p.elements / r.pointwise_rate)


def stream_time(r: Roofline, nbytes: float) -> float:
    """A memory-bound pass over ``nbytes`` (optimizer update, dequantisation)."""
    return nbytes / r.memory_rate
