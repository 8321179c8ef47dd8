"""Bad input to the Python API (trnsim.compile, trnsim.jit, preset files): a TrnsimError that says what to do,
never an exception from deep inside; and a preset given as a .toml path works end to end."""

from __future__ import annotations

import shutil
from pathlib import Path

import jax
import numpy as np
import pytest

import trnsim
from trnsim import hw
from trnsim.compiler.options import CompileOptions
from trnsim.errors import CompileError, ConfigError, SpecError, UnsupportedError
from trnsim.frontend.constants import MAX_CONSTANT_BYTES

SINE = ("module @m { func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> { %0 = stablehlo.sine %a : "
        "tensor<4xf32>\n return %0 : tensor<4xf32> } }")
X = np.ones((2, 2), np.float32)


def test_preset_file_compiles_end_to_end(tmp_path: Path) -> None:
    path = tmp_path / "my_chip.toml"
    shutil.copy(hw.PRESET_DIR / "trn3.toml", path)
    program = trnsim.compile(SINE, target=str(path), cache=False)
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    np.testing.assert_allclose(program(x)[0], np.sin(x), atol=1e-5)
    assert hw.get("my_chip").source == str(path.resolve())  # its name now resolves to the file


def test_preset_file_named_like_a_builtin_keeps_its_figures(tmp_path: Path) -> None:
    path = tmp_path / "trn3.toml"
    text = (hw.PRESET_DIR / "trn3.toml").read_text()
    shutil.copy(hw.PRESET_DIR / "trn3.toml", path)
    assert hw.get(str(path)).name == "trn3"  # an unchanged copy is the same chip
    path.write_text(text.replace("cores = 8", "cores = 4", 1))
    spec = hw.get(str(path))
    assert spec.cores == 4 and spec.name == str(path.resolve())  # not the built-in trn3 under its name
    assert hw.get(spec.name).cores == 4 and hw.get("trn3").cores == 8


@pytest.mark.parametrize("target", [3, 2.5, ["trn3"]])
def test_target_of_the_wrong_type(target: object) -> None:
    with pytest.raises(SpecError, match=r"preset name or a path to a \.toml file"):
        trnsim.compile(SINE, target=target, cache=False)  # type: ignore[arg-type]


def test_hbm_limit_as_a_size_string() -> None:
    assert CompileOptions(hbm_limit_bytes="24 GiB").hbm_limit_bytes == 24 * 2**30  # type: ignore[arg-type]
    assert CompileOptions(hbm_limit_bytes=np.int64(7)).hbm_limit_bytes == 7  # type: ignore[arg-type]
    for bad, match in (("lots", "cannot read"), (1.5, "must be an integer"), (True, "must be an integer")):
        with pytest.raises(ConfigError, match=match):
            trnsim.compile(SINE, hbm_limit_bytes=bad, cache=False)


def test_static_argnums_normalised_as_jax_does() -> None:
    assert trnsim.jit(lambda x, n: x * n, static_argnums=1, cache=False)(X, 3).tolist() == [[3, 3], [3, 3]]
    assert trnsim.jit(lambda x, n: x * n, static_argnums=(-1,), cache=False)(X, 2).tolist() == [[2, 2], [2, 2]]
    with pytest.raises(ConfigError, match="takes 1 positional"):
        trnsim.jit(lambda x: x, static_argnums=(5,))
    with pytest.raises(ConfigError, match="argument positions"):
        trnsim.jit(lambda x: x, static_argnums=("x",))  # type: ignore[arg-type]


def test_unhashable_static_argument() -> None:
    f = trnsim.jit(lambda x, n: x * n[0], static_argnums=(1,), cache=False)
    with pytest.raises(ConfigError, match="static argument 1 is a list, which is not hashable") as info:
        f(X, [2.0])
    assert "tuple" in str(info.value)
    assert f(X, (2.0,)).tolist() == [[2, 2], [2, 2]]


def test_typed_prng_key_argument() -> None:
    key = jax.random.key(0)
    got = trnsim.jit(lambda k: jax.random.normal(k, (4,)), cache=False)(key)
    np.testing.assert_allclose(got, np.asarray(jax.random.normal(key, (4,))), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("arg", ["abc", object(), {"w": "text"}])
def test_non_array_argument(arg: object) -> None:
    with pytest.raises(CompileError, match=r"argument 0.* not an array or a number") as info:
        trnsim.jit(lambda a: a, cache=False)(arg)
    assert "static_argnums" in str(info.value)


def test_huge_splat_constant() -> None:
    src = ("module @m { func.func public @main() -> tensor<100000000000xf32> {\n"
           "  %0 = stablehlo.constant dense<1.0> : tensor<100000000000xf32>\n"
           "  return %0 : tensor<100000000000xf32> } }")
    with pytest.raises(UnsupportedError, match=f"up to {MAX_CONSTANT_BYTES / 2**30:g} GiB") as info:
        trnsim.compile(src, cache=False)
    assert "stablehlo.constant" in str(info.value)


def test_a_program_that_computes_nothing_over_hbm_is_a_clear_error() -> None:
    """Its parameters are its results (no steps): they are checked against HBM like any value (an IndexError in
    the memory planner before)."""
    big = """func.func public @main(%a: tensor<100000000000xf32>) -> tensor<100000000000xf32> {
  return %a : tensor<100000000000xf32>
}"""
    with pytest.raises(trnsim.CompileError, match=r"parameters \(also its results\) need 372\.53 GiB"):
        trnsim.compile(big, cache=False)
    small = big.replace("100000000000", "4")
    np.testing.assert_array_equal(trnsim.compile(small, cache=False).run(np.ones(4, np.float32))[0], np.ones(4))
