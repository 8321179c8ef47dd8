"""Figures of cluster results, rendered headless (matplotlib's Agg backend) to PNG bytes.

- :func:`cost_vs_time`: for each target, cost against effective time to train over chip counts around the
  chosen one (``tco.sweep`` on ``tco.chip_grid``), the chosen setup marked;
- :func:`step_breakdown`: where one step's time goes (``Estimate.breakdown``);
- :func:`claims_chart`: each claim's computed value against what it needs to hold.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # NOTE: before pyplot's first import, so no display is ever needed

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from trnsim.cluster.claims import ClaimsReport
from trnsim.cluster.config import TrainingConfig
from trnsim.cluster.estimate import Estimate
from trnsim.cluster.models import ModelSpec
from trnsim.cluster.tco import Assumptions, TcoRow, chip_grid, sweep
from trnsim.fileio import write_atomic
from trnsim.hw import get as get_spec

SPAN = 4  # the sweep covers chips / SPAN ... chips × SPAN


def png_bytes(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def write_png(fig: Figure, path: Path) -> None:
    write_atomic(path, png_bytes(fig))


def cost_vs_time(model: ModelSpec, rows: Sequence[TcoRow], a: Assumptions,
                 config: TrainingConfig | None = None) -> Figure:
    """Cost (purchase option of ``a``) against effective days to train, one line per target."""
    fig, ax = plt.subplots(figsize=(8, 5))
    unpriced: list[str] = []
    for row in rows:
        spec = get_spec(row.target)
        grid = [c for c in chip_grid(spec.topology.chips_per_node, row.chips * SPAN) if c * SPAN >= row.chips]
        pts = [(r.effective_s / 86400, r.cost.usd / 1e6) for r in sweep(model, spec, row.tokens, grid,
                                                                         config, a)
               if r.cost.usd is not None and r.effective_s < float("inf")]
        if not pts or row.cost.usd is None:
            unpriced.append(row.target)
            continue
        line = ax.plot(*zip(*pts, strict=True), marker=".", label=f"{row.target}")[0]
        ax.plot([row.effective_s / 86400], [row.cost.usd / 1e6], marker="o", markersize=10,
                color=line.get_color(), markerfacecolor="none")
    ax.set_xscale("log")
    ax.set_xlabel("effective time to train (days, failures included)")
    ax.set_ylabel(f"cost, {a.purchase} (million USD)")
    title = f"{model.name}: cost vs time to train ({rows[0].tokens:.3g} tokens); circles: chosen setups"
    ax.set_title(title + (f"\nno price: {', '.join(unpriced)}" if unpriced else ""), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    if len(ax.get_lines()):
        ax.legend(fontsize=8)
    return fig


def step_breakdown(est: Estimate) -> Figure:
    """One horizontal bar per part of the step (milliseconds)."""
    parts = [(k.replace("_", " "), v * 1e3) for k, v in est.breakdown.items() if v > 0]
    fig, ax = plt.subplots(figsize=(7, 0.4 * len(parts) + 1.2))
    ax.barh([p for p, _ in parts], [v for _, v in parts], color="#4c72b0")
    ax.invert_yaxis()
    ax.set_xlabel("ms per step (exposed)")
    ax.set_title(f"{est.model} on {est.plan.chips} × {est.target}: step {est.step_time_s * 1e3:.0f} ms, "
                 f"MFU {est.mfu:.1%}", fontsize=10)
    return fig


def claims_chart(report: ClaimsReport) -> Figure:
    """Computed value over the value needed, per claim (≥ 1 holds)."""
    names = [r.key for r in report.results]
    values = [(r.value / r.threshold) if r.value is not None else 0.0 for r in report.results]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    colors = ["#55a868" if r.holds else "#c44e52" for r in report.results]
    ax.bar(names, values, color=colors)
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_ylabel("computed ÷ needed (≥ 1 holds)")
    ax.set_title(f"the specification's claims on {len(report.workloads)} workloads, {report.chips} chips each",
                 fontsize=10)
    return fig
