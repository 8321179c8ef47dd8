"""Every file of the StableHLO conformance corpus passes (in scope) or raises UnsupportedError (out of scope);
the summary table by op family; the command's exit codes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cli_util import run
from conformance.conftest import EXTRA, corpus_dir, corpus_files
from trnsim.conformance import EXPECTED_FAILURES, FileResult, run_file, summarize

FILES = corpus_files()
NO_CORPUS = f"no conformance corpus at {corpus_dir()} (set TRNSIM_CONFORMANCE_DIR to the stablehlo testdata folder)"
_RESULTS: dict[Path, FileResult] = {}


def _result(path: Path) -> FileResult:
    if path not in _RESULTS:
        _RESULTS[path] = run_file(path)
    return _RESULTS[path]


@pytest.mark.skipif(not FILES, reason=NO_CORPUS)
@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_file(path: Path) -> None:
    r = _result(path)
    assert r.ok, f"{r.status} (in scope: {r.in_scope}): {r.message}"
    assert not r.message.startswith("trnsim crashed"), r.message


@pytest.mark.skipif(not FILES, reason=NO_CORPUS)
def test_summary_table(capsys: pytest.CaptureFixture[str]) -> None:
    from trnsim.cli.conformance import print_summary

    results = [_result(p) for p in FILES]
    print_summary(results)
    table = capsys.readouterr().out
    with capsys.disabled():
        print("\n" + table)
    rows = summarize(results)
    assert sum(r[4] for r in rows) == 0, "failed files: " + ", ".join(r.path.name for r in results if not r.ok)
    assert sum(r[1] for r in rows) + sum(r[2] for r in rows) == len(FILES)
    assert "total" in table and "scatter_add" in table
    # every in-scope file passes: unsupported only for f64, complex (and what they pull in)
    assert all(r.status == "passed" for r in results if r.in_scope)


def test_expected_failures_empty() -> None:
    assert EXPECTED_FAILURES == {}, "the expected-failure list must shrink to empty (issue 5 §3)"


EXTRA_FILES = sorted(EXTRA.glob("*.mlir"))


@pytest.mark.parametrize("path", EXTRA_FILES, ids=[p.name for p in EXTRA_FILES])
def test_extra(path: Path) -> None:
    """Hand-written programs in the same form for ops the corpus sample lacks."""
    r = run_file(path)
    assert r.status == "passed", r.message


# ---- the command --------------------------------------------------------------------------------------

GOOD = """
module @jit_main {
  func.func public @main() -> (tensor<3xf32> {jax.result_info = ""}) {
    %0 = call @inputs() : () -> tensor<3xf32>
    %1 = call @expected() : () -> tensor<3xf32>
    %2 = stablehlo.add %0, %0 : tensor<3xf32>
    stablehlo.custom_call @check.expect_eq(%2, %1) {has_side_effect = true} : (tensor<3xf32>, tensor<3xf32>) -> ()
    return %2 : tensor<3xf32>
  }
  func.func private @inputs() -> (tensor<3xf32> {jax.result_info = ""}) {
    %c = stablehlo.constant dense<[1.0, -2.5, 0x7FC00000]> : tensor<3xf32>
    return %c : tensor<3xf32>
  }
  func.func private @expected() -> (tensor<3xf32> {jax.result_info = ""}) {
    %c = stablehlo.constant dense<[2.0, EXPECTED, 0x7FC00000]> : tensor<3xf32>
    return %c : tensor<3xf32>
  }
}
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_cli_passes_and_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _write(tmp_path, "add_float32_3.mlir", GOOD.replace("EXPECTED", "-5.0"))
    code, out, _ = run(capsys, "conformance", str(good))
    assert code == 0, out
    assert "1 passed" in out
    bad = _write(tmp_path, "add_float32_3_bad.mlir", GOOD.replace("EXPECTED", "-5.5"))
    code, out, _ = run(capsys, "conformance", str(tmp_path))
    assert code == 1
    assert "FAILED" in out and "add_float32_3_bad.mlir" in out and "1 of 3 differ" in out
    code, out, _ = run(capsys, "conformance", str(bad), "--json")
    assert code == 1 and '"failed": 1' in out


def test_cli_out_of_scope_f64_is_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = GOOD.replace("EXPECTED", "-5.0").replace("f32", "f64").replace("0x7FC00000", "0x7FF8000000000000")
    f = _write(tmp_path, "add_float64_3.mlir", text)
    code, out, _ = run(capsys, "conformance", str(f), "-v")
    assert code == 0, out
    assert "unsupported" in out and "f64" in out


def test_cli_in_scope_unsupported_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fft = "stablehlo.fft %0, type = FFT, length = [3]"
    text = GOOD.replace("EXPECTED", "-5.0").replace("stablehlo.add %0, %0", fft)
    f = _write(tmp_path, "fft_float32_3.mlir", text)
    code, out, _ = run(capsys, "conformance", str(f))
    assert code == 1, out


def test_module_entry_point_and_jobs(tmp_path: Path) -> None:
    from trnsim.conformance.__main__ import main

    for i in range(3):
        _write(tmp_path, f"add{i}_float32_3.mlir", GOOD.replace("EXPECTED", "-5.0"))
    assert main([str(tmp_path), "--jobs", "2"]) == 0
    assert main([str(tmp_path / "missing")]) == 2


def test_cli_ops(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "conformance", "--ops")
    assert code == 0
    assert "dot_general" in out and "fft" in out and "Rejected" in out


@pytest.mark.skipif(not FILES or shutil.which("true") is None, reason=NO_CORPUS)
def test_cli_on_a_corpus_folder_sample(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for p in FILES[:: max(1, len(FILES) // 20)]:
        shutil.copy(p, tmp_path / p.name)
    code, out, _ = run(capsys, "conformance", str(tmp_path), "--jobs", "2")
    assert code == 0, out
    assert "StableHLO conformance by op family" in out
