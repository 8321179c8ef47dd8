"""Running the `trnsim` command in-process for tests."""

from __future__ import annotations

import pytest

from trnsim.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``trnsim ARGV...`` → (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err
