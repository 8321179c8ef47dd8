"""``trnsim.compile``: a StableHLO module in, a ``CompiledProgram`` out."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trnsim.compiler.options import CompileOptions
from trnsim.compiler.pipeline import PassRecord, run_pipeline
from trnsim.errors import CompileError, SimError
from trnsim.hw import ChipSpec
from trnsim.ir.graph import Graph
from trnsim.ir.interp import Interpreter
from trnsim.ir.types import TensorType, dtype_of_numpy

if TYPE_CHECKING:
    from trnsim.frontend.importer import Signature

COMPILER_VERSION = "3"   # bumped when the compiled-program format changes (2: interned locations; 3: the graph's
#                          structure as integer tables)


@dataclass
class CompiledProgram:
    """A compiled program: the optimised graph, its lowering (kernels, engines, costs), schedule and memory
    plan. ``run`` executes it on a simulated NeuronCore and returns the outputs; ``last_profile`` holds the
    timed profile of the last run.

    A program loaded from an artifact or the compile cache may hold its graph and plan as functions that
    decode them from the (already verified) artifact: they run on first use of ``graph`` or ``plan``, so a
    cache hit that is only inspected, or run later, does not pay for them up front."""

    graph_source: Graph | Callable[[], Graph]
    target: str
    options: CompileOptions
    source_hash: str
    passes: list[PassRecord] = field(default_factory=list[PassRecord])
    shardings: dict[str, str] = field(default_factory=dict[str, str])
    plan_source: Any = None
    last_profile: Any = None
    cache_hit: bool = False
    cache_key: str = ""
    signature: Signature | None = None  # the entry's declared tuples, when it has any (``__call__``)

    @property
    def graph(self) -> Graph:
        if not isinstance(self.graph_source, Graph):
            self.graph_source = self.graph_source()
        return self.graph_source

    @property
    def plan(self) -> Any:
        """The lowering's ``Plan`` (kernel steps, schedule, memory), or None when the pipeline stopped early."""
        if callable(self.plan_source):
            self.plan_source = self.plan_source()
        return self.plan_source

    @property
    def spec(self) -> ChipSpec:
        from trnsim.hw import registry

        return registry.get(self.target)

    @property
    def input_types(self) -> list[TensorType]:
        return [p.type for p in self.graph.params]

    @property
    def output_types(self) -> list[TensorType]:
        return [v.type for v in self.graph.results]

    def check_inputs(self, args: Sequence[object]) -> list[np.ndarray]:
        types = self.input_types
        if len(args) != len(types):
            raise SimError(f"the program takes {len(types)} inputs, got {len(args)}", where="CompiledProgram.run",
                           hint="pass one array per parameter: " + ", ".join(str(t) for t in types))
        out: list[np.ndarray] = []
        for i, (a, t) in enumerate(zip(args, types, strict=True)):
            arr = np.asarray(a)
            if tuple(arr.shape) != t.shape:
                raise SimError(f"input {i} has shape {tuple(arr.shape)}, the program expects {t}",
                               where="CompiledProgram.run", hint="recompile for the new shape (trnsim.jit does)")
            try:
                got = dtype_of_numpy(arr.dtype).name
            except KeyError:
                got = str(arr.dtype)
            if got != t.dtype:
                raise SimError(f"input {i} has element type {got}, the program expects {t}",
                               where="CompiledProgram.run", hint=f"convert it with .astype({t.np_dtype.name})")
            out.append(arr)
        return out

    def run(self, *args: object, timing: bool = True) -> list[np.ndarray]:
        arrays = self.check_inputs(args)
        interp = Interpreter()
        outputs = interp.run(self.graph, arrays)
        if timing and self.plan is not None:
            from trnsim.compiler.profile import profile_run

            self.last_profile = profile_run(self, interp)
        return outputs

    def __call__(self, *args: object) -> list[Any]:
        """``run`` in the entry function's declared structure: tuple-typed arguments are given, and tuple
        results returned, as (nested) Python tuples; ``run`` takes and returns the flat arrays."""
        if self.signature is None:
            return self.run(*args)
        return self.signature.unflatten_results(self.run(*self.signature.flatten_params(args)))

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the program as a ``.neff`` artifact (``trnsim.load_artifact`` reads it back)."""
        from trnsim.runtime.program import save

        return save(self, path)

    def to_bytes(self) -> bytes:
        from trnsim.runtime.program import to_bytes

        return to_bytes(self)

    def profile(self) -> Any:
        """The static profile: the plan's schedule, control flow counted once."""
        from trnsim.compiler.profile import build_profile

        return build_profile(self)


def compile_graph(graph: Graph, *, target: str = "trn3", options: CompileOptions | None = None,
                  source_hash: str = "", shardings: dict[str, str] | None = None) -> CompiledProgram:
    from trnsim.hw import registry

    spec = registry.get(target)
    options = options or CompileOptions()
    graph, records, plan = run_pipeline(graph, spec, options)
    return CompiledProgram(graph, target, options, source_hash, records, dict(shardings or {}), plan)


def compile(module: object, target: str = "trn3", **options: Any) -> CompiledProgram:
    """Compile a StableHLO module for ``target``: text, a path, portable bytecode, ``jax.jit(f).lower(...)``,
    a ``jax.export.Exported`` or an MLIR module. Options: see ``CompileOptions``."""
    from trnsim.frontend.importer import import_module
    from trnsim.frontend.mlir import describe, parse

    opts = CompileOptions.from_kwargs(options)
    mod, text = parse(module)
    imported = import_module(mod, where=describe(module))
    digest = hashlib.sha256(text.encode()).hexdigest()
    program = compile_graph(imported.graph, target=target, options=opts, source_hash=digest,
                            shardings=imported.shardings)
    program.signature = imported.signature if imported.signature.has_tuples else None
    return program


def compile_for_conformance(text: str, *, where: str, target: str,
                            compare: Callable[[str, np.ndarray, np.ndarray], str | None]) -> list[str]:
    """Compile a conformance file with ``@inputs`` lifted to arguments, run it, apply its checks; the failed
    checks' messages (empty: all passed)."""
    from trnsim.frontend.importer import import_module
    from trnsim.frontend.mlir import parse

    mod, _ = parse(text)
    imported = import_module(mod, where=where, lift="inputs", collect_checks=True)
    if not imported.checks:
        raise CompileError("the file has no check.expect_* custom_call", where=where,
                           hint="conformance files compare a result with expected values")
    graph = imported.graph
    graph.results = [x for c in imported.checks for x in (c.actual, c.expected)]
    args: list[np.ndarray] = []
    if imported.lifted is not None:
        args = Interpreter().run(imported.lifted, [])
    program = compile_graph(graph, target=target)
    outputs = program.run(*args)
    failures: list[str] = []
    for i, check in enumerate(imported.checks):
        message = compare(check.kind, outputs[2 * i], outputs[2 * i + 1])
        if message:
            failures.append(f"{check.where}: {message}")
    return failures
