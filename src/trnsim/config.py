"""Typed, validated settings. Each knob is defined once: name, environment variable, type, default, help.

Values are read from the environment when asked for (so tests and users can change them at run time) and
validated on every read: a bad value raises ``ConfigError`` naming the variable, the value and what is
expected. ``trnsim --help`` lists every knob from this table.

    >>> from trnsim.config import settings
    >>> settings.target
    'trn3'
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trnsim.errors import ConfigError


def _default_cache_url() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return "file://" + str(Path(base) / "trnsim")


def _parse_bool(raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("expected a boolean (1/0, true/false, yes/no, on/off)")


def _parse_int(raw: str) -> int:
    try:
        return int(raw.strip(), 0)
    except ValueError:
        raise ValueError("expected an integer") from None


def _parse_str(raw: str) -> str:
    return raw.strip()


@dataclass(frozen=True)
class Knob:
    """One setting: its environment variable, parser, default and help text."""

    name: str
    env: str
    parse: Callable[[str], Any]
    default: Callable[[], Any]
    help: str

    def read(self) -> Any:
        raw = os.environ.get(self.env)
        if raw is None:
            return self.default()
        try:
            return self.parse(raw)
        except ValueError as exc:
            raise ConfigError(
                f"invalid value {raw!r}: {exc}",
                where=f"environment variable {self.env}",
                hint=f"{self.help}; unset it to use the default",
            ) from None


KNOBS: tuple[Knob, ...] = (
    Knob("target", "TRNSIM_TARGET", _parse_str, lambda: "trn3",
         "default hardware target: a preset name (`trnsim hw list`) or a path to a preset .toml file"),
    Knob("preset_path", "TRNSIM_PRESET_PATH", _parse_str, lambda: "",
         "extra folders searched for preset files, separated by ':'"),
    Knob("cache_url", "TRNSIM_CACHE_URL", _parse_str, _default_cache_url,
         "compile cache location: any fsspec URL (file://, memory://, s3://)"),
    Knob("dump_ir", "TRNSIM_DUMP_IR", _parse_str, lambda: "",
         "if set, a folder where the compiler writes the IR after every pass"),
    Knob("seed", "TRNSIM_SEED", _parse_int, lambda: 0,
         "default seed for stochastic rounding and other random choices"),
    Knob("color", "TRNSIM_COLOR", _parse_bool, lambda: True,
         "colour in terminal output (1/0)"),
)

_BY_NAME: dict[str, Knob] = {k.name: k for k in KNOBS}


class Settings:
    """Attribute access to the knobs: ``settings.cache_url``. Read on access, validated every time."""

    def __getattr__(self, name: str) -> Any:
        knob = _BY_NAME.get(name)
        if knob is None:
            raise AttributeError(f"no trnsim setting named {name!r}; known: {', '.join(_BY_NAME)}")
        return knob.read()

    @contextmanager
    def override(self, **values: str) -> Generator[None]:
        """Temporarily set knobs (by name) to raw string values, as if from the environment."""
        saved: dict[str, str | None] = {}
        try:
            for name, raw in values.items():
                knob = _BY_NAME.get(name)
                if knob is None:
                    raise ConfigError(f"no setting named {name!r}", hint=f"known: {', '.join(_BY_NAME)}")
                saved[knob.env] = os.environ.get(knob.env)
                os.environ[knob.env] = raw
            yield
        finally:
            for env, old in saved.items():
                if old is None:
                    os.environ.pop(env, None)
                else:
                    os.environ[env] = old


settings = Settings()


def help_text() -> str:
    """The environment-variable section of ``trnsim --help``."""
    width = max(len(k.env) for k in KNOBS)
    lines = ["environment variables:"]
    lines += [f"  {k.env.ljust(width)}  {k.help}" for k in KNOBS]
    return "\n".join(lines)
