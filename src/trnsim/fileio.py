"""Writing files so that an interrupted run never leaves a partial one (the bottom layer, beside ``errors``).

``write_atomic`` writes to a temporary file in the same folder, optionally ``fsync``s it, gives it the mode an
ordinary new file gets (``mkstemp`` would leave it private, which breaks shared caches and reports), and
renames it over the target: readers see the old file or the whole new one.

A symlink is written through (its target is replaced, the link stays), as an ordinary write would. A target
that exists but is not a regular file (a folder, fifo, socket or device) is refused: renaming over it would
replace the device node or fifo with a regular file.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from trnsim.errors import TrnsimError

_HINT = "choose a writable file path (its folder must exist or be creatable, with free space)"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def write_atomic(path: str | os.PathLike[str], data: bytes, *, durable: bool = False,
                 error: type[TrnsimError] = TrnsimError) -> Path:
    """Write ``data`` to ``path`` atomically (``durable``: also ``fsync`` before the rename).

    Raises ``error`` (a ``TrnsimError`` subclass; the caller picks the fitting one, e.g. ``ArtifactError``)
    when ``path`` is a folder or a special file, or cannot be written; nothing existing is changed then.
    """
    out = Path(path)
    # NOTE: write through a symlink to its target; os.replace on the link itself would replace the link
    real = Path(os.path.realpath(out)) if out.is_symlink() else out
    try:
        st = os.stat(real)
    except FileNotFoundError:
        pass
    except NotADirectoryError:
        raise error("cannot write: a folder on its path is a file", where=str(out), hint=_HINT) from None
    except OSError as exc:
        raise error(f"cannot write: {_reason(exc)}", where=str(out), hint=_HINT) from None
    else:
        if stat.S_ISDIR(st.st_mode):
            raise error("cannot write: it is a directory", where=str(out),
                        hint=f"give a file name, e.g. {out / 'output'}")
        if not stat.S_ISREG(st.st_mode):
            raise error("cannot write: it is not a regular file (a fifo, socket or device); trnsim writes files "
                        "atomically and will not replace it", where=str(out), hint="give a regular file path")
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise error(f"cannot create its folder {real.parent}: {_reason(exc)}", where=str(out),
                    hint=_HINT) from None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    except OSError as exc:
        raise error(f"cannot write in {real.parent}: {_reason(exc)}", where=str(out), hint=_HINT) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, real)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise error(f"cannot write: {_reason(exc)}", where=str(out), hint=_HINT) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out
