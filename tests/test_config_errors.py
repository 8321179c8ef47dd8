"""Settings (env vars, validation) and the error hierarchy."""

from __future__ import annotations

import pytest

import trnsim
from trnsim.config import KNOBS, help_text, settings
from trnsim.errors import ConfigError, NumericsError, TrnsimError, UnsupportedError


def test_defaults_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRNSIM_TARGET", raising=False)
    assert settings.target == "trn3"
    monkeypatch.setenv("TRNSIM_SEED", "0x10")
    assert settings.seed == 16
    monkeypatch.setenv("TRNSIM_COLOR", "off")
    assert settings.color is False


def test_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRNSIM_SEED", "twelve")
    with pytest.raises(ConfigError) as info:
        _ = settings.seed
    text = str(info.value)
    assert "TRNSIM_SEED" in text and "'twelve'" in text and "hint:" in text


def test_override_restores() -> None:
    before = settings.target
    with settings.override(target="trn2"):
        assert settings.target == "trn2"
    assert settings.target == before
    with pytest.raises(ConfigError), settings.override(nonsense="1"):
        pass


def test_unknown_setting_attribute() -> None:
    with pytest.raises(AttributeError, match="known"):
        _ = settings.nonsense


def test_help_lists_every_knob() -> None:
    text = help_text()
    assert all(k.env in text for k in KNOBS)


def test_hierarchy_and_rendering() -> None:
    assert issubclass(UnsupportedError, trnsim.CompileError) and issubclass(NumericsError, ValueError)
    err = TrnsimError("bad thing", where="file.toml:chip.cores", hint="fix it")
    assert str(err) == "file.toml:chip.cores: bad thing\n  hint: fix it"
    assert isinstance(err, Exception)
