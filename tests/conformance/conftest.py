"""Where the conformance corpus lives: $TRNSIM_CONFORMANCE_DIR, else ``shared/conformance/stablehlo`` beside the
repository or beside any folder above it (a CI checkout may sit deeper than the working copy), else the
workplace's ``/work/shared``."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXTRA = Path(__file__).resolve().parent / "extra"


def corpus_dir() -> Path:
    if os.environ.get("TRNSIM_CONFORMANCE_DIR"):
        return Path(os.environ["TRNSIM_CONFORMANCE_DIR"])
    candidates = [folder / "shared" / "conformance" / "stablehlo" for folder in REPO.parents]
    candidates.append(Path("/work/shared/conformance/stablehlo"))
    return next((c for c in candidates if c.is_dir()), candidates[0])


def corpus_files() -> list[Path]:
    d = corpus_dir()
    return sorted(d.rglob("*.mlir")) if d.is_dir() else []
