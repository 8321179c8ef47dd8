"""``trnsim profile``: time a program on one simulated NeuronCore and show where the time goes.

The program is an ISA text file (``trnsim.isa.parse``) or a built-in example (``--example matmul``: a
well-tiled matmul built with ``ProgramBuilder``, see ``trnsim.sim.timing.examples``). It runs timing-only
(shapes, no data), prints a summary (total time, engine and DMA-queue utilisation, bytes and bandwidth,
FLOPs, HFU/MFU against the named peak, the critical path's bound), and optionally writes a Chrome/Perfetto
trace (``--trace``) and a roofline plot (``--plot``, needs matplotlib).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from trnsim.cli._output import print_json, print_table
from trnsim.errors import ConfigError
from trnsim.hw.units import format_quantity

if TYPE_CHECKING:
    from trnsim.cli._output import SubParsers
    from trnsim.hw import ChipSpec
    from trnsim.isa import Program
    from trnsim.sim.profile import Profile

EXAMPLES = ("matmul",)
EPILOG = """examples:
  trnsim profile --example matmul --m 1024 --k 1024 --n 1024
  trnsim profile --example matmul --m 4096 --k 8192 --n 8192 --trace matmul.json --plot roofline.png
  trnsim profile --example matmul --dtype fp8_e4m3 --target trn3-aws --json
  trnsim profile kernel.isa --trace kernel.json         # a program in the ISA text form

The trace opens in ui.perfetto.dev (one track per engine and per DMA queue). HFU/MFU follow the
Neuron profiler's definitions (with / without transposes) against one NeuronCore's TensorE peak for
the dtype used, which the summary names.
"""


def register(subparsers: SubParsers) -> None:
    """Add ``profile`` to the top-level parser."""
    p = subparsers.add_parser(
        "profile", help="time a program on one NeuronCore: utilisation, bandwidth, HFU/MFU, trace, roofline",
        description="Time an ISA program (or a built-in example) on one simulated NeuronCore, timing-only, "
                    "and show where the time goes.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("program", nargs="?", help="ISA text file (the form str(Program) prints)")
    p.add_argument("--example", choices=EXAMPLES, help="profile a built-in example program instead")
    p.add_argument("--m", type=int, default=1024, help="matmul example: rows of the output (default 1024)")
    p.add_argument("--k", type=int, default=1024, help="matmul example: contraction size (default 1024)")
    p.add_argument("--n", type=int, default=1024, help="matmul example: columns of the output (default 1024)")
    p.add_argument("--dtype", default="bf16", help="matmul example: operand dtype (default bf16)")
    p.add_argument("--target", help="preset name or .toml path (default: TRNSIM_TARGET)")
    p.add_argument("--trace", metavar="OUT.json", help="write a Chrome/Perfetto trace")
    p.add_argument("--plot", metavar="OUT.png", help="write a roofline plot (needs matplotlib)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON (SI units)")
    p.set_defaults(handler=cmd_profile)


def _program(args: argparse.Namespace, spec: ChipSpec) -> tuple[Program, str]:
    if (args.program is None) == (args.example is None):
        raise ConfigError("give either an ISA file or --example", hint="e.g. trnsim profile --example matmul")
    if args.example == "matmul":
        from trnsim.sim.timing.examples import matmul_program

        return (matmul_program(args.m, args.k, args.n, args.dtype, spec=spec),
                f"matmul [{args.m}x{args.k}] x [{args.k}x{args.n}] {args.dtype}")
    from trnsim.isa import parse

    path = Path(args.program)
    if not path.is_file():
        raise ConfigError(f"no such file: {path}", hint="pass an ISA text file, or use --example matmul")
    return parse(path.read_text()), str(path)


def cmd_profile(args: argparse.Namespace) -> int:
    from trnsim.sim.device import Device

    device = Device(args.target) if args.target else Device()
    with Console(stderr=True).status("building the program …") as status:
        program, what = _program(args, device.spec)
        status.update(f"timing {sum(len(s) for s in program.streams.values()):,} instructions …")
        # NOTE: a file is verified; the built-in examples are verified by the test suite, and the verifier
        # takes seconds on the largest of them (it checks every access of every instruction)
        profile = device.run(program, timing_only=True, check=args.program is not None)
    if args.plot:
        plot_roofline(profile, device.spec, args.plot, what)
    if args.trace:
        profile.save_trace(args.trace)
    if args.json:
        print_json({"program": what, **profile.to_dict(), "critical_path_bound": profile.critical_path().bound})
        return 0
    print_summary(profile, device.spec, what)
    for flag, path in (("trace", args.trace), ("roofline", args.plot)):
        if path:
            print(f"{flag}: {path}")
    return 0


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.2f}"


def print_summary(profile: Profile, spec: ChipSpec, what: str) -> None:
    core = spec.core
    assert core is not None
    dma_peak = core.dma.queues * core.dma.queue_bandwidth
    path = profile.critical_path()
    rows = [
        ("total time (us)", _us(profile.total_seconds)),
        ("instructions", f"{profile.instructions:,}"),
        ("matmul FLOPs", f"{profile.flops:.4g}" + (f"  (+ {profile.transpose_flops:.3g} in transposes)"
                                                    if profile.transpose_flops else "")),
        ("achieved", f"{profile.achieved_flops / 1e12:.2f} TFLOP/s"),
        ("peak", profile.peak_name),
        ("HFU / MFU", f"{profile.hfu:.1%} / {profile.mfu:.1%}"),
        ("DMA transfers", f"{profile.dma_transfers:,}  ({format_quantity(profile.dma_bytes, 'bytes')})"),
        ("HBM traffic", format_quantity(profile.hbm_bytes, "bytes")),
        ("achieved HBM bandwidth", f"{profile.hbm_bandwidth / 1e9:.1f} GB/s ({profile.hbm_bandwidth / dma_peak:.0%} "
                                   f"of the core's {core.dma.queues} DMA queues' {dma_peak / 1e9:.0f} GB/s; "
                                   f"HBM {spec.hbm_bandwidth / 1e12:.2g} TB/s per chip)"),
        ("arithmetic intensity", f"{profile.arithmetic_intensity:.1f} FLOP/byte of HBM"),
        ("exposed LoadStationary (us)", _us(profile.exposed_load_seconds)),
        ("critical path", f"{len(path.steps):,} instructions, bound by {path.bound} "
                          f"({path.by_engine.get(path.bound, 0.0) / profile.total_seconds:.0%} of the time)"
         if profile.total_seconds else "empty"),
    ]
    print_table(f"profile: {what} on {spec.name}, one NeuronCore, timing-only", ["quantity", "value"], rows)
    used = [e for e, busy in profile.engine_busy.items() if busy or e in profile.timeline.program.streams]
    eng_rows = [(e, _us(profile.engine_busy[e]), f"{profile.engine_utilization[e]:.1%}") for e in used]
    eng_rows += [(f"dma queue {q}", _us(b), f"{profile.queue_utilization[q]:.1%}")
                 for q, b in profile.queue_busy.items() if b]
    print_table("busy time per engine and DMA queue", ["track", "busy (us)", "utilisation"], eng_rows,
                caption="DMA triggers take no engine time: sync issues them, the queues carry them")
    if profile.labels:
        print_table("per label", ["label", "instructions", "span (us)", "FLOPs", "DMA bytes"],
                    [(k, v.instructions, _us(v.seconds), f"{v.flops:.3g}", format_quantity(v.dma_bytes, "bytes"))
                     for k, v in profile.labels.items()])


# Roofs drawn per group of dtypes with the same TensorE rate (names joined in the legend).
def _compute_roofs(spec: ChipSpec) -> dict[float, list[str]]:
    core = spec.core
    assert core is not None
    roofs: dict[float, list[str]] = {}
    for dtype in core.tensor.rate:
        roofs.setdefault(core.tensor.flops(dtype), []).append(dtype)
    return roofs


def plot_roofline(profile: Profile, spec: ChipSpec, path: str, what: str) -> None:
    """Achieved FLOP/s against arithmetic intensity, under one core's compute roofs and the memory roofs."""
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("--plot needs matplotlib, which is not installed",
                          hint="pip install matplotlib (or drop --plot)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    core = spec.core
    assert core is not None
    memory = {f"core DMA queues {core.dma.queues} x {core.dma.queue_bandwidth / 1e9:g} GB/s":
              core.dma.queues * core.dma.queue_bandwidth, f"HBM {spec.hbm_bandwidth / 1e12:.2g} TB/s (chip)":
              spec.hbm_bandwidth}
    roofs = _compute_roofs(spec)
    x_lo, x_hi = 0.1, max(1e4, 4 * (profile.arithmetic_intensity if profile.hbm_bytes else 1.0))
    fig, ax = plt.subplots(figsize=(8, 5.5))
    xs = [x_lo * (x_hi / x_lo) ** (i / 200) for i in range(201)]
    top = max(roofs)
    for name, bw in memory.items():
        ax.plot(xs, [min(bw * x, top) for x in xs], linestyle="--", label=f"memory roof: {name}")
    for peak, dtypes in sorted(roofs.items()):
        ax.axhline(peak, linewidth=1, color="gray")
        names = ", ".join(dtypes) if len(dtypes) <= 3 else f"{', '.join(dtypes[:2])} +{len(dtypes) - 2} more"
        ax.text(x_lo * 1.2, peak * 1.08, f"{names}: {peak / 1e12:.1f} TFLOP/s", fontsize=7)
    if profile.flops and profile.hbm_bytes:
        ax.plot([profile.arithmetic_intensity], [profile.achieved_flops], "o", color="crimson", markersize=8,
                label=f"{what}: {profile.achieved_flops / 1e12:.1f} TFLOP/s, HFU {profile.hfu:.0%}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(min(memory.values()) * x_lo / 2, top * 3)
    ax.set_xlabel("arithmetic intensity (FLOP per HBM byte)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(f"roofline: one NeuronCore of {spec.name}")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    from trnsim.report.plots import write_png

    try:
        write_png(fig, Path(path))   # atomic; an unwritable path is a TrnsimError naming it
    finally:
        plt.close(fig)
