"""One exception hierarchy for all of trnsim.

Every error says *what* went wrong, *where* (a file and key, a StableHLO location, an instruction and
engine, an address) and *what to do next*. The CLI turns a ``TrnsimError`` into a short message and a
non-zero exit code; anything else escaping is a bug in trnsim.

    TrnsimError
    ├── ConfigError        a setting (env var, option) has a bad value
    ├── SpecError          a hardware preset is malformed or inconsistent
    ├── NumericsError      a number format, rounding mode or quantization request is invalid
    ├── CompileError       a program cannot be compiled (carries the source location)
    │   └── UnsupportedError   ... because it uses something trnsim does not support (yet)
    ├── SimError           the simulator hit an illegal access or instruction
    ├── ArtifactError      a .neff artifact is truncated, corrupt or for another target/version
    └── CacheError         the compile cache cannot be used
"""

from __future__ import annotations


class TrnsimError(Exception):
    """Base class. ``where`` locates the problem; ``hint`` says what to do next."""

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None) -> None:
        self.message = message
        self.where = where
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text

    def __str__(self) -> str:
        return self.render()


class ConfigError(TrnsimError):
    """A configuration value (environment variable, command-line option) is invalid."""


class SpecError(TrnsimError):
    """A hardware specification or preset file is malformed: names the file and key."""


class NumericsError(TrnsimError, ValueError):
    """An unknown format, rounding mode or an impossible quantization request."""


class CompileError(TrnsimError):
    """A program cannot be compiled; ``where`` carries the source location."""


class UnsupportedError(CompileError):
    """The program uses an op, attribute or dtype trnsim does not support."""


class SimError(TrnsimError):
    """The simulator rejected an access or instruction: names instruction, engine and address."""


class ArtifactError(TrnsimError):
    """An artifact file is truncated, corrupted, or built for another version or target."""


class CacheError(TrnsimError):
    """The compile cache cannot be read or written."""


__all__ = [
    "ArtifactError",
    "CacheError",
    "CompileError",
    "ConfigError",
    "NumericsError",
    "SimError",
    "SpecError",
    "TrnsimError",
    "UnsupportedError",
]
