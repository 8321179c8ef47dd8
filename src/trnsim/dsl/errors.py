"""Errors of the kernel language, located at the line of kernel code that caused them.

A kernel is ordinary Python run at trace time, so the useful place to report a mistake is the kernel's own
line, not the DSL's internals: ``user_location`` walks the stack to the first frame outside ``trnsim/dsl``
(a kernel in ``trnsim/kernels`` is user code too) and ``fail`` raises ``KernelError`` there, with the source
line quoted, as Triton renders its compilation errors.

    >>> try:
    ...     fail("partition dimension 256 > 128", "tile the rows by 128")
    ... except KernelError as e:
    ...     print(e.hint)
    tile the rows by 128
"""

from __future__ import annotations

import inspect
import linecache
import os
from typing import NamedTuple, NoReturn

from trnsim.errors import CompileError

_DSL_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


class Location(NamedTuple):
    """A line of kernel source."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"

    def source(self) -> str:
        return linecache.getline(self.file, self.line).strip()


class KernelError(CompileError):
    """A kernel cannot be traced: ``where`` is the kernel's source line."""


def user_location() -> Location:
    """The innermost stack frame that is not kernel-language code."""
    frame = inspect.currentframe()
    assert frame is not None  # CPython always has frames
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_DSL_DIR):
        frame = frame.f_back
    return Location(frame.f_code.co_filename, frame.f_lineno)


def fail(message: str, hint: str, at: Location | None = None) -> NoReturn:
    """Raise ``KernelError`` at the kernel line now executing (or at ``at``), quoting that line."""
    loc = at or user_location()
    src = loc.source()
    raise KernelError(f"{message}\n    {src}" if src else message, where=str(loc), hint=hint)
