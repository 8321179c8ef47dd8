"""Reading StableHLO with jaxlib's MLIR bindings (reference/frontend_numerics.md Part A3).

Accepts text (pretty or generic form), portable bytecode (what ``jax.export`` serialises, magic ``ML\\xefR``),
a ``jax.stages.Lowered``, a ``jax.export.Exported`` or an MLIR module object; legalises ``chlo`` to
StableHLO with the pass jaxlib ships (nested under ``func.func``, as A1.3 notes).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from trnsim.errors import CompileError

BYTECODE_MAGIC = b"ML\xefR"

_context: Any = None


def context() -> Any:
    """The one MLIR context trnsim parses in (stablehlo, chlo, sdy, func registered)."""
    global _context
    if _context is None:
        from jax._src.interpreters import mlir as jax_mlir
        from jaxlib.mlir.dialects import stablehlo

        _context = jax_mlir.make_ir_context()
        stablehlo.register_stablehlo_passes()
    return _context


def describe(source: object) -> str:
    """A short name for error messages: the file name, or what kind of object was given."""
    if isinstance(source, Path):
        return str(source)
    if isinstance(source, str) and "\n" not in source and source.endswith((".mlir", ".mlirbc", ".bc")):
        return source
    return {"str": "<module text>", "bytes": "<bytecode>"}.get(type(source).__name__, f"<{type(source).__name__}>")


def parse(source: Any) -> tuple[Any, str]:
    """An MLIR module (in trnsim's context) from any accepted form, and its text for hashing and errors."""
    from jaxlib.mlir import ir

    where = describe(source)
    ctx = context()
    given = source
    source = unwrap(read_source(source))
    with ctx:
        if isinstance(source, bytes | bytearray):
            if not bytes(source).startswith(BYTECODE_MAGIC):
                raise CompileError("these bytes are not StableHLO portable bytecode (no 'ML\\xefR' magic)",
                                   where=where, hint="pass MLIR text, bytecode from jax.export, or a Lowered")
            from jaxlib.mlir.dialects import stablehlo

            try:
                module = stablehlo.deserialize_portable_artifact(ctx, bytes(source))
            except Exception as exc:
                raise CompileError(f"cannot deserialise the bytecode: {exc}", where=where,
                                   hint="the bytecode may be truncated or from a newer StableHLO") from exc
        elif isinstance(source, str):
            try:
                module = ir.Module.parse(source)
            except Exception as exc:       # MLIR raises its own error types with the diagnostics
                module = _reparsed(given)
                if module is None:
                    raise CompileError(f"not a valid StableHLO module: {_first_diagnostic(exc)}", where=where,
                                       hint="the text must parse with jaxlib's MLIR (stablehlo, chlo, func, sdy)"
                                       ) from exc
        else:
            raise CompileError(f"cannot compile a {type(source).__name__}", where=where,
                               hint="pass StableHLO text, a path, bytecode, jax.jit(f).lower(...), a "
                                    "jax.export.Exported or an MLIR module")
        _legalize_chlo(module, where)
        text = str(module.operation.get_asm(enable_debug_info=False))
    return module, text


def _reparsed(given: Any) -> Any:
    """A ``Lowered``'s or module object's module, read back from its bytecode, for when its printed text does not
    parse (jaxlib prints a rank-0 ``dynamic_slice`` as ``%x, , sizes = []``); None for other sources or if that
    fails too. Call in trnsim's context."""
    import io

    from jaxlib.mlir import ir

    module = mlir_module(given)
    if module is None:
        return None
    out = io.BytesIO()
    try:
        with module.context:
            module.operation.write_bytecode(out)
        return ir.Module.parse(out.getvalue())
    except Exception:                      # (the text's own error is the one to report)
        return None


_TEXT_STARTS = ("module", "func.func", '"', "#", "//", "stablehlo.", "%")


def is_path(source: object) -> bool:
    """Whether ``source`` names a file: a ``Path``, or a str that names an existing file or folder (whatever
    its extension), or one that looks like a path and not like module text. A str with a newline, or one
    starting like MLIR (``module``, ``func.func``, ``"``...) and naming no file, is module text."""
    if isinstance(source, Path):
        return True
    if not isinstance(source, str) or "\n" in source or "\0" in source or not source.strip():
        return False
    try:
        if Path(source).exists() or Path(source).is_symlink():
            return True
    except OSError:   # e.g. a name too long for a path: module text
        return False
    text = source.strip()
    return bool(text) and not text.startswith(_TEXT_STARTS) and not any(c.isspace() or c in "{}()" for c in text)


def read_source(source: Any) -> Any:
    """A path's contents (bytecode as bytes, text as str); anything else unchanged."""
    if not is_path(source):
        return source
    path = Path(source)
    if path.is_dir():
        raise CompileError("cannot read the module: it is a directory", where=str(path),
                           hint="give the .mlir or .mlirbc file inside it")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CompileError(f"cannot read the module: {exc.strerror or exc}", where=str(path),
                           hint="check the path (module text passed as a string must start with `module` "
                                "or `func.func`)") from exc
    return data if data.startswith(BYTECODE_MAGIC) else data.decode("utf-8", errors="replace")


def unwrap(source: Any, *, debug_info: bool = True) -> Any:
    """Text or bytes from a ``Lowered``, an ``Exported`` or an ``ir.Module``; anything else unchanged.
    ``debug_info``: keep source locations (for errors and profiles; cache keys leave them out)."""
    if hasattr(source, "compiler_ir") and callable(source.compiler_ir):   # jax.stages.Lowered
        return source.as_text(debug_info=debug_info)
    if hasattr(source, "mlir_module_serialized"):                        # jax.export.Exported
        return bytes(source.mlir_module_serialized)
    if hasattr(source, "operation") and hasattr(source, "body"):          # an ir.Module
        return source.operation.get_asm(enable_debug_info=debug_info)
    return source


def mlir_module(source: Any) -> Any:
    """The MLIR module of a ``Lowered`` (in JAX's context) or an ``ir.Module`` itself; None otherwise."""
    if hasattr(source, "compiler_ir") and callable(source.compiler_ir):   # jax.stages.Lowered
        return source.compiler_ir("stablehlo")
    if hasattr(source, "operation") and hasattr(source, "body"):          # an ir.Module
        return source
    return None


_strip_passes: dict[int, tuple[Any, Any]] = {}


def stripped_bytecode(module: Any) -> bytes:
    """``module`` as MLIR bytecode without its source locations (a copy is stripped; ``module`` is kept):
    what keys it in the compile cache, and what ``trnsim cache warm`` hands its workers. Writing bytecode
    costs a third of printing the module as text; ``parse`` reads it back."""
    import io

    from jaxlib.mlir import passmanager

    with module.context:
        hit = _strip_passes.get(id(module.context))
        if hit is None or hit[0] is not module.context:
            hit = _strip_passes[id(module.context)] = (module.context,
                                                      passmanager.PassManager.parse("builtin.module(strip-debuginfo)"))
        copy = module.operation.clone()
        hit[1].run(copy)
        out = io.BytesIO()
        copy.write_bytecode(out)
    return out.getvalue()


def _first_diagnostic(exc: Exception) -> str:
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "error:" in ln:
            return re.sub(r"^.*error:\s*", "", ln)
    return lines[0] if lines else type(exc).__name__


def _legalize_chlo(module: Any, where: str) -> None:
    from jaxlib.mlir import passmanager

    text = module.operation.get_asm()
    if "chlo." not in text:
        return
    pm = passmanager.PassManager.parse("builtin.module(func.func(chlo-legalize-to-stablehlo))")
    try:
        pm.run(module.operation)
    except Exception as exc:
        raise CompileError(f"cannot legalise the chlo ops to StableHLO: {_first_diagnostic(exc)}", where=where,
                           hint="this chlo op has no StableHLO decomposition in jaxlib") from exc
