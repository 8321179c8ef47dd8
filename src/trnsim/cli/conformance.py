"""``trnsim conformance`` (also ``python -m trnsim.conformance``): run StableHLO conformance files through
compile + simulate, print a table by op family, list each failure, exit 1 on any failure.

A failure is an in-scope file (f32, bf16, f16, i1, i8–i32, ui8–ui32) that does not pass, or an out-of-scope
file that neither passes nor raises ``UnsupportedError``. ``--ops`` lists the ops trnsim evaluates and the ones
it rejects, with what to use instead.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from trnsim.cli._output import print_json, print_table
from trnsim.conformance import FileResult, collect, run_file, summarize
from trnsim.errors import ConfigError

if TYPE_CHECKING:
    from trnsim.cli._output import SubParsers

DESCRIPTION = ("Run StableHLO conformance files (JAX testdata form: @inputs, @expected, a check.expect_* "
               "custom_call) through trnsim's compiler and simulator and apply each file's own check. Prints "
               "passed / unsupported / failed by op family and exits 1 on any failure.")
EPILOG = """examples:
  trnsim conformance ../shared/conformance/stablehlo --jobs 8
  trnsim conformance add_float32_20_20_float32_20_20.mlir -v
  trnsim conformance ../shared/conformance/stablehlo --json > results.json
  trnsim conformance --ops
"""
PROGRESS_MIN_FILES = 50   # fewer files finish before a bar is worth drawing


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", type=Path, metavar="PATH", help=".mlir files or folders (searched recursively)")
    p.add_argument("--target", default="trn3", help="hardware preset to compile for (default trn3)")
    p.add_argument("--jobs", "-j", type=int, default=1, help="worker processes (default 1; 0 = one per CPU)")
    p.add_argument("--json", action="store_true", help="print every file's result and the summary as JSON")
    p.add_argument("--ops", action="store_true", help="list the supported ops and the rejected ones with hints")
    p.add_argument("-v", "--verbose", action="store_true", help="also list unsupported files with the reason")
    p.set_defaults(handler=cmd_conformance)


def register(subparsers: SubParsers) -> None:
    """Add ``conformance`` to the top-level parser."""
    p = subparsers.add_parser("conformance", help="run StableHLO conformance files and tabulate by op family",
                              description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m trnsim.conformance``."""
    p = argparse.ArgumentParser(prog="python -m trnsim.conformance", description=DESCRIPTION,
                                epilog=EPILOG.replace("trnsim conformance", "python -m trnsim.conformance"),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    return p


def cmd_conformance(args: argparse.Namespace) -> int:
    if args.ops:
        return _list_ops(args.json)
    if not args.paths:
        raise ConfigError("no files or folders given", where="trnsim conformance",
                          hint="pass .mlir files or folders, e.g. ../shared/conformance/stablehlo, or --ops")
    for p in args.paths:
        if not p.exists():
            raise ConfigError(f"{p} does not exist", where="trnsim conformance", hint="check the path")
    files = list(collect(args.paths))
    if not files:
        raise ConfigError("no .mlir files under the given paths", where="trnsim conformance",
                          hint="conformance files end in .mlir")
    jobs = args.jobs if args.jobs > 0 else (os.cpu_count() or 1)
    show = not args.json and sys.stderr.isatty() and len(files) >= PROGRESS_MIN_FILES
    results = run_files(files, target=args.target, jobs=jobs, progress=show)
    failed = [r for r in results if not r.ok]
    if args.json:
        print_json({"results": [r.to_json() for r in results],
                    "summary": [dict(zip(("family", "passed", "unsupported", "xfail", "failed"), row, strict=True))
                                for row in summarize(results)],
                    "failed": len(failed)})
        return 1 if failed else 0
    print_summary(results)
    # NOTE: plain print, not rich: one line per file however long, so it can be grepped
    for r in results:
        if not r.ok:
            print(f"FAILED: {r.path}: {r.message}")
        elif args.verbose and r.status != "passed":
            print(f"{'expected failure' if r.status == 'xfail' else 'unsupported'}: {r.path}: {r.message}")
    passed = sum(r.status == "passed" for r in results)
    unsupported = sum(r.status == "unsupported" and r.ok for r in results)
    print(f"{len(results)} files: {passed} passed, {unsupported} unsupported (out of scope), "
          f"{sum(r.status == 'xfail' for r in results)} expected failures, {len(failed)} failed")
    return 1 if failed else 0


def print_summary(results: Sequence[FileResult]) -> None:
    rows = summarize(results)
    show_xfail = any(row[3] for row in rows)
    table: list[list[object]] = []
    for fam, passed, unsupported, xfail, failed in rows:
        table.append([fam, passed, unsupported, *([xfail] if show_xfail else []), failed])
    totals = [sum(int(row[i]) for row in rows) for i in range(1, 5)]
    table.append(["total", totals[0], totals[1], *([totals[2]] if show_xfail else []), totals[3]])
    print_table("StableHLO conformance by op family", ["family", "passed", "unsupported",
                                                         *(["xfail"] if show_xfail else []), "failed"], table)


def run_files(files: Sequence[Path], *, target: str = "trn3", jobs: int = 1, progress: bool = False
              ) -> list[FileResult]:
    """Every file's result, in the order given; in a pool of ``jobs`` forked processes when jobs > 1."""
    bar = _Progress(len(files), progress)
    try:
        return [bar.advance(r) for r in _results(files, target, jobs)]
    finally:
        bar.close()


def _results(files: Sequence[Path], target: str, jobs: int) -> Iterator[FileResult]:
    if jobs > 1 and len(files) > 1:
        # NOTE: spawn, not fork: a process that has parsed MLIR holds LLVM's thread pool, and a forked child
        # deadlocks in its next parse (seen with jaxlib 0.10.2)
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            chunk = max(1, min(16, len(files) // (4 * jobs)))
            yield from pool.map(_run_one, files, [target] * len(files), chunksize=chunk)
        return
    for f in files:
        yield run_file(f, target)


def _run_one(path: Path, target: str) -> FileResult:
    return run_file(path, target)


class _Progress:
    """A rich progress bar on stderr, or nothing."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.bar = None
        if enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("conformance"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                console=Console(stderr=True), transient=True)
            self.task = self.bar.add_task("files", total=total)
            self.bar.start()

    def advance(self, r: FileResult) -> FileResult:
        if self.bar is not None:
            self.bar.advance(self.task, 1)
        return r

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _list_ops(as_json: bool) -> int:
    from trnsim.ir.rules import REJECTED, SEMANTICS
    from trnsim.ir.semantics import load_all

    load_all()
    supported = sorted(SEMANTICS.values(), key=lambda s: s.name)
    if as_json:
        print_json({"supported": {s.name: {"kind": s.kind, "doc": s.doc} for s in supported},
                    "rejected": dict(sorted(REJECTED.items()))})
        return 0
    first_line: Callable[[str], str] = lambda doc: doc.splitlines()[0] if doc else ""  # noqa: E731
    print_table(f"Supported StableHLO ops ({len(supported)})", ["op", "kind", "semantics"],
                [[s.name, s.kind, first_line(s.doc)] for s in supported])
    print_table(f"Rejected ops ({len(REJECTED)}), with what to do instead", ["op", "hint"],
                sorted(REJECTED.items()))
    return 0
