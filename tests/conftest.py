"""Test-wide settings: the compile cache lives in a temporary folder, never in the user's cache."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _private_compile_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    folder: Path = tmp_path_factory.getbasetemp() / "trnsim-cache"
    monkeypatch.setenv("TRNSIM_CACHE_URL", "file://" + str(folder))
