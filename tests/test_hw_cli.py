"""`trnsim hw list | show | compare`, text and --json, through trnsim.cli.main."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import trnsim.cli as cli
from cli_util import run
from trnsim import hw


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "hw", "list")
    assert code == 0
    for name in hw.names():
        assert name in out
    assert "trn3 (default)" in out and "NVIDIA" in out


def test_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "hw", "list", "--json")
    data = json.loads(out)
    assert code == 0 and [e["name"] for e in data] == hw.names()
    assert set(data[0]) == {"name", "designer", "summary", "source", "default"}


def test_show(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "hw", "show", "trn3")
    assert code == 0
    for text in ("[core.tensor]", "2.4 GHz", "32 MiB", "192 GB", "5.2 TB/s", "torus2d 4x4", "[links[0]]",
                 "629.1 TFLOP/s", "2517 TFLOP/s", "5033 TFLOP/s"):
        assert text in out, text


def test_show_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "hw", "show", "h100", "--json")
    data = json.loads(out)
    assert code == 0 and data["name"] == "h100"
    assert data["memory"]["capacity"] == 80 * 10**9
    assert data["peak_flops"]["dense"]["bf16"] == 989e12
    assert data["derived_peaks"] is False


def test_show_default_and_target(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    _, out, _ = run(capsys, "hw", "show", "--json")
    assert json.loads(out)["name"] == "trn3"
    path = tmp_path / "mine.toml"
    path.write_text(hw.resolve("trn2").read_text(encoding="utf-8"), encoding="utf-8")
    _, out, _ = run(capsys, "hw", "show", "--target", str(path), "--json")
    assert json.loads(out)["name"] == "mine"
    _, out, _ = run(capsys, "hw", "show", str(path), "--json")
    assert json.loads(out)["name"] == "mine"


def test_compare(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "hw", "compare", "trn3", "trn2", "h200", "b200")
    assert code == 0
    for text in ("designer", "target workload", "memory bandwidth", "bf16 TFLOP/s", "software stack", "TDP",
                 "629.1 (1258 sparse)", "989 (1979 sparse)", "2250", "141 GB", "96 GiB", "NVLink 4",
                 "torus2d 4x4", "700 W"):
        assert text in out, text


def test_compare_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(hw.resolve("trn1").read_text(encoding="utf-8"), encoding="utf-8")
    code, out, _ = run(capsys, "hw", "compare", "trn3", "h100", "--target", str(path), "--json")
    chips = json.loads(out)["chips"]
    assert code == 0 and [c["name"] for c in chips] == ["trn3", "h100", "mine"]
    trn3, h100, mine = chips
    assert trn3["peak_flops"]["bf16"]["dense"] == pytest.approx(629.1456e12)
    assert trn3["peak_flops"]["fp8_e4m3"]["sparse"] == pytest.approx(5033.1648e12)
    assert h100["peak_flops"]["int4"] is None  # not supported: null, key still present
    assert mine["peak_flops"]["bf16"]["sparse"] is None  # NC-v2 has no sparse mode
    assert h100["memory"]["bytes"] == 80 * 10**9 and h100["power"]["tdp_w"] == 700
    assert trn3["power"]["tdp_w"] is None
    assert set(trn3) == set(h100) == set(mine)  # stable keys


def test_unknown_name_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "hw", "show", "trn4")
    assert code == 2 and not out
    assert "unknown hardware preset 'trn4'" in err and "did you mean 'trn3'" in err
    code, _, err = run(capsys, "hw", "compare", "trn3", "h1000")
    assert code == 2 and "did you mean 'h100'" in err


def test_broken_preset_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    text = hw.resolve("trn3").read_text(encoding="utf-8")
    path.write_text(text.replace('"192 GB"', '"192"'), encoding="utf-8")
    code, _, err = run(capsys, "hw", "show", str(path))
    assert code == 2 and f"{path}: memory.capacity" in err and "missing unit" in err


@pytest.mark.parametrize("sub", ["list", "show", "compare"])
def test_help_shows_a_working_example(capsys: pytest.CaptureFixture[str], sub: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["hw", sub, "--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    example = next(line.strip() for line in out.splitlines() if line.strip().startswith(f"trnsim hw {sub}"))
    argv = example.split()[1:]
    if "--target" in argv or "|" in argv:
        return  # needs a user file / a shell pipe
    assert cli.main(argv) == 0


def test_hw_alone_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "hw")
    assert code == 0 and "compare" in out and "examples" in out
