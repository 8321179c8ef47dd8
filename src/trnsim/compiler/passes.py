"""The passes of the pipeline, in order. Each is ``(graph, ctx) -> graph``."""

from __future__ import annotations

from trnsim.compiler.autocast import autocast, sparsify
from trnsim.compiler.canonicalize import canonicalize
from trnsim.compiler.fusion import fuse
from trnsim.compiler.lowering import allocate, lower, schedule

__all__ = ["allocate", "autocast", "canonicalize", "fuse", "lower", "schedule", "sparsify"]
