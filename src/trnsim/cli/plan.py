"""``trnsim plan``: search parallel layouts for the fastest training setup that fits (trnsim.cluster.planner).

Text output is the best plans, one per parallel layout, and the rejections by reason; ``--json`` prints the
search summary and each plan as ``trnsim estimate --json`` would.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Table

from trnsim import hw
from trnsim.cli._output import console, print_json, print_table
from trnsim.cli.cluster import add_cluster_options, add_job_options, job_config
from trnsim.cluster import RECOMPUTE, TrainingConfig, models
from trnsim.cluster.planner import SEARCHED, SearchResult, Space, search
from trnsim.errors import ConfigError

if TYPE_CHECKING:
    from trnsim.cli._output import SubParsers

EPILOG = """examples:
  trnsim plan --model llama3-70b --target trn3 --chips 1024
  trnsim plan --model llama3-405b --target trn3 --chips 16384 --tp 16 --top 5
  trnsim plan --model mixtral-8x7b --target trn3 --chips 256 --recompute full --json

Searched (unless fixed by an option): TP within a node, PP dividing the layers, CP, EP (MoE), SP,
interleaving, ZeRO 0-3, recompute none/selective/full, micro-batch 1-8. DP is what is left. The global batch
(--global-batch, default about 4M tokens) is the same for every plan. Options given below fix that option.
"""
# Searched options the user may fix: name → (type, help).
FIXABLE: dict[str, tuple[type, str]] = {
    "dp": (int, "data-parallel size"), "tp": (int, "tensor-parallel size"), "pp": (int, "pipeline stages"),
    "cp": (int, "context-parallel size"), "ep": (int, "expert-parallel size (MoE)"),
    "interleave": (int, "virtual pipeline stages per chip"), "micro_batch": (int, "sequences per micro-batch"),
}


# Job options left at these values are not repeated in the `trnsim estimate` line.
DEFAULTS: dict[str, object] = {"seq_len": None, "precision": "bf16", "optimizer": "adamw", "finetune": "full",
                               "lora_rank": 16, "attention": "flash"}


def register(subparsers: SubParsers) -> None:
    """Add ``plan`` to the top-level parser."""
    p = subparsers.add_parser(
        "plan", help="search parallel layouts for the fastest training setup that fits",
        description="Search TP, PP, DP, CP, EP, SP, ZeRO, interleaving, recompute and micro-batch for the highest "
                    "training throughput that fits in memory; print the best plans and why the rest were rejected.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_cluster_options(p)
    fixed = p.add_argument_group("fix a searched option")
    for name, (kind, text) in FIXABLE.items():
        fixed.add_argument(f"--{name.replace('_', '-')}", type=kind, help=text)
    fixed.add_argument("--sp", action=argparse.BooleanOptionalAction, help="sequence parallelism")
    fixed.add_argument("--zero", type=int, choices=range(4), help="ZeRO stage, 3 = FSDP")
    fixed.add_argument("--recompute", choices=list(RECOMPUTE), help="activation recomputation")
    job = p.add_argument_group("the training job (the same for every plan)")
    job.add_argument("--global-batch", type=int, help="sequences per step (default: about 4M tokens)")
    add_job_options(job)
    p.add_argument("--top", type=int, default=10, metavar="N", help="plans to show, one per layout (default 10)")
    p.add_argument("--workers", type=int, help="processes (default: one per core for large searches; 1 = none)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(handler=cmd_plan)


def _space(args: argparse.Namespace) -> Space:
    return Space(**{name: (value,) for name in SEARCHED if (value := getattr(args, name)) is not None})


def _config(args: argparse.Namespace) -> TrainingConfig:
    return job_config(args)


def cmd_plan(args: argparse.Namespace) -> int:
    for name in ("top", "workers"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ConfigError(f"--{name} {value}: must be at least 1", hint=f"e.g. --{name} 4")
    model, spec = models.get(args.model), hw.get(args.target)
    result = search(model, spec, args.chips, _config(args), _space(args), top=args.top, workers=args.workers)
    if args.json:
        print_json(result.to_dict())
        return 0
    _print(result, model, spec, args)
    return 0


def _print(res: SearchResult, model: models.ModelSpec, spec: hw.ChipSpec, args: argparse.Namespace) -> None:
    out = console()
    out.print(f"[bold]{model.describe()}[/bold]")
    out.print(f"on {res.chips} × {spec.name} ({spec.meta.full_name}); global batch {res.global_batch} × "
              f"{res.seq_len} tokens, {args.precision}, {args.optimizer}"
              + (f", {args.finetune} r={args.lora_rank}" if args.finetune != "full" else ""))
    fixed = res.requested.fixed()
    if fixed:
        out.print("fixed: " + ", ".join(f"{k} = {v}" for k, v in fixed.items()))
    moe = model.moe
    rows: list[Sequence[object]] = []
    for i, e in enumerate(res.top, 1):
        p = e.plan
        rows.append((i, p.tp, p.pp, p.cp, p.dp, *((p.ep,) if moe else ()), "on" if p.sp else "off", p.interleave,
                     p.zero, p.recompute, p.micro_batch, f"{e.step_time_s:.2f} s", f"{e.tokens_per_s:,.0f}",
                     f"{e.mfu:.1%}", f"{e.memory_per_chip_bytes / 1e9:.0f} GB"))
    print_table(f"best plans, one per parallel layout ({len(res.top)} of {res.evaluated:,} feasible configurations)",
                ["#", "TP", "PP", "CP", "DP", *(("EP",) if moe else ()), "SP", "V", "ZeRO", "recompute",
                 "micro-batch", "step", "tokens/s", "MFU", "memory/chip"], rows,
                caption=f"searched {res.considered:,} configurations in {res.seconds:.1f} s "
                        f"({res.workers} process{'es' * (res.workers > 1)}); memory/chip of "
                        f"{spec.hbm_bytes / 1e9:.0f} GB HBM")
    if res.rejections:
        table = Table(title=f"rejected: {res.rejected:,} configurations", title_justify="left")
        table.add_column("reason")
        table.add_column("configurations", justify="right")
        table.add_column("example", overflow="fold")
        table.add_column("what to change", overflow="fold")
        for r in res.rejections:
            table.add_row(r.reason, f"{r.count:,}", r.example, r.advice)
        out.print(table)
    best = res.best.plan
    out.print(f"best: {best.describe()}")
    flags = [f"--{k} {getattr(best, k)}" for k in ("tp", "pp", "cp") + (("ep",) if moe else ())]
    flags += ["--sp" if best.sp else "--no-sp", f"--interleave {best.interleave}", f"--zero {best.zero}",
              f"--recompute {best.recompute}", f"--micro-batch {best.micro_batch}",
              f"--global-batch {best.global_batch}"]
    flags += [f"--{k.replace('_', '-')} {v}" for k in ("seq_len", "precision", "optimizer", "finetune", "lora_rank",
                                                       "attention") if (v := getattr(args, k)) != DEFAULTS.get(k)]
    flags += [] if args.overlap_grad_reduce else ["--no-overlap-grad-reduce"]
    flags += [] if args.fp32_grads is None else ["--fp32-grads" if args.fp32_grads else "--no-fp32-grads"]
    out.print(f"details: trnsim estimate --model {args.model} --target {spec.name} --chips {res.chips} "
              + " ".join(flags), soft_wrap=True)
