"""``trnsim compile | run | inspect``: a StableHLO module to a ``.neff`` artifact, run it on a simulated
NeuronCore with inputs from an ``.npz`` file, and show what an artifact holds.

``compile`` goes through the compile cache (``TRNSIM_CACHE_URL``) unless ``--no-cache``; ``cache warm``
(``trnsim.cli.cache``) shares its compile options (``add_compile_options``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import time
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trnsim.cli._output import print_json, print_table
from trnsim.compiler.options import AUTO_CAST, AUTO_CAST_TYPES, HBM_OVERFLOW, SPARSITY
from trnsim.errors import CompileError, SimError
from trnsim.fileio import write_atomic
from trnsim.hw.units import format_quantity, parse_bytes

if TYPE_CHECKING:
    from trnsim.cli._output import SubParsers
    from trnsim.compiler.api import CompiledProgram
    from trnsim.ir.types import TensorType

COMPILE_EPILOG = """examples:
  trnsim compile model.mlir -o model.neff
  trnsim compile model.mlirbc -o model-mx6.neff --auto-cast matmul --auto-cast-type mxfp6
  trnsim compile model.mlir -o model.neff --sparsity 2:4 --dump-ir ir/ --no-cache

A module comes from JAX as text or portable bytecode:
  python -c "import jax, jax.numpy as jnp; print(jax.jit(jnp.tanh).lower(jnp.ones((128, 512))).as_text())" > model.mlir
"""

RUN_EPILOG = """examples:
  python -c "import numpy as np; np.savez('in.npz', arg0=np.ones((128, 512), np.float32))"
  trnsim run model.neff --inputs in.npz --outputs out.npz --trace trace.json

Inputs are taken in parameter order from the keys arg0, arg1, ... (or arr_0, arr_1, ..., as
np.savez(path, *arrays) names them); any other names are taken in sorted order. bfloat16 and other
ml_dtypes arrays, which .npz stores as raw bytes, are read back as the type the program expects.
The trace opens in https://ui.perfetto.dev (one track per engine and one for DMA).
"""

INSPECT_EPILOG = """examples:
  trnsim inspect model.neff
  trnsim inspect model.neff --json
"""

_ARG_KEY = re.compile(r"(?:arg|arr_)(\d+)")


# ---------------------------------------------------------------------------------------------------- options


def add_compile_options(p: argparse.ArgumentParser) -> None:
    """--target and the compile options (default: unset, so ``compile_options`` returns only those given)."""
    p.add_argument("--target", default="trn3", help="hardware preset or .toml file to compile for (default trn3)")
    p.add_argument("--auto-cast", choices=AUTO_CAST, help="ops that run in a narrower type (default none)")
    p.add_argument("--auto-cast-type", choices=AUTO_CAST_TYPES, help="that type (default bf16)")
    p.add_argument("--sparsity", choices=SPARSITY, help="prune matmul weight operands N:M (default none)")
    p.add_argument("--hbm-limit", metavar="SIZE",
                   help="HBM the memory plan may use, with a unit, e.g. '24 GiB' (default: the chip's HBM)")
    p.add_argument("--hbm-overflow", choices=HBM_OVERFLOW,
                   help="when the program does not fit: recompute cheap values, then spill to host memory "
                        "(remat+spill, the default), only recompute, or fail")


def compile_options(args: argparse.Namespace) -> dict[str, str | int]:
    """The compile options given on the command line, by ``trnsim.compile`` keyword."""
    given: dict[str, str | int | None] = {
        "auto_cast": args.auto_cast, "auto_cast_type": args.auto_cast_type, "sparsity": args.sparsity,
        "hbm_overflow": getattr(args, "hbm_overflow", None),
        "hbm_limit_bytes": None if getattr(args, "hbm_limit", None) is None else
        parse_bytes(args.hbm_limit, where="--hbm-limit")}
    return {k: v for k, v in given.items() if v is not None}


@contextlib.contextmanager
def _dump_ir(folder: str | None) -> Generator[None]:
    """TRNSIM_DUMP_IR set to ``folder`` for the duration (settings are read on access)."""
    if not folder:
        yield
        return
    old = os.environ.get("TRNSIM_DUMP_IR")
    os.environ["TRNSIM_DUMP_IR"] = folder
    try:
        yield
    finally:
        if old is None:
            del os.environ["TRNSIM_DUMP_IR"]
        else:
            os.environ["TRNSIM_DUMP_IR"] = old


def _bytes(n: float) -> str:
    return format_quantity(n, "bytes", digits=3)


def _seconds(s: float) -> str:
    return format_quantity(s, "s", digits=3)


def _types(types: list[TensorType]) -> str:
    return ", ".join(str(t) for t in types)


# ---------------------------------------------------------------------------------------------------- compile


def cmd_compile(args: argparse.Namespace) -> int:
    from trnsim.runtime.program import compile as compile_cached

    source = Path(args.module)
    if not source.is_file():
        raise CompileError("is a directory" if source.is_dir() else "no such file", where=str(source),
                           hint="give a StableHLO module: text (.mlir) or portable bytecode (.mlirbc)")
    output = Path(args.output) if args.output else source.with_suffix(".neff")
    options = compile_options(args)
    start = time.perf_counter()
    with _dump_ir(args.dump_ir):
        # NOTE: a cache hit runs no passes, so there would be nothing to dump
        program = compile_cached(source, args.target, cache=False if args.no_cache or args.dump_ir else None,
                                 **options)
    elapsed = time.perf_counter() - start
    program.save(output)
    plan = program.plan
    how = (f"loaded from the compile cache in {_seconds(elapsed)} (key {program.cache_key[:16]}…)"
           if program.cache_hit else f"compiled in {_seconds(elapsed)}" +
           (" (cache not used)" if args.no_cache or args.dump_ir else ", stored in the compile cache"))
    counts = ", ".join(f"{e} {n:,}" for e, n in plan.instruction_counts().items() if n)
    rows = [["module", str(source)], ["target", program.target],
            ["options", ", ".join(f"{k}={v}" for k, v in program.options.as_dict().items())],
            ["inputs", _types(program.input_types)], ["outputs", _types(program.output_types)],
            ["kernel steps", f"{len(plan.steps):,}"], ["instructions", counts],
            ["estimated time", _seconds(plan.total_seconds)], ["HBM peak", _bytes(plan.hbm_peak)],
            *_memory_plan_rows(plan), ["program", how], ["artifact", f"{output} ({_bytes(output.stat().st_size)})"]]
    if args.dump_ir:
        rows.append(["IR dumps", str(args.dump_ir)])
    print_table(f"trnsim compile {source.name}", ["", ""], rows,
                caption=f"run it: trnsim run {output} --inputs in.npz; look inside: trnsim inspect {output}")
    return 0


def _memory_plan_rows(plan: Any) -> list[list[str]]:
    """What the HBM planner added when the program did not fit (nothing when it fit)."""
    costs = plan.memory_costs()
    if not costs["remat_bytes"] and not costs["spill_bytes"]:
        return []
    return [["HBM over capacity", f"recomputed {_bytes(costs['remat_bytes'])} ({_seconds(costs['remat_seconds'])}), "
                                  f"spilled to host {_bytes(costs['spill_bytes'])} "
                                  f"({_seconds(costs['spill_seconds'])} out and back)"]]


# ---------------------------------------------------------------------------------------------------- run


def _ordered_keys(keys: list[str]) -> list[str]:
    numbers = {k: m.group(1) for k in keys if (m := _ARG_KEY.fullmatch(k))}
    if len(numbers) == len(keys):
        return sorted(keys, key=lambda k: int(numbers[k]))
    return sorted(keys)


def _as_type(arr: np.ndarray, t: TensorType, where: str) -> np.ndarray:
    expected = t.np_dtype
    if arr.dtype == expected:
        return arr
    if arr.dtype.kind == "V" and arr.dtype.itemsize == expected.itemsize:
        return arr.view(expected)  # .npz keeps ml_dtypes arrays (bfloat16, float8) as raw bytes
    if np.can_cast(arr.dtype, expected, casting="same_kind"):
        cast = arr.astype(expected)
        if np.array_equal(cast.astype(arr.dtype), arr, equal_nan=True):
            return cast  # exact: e.g. int64 indices that fit int32
    raise SimError(f"has element type {arr.dtype}, the program expects {t}", where=where,
                   hint=f"save it as {expected.name} (the value would change if converted here)")


def read_inputs(path: str, program: CompiledProgram) -> list[np.ndarray]:
    """The program's inputs from an ``.npz`` file, in parameter order (see ``RUN_EPILOG``), checked."""
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.ndarray):   # a .npy: one array, the program's only input
            arrays = {"arg0": loaded}
        else:
            with loaded as npz:
                arrays = {k: npz[k] for k in npz.files}
    except FileNotFoundError:
        raise SimError("no such file", where=path, hint="write the inputs with np.savez(path, arg0=..., ...)"
                       ) from None
    except (OSError, ValueError) as exc:
        raise SimError(f"not a readable .npz or .npy file: {exc}", where=path,
                       hint="write the inputs with np.savez(path, arg0=..., arg1=...)") from None
    types = program.input_types
    want = ", ".join(f"arg{i}: {t}" for i, t in enumerate(types))
    keys = _ordered_keys(list(arrays))
    if len(keys) != len(types):
        more = "missing" if len(keys) < len(types) else "extra"
        raise SimError(f"{len(keys)} arrays ({', '.join(keys) or 'none'}) for a program of {len(types)} inputs "
                       f"({more} inputs)", where=path, hint=f"the program takes {want or 'no inputs'}")
    out: list[np.ndarray] = []
    for i, (key, t) in enumerate(zip(keys, types, strict=True)):
        where = f"{path}: {key} (input {i})"
        arr = arrays[key]
        if tuple(arr.shape) != t.shape:
            raise SimError(f"has shape {tuple(arr.shape)}, the program expects {t}", where=where,
                           hint=f"the program takes {want}")
        out.append(_as_type(arr, t, where))
    return out


def cmd_run(args: argparse.Namespace) -> int:
    from trnsim.compiler.profile import ProgramProfile
    from trnsim.runtime.program import load_artifact, run_compiled

    program = load_artifact(args.artifact, target=args.target)
    inputs = read_inputs(args.inputs, program)
    result = run_compiled(program.target, program, inputs)  # what trnsim.Device(target).run(program, *inputs) does
    outputs: dict[str, Any] = result.outputs
    prof: ProgramProfile | None = result.profile
    if args.outputs:
        _save_outputs(args.outputs, outputs)
    if args.trace and prof is not None:
        prof.save_trace(args.trace)
    if args.json:
        shapes = {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in outputs.items()}
        print_json({"outputs": shapes, "profile": prof.to_dict() if prof else None})
        return 0
    rows = [[name, "×".join(map(str, v.shape)) or "scalar", str(v.dtype), _summary(v)]
            for name, v in outputs.items()]
    print_table(f"trnsim run {Path(args.artifact).name} on a simulated {program.target} NeuronCore",
                ["output", "shape", "dtype", "values"], rows)
    if prof is not None:
        util = ", ".join(f"{e} {u:.0%}" for e, u in prof.utilisation.items() if u > 0)
        rows = [["simulated time", _seconds(prof.total_seconds)], ["utilisation", util],
                ["MFU", f"{prof.mfu:.1%} of {prof.peak_flops / 1e12:.1f} TFLOP/s (dense bf16, one NeuronCore)"],
                ["HBM traffic", f"{_bytes(prof.hbm_bytes)} ({prof.hbm_bandwidth / 1e9:.0f} GB/s)"]]
        written: list[str] = []
        if args.outputs:
            written.append(f"outputs: {args.outputs}")
        if args.trace:
            written.append(f"trace: {args.trace} (open in https://ui.perfetto.dev)")
        print_table("profile", ["", ""], rows, caption="; ".join(written) or None)
    return 0


def _save_outputs(path: str, outputs: Mapping[str, np.ndarray]) -> None:
    """The outputs as an .npz file at exactly ``path`` (np.savez would append .npz), written atomically."""
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, **outputs)
    write_atomic(path, buf.getvalue())


def _summary(v: np.ndarray) -> str:
    if v.size == 0 or (v.dtype.kind not in "fiub" and v.dtype.kind != "V"):
        return "-"
    x = v.astype(np.float64)
    return f"mean {x.mean():.4g}, min {x.min():.4g}, max {x.max():.4g}"


# ---------------------------------------------------------------------------------------------------- inspect


def describe_artifact(path: str) -> dict[str, Any]:
    """Header, metadata and section sizes of the artifact at ``path`` (verified; nothing is executed)."""
    from trnsim.runtime.artifact import read_artifact

    art = read_artifact(path)
    meta: Mapping[str, Any] = art.meta
    return {"path": path, "size": Path(path).stat().st_size, "format_version": art.format_version,
            "target": art.target, "producer": art.producer, "content_hash": art.content_hash,
            "sections": {name: len(data) for name, data in sorted(art.sections.items())},
            "steps": len(meta.get("locations", [])), **{k: v for k, v in meta.items() if k != "locations"}}


def _engine_order(engine: str) -> tuple[int, str]:
    from trnsim.compiler.lowering import ENGINES

    order = (*ENGINES, "dma", "kernel")
    return (order.index(engine) if engine in order else len(order), engine)


def cmd_inspect(args: argparse.Namespace) -> int:
    info = describe_artifact(args.artifact)
    if args.json:
        print_json(info)
        return 0

    def tensors(items: list[dict[str, Any]]) -> str:
        return ", ".join(f"tensor<{'x'.join(map(str, t['shape']))}{'x' if t['shape'] else ''}{t['dtype']}>"
                         for t in items) or "none"

    counts = info.get("instruction_counts", {})
    rows = [["format version", info["format_version"]], ["target", info["target"]],
            ["producer", info["producer"]], ["content hash (sha256)", info["content_hash"]],
            ["size", _bytes(info["size"])], ["kind", info.get("kind", "-")],
            ["compiler version", info.get("compiler_version", "-")],
            ["sections", ", ".join(f"{n} {_bytes(s)}" for n, s in info["sections"].items())]]
    print_table(f"artifact {args.artifact}", ["header", ""], rows)
    rows = [["inputs", tensors(info.get("inputs", []))], ["outputs", tensors(info.get("outputs", []))],
            ["kernel steps", f"{info['steps']:,}"],
            ["instructions", ", ".join(f"{e} {counts[e]:,}" for e in sorted(counts, key=_engine_order) if counts[e])],
            ["estimated time", _seconds(info["estimated_seconds"]) if "estimated_seconds" in info else "-"],
            ["HBM peak", _bytes(info["hbm_peak_bytes"]) if "hbm_peak_bytes" in info else "-"],
            ["options", ", ".join(f"{k}={v}" for k, v in info.get("options", {}).items())],
            ["passes", ", ".join(f"{name} ({nodes} nodes)" for name, nodes in info.get("passes", []))
             or "- (loaded from the compile cache)"]]
    print_table("program", ["", ""], rows)
    return 0


# ---------------------------------------------------------------------------------------------------- register


def register(sub: SubParsers) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser("compile", help="compile a StableHLO module to a .neff artifact",
                       description="Compile a StableHLO module (text or portable bytecode) for a simulated chip "
                                   "and write a .neff-style artifact. Uses the compile cache (TRNSIM_CACHE_URL).",
                       epilog=COMPILE_EPILOG, formatter_class=fmt)
    p.add_argument("module", help="the module: .mlir text or .mlirbc bytecode")
    p.add_argument("-o", "--output", help="the artifact to write (default: the module's name with .neff)")
    add_compile_options(p)
    p.add_argument("--dump-ir", metavar="DIR", help="write the IR after every pass into DIR (compiles anew)")
    p.add_argument("--no-cache", action="store_true", help="compile even if the compile cache has the program")
    p.set_defaults(handler=cmd_compile)

    p = sub.add_parser("run", help="run a .neff artifact on a simulated NeuronCore with .npz inputs",
                       description="Run a compiled artifact on a simulated NeuronCore: inputs from an .npz file, "
                                   "outputs to an .npz file, the profile on the terminal and as a Perfetto trace.",
                       epilog=RUN_EPILOG, formatter_class=fmt)
    p.add_argument("artifact", help="the .neff artifact (trnsim compile)")
    p.add_argument("--inputs", required=True,
                   help=".npz file with one array per program input (or a .npy file for a program of one input)")
    p.add_argument("--outputs", help=".npz file to write the outputs to (output0, output1, ...)")
    p.add_argument("--trace", help="write the run's Chrome/Perfetto trace (JSON) here")
    p.add_argument("--target", help="check that the artifact was built for this target")
    p.add_argument("--json", action="store_true", help="print JSON (output shapes and the profile)")
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser("inspect", help="show a .neff artifact's header, I/O, instruction counts and estimate",
                       description="Show what a .neff artifact holds: header (format version, target, producer, "
                                   "hash), inputs and outputs, instruction counts per engine, estimated time, "
                                   "HBM peak, options and passes. The file is verified, nothing is executed.",
                       epilog=INSPECT_EPILOG, formatter_class=fmt)
    p.add_argument("artifact", help="the .neff artifact")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(handler=cmd_inspect)


__all__ = ["add_compile_options", "compile_options", "read_inputs", "register"]
