"""jaxlib's StableHLO reference interpreter (``stablehlo.eval_module``) as an oracle for trnsim's semantics.

Programs are written here in MLIR's generic form (``"stablehlo.add"(%a, %b) : (T, T) -> T``), so no pretty
syntax is involved; arguments go to the reference as ``dense<"0x...">`` attributes of raw bytes (i1 as a
list), results come back as attributes and are decoded by trnsim's constant decoder (which handles bf16
and f16 from the attribute text, §A3).

NOTE: ``eval_module`` aborts the whole process (SIGABRT) on an op it does not implement; every program here
uses only ops it implements, and undefined corners (integer division by zero, float → int overflow) are
kept out of the generated inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np

from trnsim.conformance import ulp_distance

NP: dict[str, np.dtype] = {
    "f32": np.dtype(np.float32), "bf16": np.dtype(ml_dtypes.bfloat16), "f16": np.dtype(np.float16),
    "i8": np.dtype(np.int8), "i16": np.dtype(np.int16), "i32": np.dtype(np.int32),
    "ui8": np.dtype(np.uint8), "ui16": np.dtype(np.uint16), "ui32": np.dtype(np.uint32),
    "i1": np.dtype(np.bool_),
}
FLOATS = ("f32", "bf16", "f16")
SIGNED = ("i8", "i16", "i32")
UNSIGNED = ("ui8", "ui16", "ui32")
INTS = SIGNED + UNSIGNED


def ttype(shape: Sequence[int], t: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + t + ">"


def attr_text(a: np.ndarray, t: str) -> str:
    if a.size == 0:
        return f"dense<> : {ttype(a.shape, t)}"
    if t == "i1":
        body = repr(a.tolist()).replace("True", "true").replace("False", "false")
        return f"dense<{body}> : {ttype(a.shape, t)}"
    return f'dense<"0x{np.ascontiguousarray(a.astype(NP[t])).tobytes().hex().upper()}"> : {ttype(a.shape, t)}'


def module(args: Sequence[tuple[tuple[int, ...], str]], body: str, results: Sequence[tuple[str, str]]) -> str:
    """``func.func @main(%a0: T0, ...) -> (R...)`` with ``body`` and ``return`` of ``results`` (name, type)."""
    params = ", ".join(f"%a{i}: {ttype(s, t)}" for i, (s, t) in enumerate(args))
    outs = ", ".join(t for _, t in results)
    ret = ", ".join(n for n, _ in results)
    return (f"func.func @main({params}) -> ({outs}) {{\n{body}\n  func.return {ret} : {outs}\n}}\n")


class ReferenceAborted(RuntimeError):
    """eval_module killed its process (an op or a case the reference interpreter does not implement)."""


def reference(text: str, args: Sequence[np.ndarray], types: Sequence[str]) -> list[np.ndarray]:
    """The reference interpreter's results, computed in a forked child so an abort cannot end the tests."""
    import os
    import pickle
    import select

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: evaluate, send the pickled results (or the error text), exit without cleanup
        os.close(read)
        try:
            payload = pickle.dumps(("ok", _reference(text, args, types)))
        except Exception as exc:
            payload = pickle.dumps(("error", f"{type(exc).__name__}: {exc}"))
        with os.fdopen(write, "wb") as f:
            f.write(payload)
        os._exit(0)
    os.close(write)
    chunks: list[bytes] = []
    with os.fdopen(read, "rb") as f:
        while True:
            ready, _, _ = select.select([f], [], [], 60)
            if not ready:
                os.kill(pid, 9)
                break
            chunk = f.read1(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        raise ReferenceAborted(f"the reference interpreter died (status {status}) on\n{text}")
    kind, value = pickle.loads(b"".join(chunks))
    if kind != "ok":
        raise RuntimeError(f"the reference interpreter failed: {value}\n{text}")
    return list(value)


def _reference(text: str, args: Sequence[np.ndarray], types: Sequence[str]) -> list[np.ndarray]:
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    from trnsim.frontend.constants import decode_dense
    from trnsim.frontend.mlir import context

    with context():
        m: Any = ir.Module.parse(text)
        attrs = [ir.Attribute.parse(attr_text(a, t)) for a, t in zip(args, types, strict=True)]
        outs = stablehlo.eval_module(m, attrs)
        return [decode_dense(o, "reference") for o in outs]


def trnsim(text: str, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    from trnsim.frontend.importer import import_module
    from trnsim.frontend.mlir import parse
    from trnsim.ir.interp import Interpreter

    mod, _ = parse(text)
    graph = import_module(mod, where="<oracle>").graph
    return Interpreter().run(graph, list(args))


def assert_same(actual: np.ndarray, expected: np.ndarray, *, ulp: int = 0, what: str = "") -> None:
    """Bitwise equal (any NaN equals any NaN; for ulp > 0, within ``ulp`` units in the last place)."""
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} vs {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} vs {expected.dtype}"
    if actual.size == 0:
        return
    if actual.dtype.kind in "iub":
        bad = actual != expected
    else:
        d = ulp_distance(actual, expected)
        if ulp == 0:
            # exact means the same bits, so -0 and +0 differ; NaNs compare as NaNs
            same = (actual.view(f"u{actual.dtype.itemsize}") == expected.view(f"u{expected.dtype.itemsize}"))
            nan = np.isnan(actual.astype(np.float32)) & np.isnan(expected.astype(np.float32))
            bad = ~(same | nan)
        else:
            bad = d > ulp
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {actual.size} differ; first at {i}: trnsim "
                             f"{actual.ravel()[i]!r} vs reference {expected.ravel()[i]!r}")


def check(text: str, args: Sequence[np.ndarray], types: Sequence[str], *, ulp: int = 0) -> None:
    expected = reference(text, args, types)
    actual = trnsim(text, args)
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        assert_same(a, e, ulp=ulp, what=f"result {i} of\n{text}")
