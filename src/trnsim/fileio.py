"""Writing files so that an interrupted run never leaves a partial one (the bottom layer, beside ``errors``).

``write_atomic`` writes to a temporary file in the same folder, optionally ``fsync``s it, gives it the mode an
ordinary new file gets (``mkstemp`` would leave it private, which breaks shared caches and reports), and
renames it over the target: readers see the old file or the whole new one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike[str], data: bytes, *, durable: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically (``durable``: also ``fsync`` before the rename)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out
