"""Cluster-scale training estimates: model zoo, parallel training setups, memory per chip and step time.

    >>> from trnsim import hw
    >>> from trnsim.cluster import TrainingConfig, estimate, models
    >>> est = estimate(models.get("llama3-70b"), hw.get("trn3"), 1024, TrainingConfig(tp=8, pp=4))
    >>> est.plan.dp, est.fits, 0 < est.mfu < 1
    (32, True, True)

Modules, lowest first: ``models`` (shapes, parameter counts; ``zoo.toml``), ``ops`` (the ops of a layer and
their FLOPs), ``config`` (options → a checked :class:`Plan`), ``memory`` (bytes per chip), ``efficiency`` (the
per-op roofline and its constants), ``comm`` (communicators on ``trnsim.fabric``), ``estimate`` (step time,
MFU/HFU), ``validate`` (Megatron-LM Table 1 on the ``a100`` preset).
"""

from __future__ import annotations

from trnsim.cluster import models
from trnsim.cluster.config import (
    FINETUNE,
    OPTIMIZERS,
    PRECISIONS,
    RECOMPUTE,
    ClusterConfigError,
    Plan,
    TrainingConfig,
    resolve,
)
from trnsim.cluster.efficiency import DEFAULT_MAMF, MAMF, MEMORY_EFFICIENCY, Roofline
from trnsim.cluster.estimate import BREAKDOWN, Estimate, estimate, estimate_plan
from trnsim.cluster.memory import RESERVED_FRACTION, MemoryBreakdown, memory
from trnsim.cluster.models import ModelError, ModelSpec, ParamCount
from trnsim.cluster.ops import forward_flops_per_token, six_nt_flops_per_token

__all__ = [
    "BREAKDOWN",
    "DEFAULT_MAMF",
    "FINETUNE",
    "MAMF",
    "MEMORY_EFFICIENCY",
    "OPTIMIZERS",
    "PRECISIONS",
    "RECOMPUTE",
    "RESERVED_FRACTION",
    "ClusterConfigError",
    "Estimate",
    "MemoryBreakdown",
    "ModelError",
    "ModelSpec",
    "ParamCount",
    "Plan",
    "Roofline",
    "TrainingConfig",
    "estimate",
    "estimate_plan",
    "forward_flops_per_token",
    "memory",
    "models",
    "resolve",
    "six_nt_flops_per_token",
]
