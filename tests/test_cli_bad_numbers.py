"""Impossible sizes and non-finite numbers on the command line: a clear error (exit 2) at once, never a hang,
a traceback or invalid JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import trnsim.cli as cli
from cli_util import run
from trnsim.cli._output import print_json
from trnsim.cluster.config import _divisors  # pyright: ignore[reportPrivateUsage]
from trnsim.fabric import MAX_CHIPS

HUGE = "1000000000000"


def strict_json(text: str) -> object:
    def bad(constant: str) -> object:
        raise AssertionError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=bad)


@pytest.mark.parametrize("argv", [
    ("estimate", "--model", "llama3-70b", "--chips", HUGE),
    ("fabric", "--chips", HUGE),
    ("tco", "--model", "llama3-8b", "--tokens", "1T", "--chips", HUGE, "--targets", "trn3"),
    ("plan", "--model", "llama3-8b", "--chips", HUGE),
])
def test_too_many_chips(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2 and "Traceback" not in err
    assert f"{MAX_CHIPS:,}" in err and "1,000,000,000,000" in err


def test_huge_model_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "huge.toml"
    f.write_text(f"layers = {HUGE}\nhidden = 4096\nheads = 32\nkv_heads = 8\nffn = 14336\nvocab = 128256\n"
                 "seq_len = 8192\n")
    code, _, err = run(capsys, "estimate", "--model", str(f), "--chips", "8")
    assert code == 2 and "layers" in err and str(f) in err and "at most" in err


def test_divisors_are_exact_and_fast_for_large_n() -> None:
    for n in (1, 2, 12, 36, 97, 128, 1000):
        assert _divisors(n) == [d for d in range(1, n + 1) if n % d == 0]
    assert _divisors(10**12)[-3:] == [250_000_000_000, 500_000_000_000, 10**12]  # sqrt(n) steps, not n


@pytest.mark.parametrize("gamma", ["nan", "inf", "-1"])
def test_gamma_must_be_finite(capsys: pytest.CaptureFixture[str], gamma: str) -> None:
    code, out, err = run(capsys, "fabric", "--chips", "64", "--gamma", gamma, "--json")
    assert code == 2 and out == "" and "--gamma" in err


@pytest.mark.parametrize("tokens", ["1e400", "1.2.3"])
def test_tokens_must_be_finite(capsys: pytest.CaptureFixture[str], tokens: str) -> None:
    code, out, err = run(capsys, "estimate", "--model", "llama3-70b", "--chips", "64", "--tokens", tokens, "--json")
    assert code == 2 and out == "" and "--tokens" in err


def test_json_is_strict(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "numerics", "quantize", "--format", "fp8_e4m3", "--json", "--", "nan", "inf", "1")
    assert code == 0
    data = strict_json(out)
    assert isinstance(data, dict) and data["inputs"] == [None, None, 1.0]
    print_json({"a": math.nan, "b": [math.inf, 2.5], "c": (1, -math.inf)})
    assert strict_json(capsys.readouterr().out) == {"a": None, "b": [None, 2.5], "c": [1, None]}


@pytest.mark.parametrize("argv", [
    ("estimate", "--model", "{file}", "--chips", "8"),
    ("hw", "show", "--target", "{file}"),
    ("tco", "--model", "llama3-8b", "--tokens", "1T", "--chips", "64", "--targets", "trn3", "--prices", "{file}"),
])
def test_non_utf8_files(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                        argv: tuple[str, ...]) -> None:
    f = tmp_path / "binary.toml"
    f.write_bytes(b"\xff\xfe\x00")
    code, _, err = run(capsys, *(a.replace("{file}", str(f)) for a in argv))
    assert code == 2 and "not UTF-8" in err and str(f) in err


def test_ctrl_c_is_a_short_message(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(argv: object) -> int:
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "_main", interrupted)
    code, out, err = run(capsys, "hw", "list")
    assert code == 130 and out == "" and err.strip() == "trnsim: interrupted"


def test_tco_names_each_targets_problem_on_one_line_with_a_hint_that_fits() -> None:
    import contextlib
    import io

    from trnsim.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["tco", "--model", "llama3-8b", "--tokens", "1e12", "--target", "trn3", "--chips",
                     "1000000000000"])
    text = err.getvalue()
    assert code != 0
    assert "  - trn3: 1 problem with the training setup: chips = 1,000,000,000,000" in text
    assert "change what each line names" in text
