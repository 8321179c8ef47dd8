"""Validation against Megatron-LM Table 1 (Narayanan et al. 2021) on the ``a100`` preset.

The published rows live in ``megatron_table1.toml`` (transcribed from reference/calibration_megatron.md);
they are only compared against, never used by the estimator. For each row the setup is the paper's (TP, PP,
GPUs, global batch, full recomputation, fp16) with 2021 Megatron-LM's mechanisms (the file's ``[setup]``);
the micro-batch size and the interleaving, which the paper tuned per row and did not publish, are chosen the
way the authors did: every combination in the file's search lists is estimated and the fastest one that
fits in memory is kept (and reported).

The predicted TFLOP/s per GPU is computed the paper's way: F / (predicted step time × GPUs) with eq. 3,
F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)).

A secondary check (``Validation.secondary``) predicts the PTD-P rows of the paper's Table 2 the same way (the
file's ``[[ptdp]]`` rows: one model at a fixed batch on 1×, 2× and 4× the GPUs, micro-batch 1 as published).
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from trnsim import hw
from trnsim.cluster import models
from trnsim.cluster.config import ClusterConfigError, TrainingConfig
from trnsim.cluster.estimate import Estimate, estimate
from trnsim.hw.spec import ChipSpec

TABLE_FILE = Path(__file__).parent / "megatron_table1.toml"
SOURCE = "Narayanan et al. 2021 (arXiv 2104.04473) Table 1, via reference/calibration_megatron.md"


@dataclass(frozen=True, slots=True)
class Row:
    """One Table 1 row: as published, and as predicted with the chosen micro-batch and interleave."""

    model: str
    params_b: float
    tp: int
    pp: int
    gpus: int
    batch: int
    published: float
    predicted: float
    micro_batch: int
    interleave: int
    estimate: Estimate

    @property
    def error(self) -> float:
        """Relative error of the prediction, (predicted − published) / published."""
        return self.predicted / self.published - 1.0


def _row_dict(r: Row) -> dict[str, object]:
    return {"model": r.model, "params_b": r.params_b, "tp": r.tp, "pp": r.pp, "gpus": r.gpus,
            "global_batch": r.batch, "micro_batch": r.micro_batch, "interleave": r.interleave,
            "published_tflops": r.published, "predicted_tflops": r.predicted, "error": r.error,
            "step_time_s": r.estimate.step_time_s, "breakdown": dict(r.estimate.breakdown),
            "memory_per_chip_bytes": r.estimate.memory_per_chip_bytes}


def mean_abs_error(rows: tuple[Row, ...]) -> float:
    return sum(abs(r.error) for r in rows) / len(rows) if rows else 0.0


@dataclass(frozen=True, slots=True)
class Validation:
    """Table 1 (``rows``) and the secondary Table 2 PTD-P check (``secondary``)."""

    target: str
    rows: tuple[Row, ...]
    secondary: tuple[Row, ...] = ()

    @property
    def mean_abs_error(self) -> float:
        return mean_abs_error(self.rows)

    @property
    def worst(self) -> Row:
        return max(self.rows, key=lambda r: abs(r.error))

    def to_dict(self) -> dict[str, object]:
        return {"source": SOURCE, "target": self.target, "mean_abs_error": self.mean_abs_error,
                "worst": {"model": self.worst.model, "error": self.worst.error},
                "rows": [_row_dict(r) for r in self.rows],
                "table2_ptdp": {"mean_abs_error": mean_abs_error(self.secondary),
                                "rows": [_row_dict(r) for r in self.secondary]}}


@functools.cache
def table() -> dict[str, Any]:
    with TABLE_FILE.open("rb") as fh:
        return tomllib.load(fh)


def paper_flops(model: models.ModelSpec, batch: int) -> float:
    """Eq. 3 of Narayanan et al. 2021: FLOPs per iteration with full recomputation."""
    s, h, n, v = model.seq_len, model.hidden, model.layers, model.vocab
    return 96.0 * batch * s * n * h * h * (1 + s / (6 * h) + v / (16 * n * h))


def validate(spec: ChipSpec | None = None) -> Validation:
    """Predict every Table 1 row (module docstring); ``spec`` defaults to the file's target (``a100``)."""
    data = table()
    setup = cast("dict[str, Any]", data["setup"])
    spec = spec or hw.get(str(setup["target"]))
    base = TrainingConfig(precision=setup["precision"], recompute=setup["recompute"], attention=setup["attention"],
                          sp=bool(setup["sp"]), zero=int(setup["zero"]),
                          overlap_grad_reduce=bool(setup["overlap_grad_reduce"]),
                          grad_accumulation_fusion=bool(setup["grad_accumulation_fusion"]),
                          fp32_grads=bool(setup["fp32_grads"]))
    interleaves = cast("list[int]", setup["interleave"])
    rows = tuple(_predict(raw, spec, base, cast("list[int]", setup["micro_batch"]), interleaves)
                 for raw in cast("list[dict[str, Any]]", data["rows"]))
    secondary = tuple(_predict(raw, spec, base, [int(raw["micro_batch"])], interleaves)
                      for raw in cast("list[dict[str, Any]]", data.get("ptdp", [])))
    return Validation(spec.name, rows, secondary)


def _predict(raw: dict[str, Any], spec: ChipSpec, base: TrainingConfig, micro_batches: list[int],
             interleaves: list[int]) -> Row:
    """One published row: the fastest (micro-batch, interleave) of the search lists that fits in memory."""
    model = models.get(str(raw["model"]))
    best: tuple[float, int, int, Estimate] | None = None
    for micro in micro_batches:
        for v in interleaves:
            cfg = replace(base, tp=int(raw["tp"]), pp=int(raw["pp"]), micro_batch=micro, interleave=v,
                          global_batch=int(raw["batch"]))
            try:
                est = estimate(model, spec, int(raw["gpus"]), cfg)
            except ClusterConfigError:
                continue  # e.g. interleave not dividing the stage's layers: not a setup the authors could run
            tflops = paper_flops(model, int(raw["batch"])) / (est.step_time_s * int(raw["gpus"])) / 1e12
            if est.fits and (best is None or tflops > best[0]):
                best = (tflops, micro, v, est)
    if best is None:
        raise ClusterConfigError([f"no micro-batch/interleave in the search lists fits {raw['model']} in "
                                  f"{spec.name} memory"], where=str(TABLE_FILE))
    tflops, micro, v, est = best
    return Row(model.name, float(raw["params_b"]), int(raw["tp"]), int(raw["pp"]), int(raw["gpus"]),
               int(raw["batch"]), float(raw["tflops"]), tflops, micro, v, est)
