"""The HBM plan when a program does not fit (``trnsim.compiler.memory``): rematerialisation, then spills to
host memory, then a CompileError that says what does not fit. The limit is capped with the
``hbm_limit_bytes`` option; every tensor here is 512 × 512 f32 = 1 MiB."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import trnsim
from trnsim.compiler.lowering import Plan
from trnsim.errors import CompileError
from trnsim.hw import registry

MIB = 2**20
X = (0.1 * np.random.default_rng(0).standard_normal((512, 512))).astype(np.float32)
W = (0.05 * np.random.default_rng(1).standard_normal((512, 512))).astype(np.float32)


def late_exp(x: jax.Array, w: jax.Array) -> jax.Array:
    """``exp(x)`` is made first and read again by the last step: recomputing it from x frees 1 MiB."""
    e = jnp.exp(x)
    h3 = jnp.tanh(jnp.tanh(e @ w) @ w) @ w
    return jnp.sum(e * jnp.sum(h3, axis=0)[None, :])


def late_matmul(x: jax.Array, w: jax.Array) -> jax.Array:
    """Also a matmul result read again four steps later: it cannot be recomputed cheaply, so it is spilled."""
    e = jnp.exp(x)
    h1 = e @ w
    h4 = (jnp.tanh(jnp.tanh(jnp.tanh(h1) @ w) @ w) @ w) + e
    return (jnp.tanh(h4) @ w) + h1


def compile_(fn: Any, **options: Any) -> Any:
    return trnsim.compile(jax.jit(fn).lower(X, W), cache=False, **options)


def kernels(program: Any) -> list[str]:
    return [s.kernel for s in program.plan.steps]


def test_a_program_that_fits_gets_no_memory_steps() -> None:
    program = compile_(late_matmul)
    assert program.plan.hbm_peak == 6 * MIB
    assert not {"recompute", "spill", "reload"} & set(kernels(program))
    assert program.plan.remat_bytes == program.plan.spill_bytes == 0
    assert program.profile().memory == {"remat_bytes": 0, "remat_seconds": 0.0, "spill_bytes": 0,
                                        "spill_seconds": 0.0}


def test_rematerialisation_fits_a_smaller_hbm() -> None:
    free = compile_(late_exp)
    assert free.plan.hbm_peak == 5 * MIB
    program = compile_(late_exp, hbm_limit_bytes=int(4.5 * MIB), hbm_overflow="remat")
    plan = program.plan
    assert plan.hbm_peak <= int(4.5 * MIB) and plan.hbm_capacity == int(4.5 * MIB)
    assert kernels(program).count("recompute") == 1 and "spill" not in kernels(program)
    assert plan.remat_bytes == MIB and plan.spill_bytes == 0
    recompute = next(s for s in plan.steps if s.kernel == "recompute")
    original = free.plan.steps[0]
    assert recompute.ops == original.ops == ["exponential"] and recompute.nodes == []
    assert recompute.seconds == pytest.approx(original.seconds)
    consumer = plan.steps[recompute.index + 1]
    assert recompute.index in consumer.deps and consumer.start >= recompute.end
    # the recompute waits for the step before its consumer, so its time is on the critical path
    assert plan.total_seconds == pytest.approx(free.plan.total_seconds + recompute.seconds, rel=1e-9)
    assert program.run(X, W)[0] == free.run(X, W)[0]
    profile = program.profile()
    assert profile.memory["remat_bytes"] == MIB and profile.memory["remat_seconds"] == pytest.approx(recompute.seconds)
    assert "recompute" in profile.by_kernel()
    assert "rematerialised" in plan.describe()


def test_a_tighter_hbm_needs_spills_costed_at_the_host_link() -> None:
    free = compile_(late_matmul)
    with pytest.raises(CompileError, match="every cheap value is recomputed") as info:
        compile_(late_matmul, hbm_limit_bytes=5 * MIB, hbm_overflow="remat")
    assert "remat+spill" in (info.value.hint or "")
    program = compile_(late_matmul, hbm_limit_bytes=5 * MIB)
    plan = program.plan
    assert plan.hbm_peak <= 5 * MIB
    assert plan.spill_bytes == MIB and plan.remat_bytes == MIB
    spill = next(s for s in plan.steps if s.kernel == "spill")
    reload = next(s for s in plan.steps if s.kernel == "reload")
    spec = registry.get("trn3")
    assert spec.host is not None and spec.core is not None
    expected = spec.core.dma.latency + MIB / spec.host.bandwidth
    assert spill.seconds == pytest.approx(expected) and reload.seconds == pytest.approx(expected)
    assert spill.index in reload.deps and reload.start >= spill.end
    assert spill.index in plan.steps[spill.index + 1].deps          # the next step uses the freed bytes
    assert plan.total_seconds > free.plan.total_seconds + 2 * expected
    assert plan.memory_costs()["spill_seconds"] == pytest.approx(2 * expected)
    np.testing.assert_array_equal(program.run(X, W)[0], free.run(X, W)[0])
    assert program.profile().memory["spill_bytes"] == MIB


def test_a_step_whose_own_operands_exceed_hbm_is_a_compile_error() -> None:
    # the last step reads h1, h4 and w and writes its result: with x, 4 MiB that nothing can move
    with pytest.raises(CompileError, match=r"own inputs and outputs") as info:
        compile_(late_matmul, hbm_limit_bytes=4 * MIB)
    assert info.value.where == "allocate"
    assert "batch" in (info.value.hint or "") and "jax.checkpoint" in (info.value.hint or "")


def test_hbm_overflow_error_keeps_the_old_failure() -> None:
    with pytest.raises(CompileError, match=r"MiB of HBM at its peak"):
        compile_(late_matmul, hbm_limit_bytes=5 * MIB, hbm_overflow="error")


def test_the_plan_with_memory_steps_round_trips_through_json() -> None:
    plan = compile_(late_matmul, hbm_limit_bytes=5 * MIB).plan
    again = Plan.from_json(plan.to_json())
    assert again.to_json() == plan.to_json()
    assert again.remat_bytes == plan.remat_bytes and again.spill_bytes == plan.spill_bytes
    old = plan.to_json()
    del old["remat_bytes"], old["spill_bytes"]        # a plan written before these fields existed
    assert Plan.from_json(old).remat_bytes == 0


def test_bad_limits_are_config_errors() -> None:
    from trnsim.errors import ConfigError

    with pytest.raises(ConfigError, match="hbm_limit_bytes"):
        compile_(late_exp, hbm_limit_bytes=-1)
    with pytest.raises(ConfigError, match="hbm_overflow"):
        compile_(late_exp, hbm_overflow="sometimes")


def test_an_artifact_keeps_the_memory_steps(tmp_path: Any) -> None:
    program = compile_(late_matmul, hbm_limit_bytes=5 * MIB)
    loaded = trnsim.load_artifact(program.save(tmp_path / "late.neff"))
    assert kernels(loaded) == kernels(program)
    assert loaded.plan.spill_bytes == MIB and loaded.options.hbm_limit_bytes == 5 * MIB
    np.testing.assert_array_equal(loaded.run(X, W)[0], program.run(X, W)[0])
