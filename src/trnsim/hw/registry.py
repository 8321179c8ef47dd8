"""Finding and loading presets: ``get("trn3")``, ``get("my/chip.toml")``, ``load(path)``, ``names()``.

A name is looked up as ``<name>.toml`` in the built-in ``presets/`` folder, then in each folder of
``TRNSIM_PRESET_PATH`` (':'-separated). A name ending in ``.toml`` is a path. Loaded specs are cached by
file path and modification time, so editing a user preset is picked up without restarting.

A spec's ``name`` is its file's stem, and the compiler and simulator refer to the target by that name. So
once ``get("some/dir/my_chip.toml")`` has loaded a file, the name ``my_chip`` resolves to that file for the
rest of the process (after the search path). A file named like a preset on the search path that
describes a different chip is named by its full path instead, so the name never means two chips.
"""

from __future__ import annotations

import difflib
import functools
import os
from dataclasses import replace
from pathlib import Path

from trnsim.config import settings
from trnsim.errors import SpecError
from trnsim.hw.schema import build, read_toml
from trnsim.hw.spec import ChipSpec

PRESET_DIR = Path(__file__).parent / "presets"

# NOTE: name -> preset file loaded by path, so that the spec's name (which is what the compiler, the kernel
# tracer and the simulator pass around as the target) resolves back to the same file
_loaded_by_path: dict[str, Path] = {}


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
    if not isinstance(name, str):  # pyright: ignore[reportUnnecessaryIsInstance]  # callers pass anything
        raise SpecError(f"a target must be a preset name or a path to a .toml file, not {name!r}",
                        hint="e.g. target='trn3' or target='my_chip.toml'; `trnsim hw list` shows the presets")
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
    if name in _loaded_by_path and _loaded_by_path[name].is_file():
        return _loaded_by_path[name]
    known = names()
    near = difflib.get_close_matches(name, known, n=1)
    raise SpecError(
        f"unknown hardware preset {name!r}",
        hint=(f"did you mean {near[0]!r}? " if near else "") + f"known presets: {', '.join(known)}; "
        "or pass a path to a .toml file, or add its folder to TRNSIM_PRESET_PATH",
    )


def get(name: str | None = None) -> ChipSpec:
    """The spec for a preset name or ``.toml`` path; ``None`` means ``settings.target`` (TRNSIM_TARGET)."""
    target = str(settings.target) if name is None else name
    path = resolve(target)
    spec = _load_cached(str(path.resolve()), path.stat().st_mtime_ns)
    return _named(spec, path.resolve()) if target.endswith(".toml") else spec


def _named(spec: ChipSpec, path: Path) -> ChipSpec:
    """``spec`` (loaded from the file ``path``) under a name that resolves back to it: its stem, remembered
    for later look-ups; or, when the stem is already a search-path preset describing a different chip, the
    path itself."""
    other = next((f / f"{spec.name}.toml" for f in search_path() if (f / f"{spec.name}.toml").is_file()), None)
    if other is not None and other.resolve() != path.resolve():
        known = _load_cached(str(other.resolve()), other.stat().st_mtime_ns)
        return spec if replace(known, source=spec.source) == spec else replace(spec, name=str(path))
    _loaded_by_path[spec.name] = path
    return spec


def load(path: str | os.PathLike[str]) -> ChipSpec:
    """Read and validate one preset file (not cached)."""
    file = Path(path)
    table = read_toml(file, "preset")
    return build(ChipSpec, table, file=str(file), extra={"name": file.stem, "source": str(file)})


@functools.lru_cache(maxsize=64)
def _load_cached(path: str, mtime_ns: int) -> ChipSpec:
    del mtime_ns  # part of the cache key only
    return load(path)
