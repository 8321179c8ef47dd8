"""Terminal output shared by the subcommands: rich tables (plain when not a TTY) and stable JSON."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from rich.console import Console
from rich.table import Table

from trnsim.config import settings

if TYPE_CHECKING:
    import argparse

    # What each subcommand's `register` receives (argparse keeps the class private and, on Python 3.11,
    # not subscriptable at run time: hence only for the type checker).
    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]  # pyright: ignore[reportPrivateUsage]


def console() -> Console:
    """A console on stdout; colour only on a terminal and when TRNSIM_COLOR allows it."""
    return Console(no_color=not settings.color, highlight=False, soft_wrap=False,
                   width=None if sys.stdout.isatty() else 200)


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], *,
                caption: str | None = None) -> None:
    table = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right", overflow="fold")
    for row in rows:
        table.add_row(*(str(c) for c in row))
    console().print(table)


def print_json(obj: Any) -> None:
    """``obj`` as strict JSON (RFC 8259): a NaN or infinite float is written as ``null``, not ``NaN``."""
    json.dump(_strict(obj), sys.stdout, indent=2, sort_keys=True, allow_nan=False)
    sys.stdout.write("\n")


def _strict(obj: Any) -> Any:
    """``obj`` with non-finite floats as ``None`` and other numbers (numpy scalars) as Python floats."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in cast("dict[Any, Any]", obj).items()}
    if isinstance(obj, list | tuple):
        return [_strict(v) for v in cast("list[Any]", obj)]
    if obj is None or isinstance(obj, str | int):
        return obj
    return _strict(float(obj))


def fmt_float(v: float) -> str:
    """Short, exact-enough rendering of a format value (integers plain, others with 7 significant digits)."""
    if v != v:  # NaN
        return "nan"
    if v in (float("inf"), float("-inf")) or (v == int(v) and abs(v) < 1e7):
        return str(int(v)) if abs(v) != float("inf") else str(v)
    return f"{v:.7g}"
