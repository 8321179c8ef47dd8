"""Where the conformance corpus lives: ``<repo>/../shared/conformance/stablehlo`` or $TRNSIM_CONFORMANCE_DIR."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXTRA = Path(__file__).resolve().parent / "extra"


def corpus_dir() -> Path:
    return Path(os.environ.get("TRNSIM_CONFORMANCE_DIR") or REPO.parent / "shared" / "conformance" / "stablehlo")


def corpus_files() -> list[Path]:
    d = corpus_dir()
    return sorted(d.rglob("*.mlir")) if d.is_dir() else []
