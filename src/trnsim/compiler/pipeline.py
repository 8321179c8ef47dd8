"""The pass pipeline: a short, ordered list of named passes (STYLE.md rule 3).

Each pass takes the graph and a ``PassContext`` and returns the new graph; its name appears in dumps
(``TRNSIM_DUMP_IR=dir`` writes ``NN-name.txt`` after each pass), timings and errors.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trnsim.compiler.options import CompileOptions
from trnsim.hw import ChipSpec
from trnsim.ir.graph import Graph


@dataclass
class PassContext:
    spec: ChipSpec
    options: CompileOptions
    stats: dict[str, Any] = field(default_factory=dict[str, Any])
    plan: Any = None        # set by `lower`, refined by `schedule` and `allocate`


@dataclass(frozen=True)
class PassRecord:
    name: str
    seconds: float
    nodes: int
    stats: dict[str, Any]


Pass = Callable[[Graph, PassContext], Graph]


def passes() -> list[tuple[str, Pass]]:
    from trnsim.compiler import passes as p

    return [
        ("canonicalize", p.canonicalize),
        ("autocast", p.autocast),
        ("sparsity", p.sparsify),
        ("fuse", p.fuse),
        ("lower", p.lower),
        ("schedule", p.schedule),
        ("allocate", p.allocate),
    ]


def run_pipeline(graph: Graph, spec: ChipSpec, options: CompileOptions,
                 dump_dir: str | None = None) -> tuple[Graph, list[PassRecord], Any]:
    from trnsim.config import settings

    ctx = PassContext(spec, options)
    dump = dump_dir if dump_dir is not None else settings.dump_ir
    records: list[PassRecord] = []
    if dump:
        _dump(dump, 0, "input", graph, ctx)
    for index, (name, fn) in enumerate(passes(), start=1):
        ctx.stats = {}
        t0 = time.perf_counter()
        graph = fn(graph, ctx)
        records.append(PassRecord(name, time.perf_counter() - t0, sum(1 for _ in graph.walk()), dict(ctx.stats)))
        if dump:
            _dump(dump, index, name, graph, ctx)
    return graph, records, ctx.plan


def _dump(folder: str, index: int, name: str, graph: Graph, ctx: PassContext) -> None:
    from trnsim.errors import ConfigError

    path = Path(folder)
    text = f"// after pass {index}: {name}\n// stats: {ctx.stats}\n{graph}\n"
    if ctx.plan is not None:
        text += "\n" + ctx.plan.describe() + "\n"
    try:
        path.mkdir(parents=True, exist_ok=True)
        (path / f"{index:02d}-{name}.txt").write_text(text)
    except OSError as exc:
        what = "it is not a folder" if isinstance(exc, FileExistsError | NotADirectoryError) else \
            (exc.strerror or str(exc))
        raise ConfigError(f"cannot write the IR dump after pass {name!r}: {what}", where=f"TRNSIM_DUMP_IR={folder}",
                          hint="give --dump-ir (or TRNSIM_DUMP_IR) a writable folder, or unset it") from None
