"""The StableHLO conformance runner: compile + simulate each file, apply its own check, tabulate by op family.

Each file of the corpus (``shared/conformance/stablehlo``) has the JAX testdata form: ``main`` calls
``@inputs`` and ``@expected``, applies the op under test and checks with a ``check.expect_*`` custom_call.
The runner lifts ``@inputs`` to program arguments (so nothing folds at compile time), compiles ``main`` for
the target, runs it on the simulated device and compares with the check's semantics
(reference/frontend_numerics.md §A1.2): ``expect_eq`` exact (NaN equals NaN), ``expect_close`` at most 3 ulp
apart, ``expect_almost_eq`` |a − b| ≤ 1e-3.

A file is *in scope* when every element type in it is one the NeuronCore runs (f32, bf16, f16, i1, i8–i32,
ui8–ui32); in-scope files must pass. Other files must pass (trnsim emulates 64-bit integers) or raise
``UnsupportedError``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from trnsim.errors import TrnsimError, UnsupportedError

IN_SCOPE = frozenset({"f32", "bf16", "f16", "i1", "i8", "i16", "i32", "ui8", "ui16", "ui32"})
MAX_ULP = 3          # StablehloTranslateMain's expect_close fallback (frontend_numerics.md §A1.2)
ALMOST_EQ_TOL = 1e-3
CHECK_EQ_TOL = 1e-4  # the older ``check.eq`` form: exact for integers, 1e-4 for floats (§A1.2)

Status = Literal["passed", "unsupported", "failed", "xfail"]

# Temporary expected failures: file name → why it fails and what will fix it. A listed file that fails is
# reported as ``xfail`` (not a failure); a listed file that passes is a failure, so the list only shrinks.
# Issue 5 §3: this must end empty.
EXPECTED_FAILURES: dict[str, str] = {}
_TYPE = re.compile(r"tensor<(?:(?:\d+|\?)x)*(complex<\w+>|[A-Za-z0-9]+)>")
_FAMILY = re.compile(r"_(?:float|bfloat|int|uint|bool|complex)\d*(?:_|\.|$)|_\d|\.mlir$")


@dataclass(frozen=True)
class FileResult:
    path: Path
    family: str
    status: Status
    in_scope: bool
    message: str = ""

    @property
    def ok(self) -> bool:
        """Passed, an out-of-scope file rejected with UnsupportedError, or an expected failure."""
        return self.status in ("passed", "xfail") or (self.status == "unsupported" and not self.in_scope)

    def to_json(self) -> dict[str, object]:
        return {"path": str(self.path), "family": self.family, "status": self.status, "in_scope": self.in_scope,
                "ok": self.ok, "message": self.message}


def family_of(path: Path) -> str:
    """The op family from the file name: ``scatter_add_bfloat16_1_2.mlir`` → ``scatter_add``."""
    m = _FAMILY.search(path.name)
    return path.name[: m.start()] if m else path.stem


def element_types(text: str) -> set[str]:
    return set(_TYPE.findall(text))


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise distance in units in the last place (IEEE total order); NaN to NaN is 0."""
    from trnsim.ir.semantics.elementwise import total_order_key

    ka = total_order_key(a).astype(np.int64)
    kb = total_order_key(b).astype(np.int64)
    d = np.abs(ka - kb)
    both_nan = np.isnan(a.astype(np.float32)) & np.isnan(b.astype(np.float32))
    # +0 and -0 are the same number
    zeros = (a.astype(np.float32) == 0) & (b.astype(np.float32) == 0)
    return np.where(both_nan | zeros, 0, d)


def compare(kind: str, actual: np.ndarray, expected: np.ndarray) -> str | None:
    """None if the check passes, else a one-line description of the worst mismatch."""
    from trnsim.ir.semantics._util import is_float

    if actual.shape != expected.shape:
        return f"shape {actual.shape}, expected {expected.shape}"
    if actual.size == 0:
        return None
    if not is_float(actual.dtype):
        bad = actual != expected
        if not bad.any():
            return None
        i = int(np.flatnonzero(bad)[0])
        return f"{int(bad.sum())} of {actual.size} differ; first at {i}: {actual.ravel()[i]} vs {expected.ravel()[i]}"
    a32, e32 = actual.astype(np.float32), expected.astype(np.float32)
    if kind in ("expect_almost_eq", "eq"):
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.where(np.isnan(a32) & np.isnan(e32), 0, np.where(a32 == e32, 0, np.abs(a32 - e32)))
        err = np.nan_to_num(err, nan=np.inf)
        bad = err > (ALMOST_EQ_TOL if kind == "expect_almost_eq" else CHECK_EQ_TOL)
    else:
        ulps = ulp_distance(actual, expected)
        bad = ulps > (MAX_ULP if kind == "expect_close" else 0)
        err = ulps
    if not bad.any():
        return None
    i = int(np.argmax(np.where(bad, err, -1)))
    return (f"{int(bad.sum())} of {actual.size} differ ({kind}); worst at {i}: {actual.ravel()[i]!r} vs "
            f"{expected.ravel()[i]!r} ({err.ravel()[i]} {'abs' if kind in ('expect_almost_eq', 'eq') else 'ulp'})")


def run_file(path: Path, target: str = "trn3") -> FileResult:
    """Compile and simulate one file and apply its checks; never raises (a crash is a failed file)."""
    result = _run_file(path, target)
    reason = EXPECTED_FAILURES.get(path.name)
    if reason is None:
        return result
    if result.ok:
        return FileResult(path, result.family, "failed", result.in_scope,
                          f"listed as an expected failure ({reason}) but it is ok now: remove it from "
                          "EXPECTED_FAILURES")
    return FileResult(path, result.family, "xfail", result.in_scope, f"expected failure: {reason}; "
                      f"{result.message}")


def _run_file(path: Path, target: str) -> FileResult:
    from trnsim.compiler import compile_for_conformance

    family = family_of(path)
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return FileResult(path, family, "failed", True, f"cannot read the file: {exc.strerror}")
    types = element_types(text)
    in_scope = bool(types) and types <= IN_SCOPE
    try:
        failures = compile_for_conformance(text, where=str(path), target=target, compare=compare)
    except UnsupportedError as exc:
        return FileResult(path, family, "unsupported", in_scope, exc.render().splitlines()[0])
    except TrnsimError as exc:
        return FileResult(path, family, "failed", in_scope, exc.render().splitlines()[0])
    except Exception as exc:  # a crash is a bug in trnsim: report it as this file's failure
        import traceback

        frame = traceback.extract_tb(exc.__traceback__)[-1]
        return FileResult(path, family, "failed", in_scope,
                          f"trnsim crashed: {type(exc).__name__}: {exc} (at {Path(frame.filename).name}:"
                          f"{frame.lineno})")
    if failures:
        return FileResult(path, family, "failed", in_scope, "; ".join(failures))
    return FileResult(path, family, "passed", in_scope)


def collect(paths: Iterable[Path]) -> Iterator[Path]:
    for p in paths:
        if p.is_dir():
            yield from sorted(p.rglob("*.mlir"))
        else:
            yield p


def summarize(results: Iterable[FileResult]) -> list[tuple[str, int, int, int, int]]:
    """(family, passed, unsupported, expected failures, failed) per op family; failed means not ``ok``."""
    table: dict[str, list[int]] = {}
    for r in results:
        row = table.setdefault(r.family, [0, 0, 0, 0])
        if r.status == "passed":
            row[0] += 1
        elif r.status == "xfail":
            row[2] += 1
        elif r.ok:
            row[1] += 1
        else:
            row[3] += 1
    return [(f, v[0], v[1], v[2], v[3]) for f, v in sorted(table.items())]
