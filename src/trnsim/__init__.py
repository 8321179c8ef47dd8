"""trnsim: Trainium3 in software.

Layers, lowest first (imports point one way): errors/config → numerics → hw → (isa → sim → dsl/kernels →
frontend/ir → compiler → runtime) → fabric → cluster → cli/report. See ARCHITECTURE.md.
"""

from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING

from trnsim.errors import ArtifactError as ArtifactError
from trnsim.errors import CacheError as CacheError
from trnsim.errors import CompileError as CompileError
from trnsim.errors import ConfigError as ConfigError
from trnsim.errors import NumericsError as NumericsError
from trnsim.errors import SimError as SimError
from trnsim.errors import SpecError as SpecError
from trnsim.errors import TrnsimError as TrnsimError
from trnsim.errors import UnsupportedError as UnsupportedError

if TYPE_CHECKING:
    from trnsim.compiler import CompiledProgram as CompiledProgram
    from trnsim.dsl import KernelResult as KernelResult
    from trnsim.dsl import kernel as kernel
    from trnsim.dsl import run_kernel as run_kernel
    from trnsim.frontend.jit import jit as jit
    from trnsim.runtime.program import compile as compile
    from trnsim.runtime.program import load_artifact as load_artifact
    from trnsim.sim import Device as Device
    from trnsim.sim.profile import Profile as Profile
    from trnsim.sim.tensorspec import TensorSpec as TensorSpec

_LAZY = {"Device": "trnsim.sim", "kernel": "trnsim.dsl", "run_kernel": "trnsim.dsl", "KernelResult": "trnsim.dsl",
         "TensorSpec": "trnsim.sim.tensorspec", "Profile": "trnsim.sim.profile",
         "compile": "trnsim.runtime.program", "load_artifact": "trnsim.runtime.program",
         "CompiledProgram": "trnsim.compiler", "jit": "trnsim.frontend.jit"}


def __getattr__(name: str) -> object:
    # NOTE: lazy, so `import trnsim` stays cheap and the lower layers never import the simulator
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'trnsim' has no attribute {name!r}")
