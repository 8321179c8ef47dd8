"""``trnsim demo``: the main job. Trains the small GPT of ``trnsim.examples.gpt`` on a simulated Trainium3 NeuronCore,
on the Python standard library's source as a character corpus, three times from the same start: in bf16, and with
its matmuls auto-cast to MXFP6 and to FP8 (e4m3). Prints the loss curves side by side, the simulated step time,
per-engine utilisation, MFU, HBM traffic and where the time goes; writes the artifacts, a Perfetto trace of one
step per run and a PNG. Programs go through the compile cache, so a second run compiles nothing.

``trnsim demo --tour`` is the older tour (``trnsim.cli.demo_tour``).
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trnsim.cli._output import console, print_table
from trnsim.errors import ConfigError
from trnsim.hw.units import format_quantity

if TYPE_CHECKING:
    from rich.progress import Progress

    from trnsim.cli._output import SubParsers
    from trnsim.compiler.api import CompiledProgram
    from trnsim.compiler.profile import ProgramProfile

EPILOG = """examples:
  trnsim demo                        # what `make demo` runs: 30 steps x 3 runs, writes out/demo/
  trnsim demo --steps 60 --out /tmp/demo
  trnsim demo --tour                 # the short tour: chips, numerics, a kernel, a cluster estimate
  trnsim cache warm examples/gpt.py  # compile the demo's programs ahead (in parallel)
"""

SPARK = "▁▂▃▄▅▆▇█"
LABELS = {"bf16": "bf16", "mxfp6": "MXFP6 matmuls", "fp8_e4m3": "FP8 e4m3 matmuls"}


@dataclass
class Run:
    """One training run: its program (and how it was obtained), losses, and the profile of its last step."""

    name: str
    options: dict[str, str]
    program: CompiledProgram
    load_seconds: float
    losses: list[float] = field(default_factory=list[float])
    wall_seconds: float = 0.0
    artifact: Path | None = None
    trace: Path | None = None

    @property
    def label(self) -> str:
        return LABELS.get(self.name, self.name)

    @property
    def profile(self) -> ProgramProfile:
        prof: ProgramProfile | None = self.program.last_profile
        assert prof is not None, "the last step runs with timing"
        return prof


def _short_loc(loc: str) -> str:
    """``…/trnsim/examples/gpt.py:136:16 (stablehlo.dot_general, jit(step_fn)/transpose(jvp())/dot_general)``
    → ``gpt.py:136 dot_general  transpose(jvp())``."""
    m = re.match(r"(?P<file>[^ ]*?):(?P<line>\d+):\d+ \((?P<op>[\w.]+)(?:, (?P<name>.*))?\)$", loc)
    if m is None:
        return loc
    op = m["op"].removeprefix("stablehlo.")
    name = re.sub(r"^jit\([^)]*\)/", "", m["name"] or "")
    name = name.removesuffix(f"/{op}").removesuffix(op)
    return f"{Path(m['file']).name}:{m['line']} {op}" + (f"  {name}" if name and name != op else "")


def sparkline(values: Sequence[float], lo: float, hi: float) -> str:
    span = hi - lo or 1.0
    return "".join(SPARK[min(len(SPARK) - 1, int((v - lo) / span * len(SPARK)))] for v in values)


# ---------------------------------------------------------------------------------------------------- training


def _compile_runs(text: str, target: str, out_dir: Path) -> list[Run]:
    from trnsim.examples.gpt import DEMO_RUNS
    from trnsim.runtime.program import compile as compile_cached

    runs: list[Run] = []
    for name, options in DEMO_RUNS:
        start = time.perf_counter()
        program = compile_cached(text, target, **options)
        run = Run(name, dict(options), program, time.perf_counter() - start)
        run.artifact = program.save(out_dir / f"gpt-{name}.neff")
        runs.append(run)
    return runs


def _train(runs: list[Run], lowered: Any, steps: int, batch: int, seed: int, progress: Progress) -> None:
    import jax

    from trnsim.examples.gpt import CharTokenizer, GPTConfig, batches, init_opt_state, init_params, load_corpus

    cfg = GPTConfig(dtype="bfloat16")
    data = batches(CharTokenizer().encode(load_corpus()), batch, cfg.seq_len, seed)
    stream = [next(data) for _ in range(steps)]  # every run sees the same batches
    params0 = jax.tree.map(np.asarray, init_params(cfg, jax.random.key(seed)))
    opt0 = jax.tree.map(np.asarray, init_opt_state(params0))
    out_tree = lowered.out_tree
    task = progress.add_task("", total=steps * len(runs))
    for run in runs:
        state: tuple[Any, Any] = (params0, opt0)
        start = time.perf_counter()
        for i, (x, y) in enumerate(stream):
            leaves = jax.tree.leaves((state[0], state[1], np.int32(i), x, y))
            # NOTE: every step runs the same static program, so the last one's profile is every step's
            outputs = run.program.run(*leaves, timing=i == steps - 1)
            params, opt_state, loss = jax.tree.unflatten(out_tree, outputs)
            state = (params, opt_state)
            run.losses.append(float(loss))
            progress.update(task, advance=1, description=f"{run.label:<17} step {i + 1:3d}/{steps}  "
                                                         f"loss {run.losses[-1]:.3f}")
        run.wall_seconds = time.perf_counter() - start


# ---------------------------------------------------------------------------------------------------- report


def _print_programs(runs: list[Run], n_params: int, batch: int, seq_len: int) -> None:
    rows = []
    for r in runs:
        plan = r.program.plan
        how = (f"loaded from the compile cache ({r.load_seconds * 1e3:.0f} ms)" if r.program.cache_hit
               else f"compiled ({r.load_seconds:.2f} s), now in the compile cache")
        opts = ", ".join(f"{k}={v}" for k, v in r.options.items()) or "as written"
        rows.append([r.label, opts, f"{len(plan.steps)} kernel steps", how, str(r.artifact)])
    hits = sum(r.program.cache_hit for r in runs)
    print_table(f"the train step (forward, backward, AdamW) of a {n_params / 1e6:.2f} M-parameter GPT, batch {batch} "
                f"× {seq_len} tokens, compiled three ways", ["run", "options", "program", "how", "artifact"], rows,
                caption=f"{hits} of {len(runs)} programs loaded from the compile cache"
                        + (" — every program came from the cache, nothing was compiled" if hits == len(runs) else
                           "; the next `make demo` loads every one from the cache"))


def _print_losses(runs: list[Run]) -> None:
    steps = len(runs[0].losses)
    shown = sorted({*range(0, steps, 5), steps - 1})
    rows = [[str(i + 1), *(f"{r.losses[i]:.3f}" for r in runs)] for i in shown]
    lo = min(min(r.losses) for r in runs)
    hi = max(max(r.losses) for r in runs)
    rows.append(["curve", *(sparkline(r.losses, lo, hi) for r in runs)])
    print_table("training loss (nats; a uniform guess is log 128 = 4.85)",
                ["step", *(r.label for r in runs)], rows,
                caption="same initial weights and batches in every run; the curve spans "
                        f"{lo:.2f} (▁) to {hi:.2f} (█)")


def _print_performance(runs: list[Run], tokens: int) -> None:
    first = runs[0].profile
    engines = [e for e in first.engine_busy if any(r.profile.engine_busy.get(e, 0.0) > 0 for r in runs)]
    rows = [["simulated step time", *(format_quantity(r.profile.total_seconds, "s", digits=3) for r in runs)],
            ["tokens / s (one NeuronCore)", *(f"{tokens / r.profile.total_seconds:,.0f}" for r in runs)],
            *[[f"utilisation: {e}", *(f"{r.profile.utilisation.get(e, 0.0):.0%}" for r in runs)] for e in engines],
            ["matmul FLOPs / step", *(f"{r.profile.flops / 1e9:.2f} G" for r in runs)],
            ["MFU", *(f"{r.profile.mfu:.1%}" for r in runs)],
            ["HBM traffic / step", *(format_quantity(r.profile.hbm_bytes, "bytes", digits=3) for r in runs)],
            ["HBM bandwidth used", *(f"{r.profile.hbm_bandwidth / 1e9:,.0f} GB/s" for r in runs)],
            ["host time to simulate a step", *(f"{r.wall_seconds / len(r.losses):.2f} s" for r in runs)]]
    print_table(f"one step on a simulated {first.target} NeuronCore", ["", *(r.label for r in runs)], rows,
                caption=f"MFU: matmul FLOPs / (step time × {first.peak_flops / 1e12:.1f} TFLOP/s, the dense bf16 "
                        "TensorE peak of one NeuronCore). A 0.4 M-parameter model is far too small to fill "
                        "TensorE: DMA and the elementwise engines set the pace")


def _print_where(runs: list[Run]) -> None:
    kernels: dict[str, list[str]] = {}
    for col, r in enumerate(runs):
        for kernel, (n, seconds) in r.profile.by_kernel().items():
            row = kernels.setdefault(kernel, ["-"] * (2 * len(runs)))
            row[2 * col] = str(n)
            row[2 * col + 1] = format_quantity(seconds, "s", digits=3)
    print_table("where the time goes: kernel steps by kind (time from start to end, summed; steps overlap)",
                ["kernel", *(c for r in runs for c in (f"{r.name} steps", f"{r.name} time"))],
                [[k, *v] for k, v in kernels.items()])
    for r in runs[:2]:
        lines: dict[tuple[str, str], list[float]] = {}
        for st in r.profile.steps:
            lines.setdefault((_short_loc(st.loc), st.kernel), []).append(st.end - st.start)
        top = sorted(lines.items(), key=lambda kv: -sum(kv[1]))[:6]
        rows = [[loc, kernel, str(len(times)), format_quantity(sum(times), "s", digits=3)]
                for (loc, kernel), times in top]
        print_table(f"the source lines that take longest, {r.label}",
                    ["source (file:line op  JAX name)", "kernel", "steps", "time"], rows)


def _plot(runs: list[Run], path: Path) -> None:
    import matplotlib.pyplot as plt

    from trnsim.report.plots import write_png

    fig, (ax_loss, ax_util) = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in runs:
        ax_loss.plot(range(1, len(r.losses) + 1), r.losses, marker=".", label=r.label)
    ax_loss.set(xlabel="step", ylabel="loss (nats)", title="training loss on a simulated trn3")
    ax_loss.grid(alpha=0.3)
    ax_loss.legend()
    engines = [e for e in runs[0].profile.engine_busy if any(r.profile.engine_busy.get(e, 0) > 0 for r in runs)]
    width = 0.8 / len(runs)
    for i, r in enumerate(runs):
        ax_util.bar([j + i * width for j in range(len(engines))], [100 * r.profile.utilisation[e] for e in engines],
                    width, label=f"{r.label} ({r.profile.total_seconds * 1e3:.2f} ms/step)")
    ax_util.set_xticks([j + 0.4 - width / 2 for j in range(len(engines))], engines)
    ax_util.set(ylabel="busy, % of the step", title="per-engine utilisation, one step")
    ax_util.legend()
    write_png(fig, path)


# ---------------------------------------------------------------------------------------------------- command


def cmd_demo(args: argparse.Namespace) -> int:
    if args.tour:
        from trnsim.cli.demo_tour import run_tour

        return run_tour(args.seed)
    if args.steps < 1 or args.batch < 1:
        raise ConfigError(f"--steps {args.steps} --batch {args.batch}: both must be at least 1", where="trnsim demo")
    import jax
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from trnsim.examples.gpt import GPTConfig, init_params, lower_train_step, step_module

    out = console()
    out_dir = Path(args.out)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        what = "it is not a folder" if isinstance(exc, FileExistsError | NotADirectoryError) else \
            (exc.strerror or str(exc))
        raise ConfigError(f"cannot create the output folder: {what}", where=f"--out {args.out}",
                          hint="give --out a folder that exists or can be created") from None
    cfg = GPTConfig(dtype="bfloat16")
    out.rule(f"trnsim demo: train a small GPT on a simulated {args.target}")
    n_params = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(jax.eval_shape(
        lambda: init_params(cfg, jax.random.key(0)))))
    lowered = lower_train_step(cfg, args.batch)
    runs = _compile_runs(step_module(lowered), args.target, out_dir)
    _print_programs(runs, n_params, args.batch, cfg.seq_len)

    with Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=Console(stderr=True), transient=True) as progress:
        _train(runs, lowered, args.steps, args.batch, args.seed, progress)
    for r in runs:
        r.trace = r.profile.save_trace(out_dir / f"trace-{r.name}.json")

    _print_losses(runs)
    _print_performance(runs, args.batch * cfg.seq_len)
    _print_where(runs)
    png = out_dir / "demo.png"
    _plot(runs, png)
    hits = sum(r.program.cache_hit for r in runs)
    out.print(f"\nwrote {out_dir}/: " + ", ".join(p.name for r in runs for p in (r.artifact, r.trace) if p)
              + f", {png.name}", markup=False, soft_wrap=True)
    out.print(f"compile cache: {hits} of {len(runs)} programs loaded from it, {len(runs) - hits} compiled "
              "(`trnsim cache ls` lists it).", markup=False, soft_wrap=True)
    out.print(f"Next: open a trace in https://ui.perfetto.dev (one track per engine and one for DMA; each slice is "
              f"a kernel step, its args give the ops and source line); `trnsim inspect {runs[0].artifact}`; "
              "`trnsim demo --tour`.", markup=False, soft_wrap=True)
    return 0


def register(sub: SubParsers) -> None:
    p = sub.add_parser("demo", help="the main job: train a small GPT on a simulated trn3 (bf16, MXFP6, FP8)",
                       description="Train the small GPT of trnsim.examples.gpt for a few dozen steps on a simulated "
                                   "Trainium3, in bf16 and with matmuls auto-cast to MXFP6 and FP8; print the loss "
                                   "curves, step time, utilisation, MFU, HBM traffic and where the time goes; write "
                                   "artifacts, Perfetto traces and a PNG. `--tour` shows the older short tour.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=30, help="training steps per run (default 30)")
    p.add_argument("--batch", type=int, default=16, help="sequences per step (default 16, of 64 characters)")
    p.add_argument("--out", default="out/demo", help="folder for artifacts, traces and the PNG (default out/demo)")
    p.add_argument("--target", default="trn3", help="hardware preset to compile for (default trn3)")
    p.add_argument("--seed", type=int, default=0, help="seed for the weights, the batches and the tour's tensors")
    p.add_argument("--tour", action="store_true", help="the short tour: chips, numerics, a kernel, a cluster estimate")
    p.set_defaults(handler=cmd_demo)
