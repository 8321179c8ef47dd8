"""``trnsim demo --tour``: a short tour — the hardware side by side, what the low-precision formats do to
real-looking tensors, a kernel on a simulated NeuronCore, and a training job at cluster scale. Every number is
computed here, from the presets, the emulated formats, the simulator and the estimator. (``trnsim demo``
without ``--tour`` is the main job: ``trnsim.cli.demo``.)"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import trnsim.numerics as tn
from trnsim.cli._output import console, print_table

DEMO_TARGETS = ("trn3", "trn3-aws", "trn2", "h200", "b200")


def _sqnr_db(x: np.ndarray, q: np.ndarray) -> float:
    noise = np.sum((q.astype(np.float64) - x) ** 2)
    return float("inf") if noise == 0 else float(10 * np.log10(np.sum(x.astype(np.float64) ** 2) / noise))


def _tensor(rng: np.random.Generator) -> np.ndarray:
    """Activations as LLMs make them: gaussian rows with a few large-magnitude outlier channels."""
    x = rng.standard_normal((256, 1024)).astype(np.float32)
    x[:, rng.choice(1024, 8, replace=False)] *= 40.0
    return x


def _per_tensor_fp8(x: np.ndarray, fmt: str) -> np.ndarray:
    """fp8 with one per-tensor amax scale, as Transformer Engine's current scaling does."""
    f = tn.get_format(fmt)
    assert isinstance(f, tn.FloatFormat)
    scale = np.float32(f.max / np.abs(x).max())
    return tn.quantize(x * scale, f) / scale


def formats_tour(seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    x = _tensor(rng)
    schemes: list[tuple[str, str, Callable[[np.ndarray], np.ndarray]]] = [
        ("bf16", "cast", lambda t: tn.quantize(t, "bf16")),
        ("fp16", "cast", lambda t: tn.quantize(t, "fp16")),
        ("fp8_e4m3", "per-tensor amax scale", lambda t: _per_tensor_fp8(t, "fp8_e4m3")),
        ("fp8_e5m2", "per-tensor amax scale", lambda t: _per_tensor_fp8(t, "fp8_e5m2")),
        ("int8", "per-tensor symmetric", lambda t: tn.quantize(t, "int8")),
        ("int4", "per-group of 128", lambda t: tn.quantize_int(t, "int4", "group", group_size=128).dequantize()),
    ]
    for name in ("mxfp8_e4m3", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4_e2m1"):
        for rule in ("floor", "rceil"):
            schemes.append((name, f"E8M0 per 32, {rule} rule",
                            lambda t, n=name, r=rule: tn.mx_quantize(t, n, scale_rule=r).dequantize()))
    rows = []
    for name, how, fn in schemes:
        f = tn.get_format(name)
        q = fn(x)
        bits = f.bits_per_value if isinstance(f, tn.MXFormat) else f.bits
        rows.append([name, how, f"{bits:g}", f"{_sqnr_db(x, q):.1f}", f"{np.abs(q - x).max():.3g}"])
    print_table("what each format keeps of a 256×1024 activation tensor with outlier channels",
                ["format", "scaling", "bits/value", "SQNR dB", "max |error|"], rows,
                caption="OCP's floor rule clamps a block maximum that lands above the element max "
                        "(e4m3: 448..511 × 2^k); rceil picks the next scale up instead")

    a = rng.standard_normal((256, 512)).astype(np.float32)
    w = rng.standard_normal((512, 256)).astype(np.float32) / np.sqrt(512)
    ref = a.astype(np.float64) @ w
    rows = []
    for name in ("bf16", "mxfp8_e4m3", "mxfp6_e2m3", "mxfp4_e2m1"):
        qa = tn.quantize(a, name)  # blocks along K (the last axis of A)
        qw = tn.quantize(w, name, axis=0)  # blocks along K (the first axis of W)
        out = qa @ qw  # exact products, fp32 accumulation, as TensorE does
        err = np.linalg.norm(out - ref) / np.linalg.norm(ref)
        rows.append([name, f"{err:.2e}", f"{_sqnr_db(ref, out):.1f}"])
    w24 = tn.prune(w, 2, 4, axis=0)
    values, meta = tn.compress(w24, 2, 4, axis=0)
    out = tn.quantize(a, "mxfp8_e4m3") @ tn.quantize(tn.decompress(values, meta), "mxfp8_e4m3", axis=0)
    err = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    rows.append(["mxfp8_e4m3 + 2:4 sparse W", f"{err:.2e}", f"{_sqnr_db(ref, out):.1f}"])
    print_table("a 256×512 @ 512×256 matmul with quantized operands, against float64",
                ["operands", "relative error", "SQNR dB"], rows,
                caption=f"2:4 weights: {values.nbytes} value bytes + {len(meta.packed)} metadata bytes "
                        f"(2 bits per kept value) instead of {w.nbytes}")


def kernel_tour(seed: int = 0) -> None:
    """A kernel in the kernel language, run on a simulated NeuronCore with its timeline."""
    import trnsim
    from trnsim import dsl
    from trnsim.kernels import matmul_kernel

    rng = np.random.default_rng(seed)
    a = rng.integers(-8, 8, (512, 1024)).astype(np.float32)  # small integers: fp32 sums are exact
    b = rng.integers(-8, 8, (1024, 512)).astype(np.float32)
    res = trnsim.run_kernel(matmul_kernel, dsl.typed(a, "bf16"), dsl.typed(b, "bf16"), timing=True)
    prof = res.profile
    assert prof is not None
    exact = np.array_equal(res.outputs[0], tn.quantize(a @ b, "bf16"))
    engines = ", ".join(f"{e} {u:.0%}" for e, u in prof.engine_utilization.items() if u > 0)
    rows = [["instructions", f"{prof.instructions:,}"], ["simulated time", f"{prof.total_seconds * 1e6:.1f} us"],
            ["engine utilisation", engines], ["HFU", f"{prof.hfu:.1%}"],
            ["HBM traffic", f"{prof.hbm_bytes / 1e6:.1f} MB at {prof.hbm_bandwidth / 1e9:.0f} GB/s"],
            ["result vs numpy", "bit-exact" if exact else "DIFFERS"]]
    print_table("trnsim.kernels.matmul, 512×1024 @ 1024×512 bf16, on one simulated trn3 NeuronCore",
                ["", ""], rows, caption=f"peak: {prof.peak_name}. A small problem is DMA-bound; "
                                        "`trnsim profile --example matmul --trace t.json` writes a Perfetto trace")


def cluster_tour() -> None:
    """The same training job on Trainium3 and on the GPUs it competes with."""
    from trnsim import hw
    from trnsim.cluster import estimate, models

    model = models.get("llama3-70b")
    rows = []
    for target in ("trn3", "trn2", "h200", "b200"):
        est = estimate(model, hw.get(target), 1024)
        layout = f"DP {est.plan.dp} × TP {est.plan.tp} × PP {est.plan.pp}"
        rows.append([target, layout, f"{est.tokens_per_s:,.0f}", f"{est.mfu:.1%}",
                     f"{est.memory_per_chip_bytes / 1e9:.0f} GB", "yes" if est.fits else "no"])
    print_table("Llama-3 70B training on 1,024 chips: the estimator's default plan per target",
                ["target", "plan", "tokens/s", "MFU", "memory/chip", "fits"], rows,
                caption="`trnsim plan` searches layouts; `trnsim validate` checks the model against published runs")


def run_tour(seed: int = 0) -> int:
    from trnsim.cli import main

    out = console()
    out.rule("trnsim: Trainium3 in software — the chips side by side")
    status = main(["hw", "compare", *DEMO_TARGETS])
    if status:
        return status
    out.rule("bit-exact low-precision numerics")
    formats_tour(seed)
    out.rule("a kernel on a simulated NeuronCore")
    kernel_tour(seed)
    out.rule("a training job at cluster scale")
    cluster_tour()
    out.print("\nNext: `trnsim hw show trn3`, `trnsim numerics formats`, `trnsim fabric --chips 64`, "
              "`trnsim plan --model llama3-70b --chips 1024`, `trnsim profile --example matmul`")
    return 0
