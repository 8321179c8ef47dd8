"""`trnsim compile | run | inspect` and `trnsim cache warm`: artifacts on disk, inputs from .npz, the compile
cache, and every kind of bad input as exit code 2 with the error's message."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cli_util import run

MODULE = """module @m {
  func.func public @main(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %two = stablehlo.constant dense<2.0> : tensor<4x8xf32>
    %0 = stablehlo.multiply %x, %two : tensor<4x8xf32>
    %1 = stablehlo.add %0, %y : tensor<4x8xf32>
    return %1 : tensor<4x8xf32>
  }
}
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = "file://" + str(tmp_path / "cache")
    monkeypatch.setenv("TRNSIM_CACHE_URL", url)
    return url


@pytest.fixture
def module(tmp_path: Path) -> Path:
    path = tmp_path / "model.mlir"
    path.write_text(MODULE)
    return path


@pytest.fixture
def artifact(capsys: pytest.CaptureFixture[str], module: Path, cache: str) -> Path:
    out = module.with_suffix(".neff")
    assert run(capsys, "compile", str(module), "-o", str(out))[0] == 0
    return out


def _inputs(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)
    return path


def test_compile_then_cache_hit_gives_the_same_bytes(capsys: pytest.CaptureFixture[str], module: Path, cache: str,
                                                     tmp_path: Path) -> None:
    code, out, _ = run(capsys, "compile", str(module), "-o", str(tmp_path / "a.neff"))
    assert code == 0 and "compiled in" in out and "estimated time" in out and "HBM peak" in out
    code, out, _ = run(capsys, "compile", str(module), "-o", str(tmp_path / "b.neff"))
    assert code == 0 and "loaded from the compile cache" in out
    assert (tmp_path / "a.neff").read_bytes() == (tmp_path / "b.neff").read_bytes()
    code, out, _ = run(capsys, "compile", str(module), "-o", str(tmp_path / "c.neff"), "--no-cache",
                       "--auto-cast", "all", "--dump-ir", str(tmp_path / "ir"))
    assert code == 0 and "cache not used" in out and "auto_cast=all" in out
    assert any((tmp_path / "ir").iterdir())


def test_run_outputs_trace_and_profile(capsys: pytest.CaptureFixture[str], artifact: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 4, 8)).astype(np.float32)
    inputs = _inputs(tmp_path / "in.npz", arg1=y, arg0=x)  # keys, not file order, decide
    code, out, _ = run(capsys, "run", str(artifact), "--inputs", str(inputs), "--outputs", str(tmp_path / "o.npz"),
                       "--trace", str(tmp_path / "t.json"))
    assert code == 0 and "4×8" in out and "simulated time" in out and "utilisation" in out
    with np.load(tmp_path / "o.npz") as got:
        np.testing.assert_array_equal(got["output0"], 2 * x + y)
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    positional = tmp_path / "pos.npz"
    np.savez(positional, x, y)  # arr_0, arr_1
    code, out, _ = run(capsys, "run", str(artifact), "--inputs", str(positional), "--json")
    assert code == 0 and json.loads(out)["outputs"]["output0"]["shape"] == [4, 8]


@pytest.mark.parametrize(("arrays", "message"), [
    ({"arg0": np.zeros((4, 8), np.float32)}, "missing inputs"),
    ({f"arg{i}": np.zeros((4, 8), np.float32) for i in range(3)}, "extra inputs"),
    ({"arg0": np.zeros((4, 8), np.float32), "arg1": np.zeros((8, 4), np.float32)}, "has shape (8, 4)"),
    ({"arg0": np.zeros((4, 8), np.float32), "arg1": np.full((4, 8), 0.1, np.float64)}, "element type float64"),
])
def test_run_rejects_bad_inputs(capsys: pytest.CaptureFixture[str], artifact: Path, tmp_path: Path,
                                arrays: dict[str, np.ndarray], message: str) -> None:
    code, _, err = run(capsys, "run", str(artifact), "--inputs", str(_inputs(tmp_path / "bad.npz", **arrays)))
    assert code == 2 and message in err and "hint:" in err, err


def test_inspect(capsys: pytest.CaptureFixture[str], artifact: Path) -> None:
    code, out, _ = run(capsys, "inspect", str(artifact))
    assert code == 0
    for part in ("format version", "trn3", "trnsim 0.1.0", "sha256", "tensor<4x8xf32>", "instructions",
                 "estimated time", "HBM peak", "auto_cast=none", "canonicalize"):
        assert part in out, part
    code, out, _ = run(capsys, "inspect", str(artifact), "--json")
    info = json.loads(out)
    assert info["target"] == "trn3" and len(info["content_hash"]) == 64 and info["inputs"][0]["shape"] == [4, 8]


def test_bad_artifacts_and_files_exit_2(capsys: pytest.CaptureFixture[str], artifact: Path, tmp_path: Path) -> None:
    data = artifact.read_bytes()
    (tmp_path / "trunc.neff").write_bytes(data[: len(data) // 2])
    flipped = bytearray(data)
    flipped[-10] ^= 0xFF
    (tmp_path / "corrupt.neff").write_bytes(bytes(flipped))
    inputs = _inputs(tmp_path / "in.npz", arg0=np.zeros((4, 8), np.float32), arg1=np.zeros((4, 8), np.float32))
    cases = [
        (("inspect", str(tmp_path / "trunc.neff")), "truncated"),
        (("run", str(tmp_path / "corrupt.neff"), "--inputs", str(inputs)), "content hash mismatch"),
        (("run", str(artifact), "--inputs", str(inputs), "--target", "trn2"), "built for target 'trn3'"),
        (("run", str(tmp_path / "nope.neff"), "--inputs", str(inputs)), "no such file"),
        (("run", str(artifact), "--inputs", str(tmp_path / "nope.npz")), "no such file"),
        (("compile", str(tmp_path / "nope.mlir")), "no such file"),
    ]
    for argv, message in cases:
        code, _, err = run(capsys, *argv)
        assert code == 2 and message in err, (argv, err)
    (tmp_path / "broken.mlir").write_text("module { this is not mlir }")
    code, _, err = run(capsys, "compile", str(tmp_path / "broken.mlir"))
    assert code == 2 and "not a valid StableHLO module" in err


SCRIPT = '''
MODULE = {module!r}

def trnsim_programs():
    return [("double-add", MODULE), ("double-add-bf16", MODULE, {{"auto_cast": "all"}})]
'''


def test_cache_warm_in_two_workers_then_all_cached(capsys: pytest.CaptureFixture[str], module: Path,
                                                   tmp_path: Path) -> None:
    other = tmp_path / "other.mlir"
    other.write_text(MODULE.replace("stablehlo.add", "stablehlo.subtract"))
    script = tmp_path / "programs.py"
    script.write_text(SCRIPT.format(module=MODULE))
    url = "file://" + str(tmp_path / "warm-cache")
    files = [str(module), str(other), str(script)]
    code, out, _ = run(capsys, "cache", "warm", *files, "--jobs", "2", "--url", url)
    # model.mlir and the script's "double-add" are one program: one compiles it, the other finds it
    assert code == 0 and "3 compiled, 1 already cached, 0 failed" in out and "2 worker processes" in out, out
    assert "programs.py:double-add-bf16" in out
    code, out, _ = run(capsys, "cache", "warm", *files, "--jobs", "1", "--url", url, "--json")
    result = json.loads(out)
    assert code == 0 and (result["compiled"], result["cached"]) == (0, 4)
    code, out, _ = run(capsys, "cache", "ls", "--url", url, "--json")
    assert len(json.loads(out)) == 3


def test_cache_warm_failures(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.mlir"
    bad.write_text("module { nonsense }")
    url = "file://" + str(tmp_path / "c")
    code, out, _ = run(capsys, "cache", "warm", str(bad), "--url", url)
    assert code == 1 and "FAILED" in out and "1 failed" in out
    (tmp_path / "empty.py").write_text("x = 1\n")
    code, _, err = run(capsys, "cache", "warm", str(tmp_path / "empty.py"), "--url", url)
    assert code == 2 and "defines no trnsim_programs()" in err
    code, _, err = run(capsys, "cache", "warm", str(tmp_path / "missing.mlir"), "--url", url)
    assert code == 2 and "no such file" in err


def test_compile_with_an_hbm_limit_shows_what_the_memory_plan_added(capsys: pytest.CaptureFixture[str],
                                                                    tmp_path: Path, cache: str) -> None:
    import jax
    import jax.numpy as jnp

    def late_exp(x: jax.Array, w: jax.Array) -> jax.Array:   # exp(x) is read again by the last step
        e = jnp.exp(x)
        return jnp.sum(e * jnp.sum(jnp.tanh(jnp.tanh(e @ w) @ w) @ w, axis=0)[None, :])

    spec = jax.ShapeDtypeStruct((512, 512), jnp.float32)     # 1 MiB each; the program's peak is 5 MiB
    path = tmp_path / "late.mlir"
    path.write_text(jax.jit(late_exp).lower(spec, spec).as_text())
    code, out, _ = run(capsys, "compile", str(path), "--no-cache")
    assert code == 0 and "HBM over capacity" not in out
    code, out, _ = run(capsys, "compile", str(path), "--no-cache", "--hbm-limit", "4.5 MiB", "--hbm-overflow", "remat")
    assert code == 0 and "HBM over capacity" in out and "recomputed 1 MiB" in out, out
    code, _, err = run(capsys, "compile", str(path), "--hbm-limit", "4 MiB", "--hbm-overflow", "remat")
    assert code == 2 and "allocate" in err
    code, _, err = run(capsys, "compile", str(path), "--hbm-limit", "4096")
    assert code == 2 and "missing unit" in err
