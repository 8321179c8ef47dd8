"""``trnsim cache``: list, summarise and clear the compile cache (``TRNSIM_CACHE_URL``, or ``--url``).

Each subcommand is one row of ``SUBCOMMANDS`` (help, example, its own arguments, handler); every one gets
``--url`` and ``--json``. A new one (``warm``, from the compiler) is a function pair and a row.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from trnsim.cli._output import print_json, print_table
from trnsim.hw.units import format_quantity
from trnsim.runtime.cache import CacheEntry, CompileCache

if TYPE_CHECKING:
    from trnsim.cli._output import SubParsers


@dataclass(frozen=True)
class Subcommand:
    """One ``trnsim cache`` subcommand."""

    help: str
    epilog: str
    handler: Callable[[argparse.Namespace], int]
    arguments: Callable[[argparse.ArgumentParser], None] = lambda _parser: None


def open_cache(args: argparse.Namespace) -> CompileCache:
    """The cache the command line names: ``--url``, else the ``TRNSIM_CACHE_URL`` setting."""
    return CompileCache(args.url)


def _size(n: float) -> str:
    return format_quantity(n, "bytes", digits=3)


def _age(mtime: float | None, now: float) -> str:
    if mtime is None:
        return "-"
    s = max(0.0, now - mtime)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:.1f} {unit} ago"
    return f"{s:.0f} s ago"


def _describe(meta: dict[str, object]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(meta.items()) if k != "build_s")


def cmd_ls(args: argparse.Namespace) -> int:
    cache = open_cache(args)
    entries = sorted(cache.entries(), key=lambda e: (-e.mtime, e.key))
    if args.json:
        print_json([_entry_json(e) for e in entries])
        return 0
    now = time.time()
    rows = [[e.key if args.full else e.key[:16] + "…", _size(e.size), _age(e.mtime, now),
             f"{e.meta['build_s']:.3g} s" if isinstance(e.meta.get("build_s"), int | float) else "-",
             f"CORRUPT: {e.problem}" if e.problem else _describe(e.meta)] for e in entries]
    total = sum(e.size for e in entries)
    print_table(f"compile cache {cache.url}", ["key", "size", "written", "build time", "about"], rows,
                caption=f"{len(entries)} entries, {_size(total)}")
    return 0


def _entry_json(e: CacheEntry) -> dict[str, object]:
    return asdict(e)


def cmd_stat(args: argparse.Namespace) -> int:
    cache = open_cache(args)
    summary = cache.stat()
    if args.json:
        print_json(asdict(summary))
        return 0
    now = time.time()
    rows = [["url", summary.url], ["entries", summary.entries], ["size", _size(summary.bytes)],
            ["oldest", _age(summary.oldest, now)], ["newest", _age(summary.newest, now)],
            ["corrupt", summary.corrupt]]
    print_table("compile cache", ["", "value"], rows,
                caption="corrupt entries are rebuilt when next used" if summary.corrupt else None)
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    cache = open_cache(args)
    summary = cache.stat()
    removed = cache.clear()
    if args.json:
        print_json({"url": cache.url, "removed": removed, "bytes": summary.bytes})
    else:
        print(f"removed {removed} entries ({_size(summary.bytes)}) from {cache.url}")
    return 0


def _ls_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--full", action="store_true", help="show whole keys (64 hex digits)")


SUBCOMMANDS: dict[str, Subcommand] = {
    "ls": Subcommand("list the entries, newest first (key, size, age, build time, metadata)",
                     "examples:\n  trnsim cache ls\n  trnsim cache ls --url memory://scratch --json",
                     cmd_ls, _ls_arguments),
    "stat": Subcommand("entry count, total size, oldest and newest entry",
                       "example:\n  trnsim cache stat --url file:///shared/trnsim-cache", cmd_stat),
    "clear": Subcommand("delete every entry (programs are recompiled when next needed)",
                        "example:\n  trnsim cache clear", cmd_clear),
}


def register(subparsers: SubParsers) -> None:
    """Add ``cache`` and its subcommands to the top-level parser."""
    parser = subparsers.add_parser(
        "cache", help="the compile cache: " + ", ".join(SUBCOMMANDS),
        description="The compile cache, at TRNSIM_CACHE_URL (any fsspec URL: a folder, file://, memory://, "
                    "s3:// with s3fs) or --url.",
        epilog="examples:\n  trnsim cache ls\n  trnsim cache stat --json\n  trnsim cache clear --url "
               "file:///tmp/trnsim-cache",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(handler=_help_of(parser))
    sub = parser.add_subparsers(dest="cache_command", metavar="SUBCOMMAND")
    for name, spec in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=spec.help, description=spec.help[0].upper() + spec.help[1:] + ".",
                           epilog=spec.epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("--url", help="cache location (default: TRNSIM_CACHE_URL)")
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")
        spec.arguments(p)
        p.set_defaults(handler=spec.handler)


def _help_of(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    def handler(_args: argparse.Namespace) -> int:
        parser.print_help()
        return 0
    return handler
