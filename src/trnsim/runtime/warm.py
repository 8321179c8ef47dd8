"""Pre-compiling programs into the compile cache in parallel worker processes (``trnsim cache warm``), as
Neuron's parallel compile does before a job starts, so that no worker of the job compiles.

What is compiled (``collect``):

- a ``.mlir`` / ``.mlirbc`` / ``.bc`` file: that module;
- a ``.py`` script: the programs its ``trnsim_programs()`` returns, a list of ``(name, module)`` or
  ``(name, module, options)``, where a module is StableHLO text or bytecode, a ``jax.stages.Lowered`` or a
  ``jax.export.Exported``, and ``options`` are ``trnsim.compile`` keywords for that program. The script is
  imported (its ``if __name__ == "__main__":`` block does not run) in this process only; workers receive the
  module text. A ``Lowered`` is sent as ``as_text()``, which has the same cache key as the ``Lowered`` itself,
  so ``trnsim.compile(lowered)`` and ``trnsim.jit`` find what was warmed.

Each program is compiled by ``trnsim.compile`` through the cache at ``url``; a program already there is only
loaded ("cached"). Workers are spawned (never forked: the parent may have started JAX's threads). A failing
program is reported with its error; the others carry on.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from trnsim.errors import CompileError, TrnsimError

MODULE_SUFFIXES = (".mlir", ".mlirbc", ".bc")
ENTRY_POINT = "trnsim_programs"

Status = Literal["compiled", "cached", "failed"]


@dataclass(frozen=True)
class WarmJob:
    """One program to compile: a display name, the module (text, bytecode, or a file path) and options."""

    name: str
    module: str | bytes
    options: dict[str, Any] = field(default_factory=dict[str, Any])


@dataclass(frozen=True)
class WarmResult:
    name: str
    status: Status
    seconds: float
    key: str = ""
    error: str = ""


def collect(paths: Sequence[str | Path], options: dict[str, Any] | None = None) -> list[WarmJob]:
    """The programs named by ``paths`` (module files and scripts), with ``options`` over each program's own."""
    jobs: list[WarmJob] = []
    for raw in paths:
        path = Path(raw)
        if not path.is_file():
            raise CompileError("no such file", where=str(path),
                               hint="give StableHLO modules (.mlir, .mlirbc) or Python scripts defining "
                                    f"{ENTRY_POINT}()")
        if path.suffix == ".py":
            jobs += [WarmJob(name, module, own | dict(options or {})) for name, module, own in script_programs(path)]
        elif path.suffix in MODULE_SUFFIXES:
            jobs.append(WarmJob(str(path), str(path), dict(options or {})))
        else:
            raise CompileError(f"cannot warm a {path.suffix or 'suffix-less'} file", where=str(path),
                               hint="give StableHLO modules (.mlir, .mlirbc) or Python scripts defining "
                                    f"{ENTRY_POINT}()")
    return jobs


def script_programs(path: Path) -> list[tuple[str, str | bytes, dict[str, Any]]]:
    """``(name, module text or bytecode, options)`` for each program of the script's ``trnsim_programs()``."""
    where = str(path)
    spec = importlib.util.spec_from_file_location(f"_trnsim_warm_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise CompileError("cannot import the script", where=where)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    entry: Callable[[], Any] | None = getattr(mod, ENTRY_POINT, None)
    if not callable(entry):
        raise CompileError(f"the script defines no {ENTRY_POINT}()", where=where,
                           hint=f"define `def {ENTRY_POINT}():` returning a list of (name, module) or "
                                "(name, module, options), a module being StableHLO text or jax.jit(f).lower(...)")
    out: list[tuple[str, str | bytes, dict[str, Any]]] = []
    items = entry()
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
        raise CompileError(f"{ENTRY_POINT}() returned a {type(items).__name__}, not a list of programs",
                           where=where, hint="return a list of (name, module) or (name, module, options)")
    for i, item in enumerate(cast("Iterable[Any]", items)):
        if not isinstance(item, tuple | list) or len(item) not in (2, 3):
            raise CompileError(f"{ENTRY_POINT}() item {i} is not (name, module) or (name, module, options)",
                               where=where)
        entry_item: Sequence[Any] = item
        name, module = str(entry_item[0]), module_source(entry_item[1], f"{where}: {entry_item[0]}")
        if len(entry_item) == 3 and (not isinstance(entry_item[2], Mapping) or
                                     not all(isinstance(k, str) for k in cast("Mapping[Any, Any]", entry_item[2]))):
            raise CompileError(f"{ENTRY_POINT}() item {i} ({name}): its options are a "
                               f"{type(entry_item[2]).__name__}, not a dict with str keys", where=where,
                               hint="give options as a dict of trnsim.compile keywords, e.g. {'sparsity': '2:4'}")
        options: dict[str, Any] = dict(entry_item[2]) if len(entry_item) == 3 else {}
        out.append((f"{path.name}:{name}", module, options))
    return out


def module_source(module: object, where: str) -> str | bytes:
    """Text or bytecode that ``trnsim.compile`` accepts and keys the same as ``module`` itself."""
    if isinstance(module, str | bytes):
        return module
    if hasattr(module, "compiler_ir") and hasattr(module, "as_text"):   # jax.stages.Lowered
        from trnsim.frontend.mlir import mlir_module, stripped_bytecode

        return stripped_bytecode(mlir_module(module))
    if hasattr(module, "mlir_module_serialized"):                       # jax.export.Exported
        return bytes(module.mlir_module_serialized)  # pyright: ignore[reportAttributeAccessIssue]
    raise CompileError(f"cannot warm a {type(module).__name__}", where=where,
                       hint="return StableHLO text or bytecode, jax.jit(f).lower(...) or a jax.export.Exported")


def compile_one(job: WarmJob, target: str, url: str | None) -> WarmResult:
    """Compile (or find) one program in the cache at ``url`` (None: TRNSIM_CACHE_URL)."""
    from trnsim.runtime.program import compile as compile_cached

    start = time.perf_counter()
    try:
        program = compile_cached(job.module, target, cache=url, **job.options)
    except TrnsimError as exc:
        return WarmResult(job.name, "failed", time.perf_counter() - start, error=str(exc))
    return WarmResult(job.name, "cached" if program.cache_hit else "compiled", time.perf_counter() - start,
                      program.cache_key)


def warm(jobs: Sequence[WarmJob], *, target: str = "trn3", url: str | None = None, workers: int = 1,
         on_result: Callable[[WarmResult], None] | None = None) -> list[WarmResult]:
    """Compile every job into the cache, ``workers`` at a time (1: in this process); results in job order.
    ``on_result`` is called as each finishes (for a progress bar)."""
    done: dict[int, WarmResult] = {}
    for index, result in _results(jobs, target, url, workers):
        done[index] = result
        if on_result is not None:
            on_result(result)
    return [done[i] for i in range(len(jobs))]


def _results(jobs: Sequence[WarmJob], target: str, url: str | None, workers: int
             ) -> Iterator[tuple[int, WarmResult]]:
    if workers <= 1 or len(jobs) <= 1:
        for i, job in enumerate(jobs):
            yield i, compile_one(job, target, url)
        return
    # NOTE: spawn, not fork: the parent may already run JAX (and its threads) after importing a script
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx) as pool:
        futures: dict[Future[WarmResult], int] = {pool.submit(compile_one, job, target, url): i
                                                  for i, job in enumerate(jobs)}
        for future in as_completed(futures):
            yield futures[future], future.result()


def default_workers() -> int:
    """One worker per CPU this process may use."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)


__all__ = ["WarmJob", "WarmResult", "collect", "compile_one", "default_workers", "script_programs", "warm"]
