"""`trnsim demo` (what `make demo` runs) completes and shows each part of the tour."""

from __future__ import annotations

import pytest

from trnsim.cli import main


def test_demo_runs_the_whole_tour(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    for part in ("spec sheet", "what each format keeps", "bit-exact", "Llama-3 70B training on 1,024 chips"):
        assert part in out, part
    assert "DIFFERS" not in out
