"""``trnsim.jit``: run a JAX function on a simulated NeuronCore.

On each call the wrapper looks up the arguments' signature (pytree structure, shapes, dtypes, static
arguments); a new signature is lowered with ``jax.jit(fn).lower(*args)`` and compiled with
``trnsim.compile`` (kept in memory per signature), then the program runs on the flattened arguments and the
outputs are put back into the function's output structure as numpy arrays. ``last_profile`` holds the
timed profile of the last call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from trnsim.compiler.api import CompiledProgram


class JittedFunction:
    def __init__(self, fn: Callable[..., Any], target: str, static_argnums: Sequence[int], options: dict[str, Any],
                 timing: bool, cache: object = None) -> None:
        self.fn = fn
        self.target = target
        self.static_argnums = tuple(static_argnums)
        self.options = options
        self.timing = timing
        self.cache = cache
        self.programs: dict[Any, tuple[CompiledProgram, Any]] = {}
        self.last_profile: Any = None
        self.last_program: CompiledProgram | None = None
        self.compiles = 0
        self.__name__ = getattr(fn, "__name__", "fn")
        self.__doc__ = fn.__doc__

    def _signature(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, list[Any]]:
        import jax

        dynamic = tuple(a for i, a in enumerate(args) if i not in self.static_argnums)
        static = tuple((i, a) for i, a in enumerate(args) if i in self.static_argnums)
        leaves, tree = jax.tree_util.tree_flatten((dynamic, kwargs))
        shapes = tuple((np.shape(x), np.result_type(x).name if not hasattr(x, "dtype") else str(x.dtype))
                       for x in leaves)
        return (tree, shapes, static), leaves

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        import jax

        return jax.jit(self.fn, static_argnums=self.static_argnums, keep_unused=True).lower(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import jax

        key, leaves = self._signature(args, kwargs)
        entry = self.programs.get(key)
        if entry is None:
            from trnsim.runtime.program import compile

            lowered = self.lower(*args, **kwargs)
            program = compile(lowered, target=self.target, cache=self.cache, **self.options)
            entry = (program, lowered.out_tree)
            self.programs[key] = entry
            self.compiles += 1
        program, out_tree = entry
        # NOTE: as jax.jit does, Python scalars and 64-bit arrays take the dtypes the program was lowered with
        arrays = [np.asarray(x, dtype=t.np_dtype) for x, t in zip(leaves, program.input_types, strict=True)]
        outputs = program.run(*arrays, timing=self.timing)
        self.last_program = program
        self.last_profile = program.last_profile
        return jax.tree_util.tree_unflatten(out_tree, outputs)


def jit(fn: Callable[..., Any] | None = None, *, target: str = "trn3", static_argnums: Sequence[int] = (),
        timing: bool = True, cache: object = None, **options: Any) -> Any:
    """Wrap ``fn`` (a JAX function) to run on a simulated ``target``; usable as ``@trnsim.jit`` or
    ``trnsim.jit(fn, target="trn3", auto_cast="matmul", auto_cast_type="mxfp6")``. ``cache``: as for
    ``trnsim.compile`` (None: the compile cache at TRNSIM_CACHE_URL; False: none)."""
    from trnsim.compiler.options import CompileOptions

    CompileOptions.from_kwargs(options)        # reject bad options now, not at the first call

    def wrap(f: Callable[..., Any]) -> JittedFunction:
        return JittedFunction(f, target, static_argnums, options, timing, cache)

    return wrap(fn) if fn is not None else wrap
