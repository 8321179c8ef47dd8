from __future__ import annotations
from typing import Any


def autocast(graph: Any, ctx: Any) -> Any:
    return graph


def sparsify(graph: Any, ctx: Any) -> Any:
    return graph
