"""Compiled programs as artifacts: save, load, bytes for the compile cache, and cached compilation.

An artifact holds, beside the header: metadata (inputs and outputs with shapes and dtypes, target, options,
compiler and trnsim versions, the source hash, shardings, per-step source locations, instruction counts
per engine, the estimated time), and four sections: the optimised graph as ``program.json`` (op names,
locations, types and attributes, each listed once) and ``program.bin`` (its structure as integer tables),
``constants.bin`` (its arrays) and ``plan.json`` (the lowered, scheduled kernel steps — the instruction
stream at kernel granularity). Loading re-creates the ``CompiledProgram`` without recompiling.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Generator
from pathlib import Path
from typing import Any, cast

from trnsim.compiler.api import COMPILER_VERSION, CompiledProgram
from trnsim.compiler.lowering import Plan
from trnsim.compiler.options import CompileOptions
from trnsim.compiler.pipeline import PassRecord
from trnsim.errors import ArtifactError, CacheError, TrnsimError
from trnsim.ir.graph import Graph
from trnsim.ir.serialize import decode_graph, encode_graph
from trnsim.runtime.artifact import (
    FORMAT_VERSION,
    RECOMPILE,
    Artifact,
    pack_arrays,
    pack_artifact,
    read_artifact,
    unpack_arrays,
    unpack_artifact,
    write_bytes_atomic,
)

KIND = "trnsim-compiled-program"
SECTIONS = ("program.json", "program.bin", "constants.bin", "plan.json")


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def metadata(program: CompiledProgram) -> dict[str, Any]:
    from trnsim import __version__

    plan: Plan = program.plan
    return {
        "kind": KIND,
        "target": program.target,
        "trnsim_version": __version__,
        "compiler_version": COMPILER_VERSION,
        "format_version": FORMAT_VERSION,
        "options": program.options.as_dict(),
        "source_hash": program.source_hash,
        "inputs": [{"shape": list(t.shape), "dtype": t.dtype} for t in program.input_types],
        "outputs": [{"shape": list(t.shape), "dtype": t.dtype} for t in program.output_types],
        "shardings": program.shardings,
        **({"signature": program.signature.to_json()} if program.signature is not None else {}),
        "locations": [[s.index, s.kernel, s.loc] for s in plan.steps],
        "instruction_counts": plan.instruction_counts(),
        "estimated_seconds": plan.total_seconds,
        "hbm_peak_bytes": plan.hbm_peak,
        "passes": [[p.name, p.nodes] for p in program.passes],
    }


def to_bytes(program: CompiledProgram) -> bytes:
    tables, structure, arrays = encode_graph(program.graph)
    sections = {"program.json": _json_bytes(tables), "program.bin": pack_arrays(structure),
                "constants.bin": pack_arrays(arrays), "plan.json": _json_bytes(program.plan.to_json())}
    return pack_artifact(metadata(program), sections, target=program.target)


def save(program: CompiledProgram, path: str | os.PathLike[str]) -> Path:
    """Write ``program`` as a ``.neff`` artifact, atomically (identical programs give identical bytes)."""
    return write_bytes_atomic(path, to_bytes(program))


def from_artifact(art: Artifact, where: str, *, lazy: bool = False) -> CompiledProgram:
    """The program in a verified artifact. ``lazy``: decode the graph and plan on first use (the compile
    cache's hits); the header, hash, kind, version, options and sections are checked here either way."""
    meta = art.meta
    if meta.get("kind") != KIND:
        raise ArtifactError(f"not a trnsim compiled program (kind {meta.get('kind')!r})", where=where,
                            hint="compile the module with `trnsim compile model.mlir -o model.neff`")
    if meta.get("compiler_version") != COMPILER_VERSION:
        raise ArtifactError(f"compiled by compiler version {meta.get('compiler_version')!r}, this trnsim runs "
                            f"version {COMPILER_VERSION!r}", where=where,
                            hint="recompile it with this trnsim: `trnsim compile ...`")
    try:
        options = CompileOptions(**meta["options"])
        # NOTE: pass names and node counts come back (not their times): a loaded program saves to the same bytes
        passes = [PassRecord(str(name), 0.0, int(nodes), {}) for name, nodes in meta.get("passes", [])]
    except (ValueError, TypeError, KeyError) as exc:
        raise ArtifactError(f"the artifact's metadata is malformed: {exc}", where=where,
                            hint="recompile it with `trnsim compile ...`") from exc
    sections = {name: art.section(name) for name in SECTIONS}   # a missing section is an error now
    structure = unpack_arrays(sections["program.bin"], where=where)
    shardings: object = meta.get("shardings", {})
    if not isinstance(shardings, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                  for k, v in cast("dict[Any, Any]", shardings).items()):
        raise ArtifactError("the artifact's metadata is malformed: shardings is not a map of names to specs",
                            where=where, hint=RECOMPILE)

    def graph() -> Graph:
        tables = _json_section(sections["program.json"], "program", where)
        arrays = unpack_arrays(sections["constants.bin"], where=where)
        with _decoding("program graph", where):
            return decode_graph(tables, structure, arrays, where=where)

    def plan() -> Plan:
        raw = _json_section(sections["plan.json"], "plan", where)
        with _decoding("plan", where):
            decoded = Plan.from_json(raw)
            _check_plan(decoded)
            top = structure.get("graphs")
            nodes = int(top[0, 4] - top[0, 3]) if top is not None and top.ndim == 2 and len(top) else 0
            if any(not 0 <= i < nodes for s in decoded.steps for i in s.nodes):   # types checked above
                raise ArtifactError("the plan refers to nodes the program does not have", where=where,
                                    hint=RECOMPILE)
        return decoded

    program = CompiledProgram(graph, art.target, options, str(meta.get("source_hash", "")), passes,
                              dict(cast("dict[str, str]", shardings)), plan)
    if "signature" in meta:
        from trnsim.frontend.importer import Signature

        try:
            program.signature = Signature.from_json(meta["signature"], len(meta.get("inputs", [])),
                                                    len(meta.get("outputs", [])))
        except ValueError as exc:
            raise ArtifactError(f"the artifact's signature is malformed: {exc}", where=where,
                                hint=RECOMPILE) from exc
    if not lazy:
        _ = (program.graph, program.plan)     # decode now: a damaged artifact's error is raised here
    return program


@contextlib.contextmanager
def _decoding(part: str, where: str) -> Generator[None]:
    """Turn a raw exception while decoding ``part`` of a verified artifact (its hash is fine, its content is
    not: another writer, an edit re-hashed) into an ArtifactError naming the file and the part."""
    try:
        yield
    except TrnsimError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
        raise ArtifactError(f"the artifact's {part} is malformed: {type(exc).__name__}: {exc}; rebuild it",
                            where=where, hint=RECOMPILE) from exc


_NUMBER = "number"
# The JSON type of each Plan and Step field: a type, _NUMBER (int or float), or (list | dict, item type).
_PLAN_FIELDS: dict[str, Any] = {
    "target": str, "steps": list, "total_seconds": _NUMBER, "hbm_peak": _NUMBER, "hbm_capacity": _NUMBER,
    "sbuf_peak": _NUMBER, "remat_bytes": _NUMBER, "spill_bytes": _NUMBER}
_STEP_FIELDS: dict[str, Any] = {
    "index": int, "kernel": str, "ops": (list, str), "nodes": (list, int), "loc": str, "busy": (dict, _NUMBER),
    "dma_bytes": _NUMBER, "dma_seconds": _NUMBER, "seconds": _NUMBER, "flops": _NUMBER, "operand_dtype": str,
    "deps": (list, int), "sbuf_bytes": _NUMBER, "spilled": _NUMBER, "instructions": (dict, _NUMBER),
    "start": _NUMBER, "end": _NUMBER, "sub": list}


def _is(value: object, kind: Any) -> bool:
    if kind == _NUMBER:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(kind, tuple):
        outer, inner = cast("tuple[type, Any]", kind)
        if not isinstance(value, outer):
            return False
        items = cast("dict[Any, Any]", value).values() if outer is dict else cast("list[Any]", value)
        return all(_is(v, inner) for v in items)
    return isinstance(value, kind)


def _check_plan(plan: Plan, at: str = "plan") -> None:
    """Raise ValueError naming the first field of ``plan`` (or a step, or a region plan) of the wrong type."""
    for name, kind in _PLAN_FIELDS.items():
        if not _is(getattr(plan, name), kind):
            raise ValueError(f"{at}.{name} is {getattr(plan, name)!r}")
    for i, step in enumerate(plan.steps):
        for name, kind in _STEP_FIELDS.items():
            if not _is(getattr(step, name), kind):
                raise ValueError(f"{at}.steps[{i}].{name} is {getattr(step, name)!r}")
        if any(not 0 <= d < len(plan.steps) for d in step.deps):
            raise ValueError(f"{at}.steps[{i}].deps {step.deps} refers to steps the plan does not have")
        if step.sub and not step.nodes:
            raise ValueError(f"{at}.steps[{i}] has region plans but no node")
        for j, sub in enumerate(step.sub):
            _check_plan(sub, f"{at}.steps[{i}].sub[{j}]")


def _json_section(raw: bytes, what: str, where: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ArtifactError(f"the {what} section is not valid JSON: {exc}", where=where, hint=RECOMPILE) from exc


def from_bytes(data: bytes, *, where: str, target: str | None = None, lazy: bool = False) -> CompiledProgram:
    return from_artifact(unpack_artifact(data, where=where, expect_target=target), where, lazy=lazy)


def load_artifact(path: str | os.PathLike[str], target: str | None = None) -> CompiledProgram:
    """A compiled program from a ``.neff`` file: header, hash and target verified; nothing executed."""
    return from_artifact(read_artifact(path, expect_target=target), str(path))


# ---- compilation through the cache ---------------------------------------------------------------------

def module_key_text(module: object) -> str | bytes:
    """The module's identity for the cache key, without source locations: for a ``Lowered`` or an MLIR
    module its bytecode (``frontend.mlir.stripped_bytecode``), for text the text, for bytecode the bytes."""
    import re

    from trnsim.frontend.mlir import mlir_module, read_source, stripped_bytecode, unwrap

    ir_module = mlir_module(module)
    if ir_module is not None:
        return stripped_bytecode(ir_module)
    source = unwrap(read_source(module))
    if isinstance(source, bytes | bytearray):
        return bytes(source)
    text = str(source)
    if "loc(" not in text:
        return text
    text = re.sub(r"^#loc\d*\s*=.*$", "", text, flags=re.MULTILINE)
    return re.sub(r"\s*loc\((?:[^()]|\([^()]*\))*\)", "", text)


_SPEC_JSON: dict[int, tuple[object, bytes]] = {}


def _spec_json(spec: Any) -> bytes:
    """The target spec as canonical JSON (memoised per spec object: presets are immutable)."""
    hit = _SPEC_JSON.get(id(spec))
    if hit is None or hit[0] is not spec:
        hit = _SPEC_JSON[id(spec)] = (spec, _json_bytes(spec.to_dict()))
    return hit[1]


def _jaxlib_version() -> str:
    """jaxlib's version: its parser reads the module and writes the bytecode that keys it."""
    from importlib.metadata import version

    return version("jaxlib")


_SOURCE_DIGEST: list[str] = []


def source_digest() -> str:
    """sha256 of trnsim's own source and data files (read once per process): an edited kernel, cost table
    or pass is a new compiler even when the version string is not, so its programs get new keys."""
    if not _SOURCE_DIGEST:
        root = Path(__file__).resolve().parents[1]
        digest = hashlib.sha256()
        for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".toml") and p.is_file()):
            digest.update(str(path.relative_to(root)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
        _SOURCE_DIGEST.append(digest.hexdigest())
    return _SOURCE_DIGEST[0]


def cache_entries(module: object, target: str, options: CompileOptions) -> dict[str, str | bytes]:
    from trnsim import __version__
    from trnsim.hw import registry

    spec = registry.get(target)
    return {"module": module_key_text(module), "options": _json_bytes(options.as_dict()),
            "target": _spec_json(spec), "trnsim_version": __version__, "jaxlib_version": _jaxlib_version(),
            "trnsim_source": source_digest(),
            "compiler_version": COMPILER_VERSION, "format_version": str(FORMAT_VERSION)}


def compile(module: object, target: str = "trn3", *, cache: object = None,
            **options: Any) -> CompiledProgram:
    """``trnsim.compiler.compile`` through the compile cache: ``cache`` is None (the cache at
    TRNSIM_CACHE_URL, by default a folder in the user's cache directory), False (no cache), a URL, or a
    ``CompileCache``. A hit loads the stored program instead of compiling; ``program.cache_hit`` says which."""
    from trnsim.compiler.api import compile as compile_uncached
    from trnsim.runtime.cache import CompileCache, cache_key

    opts = CompileOptions.from_kwargs(options)
    if cache is False:
        program = compile_uncached(module, target, **options)
        program.cache_hit = False
        return program
    if isinstance(cache, CompileCache):
        store = cache
    elif cache is None or cache is True:
        store = CompileCache(None)
    elif isinstance(cache, str | os.PathLike):
        store = CompileCache(os.fspath(cache))
    else:
        raise CacheError(f"cache={cache!r} is not a cache", where="trnsim.compile",
                         hint="pass cache=None (TRNSIM_CACHE_URL), False (no cache), a URL or folder, "
                              "or a CompileCache")
    key = cache_key(cache_entries(module, target, opts))
    built: list[CompiledProgram] = []

    def build() -> bytes:
        program = compile_uncached(module, target, **options)
        built.append(program)
        return to_bytes(program)

    data, hit = store.get_or_build(key, build, meta={"target": target, "options": opts.as_dict()})
    program = built[0] if built else from_bytes(data, where=f"compile cache entry {key[:12]}", target=target,
                                                lazy=True)
    program.cache_hit = hit and not built
    program.cache_key = key
    return program


def run_compiled(target: str, program: object, inputs: list[Any], *, timing: bool = True) -> Any:
    """Run a compiled program (or the artifact at a path) for ``Device.run``: a ``RunResult`` whose outputs
    are named ``output0``, ``output1``, ... in order, with the profile."""
    from trnsim.errors import SimError
    from trnsim.sim.device import RunResult

    if isinstance(program, str | os.PathLike):
        program = load_artifact(program, target=target)
    if not isinstance(program, CompiledProgram):
        raise SimError(f"cannot run a {type(program).__name__}", where="Device.run",
                       hint="pass an ISA Program, a compiled program or the path of a .neff artifact")
    if program.target != target:
        raise SimError(f"the program was compiled for {program.target}, this device is {target}",
                       where="Device.run", hint=f"use trnsim.Device({program.target!r}) or recompile for {target}")
    outputs = program.run(*inputs, timing=timing)
    return RunResult({f"output{i}": o for i, o in enumerate(outputs)}, (), program.last_profile)
