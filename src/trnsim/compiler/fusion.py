from __future__ import annotations
from typing import Any


def fuse(graph: Any, ctx: Any) -> Any:
    return graph
