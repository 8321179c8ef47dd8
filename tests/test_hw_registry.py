"""Finding presets: by name, by .toml path, via TRNSIM_TARGET and TRNSIM_PRESET_PATH; caching."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trnsim import hw
from trnsim.config import settings
from trnsim.errors import SpecError

TRN3 = hw.resolve("trn3").read_text(encoding="utf-8")


def user_preset(folder: Path, name: str = "mychip", sbuf: str = "32 MiB") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.toml"
    path.write_text(TRN3.replace('bytes = "32 MiB"', f'bytes = "{sbuf}"'), encoding="utf-8")
    return path


def test_default_is_settings_target() -> None:
    assert hw.get().name == "trn3"
    with settings.override(target="h100"):
        assert hw.get().name == "h100"


def test_target_may_be_a_path(tmp_path: Path) -> None:
    path = user_preset(tmp_path)
    with settings.override(target=str(path)):
        assert hw.get().name == "mychip"


def test_load_a_user_file(tmp_path: Path) -> None:
    spec = hw.load(user_preset(tmp_path, sbuf="24 MiB"))
    assert spec.name == "mychip" and spec.core is not None and spec.core.sbuf.bytes == 24 * 2**20


def test_get_with_a_toml_path(tmp_path: Path) -> None:
    path = user_preset(tmp_path)
    assert hw.get(str(path)).source.endswith("mychip.toml")


def test_preset_path_folders_are_searched(tmp_path: Path) -> None:
    user_preset(tmp_path / "a", "chip_a")
    user_preset(tmp_path / "b", "chip_b")
    with settings.override(preset_path=f"{tmp_path / 'a'}{os.pathsep}{tmp_path / 'b'}"):
        assert hw.get("chip_b").name == "chip_b"
        assert {"chip_a", "chip_b", "trn3"} <= set(hw.names())
        assert hw.search_path()[0] == hw.PRESET_DIR
    assert "chip_a" not in hw.names()


def test_builtins_win_over_user_folders(tmp_path: Path) -> None:
    user_preset(tmp_path, "trn2")  # a file named like a built-in
    with settings.override(preset_path=str(tmp_path)):
        assert hw.get("trn2").source == str(hw.PRESET_DIR / "trn2.toml")


def test_unknown_name_suggests_nearest_and_lists_known() -> None:
    with pytest.raises(SpecError) as err:
        hw.get("trn4")
    message = str(err.value)
    assert "unknown hardware preset 'trn4'" in message
    assert "did you mean 'trn3'" in message
    assert "h100" in message and "TRNSIM_PRESET_PATH" in message


def test_missing_toml_path() -> None:
    with pytest.raises(SpecError, match="does not exist"):
        hw.get("no/such/chip.toml")


def test_get_is_cached_and_sees_edits(tmp_path: Path) -> None:
    path = user_preset(tmp_path)
    first = hw.get(str(path))
    assert hw.get(str(path)) is first
    path.write_text(TRN3.replace('bytes = "32 MiB"', 'bytes = "16 MiB"'), encoding="utf-8")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    second = hw.get(str(path))
    assert second is not first and second.core is not None and second.core.sbuf.bytes == 16 * 2**20


def test_specs_are_frozen() -> None:
    spec = hw.get("trn3")
    with pytest.raises(AttributeError):
        spec.cores = 4  # type: ignore[misc]
