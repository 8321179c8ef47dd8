"""``@kernel`` (trace a Python function over HBM tensors into a ``Program``) and ``run_kernel``.

A kernel's positional parameters are its HBM inputs: at call time each is a numpy array (its shape and
dtype taken from it), ``typed(array, dtype)`` (the values stored as an ISA dtype numpy lacks, e.g. bf16,
mxfp8_e4m3, int4), or ``None`` (an optional input left out; the function receives ``None``). To trace
without data (``Kernel.compile``), any shape description with ``.shape`` and ``.dtype`` will do. Keyword
arguments are compile-time constants. The function declares its outputs with ``hbm_tensor`` and returns
them (one, or a tuple). Tracing runs the function once per distinct (target, input shapes and dtypes,
constants): the program is cached, as NKI caches kernels by their arguments, and verified against the
target as it is built (each instruction as it is emitted, by the ISA verifier's rules; then the semaphores).

    >>> import numpy as np, trnsim
    >>> from trnsim import dsl
    >>> @trnsim.kernel
    ... def double(x):
    ...     out = dsl.hbm_tensor(x.shape, x.dtype)
    ...     dsl.store(out, dsl.multiply(dsl.load(x), 2.0))
    ...     return out
    >>> trnsim.run_kernel(double, np.ones((4, 3), np.float32)).outputs[0].tolist()[0]
    [2.0, 2.0, 2.0]
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, overload, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trnsim import hw
from trnsim.dsl.errors import KernelError, Location, fail
from trnsim.dsl.tensor import Tensor
from trnsim.dsl.trace import Trace, check_dtype, current
from trnsim.errors import SimError
from trnsim.isa.dtypes import DTYPES
from trnsim.isa.program import ROUNDINGS, Program
from trnsim.isa.verify import check_semaphores
from trnsim.sim.device import Device, Executed
from trnsim.sim.profile import Profile

# numpy / ml_dtypes dtype name → ISA dtype of an input (float64/int64 narrow to the engines' 32-bit types)
NUMPY_DTYPES: dict[str, str] = {
    "float32": "fp32", "float64": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2", "int8": "int8", "uint8": "uint8", "int16": "int16", "uint16": "uint16",
    "int32": "int32", "uint32": "uint32", "int64": "int32", "bool": "uint8",
}


@dataclass(frozen=True)
class Typed:
    """An input array to be stored in HBM as the ISA ``dtype`` (any numeric values; the device rounds them
    on the way in, so the float values of an ``mxfp8_e4m3`` input are its element values)."""

    data: NDArray[Any]
    dtype: str

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape) or (1,)


def typed(array: ArrayLike, dtype: str) -> Typed:
    """``array`` as a kernel input of ISA ``dtype`` (e.g. ``typed(x, "bf16")``, ``typed(codes, "int4")``)."""
    return Typed(np.asarray(array), dtype)


Arg = ArrayLike | Typed | None  # or a shape description: anything with .shape and .dtype (compile only)


def isa_dtype(dtype: object) -> str:
    name = str(getattr(dtype, "name", dtype))
    return name if name in DTYPES else NUMPY_DTYPES.get(name, name)


Spec = tuple[tuple[int, ...], str]  # (shape, ISA dtype)


@runtime_checkable
class ShapeDescription(Protocol):
    """``trnsim.TensorSpec``, ``jax.ShapeDtypeStruct``, …: a shape and a dtype without data."""

    @property
    def shape(self) -> Sequence[int]: ...
    @property
    def dtype(self) -> object: ...


INT32_RANGE = (-(2**31), 2**31 - 1)


def is_array(arg: object) -> bool:
    """Data rather than a shape description: a numpy array, or another library's array that numpy converts
    (``__array__`` or ``__dlpack__``: jax, torch), although it has ``.shape`` and ``.dtype`` too."""
    return isinstance(arg, np.ndarray) or hasattr(arg, "__array__") or hasattr(arg, "__dlpack__")


def _host_array(arg: object) -> NDArray[Any]:
    if not hasattr(arg, "__array__") and hasattr(arg, "__dlpack__"):
        return np.from_dlpack(arg)  # pyright: ignore[reportArgumentType]  (has __dlpack__, checked above)
    return np.asarray(arg)


def as_typed(arg: object, what: str = "an input") -> tuple[tuple[int, ...], str, NDArray[Any] | None] | None:
    """(shape, ISA dtype, data or None) of a kernel argument (``what`` names it in errors)."""
    if arg is None:
        return None
    if isinstance(arg, Typed):
        return arg.shape, arg.dtype, arg.data
    if not is_array(arg) and isinstance(arg, ShapeDescription):
        return tuple(int(n) for n in arg.shape), isa_dtype(arg.dtype), None
    data = _host_array(arg)
    dtype = NUMPY_DTYPES.get(data.dtype.name)
    if dtype is None:
        raise KernelError(f"no ISA dtype for numpy {data.dtype} ({what})", hint="say which: dsl.typed(x, 'bf16')")
    if data.dtype == np.int64 and data.size:
        # NOTE: int64 narrows to the engines' int32; a value that does not fit would saturate silently
        lo, hi = int(data.min()), int(data.max())
        if lo < INT32_RANGE[0] or hi > INT32_RANGE[1]:
            bad = lo if lo < INT32_RANGE[0] else hi
            raise KernelError(f"int64 value {bad} of {what} does not fit int32 (the engines' widest integer)",
                              hint="pass values in -2**31..2**31-1, or a float array if they are not indices")
    return tuple(data.shape) or (1,), dtype, data


@dataclass(frozen=True)
class Compiled:
    """A traced, verified kernel: its program, input and output tensor names, source line per instruction."""

    program: Program
    inputs: tuple[str | None, ...]  # per positional argument (None: argument left out)
    outputs: tuple[str, ...]
    locations: Mapping[tuple[str, int], Location]
    target: str
    name: str = "kernel"

    def labels(self) -> dict[tuple[str, int], str]:
        """Profile labels: every instruction tagged with its kernel line (``name:line``), so the profile's
        per-label breakdown shows where in the kernel the time goes."""
        return {key: f"{self.name}:{loc.line}" for key, loc in self.locations.items()}


class Kernel:
    """A traceable kernel function; see the module docstring."""

    def __init__(self, fn: Callable[..., Any], rounding: str = "rne", seed: int = 0) -> None:
        if rounding not in ROUNDINGS:
            raise KernelError(f"unknown rounding {rounding!r}", hint=f"use one of: {', '.join(ROUNDINGS)}")
        self.fn, self.rounding, self.seed = fn, rounding, seed
        self._signature = inspect.signature(fn)
        self.params = [p.name for p in self._signature.parameters.values()
                       if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self._cache: dict[Hashable, Compiled] = {}
        functools.update_wrapper(self, fn)

    def forget_traces(self) -> None:
        """Drop the traces cached per signature: the next call traces afresh (what a new process does)."""
        self._cache.clear()

    def __repr__(self) -> str:
        return f"<trnsim kernel {self.fn.__qualname__}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Inside another kernel: inline this one (its tensors are the caller's)."""
        current()
        return self.fn(*args, **kwargs)

    def compile(self, *args: Arg, target: str = "trn3", **params: Any) -> Compiled:
        """Trace (or fetch from the cache) the program for these inputs and constants."""
        typed_args = [as_typed(a, self.argument(i)) for i, a in enumerate(args)]
        return self.compile_specs([None if t is None else t[:2] for t in typed_args], target, params)

    def argument(self, i: int) -> str:
        """How errors name positional argument ``i``."""
        return f"{self.fn.__qualname__}'s {self.params[i]}" if i < len(self.params) else f"argument {i}"

    def signature(self) -> str:
        """The kernel's parameters as a call would give them: tensors, then constants (for hints)."""
        sig = self._signature
        bare = sig.replace(parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
                           return_annotation=sig.empty)
        return f"{self.fn.__qualname__}{bare}"

    def check_arguments(self, n_tensors: int, params: Mapping[str, Any]) -> None:
        """``KernelError`` unless ``n_tensors`` positional tensors and the keyword ``params`` fit the kernel's
        signature (checked before tracing, so a mistake is not a ``TypeError`` from inside the function)."""
        if n_tensors > len(self.params):
            raise KernelError(f"{self.fn.__qualname__} takes {len(self.params)} tensors, got {n_tensors}",
                              hint="pass one array per positional parameter; constants as keywords")
        try:
            self._signature.bind(*[None] * n_tensors, **params)
        except TypeError as e:
            raise KernelError(f"{self.fn.__qualname__}: {e}",
                              hint=f"call it as {self.signature()}: tensors positionally, constants as keywords"
                              ) from None

    def compile_specs(self, specs: Sequence[Spec | None], target: str, params: dict[str, Any]) -> Compiled:
        """``compile`` from (shape, ISA dtype) per positional argument."""
        self.check_arguments(len(specs), params)
        key: Hashable = None
        try:
            key = (target, tuple(specs), tuple(sorted(params.items())))
            hash(key)
        except TypeError:
            key = None  # unhashable constants: trace every time
        if key is not None and key in self._cache:
            return self._cache[key]
        compiled = self._trace(specs, target, params)
        if key is not None:
            self._cache[key] = compiled
        return compiled

    def _trace(self, specs: Sequence[Spec | None], target: str, params: dict[str, Any]) -> Compiled:
        spec = hw.get(target)
        with Trace(spec) as tr:
            inputs = [None if s is None else tr.declare(name, s[0], check_dtype(s[1]), "input")
                      for name, s in zip(self.params, specs, strict=False)]
            result = self.fn(*inputs, **params)
            code = self.fn.__code__
            outputs = _output_names(result, {t.buffer.name for t in inputs if t is not None},
                                    Location(code.co_filename, code.co_firstlineno))
            program = tr.program(outputs, self.rounding, self.seed)
            locations = dict(tr.locations)
        # NOTE: every instruction passed the verifier's rules as it was emitted (Trace.emit), so only the
        # program-wide check is left; verify() would check each instruction a second time
        check_semaphores(program)
        names = tuple(None if t is None else t.buffer.name for t in inputs)
        return Compiled(program, names, outputs, locations, target, self.fn.__name__)


def _output_names(result: object, inputs: set[str], at: Location) -> tuple[str, ...]:
    items = result if isinstance(result, tuple | list) else () if result is None else (result,)
    names: list[str] = []
    for item in items:
        if not isinstance(item, Tensor) or item.on_chip or item.buffer.name in inputs:
            fail(f"a kernel returns HBM tensors it declared, not {item!r}",
                 "declare outputs with dsl.hbm_tensor(shape, dtype), store into them, return them", at)
        names.append(item.buffer.name)
    return tuple(names)


@overload
def kernel(fn: Callable[..., Any], /) -> Kernel: ...
@overload
def kernel(*, rounding: str = "rne", seed: int = 0) -> Callable[[Callable[..., Any]], Kernel]: ...
def kernel(
    fn: Callable[..., Any] | None = None, /, *, rounding: str = "rne", seed: int = 0
) -> Kernel | Callable[[Callable[..., Any]], Kernel]:
    """Decorator: ``@kernel`` or ``@kernel(rounding="stochastic", seed=1)`` (how engines round on write)."""
    if fn is not None:
        return Kernel(fn, rounding, seed)

    def wrap(f: Callable[..., Any]) -> Kernel:
        return Kernel(f, rounding, seed)
    return wrap


@dataclass(frozen=True)
class KernelResult:
    """The outputs of one run (numpy arrays of the values, in return order) and what produced them.

    ``profile`` is the timeline when the run was timed (``timing=True``, or timing-only when the inputs
    were shape descriptions: then ``outputs`` is empty and ``log`` too)."""

    outputs: list[NDArray[Any]]
    program: Program
    log: tuple[Executed, ...]
    compiled: Compiled
    profile: Profile | None = None

    def __getitem__(self, i: int) -> NDArray[Any]:
        return self.outputs[i]


def run_kernel(
    k: Kernel | Callable[..., Any], /, *arrays: Arg, target: str = "trn3", timing: bool = False,
    strict_reads: bool = False, **params: Any
) -> KernelResult:
    """Trace ``k`` for these inputs (cached), run it on a fresh simulated device, return its outputs.

    Inputs are numpy arrays, ``typed(...)``, or arrays of other libraries (anything with ``__array__`` or
    ``__dlpack__``, e.g. jax arrays). ``timing=True`` also returns the timeline (``.profile``). When every
    input is a shape description (``trnsim.TensorSpec(shape, dtype)``, ``jax.ShapeDtypeStruct``: a
    ``.shape`` and a ``.dtype`` and no data) the run is timing-only: nothing is computed, so large problems
    simulate in seconds. ``strict_reads=True`` runs on a ``Device(strict_reads=True)``: a read of SBUF,
    PSUM or HBM bytes that nothing wrote (a tile loaded from nowhere, ``accumulate=True`` into a fresh
    PSUM tile) is a ``SimError`` at the kernel line that reads it, not zeros. It is off by default: the
    device then tracks a written flag per byte, which makes runs slower."""
    if not isinstance(k, Kernel):
        raise KernelError(f"run_kernel takes a @trnsim.kernel function, not {k!r}", hint="decorate it")
    args = [as_typed(a, k.argument(i)) for i, a in enumerate(arrays)]
    compiled = k.compile_specs([None if a is None else a[:2] for a in args], target, params)
    described = [a is not None and a[2] is None for a in args]
    if any(described):
        if not all(d for d, a in zip(described, args, strict=True) if a is not None):
            raise KernelError("some inputs are arrays and some are shape descriptions",
                              hint="pass all arrays (a functional run) or all shape descriptions (timing only)")
        profile = Device(target).run(compiled.program, check=False, timing_only=True, labels=compiled.labels())
        return KernelResult([], compiled.program, (), compiled, profile)
    feed: dict[str, NDArray[Any]] = {}
    for name, a in zip(compiled.inputs, args, strict=True):
        if name is None or a is None or a[2] is None:
            continue
        data = a[2]
        if (data.dtype.kind in "fV" and data.dtype.name not in ("float32", "float64")
                and not (data.dtype.name == "bfloat16" and a[1] == "bf16")):  # bf16 codes are copied as they are
            # NOTE: ml_dtypes' bfloat16/fp8 are kind "V", not "f"
            data = data.astype(np.float32)  # exact for bf16/fp16/fp8; the device's fast paths take fp32
        feed[name] = data
    try:
        result = Device(target, strict_reads=strict_reads).run(  # verified when compiled
            compiled.program, feed, check=False, timing=timing, labels=compiled.labels() if timing else None)
    except SimError as e:
        m = re.match(r"(\w+)\[(\d+)\]", e.where or "")
        loc = compiled.locations.get((m[1], int(m[2]))) if m else None
        if loc is None:
            raise
        raise SimError(e.message, where=f"{loc} ({e.where})", hint=e.hint) from e
    return KernelResult([result.outputs[n] for n in compiled.outputs], compiled.program, result.log, compiled,
                        result.profile)
