"""``trnsim estimate`` (one training setup on a cluster) and ``trnsim validate`` (Megatron-LM Table 1).

Text output is rich tables; ``--json`` prints machine-readable JSON (seconds, bytes, FLOP/s, fractions).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trnsim import hw
from trnsim.cli._output import console, print_json, print_table
from trnsim.cluster import (
    FINETUNE,
    OPTIMIZERS,
    PRECISIONS,
    RECOMPUTE,
    RESERVED_FRACTION,
    Estimate,
    TrainingConfig,
    estimate,
    models,
)
from trnsim.cluster.ops import ATTENTION_KINDS
from trnsim.cluster.validate import SOURCE, mean_abs_error, validate
from trnsim.errors import ConfigError

if TYPE_CHECKING:
    from trnsim.cli._output import SubParsers

ESTIMATE_EPILOG = """examples:
  trnsim estimate --model llama3-70b --target trn3 --chips 1024
  trnsim estimate --model llama3-405b --target h100 --chips 8064 --tp 8 --pp 14 --interleave 3 \\
                  --global-batch 2016 --recompute full --tokens 15T
  trnsim estimate --model gpt3-175b --target b200 --chips 512 --precision fp8 --zero 3 --recompute full --json
  trnsim estimate --model llama2-70b --target trn3 --chips 64 --finetune qlora --lora-rank 16

models: {models}
a model file (.toml or .json) has the zoo's keys: layers, hidden, heads, kv_heads, ffn, vocab, seq_len
(and optional mlp, norm, position, bias, dropout, tied_embeddings, experts, top_k, moe_ffn).
Unset options get defaults: DP from the chip count, TP within a node, SP on with TP > 1, micro-batch 1,
about 4M tokens per batch, ZeRO-1, selective recompute, flash attention, fp32 gradients (16-bit with fp16).
"""
VALIDATE_EPILOG = """examples:
  trnsim validate
  trnsim validate --json

Predicts each row of Narayanan et al. 2021 (Megatron-LM) Table 1 on the a100 preset and compares the
TFLOP/s per GPU (eq. 3 FLOPs / predicted step time / GPUs). Micro-batch and interleave, not published,
are chosen per row as the fastest setup that fits in memory.
"""
TOKEN_SUFFIX = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


def add_cluster_options(p: argparse.ArgumentParser) -> None:
    """--model, --target, --chips: shared by the commands that look at a job on a cluster."""
    p.add_argument("--model", required=True, help="zoo model name or a .toml/.json model file")
    p.add_argument("--target", help="hardware preset or .toml file (default: TRNSIM_TARGET)")
    p.add_argument("--chips", type=int, required=True, help="number of chips")


def add_job_options(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:  # pyright: ignore[reportPrivateUsage]
    """The training-job options (everything but the parallel layout), shared by `estimate` and `plan`."""
    p.add_argument("--seq-len", type=int, help="tokens per sequence (default: the model's)")
    p.add_argument("--precision", default="bf16", choices=list(PRECISIONS), help="matmul precision")
    p.add_argument("--optimizer", default="adamw", choices=list(OPTIMIZERS))
    p.add_argument("--overlap-grad-reduce", action=argparse.BooleanOptionalAction, default=True,
                   help="overlap the gradient reduction with backward (default on)")
    p.add_argument("--fp32-grads", action=argparse.BooleanOptionalAction,
                   help="accumulate and reduce gradients in fp32 (default: on unless --precision fp16)")
    p.add_argument("--finetune", default="full", choices=list(FINETUNE), help="full training, LoRA or QLoRA")
    p.add_argument("--lora-rank", type=int, default=16, help="LoRA rank r")
    p.add_argument("--attention", default="flash", choices=list(ATTENTION_KINDS), help="attention kernel")


def job_config(args: argparse.Namespace, **layout: Any) -> TrainingConfig:
    """A TrainingConfig from the job options of ``add_job_options`` plus the given layout options."""
    return TrainingConfig(seq_len=args.seq_len, precision=args.precision, optimizer=args.optimizer,
                          overlap_grad_reduce=args.overlap_grad_reduce, fp32_grads=args.fp32_grads,
                          finetune=args.finetune, lora_rank=args.lora_rank, attention=args.attention,
                          global_batch=args.global_batch, **layout)


def register(subparsers: SubParsers) -> None:
    """Add ``estimate`` and ``validate`` to the top-level parser."""
    p = subparsers.add_parser(
        "estimate", help="step time, MFU and memory of a training setup on a cluster",
        description="Estimate one training step of a model on a cluster of chips: plan, time breakdown, "
                    "memory per chip, throughput, MFU and HFU.",
        epilog=ESTIMATE_EPILOG.format(models=", ".join(models.names())),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_cluster_options(p)
    for name, text in (("dp", "data-parallel size"), ("tp", "tensor-parallel size"), ("pp", "pipeline stages"),
                       ("cp", "context-parallel size"), ("ep", "expert-parallel size (MoE)")):
        p.add_argument(f"--{name}", type=int, help=text)
    p.add_argument("--sp", action=argparse.BooleanOptionalAction, help="sequence parallelism (default: on with TP>1)")
    p.add_argument("--zero", type=int, default=1, choices=range(4), help="ZeRO stage, 3 = FSDP (default 1)")
    p.add_argument("--recompute", default="selective", choices=list(RECOMPUTE), help="activation recomputation")
    p.add_argument("--interleave", type=int, default=1, metavar="V", help="virtual pipeline stages per chip")
    p.add_argument("--global-batch", type=int, help="sequences per step")
    p.add_argument("--micro-batch", type=int, help="sequences per micro-batch (default 1)")
    add_job_options(p)
    p.add_argument("--tokens", help="training tokens for time-to-train, e.g. 15T, 2e12")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(handler=cmd_estimate)

    v = subparsers.add_parser(
        "validate", help="predicted vs published Megatron-LM Table 1 throughput (a100)",
        description="Compare the estimator with Megatron-LM Table 1 (Narayanan et al. 2021) on the a100 preset.",
        epilog=VALIDATE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    v.add_argument("--json", action="store_true", help="print JSON instead of a table")
    v.set_defaults(handler=cmd_validate)


def parse_tokens(text: str) -> float:
    """``15T`` → 1.5e13; plain numbers and exponents (``2e12``) too."""
    match = re.fullmatch(r"\s*([0-9.]+(?:e[0-9]+)?)\s*([KMBGT]?)\s*", text, re.IGNORECASE)
    if not match:
        raise ConfigError(f"cannot read --tokens {text!r}", hint="write a number with an optional K/M/B/T "
                          "suffix, e.g. 15T or 2e12")
    try:
        tokens = float(match.group(1)) * TOKEN_SUFFIX[match.group(2).upper()]
    except ValueError:  # "1.2.3"
        tokens = math.nan
    if not 0 <= tokens < math.inf:
        raise ConfigError(f"cannot read --tokens {text!r}: not a finite number",
                          hint="write a number with an optional K/M/B/T suffix, e.g. 15T or 2e12")
    return tokens


def _config(args: argparse.Namespace) -> TrainingConfig:
    return job_config(args, micro_batch=args.micro_batch, dp=args.dp, tp=args.tp, pp=args.pp, cp=args.cp, ep=args.ep,
                      sp=args.sp, interleave=args.interleave, zero=args.zero, recompute=args.recompute)


def _gb(x: float) -> str:
    return f"{x / 1e9:.1f} GB"


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.2f} s"


def cmd_estimate(args: argparse.Namespace) -> int:
    model, spec = models.get(args.model), hw.get(args.target)
    tokens = parse_tokens(args.tokens) if args.tokens else None
    est = estimate(model, spec, args.chips, _config(args))
    if args.json:
        out = est.to_dict()
        if tokens is not None:
            out["tokens"], out["time_to_train_s"] = tokens, est.time_to_train(tokens)
        print_json(out)
        return 0
    _print_estimate(est, model, spec, tokens)
    return 0


def _print_estimate(est: Estimate, model: models.ModelSpec, spec: hw.ChipSpec, tokens: float | None) -> None:
    out = console()
    out.print(f"[bold]{model.describe()}[/bold]")
    out.print(f"on {est.plan.chips} × {spec.name} ({spec.meta.full_name})")
    out.print(f"plan: {est.plan.describe()}")
    step = est.step_time_s
    rows: list[Sequence[object]] = [(k.replace("_", " "), f"{v * 1e3:.1f} ms", f"{v / step:.1%}")
                                    for k, v in est.breakdown.items() if v > 0]
    rows.append(("step", f"{step * 1e3:.1f} ms", "100.0%"))
    print_table("step time (exposed, per step)", ["part", "time", "share"], rows)
    mem = est.memory
    mrows: list[Sequence[object]] = [(k, _gb(getattr(mem, k))) for k in ("weights", "gradients", "optimizer",
                                                                        "activations", "logits", "buffers")]
    mrows += [("total", _gb(mem.total)), (f"usable ({1 - RESERVED_FRACTION:.0%} of {_gb(mem.capacity)})",
                                          _gb(mem.usable))]
    print_table(f"memory per chip ({mem.stage} pipeline stage)", ["part", "bytes"], mrows,
                caption="fits" if mem.fits else "DOES NOT FIT: raise TP/PP, ZeRO or recompute, or lower the "
                "micro-batch")
    srows: list[Sequence[object]] = [
        ("tokens/s", f"{est.tokens_per_s:,.0f}"),
        ("tokens/s per chip", f"{est.tokens_per_s / est.plan.chips:,.1f}"),
        ("model TFLOP/s per chip", f"{est.model_tflops_per_chip:.1f}"),
        ("MFU", f"{est.mfu:.1%}"),
        ("HFU", f"{est.hfu:.1%}"),
        ("peak used", f"{est.peak_dtype}, dense, {est.peak_flops / 1e12:.0f} TFLOP/s per chip"),
        ("matmul cap (MAMF)", f"{est.mamf:.1%} of peak"),
    ]
    if tokens is not None:
        srows.append((f"time to train {tokens:.3g} tokens", _duration(est.time_to_train(tokens))))
    print_table("throughput", ["", ""], srows, caption=(
        "MFU: model FLOPs 6·N·T + 12·L·a·d·s·T (full attention, PaLM convention) / (time × chips × peak);\n"
        "HFU: every FLOP executed, recompute included.\n"
        f"MAMF: {est.mamf_source}"))


def cmd_validate(args: argparse.Namespace) -> int:
    result = validate()
    if args.json:
        print_json(result.to_dict())
        return 0
    columns = ["model", "params (B)", "TP", "PP", "GPUs", "batch", "micro-batch*", "interleave*", "published",
               "predicted", "error"]
    rows: list[Sequence[object]] = [
        (r.model, f"{r.params_b:g}", r.tp, r.pp, r.gpus, r.batch, r.micro_batch, r.interleave,
         f"{r.published:.0f}", f"{r.predicted:.1f}", f"{r.error:+.1%}") for r in result.rows]
    worst = result.worst
    print_table(f"Megatron-LM Table 1 on {result.target}: TFLOP/s per GPU, predicted vs published", columns, rows,
                caption=f"mean absolute error {result.mean_abs_error:.1%}; worst {worst.model} {worst.error:+.1%}\n"
                        f"* not published; chosen per row as the fastest setup that fits in memory\n"
                        f"source: {SOURCE}")
    if result.secondary:
        rows = [(r.model, f"{r.params_b:g}", r.tp, r.pp, r.gpus, r.batch, r.micro_batch, r.interleave,
                 f"{r.published:.0f}", f"{r.predicted:.1f}", f"{r.error:+.1%}") for r in result.secondary]
        print_table("secondary check: Table 2, PTD-P rows", [c.replace("micro-batch*", "micro-batch") for c in columns],
                    rows, caption=f"mean absolute error {mean_abs_error(result.secondary):.1%}; TP × PP = the "
                                  "published model-parallel size; micro-batch as published; * as above")
    return 0
