"""Finding and loading presets: ``get("trn3")``, ``get("my/chip.toml")``, ``load(path)``, ``names()``.

A name is looked up as ``<name>.toml`` in the built-in ``presets/`` folder, then in each folder of
``TRNSIM_PRESET_PATH`` (':'-separated). A name ending in ``.toml`` is a path. Loaded specs are cached by
file path and modification time, so editing a user preset is picked up without restarting.
"""

from __future__ import annotations

import difflib
import functools
import os
from pathlib import Path

from trnsim.config import settings
from trnsim.errors import SpecError
from trnsim.hw.schema import build, read_toml
from trnsim.hw.spec import ChipSpec

PRESET_DIR = Path(__file__).parent / "presets"


def search_path() -> list[Path]:
    """Folders searched for ``<name>.toml``, in order: built-in presets, then ``TRNSIM_PRESET_PATH``."""
    extra = [Path(p).expanduser() for p in str(settings.preset_path).split(os.pathsep) if p.strip()]
    return [PRESET_DIR, *extra]


def names() -> list[str]:
    """Every preset name on the search path (built-ins first, each group sorted; duplicates dropped)."""
    seen: list[str] = []
    for folder in search_path():
        for name in sorted(p.stem for p in folder.glob("*.toml")) if folder.is_dir() else ():
            if name not in seen:
                seen.append(name)
    return seen


def resolve(name: str) -> Path:
    """The file a preset name (or ``.toml`` path) refers to; ``SpecError`` with suggestions if none."""
    if name.endswith(".toml"):
        path = Path(name).expanduser()
        if not path.is_file():
            raise SpecError(f"preset file {name!r} does not exist",
                            hint="check the path, or use a preset name from `trnsim hw list`")
        return path
    for folder in search_path():
        path = folder / f"{name}.toml"
        if path.is_file():
            return path
    known = names()
    near = difflib.get_close_matches(name, known, n=1)
    raise SpecError(
        f"unknown hardware preset {name!r}",
        hint=(f"did you mean {near[0]!r}? " if near else "") + f"known presets: {', '.join(known)}; "
        "or pass a path to a .toml file, or add its folder to TRNSIM_PRESET_PATH",
    )


def get(name: str | None = None) -> ChipSpec:
    """The spec for a preset name or ``.toml`` path; ``None`` means ``settings.target`` (TRNSIM_TARGET)."""
    path = resolve(str(settings.target) if name is None else name)
    return _load_cached(str(path.resolve()), path.stat().st_mtime_ns)


def load(path: str | os.PathLike[str]) -> ChipSpec:
    """Read and validate one preset file (not cached)."""
    file = Path(path)
    table = read_toml(file, "preset")
    return build(ChipSpec, table, file=str(file), extra={"name": file.stem, "source": str(file)})


@functools.lru_cache(maxsize=64)
def _load_cached(path: str, mtime_ns: int) -> ChipSpec:
    del mtime_ns  # part of the cache key only
    return load(path)
