"""``trnsim.jit``: run a JAX function on a simulated NeuronCore.

On each call the wrapper looks up the arguments' signature (pytree structure, shapes, dtypes, static
arguments); a new signature is lowered with ``jax.jit(fn).lower(*args)`` and compiled with
``trnsim.compile`` (kept in memory per signature), then the program runs on the flattened arguments and the
outputs are put back into the function's output structure as numpy arrays. ``last_profile`` holds the
timed profile of the last call.
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import numpy as np

from trnsim.compiler.api import CompiledProgram
from trnsim.errors import CompileError, ConfigError

# NOTE: the Python scalar types jax.jit takes as (weakly typed) array arguments
_SCALARS = (bool, int, float, complex, np.generic)


def _positional_count(fn: Callable[..., Any]) -> int | None:
    """How many positional parameters ``fn`` takes (None: any number, or the signature is unknown)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


def _static_argnums(fn: Callable[..., Any], argnums: int | Sequence[int] | None) -> tuple[int, ...]:
    """``static_argnums`` as jax.jit takes it (an int or a sequence of ints; negative ones count from the
    end), normalised against ``fn``'s positional parameters when it has a fixed number of them."""
    name = getattr(fn, "__name__", "fn")
    where = f"trnsim.jit({name})"
    if argnums is None:
        return ()
    given: object = (argnums,) if isinstance(argnums, numbers.Integral) else argnums
    try:
        items = list(cast("Iterable[object]", given))
    except TypeError:
        raise ConfigError(f"static_argnums={argnums!r} is not an int or a sequence of ints", where=where,
                          hint="e.g. static_argnums=1 or static_argnums=(1, 2)") from None
    if any(isinstance(i, bool) or not isinstance(i, numbers.Integral) for i in items):
        raise ConfigError(f"static_argnums={argnums!r} must hold argument positions (ints)", where=where,
                          hint="e.g. static_argnums=(1,) makes the second argument static")
    count = _positional_count(fn)
    out: list[int] = []
    for i in (int(cast("int", i)) for i in items):
        j = i + count if count is not None and i < 0 else i
        if count is not None and not 0 <= j < count:
            raise ConfigError(f"static_argnums has {i}, but {name} takes {count} positional argument(s)",
                              where=where, hint=f"use positions from {-count} to {count - 1}" if count else
                              "this function takes no positional arguments: drop static_argnums")
        out.append(j)
    return tuple(sorted(set(out)))


class JittedFunction:
    def __init__(self, fn: Callable[..., Any], target: str, static_argnums: int | Sequence[int] | None,
                 options: dict[str, Any], timing: bool, cache: object = None) -> None:
        self.fn = fn
        self.target = target
        self.static_argnums = _static_argnums(fn, static_argnums)
        self.options = options
        self.timing = timing
        self.cache = cache
        self.programs: dict[Any, tuple[CompiledProgram, Any]] = {}
        self.last_profile: Any = None
        self.last_program: CompiledProgram | None = None
        self.compiles = 0
        self.__name__ = getattr(fn, "__name__", "fn")
        self.__doc__ = fn.__doc__

    def _static(self, n_args: int) -> tuple[int, ...]:
        """The static positions for a call with ``n_args`` positional arguments (negative ones of a function
        with ``*args`` count from the end of this call's)."""
        out = sorted({i + n_args if i < 0 else i for i in self.static_argnums})
        if out and out[0] < 0:
            raise ConfigError(f"static_argnums {self.static_argnums} reaches before the first of {n_args} "
                              "positional argument(s)", where=f"trnsim.jit({self.__name__})",
                              hint="pass more positional arguments, or use smaller negative positions")
        return tuple(out)

    def _signature(self, args: tuple[Any, ...], kwargs: dict[str, Any],
                   static_argnums: tuple[int, ...]) -> tuple[Any, list[Any]]:
        import jax

        where = f"trnsim.jit({self.__name__})"
        dynamic = tuple(a for i, a in enumerate(args) if i not in static_argnums)
        static = tuple((i, a) for i, a in enumerate(args) if i in static_argnums)
        for i, a in static:
            try:
                hash(a)
            except TypeError:
                raise ConfigError(f"static argument {i} is a {type(a).__name__}, which is not hashable", where=where,
                                  hint="static arguments key the compiled programs: pass a hashable value (a tuple "
                                  "instead of a list, a Python number instead of an array)") from None
        named = [*((f"argument {i}", a) for i, a in enumerate(args) if i not in static_argnums),
                 *((f"argument {k!r}", a) for k, a in kwargs.items())]
        for name, a in named:
            for path, x in jax.tree_util.tree_flatten_with_path(a)[0]:
                if not (isinstance(x, _SCALARS) or (hasattr(x, "shape") and hasattr(x, "dtype"))):
                    raise CompileError(f"{name}{jax.tree_util.keystr(path)} is of type {type(x).__name__} "
                                       f"({str(x)[:40]!r}), not an array or a number", where=where,
                                       hint="pass arrays or numbers; make it static with static_argnums if "
                                       f"{self.__name__} takes it as a Python value")
        leaves, tree = jax.tree_util.tree_flatten((dynamic, kwargs))
        shapes = tuple((np.shape(x), np.result_type(x).name if not hasattr(x, "dtype") else str(x.dtype))
                       for x in leaves)
        return (tree, shapes, static), leaves

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        import jax

        return jax.jit(self.fn, static_argnums=self._static(len(args)), keep_unused=True).lower(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import jax

        key, leaves = self._signature(args, kwargs, self._static(len(args)))
        entry = self.programs.get(key)
        if entry is None:
            from trnsim.runtime.program import compile

            lowered = self.lower(*args, **kwargs)
            program = compile(lowered, target=self.target, cache=self.cache, **self.options)
            entry = (program, lowered.out_tree)
            self.programs[key] = entry
            self.compiles += 1
        program, out_tree = entry
        # NOTE: as jax.jit does, Python scalars and 64-bit arrays take the dtypes the program was lowered with;
        # a typed PRNG key (jax.random.key) is lowered as its key data (uint32 words)
        arrays = [np.asarray(_key_data(x), dtype=t.np_dtype) for x, t in zip(leaves, program.input_types, strict=True)]
        outputs = program.run(*arrays, timing=self.timing)
        self.last_program = program
        self.last_profile = program.last_profile
        return jax.tree_util.tree_unflatten(out_tree, outputs)


def _key_data(x: Any) -> Any:
    """A typed PRNG key array's raw data; anything else as it is."""
    import jax

    dtype = getattr(x, "dtype", None)
    if dtype is not None and jax.numpy.issubdtype(dtype, jax.dtypes.prng_key):
        return jax.random.key_data(x)
    return x


def jit(fn: Callable[..., Any] | None = None, *, target: str = "trn3", static_argnums: int | Sequence[int] | None = (),
        timing: bool = True, cache: object = None, **options: Any) -> Any:
    """Wrap ``fn`` (a JAX function) to run on a simulated ``target``; usable as ``@trnsim.jit`` or
    ``trnsim.jit(fn, target="trn3", auto_cast="matmul", auto_cast_type="mxfp6")``. ``cache``: as for
    ``trnsim.compile`` (None: the compile cache at TRNSIM_CACHE_URL; False: none)."""
    from trnsim.compiler.options import CompileOptions

    CompileOptions.from_kwargs(options)        # reject bad options now, not at the first call

    def wrap(f: Callable[..., Any]) -> JittedFunction:
        return JittedFunction(f, target, static_argnums, options, timing, cache)

    return wrap(fn) if fn is not None else wrap
