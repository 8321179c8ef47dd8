"""Profiles through ``Device.run`` (functional+timing and timing-only), shape descriptions, labels, the
critical path, the Chrome trace, and ``trnsim profile``."""

from __future__ import annotations

import doctest
import importlib
import itertools
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import trnsim
from trnsim.cli import main
from trnsim.errors import SimError
from trnsim.isa import DmaCopy, Matmul, Memset, ProgramBuilder, TensorTranspose, tile
from trnsim.sim.profile import Profile
from trnsim.sim.tensorspec import TensorSpec
from trnsim.sim.timing import matmul_program

RNG = np.random.default_rng(0)


class ShapeDtype:
    """What jax.ShapeDtypeStruct looks like to trnsim: .shape and .dtype (a dtype object with .name)."""

    def __init__(self, shape: tuple[int, ...], dtype: Any) -> None:
        self.shape, self.dtype = shape, dtype


@pytest.fixture(scope="module")
def small() -> tuple[Any, dict[str, np.ndarray]]:
    program = matmul_program(256, 384, 640, out_dtype="fp32")
    return program, {"aT": RNG.standard_normal((384, 256)).astype(np.float32),
                     "b": RNG.standard_normal((384, 640)).astype(np.float32)}


def test_functional_and_timing_only_give_the_same_timeline(small: tuple[Any, dict[str, np.ndarray]]) -> None:
    program, inputs = small
    device = trnsim.Device()
    timed = device.run(program, inputs, timing=True)
    plain = device.run(program, inputs)
    assert plain.profile is None and timed.profile is not None
    assert np.array_equal(timed["c"], plain["c"])  # semantics in timeline order compute the same
    import ml_dtypes

    bf = {k: v.astype(ml_dtypes.bfloat16).astype(np.float64) for k, v in inputs.items()}
    np.testing.assert_allclose(timed["c"], bf["aT"].T @ bf["b"], rtol=1e-4, atol=1e-3)
    shapes = device.run(program, {"aT": TensorSpec((384, 256), "bf16"), "b": ShapeDtype((384, 640), np.float32)},
                        timing_only=True)
    assert isinstance(shapes, Profile)
    assert shapes == timed.profile
    tl, tl2 = shapes.timeline, timed.profile.timeline
    assert (tl.start, tl.end, tl.effect) == (tl2.start, tl2.end, tl2.effect)
    assert len(timed.log) == program_size(program)


def program_size(program: Any) -> int:
    return sum(len(s) for s in program.streams.values())


def test_timing_only_touches_no_memory() -> None:
    device = trnsim.Device()
    profile = device.run(matmul_program(1024, 2048, 1024), timing_only=True)
    assert profile.total_seconds > 0
    assert device.chips[0].hbm.allocated_bytes == 0
    profile2 = device.run(matmul_program(1024, 2048, 1024), [np.zeros((2048, 1024))], timing_only=True)
    assert profile2 == profile  # an array only lends its shape
    assert device.chips[0].hbm.allocated_bytes == 0


def test_shape_descriptions_are_checked() -> None:
    device, program = trnsim.Device(), matmul_program(256, 256, 512)
    with pytest.raises(SimError, match="shape"):
        device.run(program, {"aT": TensorSpec((128, 256), "bf16")}, timing_only=True)
    with pytest.raises(SimError, match="no tensor named"):
        device.run(program, {"x": TensorSpec((256, 256), "bf16")}, timing_only=True)
    with pytest.raises(SimError, match="not a shape description"):
        device.run(program, [3.0], timing_only=True)
    assert TensorSpec.like(ShapeDtype((2, 3), np.dtype("float32"))) == TensorSpec((2, 3), "fp32")
    assert TensorSpec((4,), "bfloat16").dtype == "bf16" and TensorSpec((4,), "bf16").nbytes == 8
    with pytest.raises(SimError, match="unknown dtype"):
        TensorSpec((4,), "float128")
    assert trnsim.TensorSpec is TensorSpec


def test_profile_fields_and_units() -> None:
    p = trnsim.Device().run(matmul_program(512, 1024, 1024), timing_only=True)
    assert set(p.engine_utilization) == {"tensor", "vector", "scalar", "gpsimd", "sync"}
    assert all(0 <= u <= 1 for u in [*p.engine_utilization.values(), *p.queue_utilization.values()])
    assert len(p.queue_utilization) == 16 and p.engine_busy["sync"] == 0  # DMA triggers take no engine time
    assert p.flops == p.flops_by_dtype["bf16"] == 2 * 512 * 1024 * 1024 and p.transpose_flops == 0
    assert p.hfu == p.mfu == pytest.approx(p.flops / p.peak_flops / p.total_seconds)
    assert "bf16 dense" in p.peak_name and "78.6 TFLOP/s" in p.peak_name
    assert p.hbm_bytes == 2 * (512 * 1024 + 1024 * 1024 * (512 // 512)) + 2 * 512 * 1024
    assert p.hbm_bandwidth == pytest.approx(p.hbm_bytes / p.total_seconds)
    assert p.engine_busy["tensor"] <= p.total_seconds
    summary = p.to_dict()
    json.dumps(summary)
    assert summary["hfu"] == p.hfu and summary["flops"] == p.flops


def test_transposes_count_in_hfu_not_mfu() -> None:
    b = ProgramBuilder()
    src = tile("sbuf", "bf16", (128, 128))
    b.emit("tensor", Matmul(tile("psum", "fp32", (128, 512)), src, tile("sbuf", "bf16", (128, 512), offset=256)),
           TensorTranspose(tile("psum", "bf16", (128, 128), offset=2048), src))
    p = trnsim.Device().run(b.build(), timing_only=True)
    assert p.transpose_flops == 2 * 128 * 128 * 128 and p.flops == 2 * 128 * 128 * 512
    assert p.hfu == pytest.approx(p.mfu * (512 + 128) / 512)


def test_labels_group_instructions() -> None:
    program = matmul_program(256, 256, 512)
    labels = {(e, i): ("load" if e == "sync" else e) for e, i, _ in program.instructions()}
    p = trnsim.Device().run(program, timing_only=True, labels=labels)
    assert set(p.labels) == {"load", "tensor", "vector", "scalar"}
    assert p.labels["tensor"].flops == p.flops and p.labels["load"].dma_bytes > 0
    assert sum(s.instructions for s in p.labels.values()) == p.instructions
    assert p.labels["tensor"].busy["tensor"] == pytest.approx(p.engine_busy["tensor"])
    assert 0 < p.labels["tensor"].seconds <= p.total_seconds
    trace = p.to_chrome_trace()
    assert {ev["args"]["label"] for ev in trace["traceEvents"] if ev["ph"] == "X"} == set(p.labels)


def test_critical_path_is_a_chain_ending_at_the_end() -> None:
    p = trnsim.Device().run(matmul_program(1024, 2048, 1024), timing_only=True)
    path = p.critical_path()
    assert path.steps[0].via == "program start"
    last = path.steps[-1]
    assert last.end <= p.total_seconds and p.total_seconds - last.end < 1e-6
    for a, b in itertools.pairwise(path.steps):
        assert a.start <= b.start
    assert sum(path.by_track.values()) <= p.total_seconds * (1 + 1e-9)
    assert path.bound == "tensor" and path.by_engine["tensor"] > 0.6 * p.total_seconds


def check_trace(trace: dict[str, Any]) -> None:
    """Structure of a Chrome/Perfetto trace: required keys, sorted, non-overlapping complete events per track."""
    events = trace["traceEvents"]
    names = {ev["tid"]: ev["args"]["name"] for ev in events if ev["ph"] == "M" and ev["name"] == "thread_name"}
    timed = [ev for ev in events if ev["ph"] != "M"]
    assert [ev["ts"] for ev in timed] == sorted(ev["ts"] for ev in timed)
    per_track: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for ev in timed:
        assert {"name", "ph", "ts", "pid", "tid"} <= set(ev) and ev["ph"] in ("X", "i")
        assert ev["tid"] in names
        if ev["ph"] == "X":
            assert ev["dur"] >= 0 and "instruction" in ev["args"]
            per_track[ev["tid"]].append(ev)
    for evs in per_track.values():
        for a, b in itertools.pairwise(evs):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-6, (a, b)


def test_chrome_trace_structure(tmp_path: Path) -> None:
    p = trnsim.Device().run(matmul_program(512, 512, 1024), timing_only=True)
    trace = p.to_chrome_trace()
    check_trace(trace)
    x = [ev for ev in trace["traceEvents"] if ev["ph"] == "X"]
    assert len(x) == p.instructions
    assert {ev["name"] for ev in x} == {"matmul", "dma_copy", "tensor_copy"}
    mm = next(ev for ev in x if ev["name"] == "matmul")
    assert mm["args"]["K"] == 128 and mm["args"]["N"] == 512 and "stationary=sbuf:bf16" in mm["args"]["instruction"]
    dma = next(ev for ev in x if ev["name"] == "dma_copy")
    assert dma["tid"] >= 5 and dma["args"]["bytes"] > 0
    path = p.save_trace(tmp_path / "t.json")
    assert json.loads(path.read_text()) == json.loads(json.dumps(trace))
    assert max(ev["ts"] + ev.get("dur", 0) for ev in x) == pytest.approx(p.total_seconds * 1e6)


def test_racy_program_runs_in_timeline_order() -> None:
    """Without a semaphore, a store overtakes the long memset it should wait for: the timed run computes
    what the timeline implies (the old bytes), the untimed one its fixed engine order (the new ones)."""
    b = ProgramBuilder()
    y = b.tensor("y", (128, 512), "bf16", "output")
    big = tile("sbuf", "bf16", (128, 4, 16384))  # 16384 VectorE cycles ≈ 13.7 us; the store ≈ 6 us
    b.emit("vector", Memset(big, 2.0))
    b.emit("sync", DmaCopy(y.ap(), tile("sbuf", "bf16", (128, 512))))
    device = trnsim.Device()
    timed, plain = device.run(b.build(), timing=True), device.run(b.build())
    assert [e.instruction.mnemonic for e in timed.log] == ["dma_copy", "memset"]
    assert (timed["y"] == 0).all() and (plain["y"] == 2).all()


# --- CLI -----------------------------------------------------------------------------------------------------


def test_cli_profile_example(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = tmp_path / "m.json"
    assert main(["profile", "--example", "matmul", "--m", "512", "--k", "512", "--n", "1024",
                 "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    for word in ("total time", "HFU / MFU", "78.6 TFLOP/s", "achieved HBM bandwidth", "dma queue 0", "bound by"):
        assert word in out
    check_trace(json.loads(trace.read_text()))


def test_cli_profile_isa_file_and_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    program = matmul_program(256, 256, 512)
    path = tmp_path / "k.isa"
    path.write_text(str(program))
    assert main(["profile", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["instructions"] == program_size(program) and data["critical_path_bound"] in ("dma", "tensor")
    assert data["total_seconds"] == trnsim.Device().run(program, timing_only=True).total_seconds
    assert main(["profile"]) == 2 and "either an ISA file or --example" in capsys.readouterr().err


def test_cli_roofline_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "r.png"
    assert main(["profile", "--example", "matmul", "--m", "256", "--k", "256", "--n", "512", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_roofline_without_matplotlib(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    assert main(["profile", "--example", "matmul", "--plot", str(tmp_path / "r.png")]) == 2
    assert "pip install matplotlib" in capsys.readouterr().err


@pytest.mark.parametrize("module", ["trnsim.sim.timing", "trnsim.sim.tensorspec"])
def test_docstring_examples_run(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
