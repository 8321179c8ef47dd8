"""``trnsim cache``: list, summarise, clear and warm the compile cache (``TRNSIM_CACHE_URL``, or ``--url``).

Each subcommand is one row of ``SUBCOMMANDS`` (help, example, its own arguments, handler); every one gets
``--url`` and ``--json``. ``warm`` (``trnsim.runtime.warm``) pre-compiles programs in worker processes.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from trnsim.cli._output import print_json, print_table
from trnsim.errors import ConfigError
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
    return " ".join(f"{k}={v}" for k, v in sorted(meta.items()) if k not in ("build_s", "key"))


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


def cmd_warm(args: argparse.Namespace) -> int:
    from trnsim.cli.compile import compile_options
    from trnsim.runtime.warm import WarmResult, collect, default_workers, warm

    if args.jobs is not None and args.jobs < 0:
        raise ConfigError(f"--jobs {args.jobs}: must be 0 (one per CPU) or more", where="trnsim cache warm",
                          hint="e.g. --jobs 4, or leave it out for one worker per CPU")
    cache = open_cache(args)
    jobs = collect(args.files, compile_options(args))
    # NOTE: the pool never runs more workers than programs; report the number that actually runs
    workers = max(1, min(args.jobs or default_workers(), len(jobs)))
    start = time.perf_counter()
    with _WarmProgress(len(jobs), enabled=not args.json) as bar:
        results: list[WarmResult] = warm(jobs, target=args.target, url=cache.url, workers=workers,
                                         on_result=bar.advance)
    wall = time.perf_counter() - start
    counts = {s: sum(r.status == s for r in results) for s in ("compiled", "cached", "failed")}
    if args.json:
        print_json({"url": cache.url, "workers": workers, "seconds": wall, **counts,
                    "programs": [asdict(r) for r in results]})
        return 1 if counts["failed"] else 0
    rows = [[r.name, "FAILED" if r.status == "failed" else
             {"compiled": "compiled", "cached": "already cached"}[r.status], f"{r.seconds:.2f} s",
             r.error or (r.key[:16] + "…")] for r in results]
    print_table(f"trnsim cache warm: {len(jobs)} programs for {args.target} into {cache.url}",
                ["program", "result", "time", "key / error"], rows,
                caption=f"{counts['compiled']} compiled, {counts['cached']} already cached, {counts['failed']} failed "
                        f"in {wall:.1f} s on {workers} worker process{'es' if workers > 1 else ''}")
    return 1 if counts["failed"] else 0


class _WarmProgress:
    """A rich progress bar on stderr (programs done of total), or nothing."""

    def __init__(self, total: int, *, enabled: bool) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("warming the compile cache"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), TextColumn("{task.description}"),
                            console=Console(stderr=True), transient=True, disable=not enabled)
        self.task = self.bar.add_task("", total=total)

    def __enter__(self) -> _WarmProgress:
        self.bar.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.bar.stop()

    def advance(self, result: object) -> None:
        name = getattr(result, "name", "")
        self.bar.update(self.task, advance=1, description=f"{name}: {getattr(result, 'status', '')}")


def _warm_arguments(parser: argparse.ArgumentParser) -> None:
    from trnsim.cli.compile import add_compile_options

    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="StableHLO modules (.mlir, .mlirbc) and Python scripts defining trnsim_programs()")
    parser.add_argument("--jobs", "-j", type=int, default=0,
                        help="worker processes (0, the default: one per CPU; never more than one per program)")
    add_compile_options(parser)


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
    "warm": Subcommand("pre-compile modules, or a script's trnsim_programs(), in parallel worker processes",
                       "examples:\n  trnsim cache warm examples/gpt.py --jobs 2\n"
                       "  trnsim cache warm model.mlir other.mlirbc --auto-cast matmul --auto-cast-type mxfp6\n"
                       "  trnsim cache warm *.mlir --url file:///shared/trnsim-cache\n\n"
                       "A script defines trnsim_programs() returning a list of (name, module) or (name, module,\n"
                       "options): a module is StableHLO text or bytecode, jax.jit(f).lower(...) or an Exported;\n"
                       "options are trnsim.compile keywords (those given here override them). Each program is\n"
                       "compiled once into the cache; one already there is counted as already cached.",
                       cmd_warm, _warm_arguments),
}


def register(subparsers: SubParsers) -> None:
    """Add ``cache`` and its subcommands to the top-level parser."""
    parser = subparsers.add_parser(
        "cache", help="the compile cache: " + ", ".join(SUBCOMMANDS),
        description="The compile cache, at TRNSIM_CACHE_URL (any fsspec URL: a folder, file://, memory://, "
                    "s3:// with s3fs) or --url.",
        epilog="examples:\n  trnsim cache ls\n  trnsim cache stat --json\n  trnsim cache clear --url "
               "file:///tmp/trnsim-cache\n  trnsim cache warm examples/gpt.py --jobs 2",
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
