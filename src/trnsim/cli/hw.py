"""``trnsim hw``: list, show and compare hardware presets.

Text output is ``rich`` tables (plain when stdout is not a terminal); ``--json`` prints machine-readable
JSON with stable keys and quantities in SI base units (bytes, bytes/s, Hz, s, W, FLOP/s). Anywhere a
preset name is accepted, a path to a ``.toml`` preset is too (positionally or with ``--target``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from trnsim import hw
from trnsim.cli._output import console, print_json
from trnsim.config import settings
from trnsim.hw.schema import flatten
from trnsim.hw.sheet import sheet, sheet_json
from trnsim.hw.units import format_quantity

if TYPE_CHECKING:
    from trnsim.cli._output import SubParsers

LIST_EPILOG = """example:
  trnsim hw list
  trnsim hw list --json | python -m json.tool
"""
SHOW_EPILOG = """examples:
  trnsim hw show trn3
  trnsim hw show --target my_chip.toml
  trnsim hw show h100 --json
"""
COMPARE_EPILOG = """examples:
  trnsim hw compare trn3 trn2 h200 b200
  trnsim hw compare trn3 --target my_chip.toml
  trnsim hw compare trn3 trn3-aws --json
"""


def register(subparsers: SubParsers) -> None:
    """Add ``hw`` and its subcommands to the top-level parser."""
    parser = subparsers.add_parser(
        "hw", help="hardware presets: list, show, compare",
        description="Hardware specifications: the presets trnsim simulates and compares against.",
        epilog="examples:\n  trnsim hw list\n  trnsim hw show trn3\n  trnsim hw compare trn3 trn2 h200 b200",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(handler=_help_of(parser))
    sub = parser.add_subparsers(dest="hw_command", metavar="SUBCOMMAND")

    p = _sub(sub, "list", "list the presets (name, designer, summary)", LIST_EPILOG)
    p.set_defaults(handler=cmd_list)

    p = _sub(sub, "show", "every field of one preset, grouped, with units", SHOW_EPILOG)
    p.add_argument("name", nargs="?", help="preset name or path to a .toml file (default: TRNSIM_TARGET)")
    p.add_argument("--target", help="path to a .toml preset (same as giving it as NAME)")
    p.set_defaults(handler=cmd_show)

    p = _sub(sub, "compare", "side-by-side spec sheet of several presets", COMPARE_EPILOG)
    p.add_argument("names", nargs="*", metavar="NAME", help="preset names or .toml paths")
    p.add_argument("--target", action="append", default=[], help="a .toml preset to add (repeatable)")
    p.set_defaults(handler=cmd_compare)


def _sub(sub: SubParsers, name: str, help_text: str, epilog: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text, description=help_text[0].upper() + help_text[1:] + ".",
                       epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print JSON (SI base units) instead of a table")
    return p


def _help_of(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """`trnsim hw` alone prints its help, like `trnsim` alone."""
    def handler(_args: argparse.Namespace) -> int:
        parser.print_help()
        return 0
    return handler


def _row(table: Table, *cells: str) -> None:
    # Text, not str: preset values and keys contain brackets ("links[0]") that rich would read as markup.
    table.add_row(*(Text(c) for c in cells))


def cmd_list(args: argparse.Namespace) -> int:
    default = str(settings.target)
    entries = [(name, hw.get(name)) for name in hw.names()]
    if args.json:
        print_json([{"name": n, "designer": s.meta.designer, "summary": s.meta.summary, "source": s.source,
                      "default": n == default} for n, s in entries])
        return 0
    table = Table(title="trnsim hardware presets", title_justify="left")
    for col in ("name", "designer", "summary"):
        table.add_column(col, overflow="fold")
    for name, spec in entries:
        _row(table, name + (" (default)" if name == default else ""), spec.meta.designer, spec.meta.summary)
    console().print(table)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    spec = hw.get(args.target or args.name)
    if args.json:
        print_json(spec.to_dict())
        return 0
    table = Table(title=f"{spec.name}: {spec.meta.full_name}  ({spec.source})", title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    table.add_column("meaning", style="dim", overflow="fold")
    group = None
    for key, value, meaning in flatten(spec):
        head = _group(key)
        if head != group:
            if group is not None:
                table.add_section()
            _row(table, f"[{head}]", "", "")
            group = head
        _row(table, "  " + key.removeprefix(head).lstrip("."), value, meaning)
    out = console()
    out.print(table)
    out.print(_peak_table(spec))
    return 0


def _group(key: str) -> str:
    """Section a dotted key belongs to: ``core.tensor.rate`` → ``core.tensor``, ``links[0].kind`` →
    ``links[0]``, ``cores`` → ``chip``."""
    parts = key.split(".")
    if len(parts) == 1:
        return "chip"
    depth = 2 if parts[0] in ("core", "topology") and len(parts) > 2 else 1
    return ".".join(parts[:depth])


def _peak_table(spec: hw.ChipSpec) -> Table:
    how = "derived: cores × rows × cols × 2 × clock × rate" if spec.derived else "datasheet"
    table = Table(title=f"peak FLOP/s per chip ({how})", title_justify="left")
    for col in ("dtype", "dense", "sparse", "documented"):
        table.add_column(col, justify="left" if col == "dtype" else "right")
    documented = {(d.dtype, d.sparse): d.value for d in spec.documented}
    for dtype in spec.dtypes:
        dense = spec.peak_flops(dtype)
        sparse = spec.peak_flops(dtype, sparse=True)
        docs = [f"{'sparse ' if sp else ''}{format_quantity(v, 'FLOP/s', unit='TFLOP/s')}"
                for (d, sp), v in documented.items() if d == dtype]
        _row(table, dtype, format_quantity(dense, "FLOP/s", unit="TFLOP/s"),
             format_quantity(sparse, "FLOP/s", unit="TFLOP/s") if sparse > dense else "—", ", ".join(docs))
    return table


def cmd_compare(args: argparse.Namespace) -> int:
    specs = [hw.get(name) for name in [*args.names, *args.target]]
    if not specs:
        specs = [hw.get()]
    if args.json:
        print_json(sheet_json(specs))
        return 0
    table = Table(title="spec sheet (per chip; peaks dense unless marked sparse)", title_justify="left")
    table.add_column("", style="bold")
    for spec in specs:
        table.add_column(spec.name, overflow="fold", max_width=40)
    for row in sheet(specs):
        _row(table, row.label, *(row.text(spec) for spec in specs))
    console().print(table)
    return 0
