"""`trnsim demo` (what `make demo` runs): the training job, short, twice (the second from the compile cache),
and the tour (`--tour`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_util import run


def test_training_demo_writes_everything_and_second_run_loads_from_cache(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(capsys, "demo", "--steps", "2", "--out", str(tmp_path))
    assert code == 0
    for part in ("training loss", "bf16", "MXFP6 matmuls", "FP8 e4m3 matmuls", "simulated step time",
                 "utilisation: tensor", "MFU", "78.6 TFLOP/s", "HBM traffic", "where the time goes", "gpt.py:"):
        assert part in out, part
    for name in ("bf16", "mxfp6", "fp8_e4m3"):
        assert (tmp_path / f"gpt-{name}.neff").stat().st_size > 0
        trace = json.loads((tmp_path / f"trace-{name}.json").read_text())
        tracks = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
        assert {"tensor", "vector", "scalar", "dma"} <= tracks
        assert any(e.get("ph") == "X" for e in trace["traceEvents"])
    assert (tmp_path / "demo.png").read_bytes().startswith(b"\x89PNG")

    code, out, _ = run(capsys, "demo", "--steps", "1", "--out", str(tmp_path / "again"))
    assert code == 0
    assert "3 of 3 programs loaded from the compile cache" in out
    assert "now in the compile cache" not in out  # the text of a compiled program


def test_demo_rejects_zero_steps(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "demo", "--steps", "0", "--out", str(tmp_path))
    assert code == 2 and "--steps 0" in err


def test_demo_tour(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "demo", "--tour")
    assert code == 0
    for part in ("spec sheet", "what each format keeps", "bit-exact", "Llama-3 70B training on 1,024 chips"):
        assert part in out, part
    assert "DIFFERS" not in out
