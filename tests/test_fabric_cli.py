"""`trnsim fabric`: the table, --json, and bad input as exit code 2 with a hint."""

from __future__ import annotations

import json

import pytest

import trnsim.cli as cli
from cli_util import run


def test_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fabric", "--target", "trn3", "--chips", "64", "--op", "all-reduce")
    assert code == 0
    assert "all-reduce on trn3: 64 ranks, stride 1, of 64 chips; ranks per level (16, 4)" in out
    for text in ("1 KiB", "4 GiB", "busbw (GB/s)", "hierarchical", "ring (us)", "GB/s = 1e9 bytes/s",
                 "torus2d 4x4", "Trn3 UltraServer"):
        assert text in out, text
    rows = [line for line in out.splitlines() if "iB " in line and "│" in line]
    assert len(rows) == 12  # 1 KiB .. 4 GiB in powers of 4


def test_dp_group_across_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fabric", "--target", "a100", "--chips", "256", "--stride", "8",
                       "--group-size", "32", "--factor", "2", "--min", "1MiB", "--max", "8MiB")
    assert code == 0 and "ranks per level (1, 32)" in out
    assert sum("MiB " in line for line in out.splitlines()) == 4


def test_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fabric", "--target", "trn3", "--chips", "64", "--op", "reduce-scatter",
                       "--algorithm", "ring", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["op"] == "reduce-scatter" and data["group"]["ranks_per_level"] == [16, 4]
    assert [lv["scope"] for lv in data["topology"]["levels"]] == ["node", "scaleup"]
    assert len(data["rows"]) == 12 and {r["algorithm"] for r in data["rows"]} == {"ring"}
    first = data["rows"][0]
    assert first["nbytes"] == 1024 and first["busbw"] == pytest.approx(first["algbw"] * 63 / 64)


def test_default_is_one_node_of_the_default_target(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fabric", "--max", "4KiB")
    assert code == 0 and "16 ranks" in out


@pytest.mark.parametrize("argv", [
    ["--target", "trn3", "--chips", "20"],                               # not whole nodes
    ["--target", "trn3", "--chips", "64", "--op", "allreduce"],          # unknown op
    ["--target", "trn3", "--chips", "64", "--algorithm", "kangaring"],   # unknown algorithm
    ["--target", "trn3", "--chips", "64", "--group-size", "8", "--stride", "16"],   # does not fit
    ["--target", "trn3", "--chips", "64", "--group-size", "24", "--op", "all-gather", "--algorithm", "rdh"],
    ["--target", "nope"],
    ["--target", "trn3", "--factor", "1"],
    ["--target", "mtia-v2", "--chips", "4"],                             # no scale-out link in the preset
])
def test_bad_input_exits_2_with_a_hint(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = run(capsys, "fabric", *argv)
    assert code == 2 and out == ""
    assert err.startswith("trnsim: error:") and "hint:" in err


def test_help_has_a_working_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["fabric", "--help"])
    out = capsys.readouterr().out
    assert "trnsim fabric --target trn3 --chips 64 --op all-reduce" in out
    code, _, _ = run(capsys, "fabric", "--target", "trn3", "--chips", "64", "--op", "all-reduce")
    assert code == 0
