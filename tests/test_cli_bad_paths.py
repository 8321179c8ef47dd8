"""The CLI given impossible paths: a folder, a file where a folder should be, a fifo, a .npy, a module file
without the .mlir extension. Each gets a one-line trnsim error (exit code 2), never a traceback, and nothing
already saved is lost."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from cli_util import run

MODULE = ("module @m { func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> { "
          "%0 = stablehlo.sine %a : tensor<4xf32>\n return %0 : tensor<4xf32> } }\n")


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.mlir").write_text(MODULE)
    (tmp_path / "afile").write_text("keep")
    assert run(capsys, "compile", "m.mlir", "-o", "m.neff")[0] == 0
    np.savez(tmp_path / "in.npz", arg0=np.ones(4, np.float32))
    return tmp_path


@pytest.mark.parametrize("name", ["model.txt", "model"])
def test_compile_module_without_mlir_extension(work: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    (work / name).write_text(MODULE)
    code, _, err = run(capsys, "compile", name, "-o", "x.neff")
    assert code == 0, err
    assert (work / "x.neff").is_file()


def test_compile_a_directory(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (work / "d").mkdir()
    code, _, err = run(capsys, "compile", "d")
    assert code == 2 and "is a directory" in err and "Traceback" not in err


def test_compile_output_is_a_directory_or_fifo(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (work / "outdir").mkdir()
    code, _, err = run(capsys, "compile", "m.mlir", "-o", "outdir")
    assert code == 2 and "is a directory" in err
    os.mkfifo(work / "fifo.neff")
    code, _, err = run(capsys, "compile", "m.mlir", "-o", "fifo.neff")
    assert code == 2 and "not a regular file" in err
    assert stat.S_ISFIFO(os.lstat(work / "fifo.neff").st_mode)


def test_run_outputs_exact_name_and_bad_places(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "run", "m.neff", "--inputs", "in.npz", "--outputs", "result")
    assert code == 0, err
    assert (work / "result").is_file() and not (work / "result.npz").exists()
    with np.load(work / "result") as npz:
        np.testing.assert_allclose(npz["output0"], np.sin(np.ones(4, np.float32)), rtol=1e-6)
    (work / "outdir").mkdir()
    for bad, why in (("outdir", "is a directory"), ("afile/out.npz", "a folder on its path is a file")):
        code, _, err = run(capsys, "run", "m.neff", "--inputs", "in.npz", "--outputs", bad)
        assert code == 2 and why in err and "Traceback" not in err
    assert (work / "afile").read_text() == "keep" and not (work / "outdir.npz").exists()


def test_run_trace_to_a_directory(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (work / "tdir").mkdir()
    code, _, err = run(capsys, "run", "m.neff", "--inputs", "in.npz", "--trace", "tdir")
    assert code == 2 and "is a directory" in err


def test_run_inputs_npy(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    np.save(work / "in.npy", np.ones(4, np.float32))
    code, _, err = run(capsys, "run", "m.neff", "--inputs", "in.npy")
    assert code == 0, err
    np.save(work / "bad.npy", np.ones(5, np.float32))
    code, _, err = run(capsys, "run", "m.neff", "--inputs", "bad.npy")
    assert code == 2 and "has shape (5,)" in err


def test_dump_ir_unwritable(work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = run(capsys, "compile", "m.mlir", "-o", "d.neff", "--dump-ir", "afile")
    assert code == 2 and "cannot write the IR dump" in err and "not a folder" in err
    monkeypatch.setenv("TRNSIM_DUMP_IR", str(work / "afile" / "sub"))
    code, _, err = run(capsys, "compile", "m.mlir", "-o", "d.neff", "--no-cache")
    assert code == 2 and "TRNSIM_DUMP_IR" in err
    assert (work / "afile").read_text() == "keep"


def test_demo_out_is_a_file(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "demo", "--out", "afile", "--steps", "1")
    assert code == 2 and "cannot create the output folder" in err and "--out afile" in err


def test_profile_plot_unwritable(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    code, _, err = run(capsys, "profile", "--example", "matmul", "--m", "128", "--k", "128", "--n", "128",
                       "--plot", "afile/x.png")
    assert code == 2 and "afile/x.png" in err and "Traceback" not in err


@pytest.mark.parametrize("sub", ["ls", "stat", "clear"])
def test_cache_commands_on_a_file(work: Path, capsys: pytest.CaptureFixture[str], sub: str) -> None:
    code, _, err = run(capsys, "cache", sub, "--url", "afile")
    assert code == 2 and "is a file, not a folder" in err
    assert (work / "afile").read_text() == "keep"


def test_cache_warm_jobs(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "cache", "warm", "m.mlir", "--jobs", "-3")
    assert code == 2 and "--jobs -3" in err
    code, out, _ = run(capsys, "cache", "warm", "m.mlir", "--jobs", "100000", "--json")
    assert code == 0 and json.loads(out)["workers"] == 1


def test_cache_warm_script_returns_none(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (work / "s.py").write_text("def trnsim_programs():\n    return None\n")
    code, _, err = run(capsys, "cache", "warm", "s.py")
    assert code == 2 and "returned a NoneType" in err
