"""Generated tile code for fused elementwise steps: which groups take it, that the kernel it generates is a
valid NeuronCore program computing the group's result on the functional simulator, and how it is timed."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import trnsim
from trnsim.compiler import tilegen
from trnsim.hw import registry
from trnsim.isa.verify import verify


def _compile(fn, *args):  # type: ignore[no-untyped-def]
    return trnsim.compile(jax.jit(fn).lower(*args), cache=False)


def _recipe(program: trnsim.CompiledProgram) -> tilegen.Recipe | None:
    (step,) = program.plan.steps
    nodes = [program.graph.nodes[i] for i in step.nodes]
    produced = {v.id for n in nodes for v in n.outputs}
    external = list({v.id: v for n in nodes for v in n.inputs if v.id not in produced
                     and not (v.type.size == 1 and v.producer is not None and v.producer.op == "constant")}.values())
    return tilegen.recipe_for(nodes, external, list(program.graph.results))


def test_chain_with_scalars_becomes_a_recipe_with_immediates() -> None:
    x = np.ones((256, 512), np.float32)
    recipe = _recipe(_compile(lambda x, y: jnp.maximum(jnp.tanh(x * 2.0 + y), 0.0) - x, x, x))
    assert recipe is not None
    assert recipe.elements == x.size and recipe.inputs == (("fp32", "full"), ("fp32", "full"))
    assert ("imm", 2.0) in [r for _, _, operands, _ in recipe.steps for r in operands]
    assert [s[1] for s in recipe.steps] == ["mul", "add", "tanh", "max", "sub"]


def test_reductions_over_two_blocks_of_axes_and_maxima_over_a_period_not_dividing_a_tile_keep_the_analytic_cost(
        ) -> None:
    x = np.ones((8, 16, 32, 4), np.float32)
    assert _recipe(_compile(lambda x: jnp.exp(x).sum(axis=(1, 3)), x)) is None       # two separate blocks
    y = np.ones((4, 50, 96), np.float32)
    assert _recipe(_compile(lambda y: jnp.exp(y).max(axis=0), y)) is None             # rows mod 50 per tile
    program = _compile(lambda x: jnp.exp(x).sum(axis=(1, 3)), x)
    assert program.plan.steps[0].kernel == "fused_elementwise"


def _values(program: trnsim.CompiledProgram, args: list[np.ndarray]) -> dict[int, np.ndarray]:
    """Every value of the program's graph, by the reference interpreter."""
    from trnsim.ir.interp import Env, Interpreter

    env, interp = Env(), Interpreter()
    for p, a in zip(program.graph.params, args[:len(program.graph.params)], strict=True):
        env[p.id] = a
    for node in program.graph.nodes:
        for v, a in zip(node.outputs, interp.run_node(node, [env[u.id] for u in node.inputs], env), strict=True):
            env[v.id] = a
    return env


def _check_step(program: trnsim.CompiledProgram, args: list[np.ndarray], step: int, rtol: float) -> tilegen.Recipe:
    """Run the step's generated kernel on the functional simulator; compare with the interpreter."""
    recipe, pairs = _run_step(program, args, step)
    for got, want in pairs:
        np.testing.assert_allclose(np.asarray(got, np.float64).reshape(-1)[:want.size], want.astype(np.float64),
                                   rtol=rtol, atol=rtol)
    return recipe


def _run_step(program: trnsim.CompiledProgram, args: list[np.ndarray],
              step: int) -> tuple[tilegen.Recipe, list[tuple[np.ndarray, np.ndarray]]]:
    """The step's recipe and, per output, (the generated kernel's result, the interpreter's value), flat."""
    graph = program.graph
    nodes = [graph.nodes[i] for i in program.plan.steps[step].nodes]
    produced = {v.id for n in nodes for v in n.outputs}
    inside = {id(n) for n in nodes}
    external = list({v.id: v for n in nodes for v in n.inputs if v.id not in produced
                     and not (v.type.size == 1 and v.producer is not None and v.producer.op == "constant")}.values())
    read_outside = {u.id for n in graph.nodes if id(n) not in inside for u in n.inputs}
    outputs = [v for n in nodes for v in n.outputs if v.id in read_outside or any(v is r for r in graph.results)]
    built = tilegen.lowered(nodes, external, outputs)
    if built is None:
        (node,) = nodes
        recipe, sources = tilegen.index_recipe(node), list(node.inputs)
        assert recipe is not None
    else:
        recipe, sources = built
    env = _values(program, args)
    _within_ranges(nodes, env)
    verify(tilegen.kernel_program("trn3", recipe), registry.get("trn3"))
    kernel_args = [np.asarray(env[v.id]).astype(np.uint8 if v.type.dtype == "i1" else env[v.id].dtype).reshape(shape)
                   for v, shape in zip(sources, tilegen.input_shapes(recipe), strict=True)]
    result = trnsim.run_kernel(tilegen.kernel(), *kernel_args, recipe=recipe)
    return recipe, [(np.asarray(got).reshape(-1), np.asarray(env[v.id]).reshape(-1))
                    for got, v in zip(result.outputs, outputs, strict=True)]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", ["bias_grad", "batch_sum", "period_table", "loss_mean"])
def test_leading_axis_reductions_and_tables_compute_the_group(name: str, dtype: str) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 50, 96)).astype(dtype)                   # 200 rows: 2 tiles, one ragged
    table = rng.standard_normal((50, 96)).astype(dtype)
    y = rng.standard_normal((8, 48)).astype(dtype)                      # flat: [128, 3]
    mask = rng.random((8, 48)) < 0.5
    cases = {
        "bias_grad": (lambda x: (x * 2.0).sum(axis=(0, 1)) * 0.5, [x]),              # [B·T, C] → [C]: ones column
        "batch_sum": (lambda x: jnp.exp(x).sum(axis=0), [x]),                        # period 50 ∤ 128: per tile
        "period_table": (lambda x, t: jnp.tanh(x + t[None]), [x, table]),            # a [T, C] table over B
        "loss_mean": (lambda y, m: -jnp.mean(jnp.where(m, y, 0.0)), [y, mask]),      # all axes → scalar
    }
    fn, args = cases[name]
    program = _compile(fn, *args)
    step = next(s.index for s in program.plan.steps if s.kernel == "generated_elementwise")
    recipe = _check_step(program, args, step, 3e-2 if dtype == "bfloat16" else 1e-4)
    if name in ("bias_grad", "batch_sum", "loss_mean"):
        assert any(s[0] == "lead" for s in recipe.steps)
    assert all(s.kernel not in ("fused_elementwise",) for s in program.plan.steps)


@pytest.mark.parametrize("name", ["causal_softmax", "one_hot", "index_wrap", "adam_bias_correction"])
def test_iota_masks_integers_and_scalar_chains_compute_the_group(name: str) -> None:
    rng = np.random.default_rng(4)
    s = rng.standard_normal((2, 3, 40, 40)).astype(np.float32)
    x = rng.standard_normal((200, 96)).astype(np.float32)
    labels = rng.integers(-96, 96, (200,)).astype(np.int32)
    m = rng.standard_normal((128, 130)).astype(np.float32)
    t = np.asarray(7, np.int32)

    def causal(s: jax.Array) -> jax.Array:
        keep = jnp.arange(40)[:, None] >= jnp.arange(40)[None, :]
        return jax.nn.softmax(jnp.where(keep, s, -jnp.inf), axis=-1)

    def adam(t: jax.Array, m: jax.Array) -> tuple[jax.Array, jax.Array]:
        c = 1.0 - 0.9 ** (t.astype(jnp.float32) + 1.0)
        return m / c, c

    cases = {
        "causal_softmax": (causal, [s]),
        "one_hot": (lambda x, lab: jnp.where(jnp.arange(96)[None, :] == lab[:, None], x, 0.0).sum(-1), [x, labels]),
        "index_wrap": (lambda lab: jnp.where(lab < 0, lab + 96, lab)[..., None], [labels.reshape(4, 50)[:, :32]]),
        "adam_bias_correction": (adam, [t, m]),
    }
    fn, args = cases[name]
    program = _compile(fn, *args)
    step = next(s.index for s in program.plan.steps if s.kernel == "generated_elementwise")
    recipe = _check_step(program, args, step, 1e-5)
    if name in ("causal_softmax", "one_hot"):
        assert any(s[0] == "iota" for s in recipe.steps)
    assert all(s.kernel != "fused_elementwise" for s in program.plan.steps)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_last_axis_gather_and_scatter_add_are_one_hot_selects(dtype: str) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 50, 96)).astype(dtype)
    labels = rng.integers(0, 96, (4, 50, 1)).astype(np.int32)

    def loss(x: jax.Array) -> jax.Array:
        return -jnp.take_along_axis(x, labels, axis=-1).astype(jnp.float32).sum()

    for fn in (loss, jax.grad(loss)):
        program = _compile(fn, x)
        steps = [s for s in program.plan.steps if s.ops in (["gather"], ["scatter"])]
        assert steps and all(s.kernel == "generated_elementwise" for s in steps)
        for s in steps:
            _check_step(program, [x], s.index, 0.0)


def test_a_vector_broadcast_along_the_rows_is_one_broadcast_load_and_computes_the_group() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((200, 96)).astype(np.float32)
    scale = rng.standard_normal(96).astype(np.float32)
    program = _compile(lambda x, s: x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-5) * s, x, scale)
    (step,) = program.plan.steps
    assert step.kernel == "generated_elementwise"
    recipe = _recipe(program)
    assert recipe is not None and ("fp32", "vec") in recipe.inputs
    result = trnsim.run_kernel(tilegen.kernel(), x, scale[None, :], recipe=recipe)
    (expected,) = program.run(x, scale, timing=False)
    np.testing.assert_allclose(result.outputs[0], expected, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["softmax", "rmsnorm", "logsumexp"])
def test_last_axis_reductions_use_the_row_layout_and_compute_the_group(name: str) -> None:
    fns = {
        "softmax": lambda x: jax.nn.softmax(x, axis=-1),
        "rmsnorm": lambda x: x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-5),
        "logsumexp": lambda x: jnp.log(jnp.sum(jnp.exp(x - x.max(-1, keepdims=True)), -1)),
    }
    x = np.random.default_rng(1).standard_normal((200, 96)).astype(np.float32)     # 2 row tiles, one ragged
    program = _compile(fns[name], x)
    (step,) = program.plan.steps
    assert step.kernel == "generated_elementwise"
    recipe = _recipe(program)
    assert recipe is not None and recipe.cols == 96 and any(s[0] == "reduce" for s in recipe.steps)
    verify(tilegen.kernel_program("trn3", recipe), registry.get("trn3"))
    result = trnsim.run_kernel(tilegen.kernel(), x, recipe=recipe)
    (expected,) = program.run(x, timing=False)
    np.testing.assert_allclose(result.outputs[0].reshape(expected.shape), expected, rtol=2e-5, atol=1e-6)


def test_generated_kernel_verifies_and_computes_the_group_on_the_simulator() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 640)).astype(np.float32)        # 2 column tiles, the second ragged
    y = rng.standard_normal((128, 640)).astype(np.float32)
    program = _compile(lambda x, y: jnp.minimum(jax.nn.sigmoid(x * 2.0 + y) * y, 0.25) - x, x, y)
    recipe = _recipe(program)
    assert recipe is not None
    verify(tilegen.kernel_program("trn3", recipe), registry.get("trn3"))
    kernel = tilegen.kernel()
    result = trnsim.run_kernel(kernel, x, y, recipe=recipe)
    (expected,) = program.run(x, y, timing=False)
    np.testing.assert_allclose(result.outputs[0].reshape(expected.shape), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn, shape", [
    (lambda x: jax.nn.softmax(jnp.where(x > 0.5, x, -1e9), axis=-1), (16, 4, 64, 64)),   # 32 tiles of 128 rows
    (lambda x: (jnp.tanh(x) * 2.0).sum(axis=0), (8192, 128)),          # a leading-axis sum on TensorE
    (lambda x: jax.nn.gelu(x) * x, (128, 48 * 512)),                   # flat: 48 column tiles
    (lambda x: jax.nn.log_softmax(x, -1), (8192, 8192)),               # rows in 2 chunks: 16 and 32 tiles
    (lambda x: x.reshape(4096, 2, 4, 64).sum(2), (4096, 8, 64)),       # a middle axis: 8192 rows of 256
    (lambda x: jnp.exp(x).max(axis=0), (8192, 128)),                   # a leading-axis max on VectorE
    (lambda x: jnp.exp(x).sum(-1), (8192, 256)),                       # 2 DMAs a tile: 16 and 32 tiles
])
def test_large_kernels_are_timed_on_two_samples_within_3_percent(fn, shape) -> None:  # type: ignore[no-untyped-def]
    from trnsim.compiler.tilegen.timing import SAMPLE_BLOCKS

    recipe = _recipe(_compile(fn, np.ones(shape, np.float32)))
    assert recipe is not None
    assert recipe.elements >= 4 * SAMPLE_BLOCKS * tilegen.PARTITIONS * (recipe.cols or tilegen.TILE_COLS)
    sampled, whole = tilegen.fused_time("trn3", recipe), tilegen.fused_time("trn3", recipe, sample=False)
    assert sampled.seconds == pytest.approx(whole.seconds, rel=0.03)
    assert sampled.instructions == pytest.approx(whole.instructions, rel=0.01)
    for engine, busy in whole.busy.items():
        assert sampled.busy[engine] == pytest.approx(busy, rel=0.03)


def test_more_elements_never_take_less_time() -> None:
    steps = (("act", "exp", (("in", 0),), "fp32"),)
    times = [tilegen.fused_time("trn3", tilegen.Recipe(n * tilegen.PARTITIONS, (("fp32", "full"),), steps,
                                                      ((("tmp", 0), "fp32"),))).seconds
             for n in (64, 512, 4096, 32768)]
    assert times == sorted(times)


def test_a_working_set_larger_than_sbuf_falls_back_to_the_analytic_cost() -> None:
    from trnsim.compiler.lowering import _generated  # pyright: ignore[reportPrivateUsage]
    from trnsim.compiler.options import CompileOptions
    from trnsim.compiler.pipeline import PassContext
    from trnsim.dsl.errors import KernelError

    # 24 exp tiles of [128, 4096] fp32 (16 KiB per partition each) all live until a final sum: > SBUF
    live = 24
    steps: list[tuple[str, str, tuple[tilegen.Ref, ...], str]] = [
        ("alu", "mul", (("in", 0), ("imm", float(i + 1))), "fp32") for i in range(live)]
    steps.append(("alu", "add", (("tmp", 0), ("tmp", 1)), "fp32"))
    for i in range(2, live):
        steps.append(("alu", "add", (("tmp", len(steps) - 1), ("tmp", i)), "fp32"))
    recipe = tilegen.Recipe(4096 * 256, (("fp32", "full"),), tuple(steps), ((("tmp", len(steps) - 1), "fp32"),),
                            cols=4096, output_kinds=("full",))
    with pytest.raises(KernelError, match="out of sbuf"):
        tilegen.fused_time("trn3", recipe)
    ctx = PassContext(registry.get("trn3"), CompileOptions())
    assert _generated("trn3", recipe, ctx) is None
    assert ctx.stats["sbuf_fallbacks"] == 1


def test_a_broadcast_read_by_another_step_is_made_again_there_instead_of_stored() -> None:
    def norm_then_scale(x, w):  # type: ignore[no-untyped-def]
        r = jnp.broadcast_to(jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True)), x.shape)
        return ((x * r) @ w) * r           # the matmul's epilogue reads the norm's broadcast column

    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((256, 128)).astype(np.float32), rng.standard_normal((128, 128)).astype(np.float32)
    program = _compile(norm_then_scale, x, w)
    groups = {n.attrs["_group"] for n in program.graph.nodes
              if n.op == "broadcast_in_dim" and n.out.type.shape == (256, 128)}
    assert len(groups) == 2                # one in the norm's step, a copy in the matmul's
    norm = next(s for s in program.plan.steps if s.kernel == "generated_elementwise")
    assert norm.dma_bytes == x.nbytes + x.nbytes + 256 * 4      # x in; x * r and the rsqrt column out
    (out,) = program.run(x, w, timing=False)
    np.testing.assert_allclose(out, np.asarray(jax.jit(norm_then_scale)(x, w)), rtol=2e-4, atol=2e-4)


def _two_matmul_operand(h):  # type: ignore[no-untyped-def]
    """``h`` feeds a matmul contracting its last axis and one contracting the rows (a weight gradient): autocast
    puts two qdq of ``h`` in its group, MX blocks along the rows and down 32 consecutive rows."""
    def f(x, w, dy):  # type: ignore[no-untyped-def]
        v = h(x)
        return jnp.einsum("btc,cd->btd", v, w), jnp.einsum("btc,btd->cd", v, dy)
    return f


@pytest.mark.parametrize("fmt", ["mxfp6", "mxfp4", "mxfp8"])
def test_mx_quantize_dequantize_is_generated_and_exact_on_the_simulator(fmt: str) -> None:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 64, 96)) * np.exp(rng.standard_normal((3, 64, 96)))).astype(np.float32)
    x[0, :32, :32] = 0.0                                 # an all-zero block in both directions
    w = rng.standard_normal((96, 64)).astype(np.float32)
    dy = rng.standard_normal((3, 64, 64)).astype(np.float32)
    fn = _two_matmul_operand(lambda x: jnp.tanh(x) * 3.0 + x)
    program = trnsim.compile(jax.jit(fn).lower(x, w, dy), cache=False, auto_cast="matmul", auto_cast_type=fmt)
    assert program.plan.steps[0].kernel == "generated_elementwise"    # 192 rows: a full tile and a ragged one
    recipe = _check_step(program, [x, w, dy], 0, 0.0)
    assert sorted(s[2][1][1] for s in recipe.steps if s[0] == "mx") == [0.0, 1.0]
    assert all(s.kernel != "fused_elementwise" for s in program.plan.steps)


def test_mx_blocks_down_the_rows_of_a_reshaped_value_transpose_in_column_chunks() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 64, 3, 2, 32)).astype(np.float32)      # [B, T, 3, H, D] → [B, T, 192]
    w = rng.standard_normal((192, 64)).astype(np.float32)
    dy = rng.standard_normal((2, 64, 64)).astype(np.float32)
    fn = _two_matmul_operand(lambda a: (a * 2.0 + a).reshape(2, 64, 192))
    program = trnsim.compile(jax.jit(fn).lower(a, w, dy), cache=False, auto_cast="matmul", auto_cast_type="mxfp6")
    recipe = _check_step(program, [a, w, dy], 0, 0.0)
    assert recipe.cols == 192                            # two TensorE transposes each way: 128 + 64 columns


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("layout", ["flat", "rows"])
def test_per_tensor_fp8_scaling_runs_after_the_loop_on_kept_tiles_and_is_exact(fmt: str, layout: str) -> None:
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((3, 64, 96)) * np.exp(rng.standard_normal((3, 64, 96)))).astype(np.float32)
    w = rng.standard_normal((96, 64)).astype(np.float32)
    dy = rng.standard_normal((3, 64, 64)).astype(np.float32)
    h = {"flat": lambda x: jnp.tanh(x) * 3.0 + x,           # type: ignore[no-untyped-def]
         "rows": lambda x: x - jnp.max(x, -1, keepdims=True)}[layout]     # exact on VectorE: compare at 0
    program = trnsim.compile(jax.jit(_two_matmul_operand(h)).lower(x, w, dy), cache=False, auto_cast="matmul",
                             auto_cast_type=fmt)
    assert all(s.kernel != "fused_elementwise" for s in program.plan.steps)
    recipe = _check_step(program, [x, w, dy], 0, 0.0)
    assert [s[0] for s in recipe.steps].count("scaled") == 2 and (recipe.cols > 0) == (layout == "rows")


def test_per_tensor_fp8_scaling_of_more_than_sbuf_keeps_the_analytic_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    from trnsim.compiler.tilegen import build

    monkeypatch.setattr(build, "KEEP_BYTES", 3 * 64 * 96 * 4 - 1)                # one byte short of the source
    x = np.ones((3, 64, 96), np.float32)
    fn = _two_matmul_operand(lambda x: jnp.tanh(x))
    program = trnsim.compile(jax.jit(fn).lower(x, np.ones((96, 64), np.float32), np.ones((3, 64, 64), np.float32)),
                             cache=False, auto_cast="matmul", auto_cast_type="fp8_e4m3")
    assert program.plan.steps[0].kernel == "fused_elementwise"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("h", ["tanh", "double"])
def test_int4_group_quantize_dequantize_is_generated_and_exact_on_the_simulator(h: str, dtype: str) -> None:
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((3, 64, 96)) * np.exp(rng.standard_normal((3, 64, 96)))).astype(np.float32)
    x[0, :32, :32] = 0.0                                 # an all-zero group in both directions
    x[1, :32, :32] = rng.integers(-13, 14, (32, 32)) / 2.0   # doubled, x / scale is k / 2: ties round to even
    x[1, 0, :32], x[1, :32, 0] = 7.0, -7.0               # amax 7 in every row and column of the block
    x[2, :32, 32:64] *= 2.0 ** -135                      # subnormal elements and scales
    x = x.astype(dtype)
    w = rng.standard_normal((96, 64)).astype(dtype)
    dy = rng.standard_normal((3, 64, 64)).astype(dtype)
    fn = _two_matmul_operand({"tanh": lambda x: jnp.tanh(x) * 3.0 + x, "double": lambda x: x * 2.0}[h])
    program = trnsim.compile(jax.jit(fn).lower(x, w, dy), cache=False, auto_cast="matmul", auto_cast_type="int4")
    assert program.plan.steps[0].kernel == "generated_elementwise"    # 192 rows: a full tile and a ragged one
    recipe = _check_step(program, [x, w, dy], 0, 0.0)
    assert sorted(s[2][1][1] for s in recipe.steps if s[0] == "group") == [0.0, 1.0]
    assert all(s.kernel != "fused_elementwise" for s in program.plan.steps)


def test_int4_groups_that_do_not_tile_the_rows_keep_the_analytic_cost() -> None:
    x = np.ones((3, 64, 80), np.float32)                 # 80 columns: the last group of each row is ragged
    fn = _two_matmul_operand(lambda x: jnp.tanh(x))
    program = trnsim.compile(jax.jit(fn).lower(x, np.ones((80, 64), np.float32), np.ones((3, 64, 64), np.float32)),
                             cache=False, auto_cast="matmul", auto_cast_type="int4")
    assert program.plan.steps[0].kernel == "fused_elementwise"


def _cross_entropy_grad(x, y):  # type: ignore[no-untyped-def]
    """The gradient of a mean cross-entropy against soft labels ``y``: a softmax and a sum along each row."""
    return jax.grad(lambda x: -jnp.mean(jnp.sum(y * jax.nn.log_softmax(x, -1), -1)))(x)


@pytest.mark.parametrize("name", ["log_softmax", "softmax", "logsumexp", "cross_entropy_grad", "rmsnorm",
                                  "temperature", "jax_logsumexp"])
@pytest.mark.parametrize("keep", [True, False])
def test_rows_longer_than_max_row_pass_over_column_chunks_and_compute_the_group(
        name: str, keep: bool, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    from trnsim.compiler.tilegen import build, chunked

    monkeypatch.setattr(build, "MAX_ROW", 128)           # 600 columns: chunks of 128, the last of 88
    if not keep:
        monkeypatch.setattr(chunked, "KEEP_ROW_BYTES", 0)     # inputs read in two passes are loaded again
    tilegen.clear_memo()                                  # traces and times are cached per recipe
    request.addfinalizer(tilegen.clear_memo)
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((200, 600)) * 3.0).astype(np.float32)      # 2 row tiles, one ragged
    y = rng.random((200, 600)).astype(np.float32)
    scale = rng.standard_normal(600).astype(np.float32)
    cases = {
        "log_softmax": (lambda x: jax.nn.log_softmax(x, -1), [x]),              # 3 passes: max, sum, result
        "softmax": (lambda x: jax.nn.softmax(x, -1), [x]),
        "logsumexp": (lambda x: jnp.log(jnp.sum(jnp.exp(x - x.max(-1, keepdims=True)), -1)) + x.max(-1), [x]),
        "cross_entropy_grad": (_cross_entropy_grad, [x, y]),
        "rmsnorm": (lambda x, s: x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-5) * s, [x, scale]),
        "temperature": (lambda x, t: jax.nn.softmax(x / t, -1), [x, np.asarray(0.7, np.float32)]),  # a scalar input
        "jax_logsumexp": (lambda x: jax.nn.logsumexp(x, -1), [x]),     # a select of columns with a constant
    }
    fn, args = cases[name]
    program = _compile(fn, *args)
    assert all(s.kernel != "fused_elementwise" for s in program.plan.steps)
    steps = [s.index for s in program.plan.steps if s.kernel == "generated_elementwise"]
    recipes = [_check_step(program, args, step, 2e-5) for step in steps]
    chunk = next(r for r in recipes if r.chunk)
    assert chunk.chunk == 128 and chunk.cols == 600
    if name == "log_softmax":
        stage, _ = chunked.passes(chunk)
        assert max(stage) == 2
        dmas = tilegen.fused_time("trn3", chunk).by_engine["dma"]
        assert dmas == 2 * 5 * (2 if keep else 4)        # per tile and chunk: a load (three if reloaded), a store


def test_rows_longer_than_max_row_at_full_size_fit_in_sbuf_and_compute_the_group() -> None:
    x = (np.random.default_rng(8).standard_normal((130, 9000)) * 3.0).astype(np.float32)  # chunks 4096, 4096, 808
    program = _compile(lambda x: jax.nn.log_softmax(x, -1), x)
    (step,) = program.plan.steps
    assert step.kernel == "generated_elementwise"
    recipe = _check_step(program, [x], 0, 2e-5)
    assert recipe.chunk == tilegen.recipe.MAX_ROW
    # the input (36 KiB a row) is kept for its tile: 3 chunk loads and 3 chunk stores a tile; those of the
    # 128-row tile (2 MiB, 413 KB) go as 4 DMAs of 32 partitions, those of the 2-row tile whole
    assert tilegen.fused_time("trn3", recipe).by_engine["dma"] == 2 * 3 * 4 + 2 * 3


@pytest.mark.parametrize("fmt", ["int4", "mxfp6"])
def test_grouped_quantize_dequantize_of_rows_in_chunks_is_exact(fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from trnsim.compiler.tilegen import build

    monkeypatch.setattr(build, "MAX_ROW", 256)           # 640 columns: chunks of 256, 256 and 128
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((3, 64, 640)) * np.exp(rng.standard_normal((3, 64, 640)))).astype(np.float32)
    w = rng.standard_normal((640, 64)).astype(np.float32)
    dy = rng.standard_normal((3, 64, 64)).astype(np.float32)
    fn = _two_matmul_operand(lambda x: x - jnp.max(x, -1, keepdims=True))     # exact on VectorE: compare at 0
    program = trnsim.compile(jax.jit(fn).lower(x, w, dy), cache=False, auto_cast="matmul", auto_cast_type=fmt)
    assert all(s.kernel != "fused_elementwise" for s in program.plan.steps)
    recipe = _check_step(program, [x, w, dy], 0, 0.0)
    assert recipe.chunk == 256
    assert sorted(s[2][1][1] for s in recipe.steps if s[0] in ("group", "mx")) == [0.0, 1.0]


def test_rows_in_chunks_with_an_iota_mask_keep_the_analytic_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    from trnsim.compiler.tilegen import build

    x = np.ones((200, 600), np.float32)
    fn = lambda x: jax.nn.softmax(jnp.where(jnp.arange(600)[None, :] < 300, x, -1e9), -1)  # noqa: E731
    assert _compile(fn, x).plan.steps[0].kernel == "generated_elementwise"
    monkeypatch.setattr(build, "MAX_ROW", 128)
    assert _compile(fn, x).plan.steps[0].kernel == "fused_elementwise"


def _program_text(recipe: tilegen.Recipe) -> str:
    return str(tilegen.kernel_program("trn3", recipe))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("form", ["folds", "reduce"])
def test_middle_axis_reductions_are_generated_and_exact_on_the_simulator(form: str, op: str, dtype: str) -> None:
    """The GQA key/value gradient: ``[B, T, kv, rep, d] → [B, T, kv, d]``, 300 rows of ``B·T·kv`` (3 tiles, the
    last ragged); wide ``d`` folds the slices with tensor_tensor ops, narrow ``d`` copies the tile to
    ``[rows, rep, d]`` and reduces its middle axis."""
    rng = np.random.default_rng(10)
    rep, d = {"folds": (4, 48), "reduce": (16, 2)}[form]
    shape = (3, 50, 2, rep * d)
    # sums of small integers are exact in any order and dtype; maxima and minima are exact anyway
    x = rng.integers(-8, 9, shape) if op == "sum" else rng.standard_normal(shape)
    x = x.astype(dtype)
    x[0, 0, 0, :] = -0.0 if op == "min" else 0.0             # signed zeros: the reference's IEEE max/min
    reduce = {"sum": jnp.sum, "max": jnp.max, "min": jnp.min}[op]

    def grad_kv(x: jax.Array) -> jax.Array:
        return reduce(x.reshape(3, 50, 2, rep, d), axis=3).reshape(3, 50, 2 * d)

    program = _compile(grad_kv, x)
    assert all(s.kernel != "fused_elementwise" for s in program.plan.steps)
    step = next(s.index for s in program.plan.steps if s.kernel == "generated_elementwise")
    recipe = _check_step(program, [x], step, 0.0)
    assert recipe.cols == rep * d and recipe.output_kinds == ("mid",)
    assert ("tensor_reduce" in _program_text(recipe)) == (form == "reduce")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_middle_axis_sum_with_other_inputs_of_its_result_shape_is_generated(dtype: str) -> None:
    """Random values: the simulator sums in fp32 (and rounds once to bf16), the reference in float64."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((200, 4, 3, 64)).astype(dtype)
    g = rng.standard_normal((200, 4, 64)).astype(dtype)
    s = np.asarray(0.5, np.float32)

    def f(x: jax.Array, g: jax.Array, s: jax.Array) -> jax.Array:
        return (x.sum(axis=2).astype(jnp.float32) * s + g.astype(jnp.float32)).astype(x.dtype)

    program = _compile(f, x, g, s)
    (step,) = program.plan.steps
    assert step.kernel == "generated_elementwise"
    # fp32: three terms each off by at most 2^-24 relatively; bf16: one unit in the last place (2^-8)
    recipe = _check_step(program, [x, g, s], 0, 2.0 ** -8 if dtype == "bfloat16" else 1e-6)
    assert ("fp32" if dtype == "float32" else "bf16", "mid") in recipe.inputs


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("name", ["rows", "period", "wide_period", "scalar"])
def test_leading_axis_maxima_and_minima_run_on_vectore_and_are_exact(name: str, op: str, dtype: str) -> None:
    rng = np.random.default_rng(12)
    reduce = {"max": jnp.max, "min": jnp.min}[op]
    cases = {
        "rows": ((200, 96), 0),                    # [N, C] → [C]: a running tile, a GpSimd partition reduce
        "period": ((10, 32, 96), 0),               # [B, T, C] → [T, C], 320 rows: TensorE transposes
        "wide_period": ((3, 64, 160), 0),          # 160 columns: transposes of 128 and 32
        "scalar": ((8, 48), None),                 # flat [128, 3]: a column per block, then across them
    }
    shape, axis = cases[name]
    x = rng.standard_normal(shape).astype(dtype)
    x.reshape(-1)[:3] = [0.0, -0.0, 0.0]

    def f(x: jax.Array) -> jax.Array:
        return reduce(jnp.tanh(x) if name == "scalar" else x * 2.0, axis=axis)

    program = _compile(f, x)
    assert all(s.kernel != "fused_elementwise" for s in program.plan.steps)
    step = next(s.index for s in program.plan.steps if s.kernel == "generated_elementwise")
    # tanh on ScalarE against numpy's: compare within fp32 rounding; the rest is exact
    recipe = _check_step(program, [x], step, 1e-6 if name == "scalar" else 0.0)
    assert any(s[0] == "lead" and s[1] == op for s in recipe.steps)
    text = _program_text(recipe)
    assert ("partition_reduce" in text) == (name in ("rows", "scalar"))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "int32"])
def test_a_constant_broadcast_and_converted_is_a_generated_fill(dtype: str) -> None:
    """A group reading nothing (the loss gradient's seed of ones, converted to bf16): a constant tile stored
    block by block. (Without the convert it is a single broadcast: ``dmagen``'s fill.)"""
    def f(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        ones = jnp.broadcast_to(jnp.float32(1.5 if dtype != "int32" else 3.0), (256, 640)).astype(dtype)
        return ones, x + 1.0

    x = np.ones((4,), np.float32)
    program = _compile(f, x)
    step = next(s for s in program.plan.steps if s.ops[0] == "broadcast_in_dim")
    assert step.kernel == "generated_elementwise"
    recipe = _check_step(program, [x], step.index, 0.0)
    assert recipe.inputs == ()


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
def test_per_tensor_fp8_scaling_of_rows_in_chunks_keeps_the_chunks_and_is_exact(
        fmt: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    from trnsim.compiler.tilegen import build

    monkeypatch.setattr(build, "MAX_ROW", 256)           # 640 columns: chunks of 256, 256 and 128
    tilegen.clear_memo()
    request.addfinalizer(tilegen.clear_memo)
    rng = np.random.default_rng(13)
    x = (rng.standard_normal((3, 64, 640)) * np.exp(rng.standard_normal((3, 64, 640)))).astype(np.float32)
    w = rng.standard_normal((640, 64)).astype(np.float32)
    dy = rng.standard_normal((3, 64, 64)).astype(np.float32)
    fn = _two_matmul_operand(lambda x: x - jnp.max(x, -1, keepdims=True))     # the source made in pass 1
    program = trnsim.compile(jax.jit(fn).lower(x, w, dy), cache=False, auto_cast="matmul", auto_cast_type=fmt)
    assert all(s.kernel != "fused_elementwise" for s in program.plan.steps)
    recipe = _check_step(program, [x, w, dy], 0, 0.0)
    assert recipe.chunk == 256 and [s[0] for s in recipe.steps].count("scaled") == 2


@pytest.mark.parametrize("keep", [True, False])
def test_a_per_tensor_scaled_input_of_rows_in_chunks_is_kept_as_loaded(keep: bool, monkeypatch: pytest.MonkeyPatch,
                                                                        request: pytest.FixtureRequest) -> None:
    """The scaled value is a kernel input (loaded chunk by chunk, kept), next to a row max of it read in a
    later pass (the input kept for the tile, or loaded again)."""
    from trnsim.compiler.tilegen import chunked
    from trnsim.numerics.quantize import quantize

    if not keep:
        monkeypatch.setattr(chunked, "KEEP_ROW_BYTES", 0)
    tilegen.clear_memo()
    request.addfinalizer(tilegen.clear_memo)
    rng = np.random.default_rng(14)
    x = (rng.standard_normal((200, 600)) * np.exp(rng.standard_normal((200, 600)))).astype(np.float32)
    steps: tuple[tilegen.Step, ...] = (
        ("reduce", "max", (("in", 0),), "fp32"),
        ("alu", "sub", (("in", 0), ("tmp", 0)), "fp32"),
        ("scaled", "fp8_e4m3", (("in", 0),), "fp32"),
    )
    recipe = tilegen.Recipe(x.size, (("fp32", "full"),), steps, ((("tmp", 1), "fp32"), (("tmp", 2), "fp32")),
                            cols=600, output_kinds=("full", "full"), phases=("block", "block", "late"), chunk=128)
    verify(tilegen.kernel_program("trn3", recipe), registry.get("trn3"))
    shifted, scaled = trnsim.run_kernel(tilegen.kernel(), x, recipe=recipe).outputs
    np.testing.assert_array_equal(shifted, x - x.max(-1, keepdims=True))
    scale = np.float32(448.0 / np.abs(x).max())
    np.testing.assert_array_equal(scaled, (quantize(x * scale, "fp8_e4m3") / scale).astype(np.float32))


def test_an_iota_of_the_row_layout_is_a_row_or_column_index_whatever_the_space_size(
        monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """A causal mask over many heads: the flat element index passes 2**24 (here a limit of 200, below the
    9600 elements); the mask's row index is each tile's partition (40 rows + 128 below the limit, the second
    tile starting at row 8 of the mask), its column index the tile's column. The flat layout, whose partitions
    span the whole space, still needs the space below the limit."""
    from trnsim.compiler.tilegen import build

    monkeypatch.setattr(build, "EXACT_INDEX", 200)
    tilegen.clear_memo()
    request.addfinalizer(tilegen.clear_memo)
    s = np.random.default_rng(15).standard_normal((2, 3, 40, 40)).astype(np.float32)   # 240 rows: 2 tiles

    def causal(s: jax.Array) -> jax.Array:
        keep = jnp.arange(40)[:, None] >= jnp.arange(40)[None, :]
        return jax.nn.softmax(jnp.where(keep, s, -jnp.inf), axis=-1)

    program = _compile(causal, s)
    (step,) = [s for s in program.plan.steps if s.kernel != "view"]
    assert step.kernel == "generated_elementwise"
    recipe = _check_step(program, [s], step.index, 1e-6)
    iotas = [i for i, st in enumerate(recipe.steps) if st[0] == "iota"]
    assert iotas and any(recipe.phases[i] == "block" for i in iotas)      # period 40 rows: per tile
    flat = _compile(lambda x: x * jnp.arange(9600, dtype=jnp.float32).reshape(2, 3, 40, 40), s)
    assert flat.plan.steps[0].kernel == "fused_elementwise"


def test_small_blocks_are_loaded_further_ahead_and_large_ones_in_pieces(monkeypatch: pytest.MonkeyPatch,
                                                                         request: pytest.FixtureRequest) -> None:
    from trnsim.compiler.tilegen import emit
    from trnsim.compiler.tilegen.recipe import PREFETCH, pipeline

    request.addfinalizer(tilegen.clear_memo)
    small = _recipe(_compile(lambda x: x * 2.0, np.ones((2048, 512), jnp.bfloat16)))    # blocks of 128 KiB
    x = np.random.default_rng(16).standard_normal((512, 2048)).astype(np.float32)
    program = _compile(lambda x: jax.nn.softmax(x, -1), x)                             # blocks of 1 MiB
    large = _recipe(program)
    assert small is not None and large is not None
    # the softmax has 4 blocks: all of them ahead, each DMA in 4 pieces (16 loads in flight)
    assert pipeline(small) == (16, 1) and pipeline(large) == (4, 4)
    recipe = _check_step(program, [x], 0, 2e-6)                 # each block loaded and stored in 4 pieces
    assert tilegen.fused_time("trn3", recipe).by_engine["dma"] == 4 * 2 * 4
    one = _recipe(_compile(lambda x: x * 2.0, np.ones((128, 512), jnp.float32)))      # one block of 256 KiB
    assert one is not None and pipeline(one) == (1, 4)
    # against PREFETCH blocks ahead in one DMA each: the queues' bound is 4 MiB / 528 GB/s + 2 us = 10 us
    piped = tilegen.fused_time("trn3", small).seconds
    monkeypatch.setattr(emit, "pipeline", lambda recipe: (PREFETCH, 1))
    tilegen.clear_memo()
    assert piped < 20e-6 < 30e-6 < tilegen.fused_time("trn3", small).seconds


def test_five_inputs_of_rows_of_4096_fp32_load_one_block_ahead_and_fit_in_sbuf(
        monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """Five operand tiles of 16 KiB per partition (a norm's backward over [B·T, 4096] fp32 reads four): four
    blocks ahead do not fit in SBUF (the step kept the analytic cost); one block ahead, in pieces, does."""
    from trnsim.compiler.tilegen import emit
    from trnsim.compiler.tilegen.recipe import PREFETCH, pipeline
    from trnsim.dsl.errors import KernelError

    request.addfinalizer(tilegen.clear_memo)
    rng = np.random.default_rng(17)
    a, b, c, d, e = (rng.standard_normal((200, 4096)).astype(np.float32) for _ in range(5))
    steps: tuple[tilegen.Step, ...] = (
        ("alu", "mul", (("in", 0), ("in", 1)), "fp32"), ("alu", "add", (("tmp", 0), ("in", 2)), "fp32"),
        ("alu", "mul", (("tmp", 1), ("in", 3)), "fp32"), ("alu", "add", (("tmp", 2), ("in", 4)), "fp32"))
    recipe = tilegen.Recipe(a.size, (("fp32", "full"),) * 5, steps, ((("tmp", 3), "fp32"),), cols=4096,
                            output_kinds=("full",))
    assert pipeline(recipe) == (1, 4)
    verify(tilegen.kernel_program("trn3", recipe), registry.get("trn3"))
    (out,) = trnsim.run_kernel(tilegen.kernel(), a, b, c, d, e, recipe=recipe).outputs
    np.testing.assert_array_equal(out, (a * b + c) * d + e)                 # fp32 rounding at each op, as numpy
    longer = dataclasses.replace(recipe, elements=1024 * 4096)                 # 8 blocks (timing only)
    tilegen.fused_time("trn3", longer)
    monkeypatch.setattr(emit, "pipeline", lambda recipe: (PREFETCH, 1))
    tilegen.clear_memo()
    with pytest.raises(KernelError, match="out of sbuf"):
        tilegen.fused_time("trn3", longer)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_leading_axis_sum_4096_wide_accumulates_in_all_eight_psum_banks(dtype: str) -> None:
    """The RMSNorm weight gradient of a 4096-wide model: [B·T, 4096] → [4096], 8 banks of 512 fp32."""
    x = np.random.default_rng(18).integers(-8, 9, (200, 4096)).astype(dtype)     # sums of integers: exact
    program = _compile(lambda x: (x * 2.0).sum(axis=0), x)
    step = next(s.index for s in program.plan.steps if s.kernel == "generated_elementwise")
    recipe = _check_step(program, [x], step, 0.0)
    assert any(s[0] == "lead" for s in recipe.steps)
    assert all(s.kernel != "fused_elementwise" for s in program.plan.steps)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_leading_axis_sum_added_to_a_group_input_of_its_shape_loads_it_after_the_loop(dtype: str) -> None:
    """A gradient accumulated into (one sum made by another step plus this step's): the other is a ``red``
    input, loaded once after the tile loop."""
    x = np.random.default_rng(19).integers(-8, 9, (200, 96)).astype(dtype)
    program = _compile(lambda x: (x * 2.0).sum(axis=0) + (x * x).sum(axis=0), x)
    assert all(s.kernel != "fused_elementwise" for s in program.plan.steps)
    step = next(s.index for s in program.plan.steps if s.ops[-1] == "add")
    recipe = _check_step(program, [x], step, 0.0)
    assert any(kind == "red" for _, kind in recipe.inputs)


def test_identities_take_no_instruction_and_signed_zeros_stay_exact() -> None:
    """``x - 0``, ``x * 1``, ``x / 1``, ``max(x, -inf)``, ``min(x, inf)``, an integer ``+ 0`` and
    ``select(mask, True, False)`` are their operand; a float ``x + 0`` is not (-0 + 0 = +0)."""
    x = np.random.default_rng(20).standard_normal((200, 96)).astype(np.float32)
    x[0, :6] = [-0.0, 0.0, np.inf, -np.inf, np.nan, -1.0]
    n = np.arange(200 * 96, dtype=np.int32).reshape(200, 96) % 7 - 3

    def f(x: jax.Array, n: jax.Array) -> jax.Array:
        mask = jnp.where(n + 0 > 0, True, False)
        same = jnp.minimum(jnp.maximum((x - 0.0) * 1.0 / 1.0, -jnp.inf), jnp.inf)
        return jnp.where(mask, same, x + 0.0)

    program = _compile(f, x, n)
    (step,) = program.plan.steps
    assert step.kernel == "generated_elementwise"
    recipe = _check_step(program, [x, n], 0, 0.0)
    assert [s[1] for s in recipe.steps if s[0] == "alu"] == ["gt", "add"]       # the compare and x + 0


@pytest.mark.parametrize("name", ["softmax", "logsumexp", "causal"])
def test_a_subtracted_column_and_a_sum_fold_into_the_activation_bit_for_bit(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``exp(x - m)`` is one ScalarE activation with the bias ``-m`` and its sum along the rows accumulated:
    the same fp32 values as the three separate instructions (compared bit for bit on the simulator)."""
    from trnsim.compiler.tilegen import build

    x = (np.random.default_rng(21).standard_normal((2, 100, 96)) * 4.0).astype(np.float32)
    fns = {
        "softmax": lambda x: jax.nn.softmax(x, axis=-1),
        "logsumexp": lambda x: jnp.log(jnp.sum(jnp.exp(x - x.max(-1, keepdims=True)), -1)) + x.max(-1),
        "causal": lambda x: jax.nn.softmax(jnp.where(jnp.arange(96)[None, :] <= jnp.arange(100)[:, None], x,
                                                     -jnp.inf), axis=-1),
    }
    program = _compile(fns[name], x)
    step = next(s.index for s in program.plan.steps if s.kernel == "generated_elementwise")
    fused = _check_step(program, [x], step, 2e-6)
    kinds = [s[0] for s in fused.steps]
    assert "actsum" in kinds and "summed" in kinds and ("act", "neg") in [s[:2] for s in fused.steps]
    monkeypatch.setattr(build._Builder, "fuse_activations", lambda self, stored: None)  # pyright: ignore
    separate = _check_step(program, [x], step, 2e-6)
    assert "actsum" not in [s[0] for s in separate.steps]
    args = [x.reshape(tilegen.input_shapes(fused)[0])]
    a = trnsim.run_kernel(tilegen.kernel(), *args, recipe=fused).outputs
    b = trnsim.run_kernel(tilegen.kernel(), *args, recipe=separate).outputs
    for u, v in zip(a, b, strict=True):
        np.testing.assert_array_equal(u, v)


def test_is_finite_is_a_magnitude_below_infinity_and_jax_logsumexp_is_generated() -> None:
    x = (np.random.default_rng(22).standard_normal((200, 96)) * 4.0).astype(np.float32)
    x[0, :3] = [np.inf, -np.inf, np.nan]
    x[1, :] = -np.inf                                    # a row of -inf: its max is not finite
    program = _compile(lambda x: (jax.nn.logsumexp(x, axis=-1), jnp.isfinite(x)), x)
    assert all(s.kernel != "fused_elementwise" for s in program.plan.steps)
    for step in (s.index for s in program.plan.steps if s.kernel == "generated_elementwise"):
        _check_step(program, [x], step, 2e-6)


@pytest.mark.parametrize("shape", [(32, 10), (3, 3, 3, 16), (10,), (1000, 3)])
def test_elementwise_groups_of_a_size_128_does_not_divide_run_in_rows(shape: tuple[int, ...]) -> None:
    """An SGD update of a small weight: too few elements (or a count 128 does not divide) for the flat layout,
    so the rows of its shape; checked on the simulator."""
    rng = np.random.default_rng(21)
    w, g = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    program = _compile(lambda w, g: w - 0.1 * g, w, g)
    (step,) = program.plan.steps
    assert step.kernel == "generated_elementwise"
    recipe = _check_step(program, [w, g], 0, 2e-7)
    assert recipe.cols == shape[-1]


def _within_ranges(nodes: list, env: dict[int, np.ndarray]) -> None:  # type: ignore[type-arg]
    """Every integer value the group makes lies in the interval ``tilegen.ranges`` bounds it by (the builder's
    choice between fp32 instructions and exact word forms rests on it)."""
    from trnsim.compiler.tilegen.ranges import Ranges

    ranges = Ranges(nodes)
    for v in (v for n in nodes for v in n.outputs):
        r = ranges.of(v)
        if r is not None and np.asarray(env[v.id]).size:
            value = np.asarray(env[v.id])
            assert r[0] <= int(value.min()) and int(value.max()) <= r[1], (v, r, value.min(), value.max())


def _exact(fn, *args: np.ndarray) -> list[tilegen.Recipe]:  # type: ignore[no-untyped-def]
    """Compile ``fn``; every step must be generated, and its kernel on the simulator must give the interpreter's
    values bit for bit (signed zeros and NaNs included)."""
    recipes = _bit_exact(_compile(fn, *args), list(args))
    assert recipes
    return recipes


def _bit_exact(program: trnsim.CompiledProgram, args: list[np.ndarray]) -> list[tilegen.Recipe]:
    """No step of ``program`` keeps the analytic cost; each generated step's kernel gives the interpreter's
    values bit for bit (signed zeros and NaNs included). The steps' recipes."""
    assert all(s.kernel != "fused_elementwise" for s in program.plan.steps), [s.ops for s in program.plan.steps]
    recipes = []
    for step in (s.index for s in program.plan.steps if s.kernel == "generated_elementwise"):
        recipe, pairs = _run_step(program, args, step)
        recipes.append(recipe)
        for got, want in pairs:
            got = got[:want.size].astype(want.dtype if want.dtype != np.bool_ else np.uint8)
            if want.dtype.kind == "f" or want.dtype == jnp.bfloat16:
                g, w = got.astype(np.float32), want.astype(np.float32)
                np.testing.assert_array_equal(g, w)
                np.testing.assert_array_equal(np.signbit(g), np.signbit(w))
            else:
                np.testing.assert_array_equal(got.astype(np.int64), want.astype(np.int64))
    return recipes


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int8", "uint16", "bool"])
def test_a_group_of_scalars_is_one_column_and_exact(dtype: str) -> None:
    """A compare of two 0-d values (the conformance corpus's ``eq_*`` files): a [1, 1] space."""
    a, b = np.asarray(3, dtype), np.asarray(1 if dtype == "bool" else 5, dtype)
    for fn in (lambda a, b: a == b, lambda a, b: a >= b, lambda a, b: a < b):
        (recipe,) = _exact(fn, a, b)
        assert recipe.elements == 1


_EDGES: dict[str, list[int]] = {
    "int8": [-128, -127, -1, 0, 1, 2, 5, 127], "int16": [-32768, -300, -1, 0, 1, 7, 300, 32767],
    "uint8": [0, 1, 2, 5, 127, 128, 200, 255], "uint16": [0, 1, 7, 300, 32768, 40000, 65534, 65535],
    "uint32": [0, 1, 7, 65535, 65536, (1 << 24) + 1, 0x9E3779B9, (1 << 32) - 1],
    "int32": [-(1 << 31), -(1 << 24) - 1, -65536, -1, 0, 7, (1 << 24) + 1, (1 << 31) - 1],
}


def _pairs(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of a dtype's edge values, as two [8, 16] arrays (64 pairs, twice)."""
    e = np.asarray(_EDGES[dtype], np.int64)
    a, b = np.meshgrid(e, e)
    return tuple(np.tile(m.reshape(-1), 2).reshape(8, 16).astype(dtype) for m in (a, b))  # type: ignore[return-value]


@pytest.mark.parametrize("dtype", list(_EDGES))
def test_integers_wrap_as_stablehlo_and_compute_exactly(dtype: str) -> None:
    """Sums, differences, products and negations wrap modulo 2**bits (an ISA write would saturate: 127 + 1 =
    -128, 3 - 5 = 254 in uint8, -(-128) = -128); the others stay in range. 16-bit products and 32-bit
    arithmetic beyond 2**24, which VectorE's fp32 would round, take the exact word forms (halves and byte
    limbs: ``intmath``), compares and selects of such values too; ``lax.clamp`` and ``abs`` of them as well."""
    a, b = _pairs(dtype)
    signed = np.dtype(dtype).kind == "i"
    hundred = jnp.asarray(100, dtype)
    recipes = _exact(lambda a, b: (a + b, a - b, a * b, jnp.maximum(a, b), jnp.minimum(a, b), a & b, a | b, a ^ b,
                                   ~a, jnp.where(a > b, a, b), jnp.clip(a, b, hundred), jax.lax.clamp(b, a, hundred),
                                   a == b, a <= b, -a, -(a - b), *((jnp.abs(a), jnp.sign(a)) if signed else ())),
                     a, b)
    steps = {s[0] for r in recipes for s in r.steps}
    assert ("wrap" if np.dtype(dtype).itemsize < 4 else "word") in steps
    assert ("word" in steps) == (np.dtype(dtype).itemsize > 1)        # 16-bit products, 32-bit everything


@pytest.mark.parametrize("dtype", ["int8", "int32", "uint8", "uint16"])
def test_integer_division_truncates_and_divisions_by_zero_are_stablehlo_s(dtype: str) -> None:
    """``-5 / 3 = -1`` (an fp32 quotient converted would round to -2), ``x / 0 = -1`` (all ones), ``x % 0 = x``,
    ``INT_MIN / -1 = INT_MIN`` (wrapped), remainders take the dividend's sign."""
    edges = {"int8": [-128, -7, -5, -1, 0, 1, 3, 127], "int32": [-(1 << 20), -7, -5, -1, 0, 1, 3, 1 << 20],
             "uint8": [0, 1, 2, 3, 5, 7, 128, 255], "uint16": [0, 1, 3, 7, 300, 40000, 65534, 65535]}
    e = np.asarray(edges[dtype], np.int64)
    a, b = (m.reshape(4, 16).astype(dtype) for m in np.meshgrid(e, e))
    _exact(lambda a, b: (jax.lax.div(a, b), jax.lax.rem(a, b), jax.lax.div(a, jnp.asarray(3, dtype)),
                         jax.lax.rem(a, jnp.asarray(3, dtype))), a, b)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_floor_ceil_round_sign_and_remainder_of_floats_are_exact(dtype: str) -> None:
    """Signed zeros (``floor(-0) = -0``, ``ceil(-0.5) = -0``, ``round(-0.4) = -0``), halves to even, infinities,
    NaN, values that are integers already and the smallest subnormal's sign."""
    values = [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 0.49999997, -0.49999997, 1.0, -3.0, 3.7, -3.7, 1e-45, -1e-45,
              np.inf, -np.inf, np.nan, 4194305.5, 8388609.0, -16777216.0, 1e30, -1e30, 123.25]
    x = np.resize(np.asarray(values, np.float32), 8 * 16).reshape(8, 16)
    with np.errstate(over="ignore"):
        x = x.astype(dtype)                              # 1e30 is an infinity in float16
    y = np.resize(np.asarray([3.0, -3.0, 0.5, -0.0, 0.0, np.inf, 1.25, 7.0], np.float32), x.size).reshape(x.shape)
    y = y.astype(dtype)
    _exact(lambda x, y: (jnp.floor(x), jnp.ceil(x), jnp.round(x), jnp.sign(x), jnp.fmod(x, y)), x, y)


@pytest.mark.parametrize("out", ["int8", "int32", "uint8", "uint16", "bool"])
def test_conversions_to_integers_truncate_saturate_and_wrap(out: str) -> None:
    """Floats convert toward zero, saturating, NaN to 0 (the ISA's write alone rounds half to even); integers
    into a narrower type keep the low bits; anything into i1 is ``!= 0``."""
    f = np.resize(np.asarray([0.5, -0.5, 1.5, -1.5, 2.7, -2.7, 127.9, 128.5, -129.0, 255.5, 1e10, -1e10, np.inf,
                              -np.inf, np.nan, 3.0], np.float32), 128).reshape(8, 16)
    i = np.resize(np.asarray([0, 1, -1, 127, 128, 255, 256, -129, 65535, 65536, -32769, 1 << 20, -(1 << 20), 300,
                              -300, 7], np.int32), 128).reshape(8, 16)
    _exact(lambda f, i: (f.astype(out), i.astype(out)), f, i)


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "uint8", "uint16", "uint32"])
def test_shifts_wrap_read_amounts_unsigned_and_give_zero_or_the_sign_past_the_width(dtype: str) -> None:
    """Every amount from -1 (read unsigned: past the width) to the width + 1, of values with the top bit set
    or not: left shifts drop the bits shifted out (the ISA's write would saturate), logical shifts fill with
    zeros, arithmetic ones with the sign (an unsigned type's top bit read as one)."""
    bits = np.dtype(dtype).itemsize * 8
    info = np.iinfo(dtype)
    values = np.asarray([info.min, info.max, 1, 0, 5, info.max // 3, info.min + 7, -3 if info.min < 0 else 200],
                        np.int64)
    amounts = np.asarray([0, 1, 3, bits - 1, bits, bits + 1, 7, -1 if info.min < 0 else info.max], np.int64)
    x, s = (m.reshape(4, 16).astype(dtype) for m in np.meshgrid(values, amounts))
    three = jnp.asarray(3, dtype)
    _exact(lambda x, s: (jax.lax.shift_left(x, s), jax.lax.shift_right_logical(x, s),
                         jax.lax.shift_right_arithmetic(x, s), jax.lax.shift_left(x, three),
                         jax.lax.shift_right_arithmetic(x, three), jax.lax.shift_right_logical(x, s[:1])), x, s)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_round_half_away_from_zero_is_exact(dtype: str) -> None:
    """``round_nearest_afz``: halves away from zero, 0.49999997 down (``floor(|x| + 0.5)`` would round it up),
    signed zeros, infinities and NaN."""
    values = [0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999997, -0.49999997, -0.0, 0.0, -0.3, 3.7, -3.7, np.inf,
              -np.inf, np.nan, 4194305.5, -8388607.5, 1e30, 123.25]
    x = np.resize(np.asarray(values, np.float32), 128).reshape(8, 16).astype(dtype)
    _exact(lambda x: jax.lax.round(x, jax.lax.RoundingMethod.AWAY_FROM_ZERO), x)


def test_a_scalar_predicate_or_bound_is_spread_over_the_tile() -> None:
    """``select`` of a 0-d predicate (``select_n``) and ``clamp`` with a scalar bound and tensor bound."""
    rng = np.random.default_rng(23)
    x, y = (rng.standard_normal((8, 18)).astype(np.float32) for _ in range(2))
    x[0, :2] = [-0.0, np.nan]
    for p in (np.asarray(True), np.asarray(False)):
        _exact(lambda p, x, y: (jax.lax.select(jnp.broadcast_to(p, x.shape), x, y),
                                jax.lax.clamp(jnp.float32(-0.5), x, y)), p, x, y)


@pytest.mark.parametrize("dtype", ["int8", "int16", "uint8", "uint16", "int32", "bool"])
def test_integer_maxima_and_minima_along_rows_and_leading_axes_and_wrapped_sums_are_exact(dtype: str) -> None:
    """Integer reductions start from the type's own extremes (``reduce`` inits INT_MIN / INT_MAX, not ±inf);
    maxima and minima over either axis are exact; narrow sums along the rows wrap (127 + 1 = -128). int32
    values are clipped within 2**23 in the group, which bounds them (``ranges``) where fp32 is exact (those of
    any size are the ``int_reduce`` kernel's: ``test_compiler_intreduce``)."""
    info = np.iinfo(np.uint8 if dtype == "bool" else dtype)
    lo, hi = (-(1 << 23), 1 << 23) if dtype == "int32" else (int(info.min), int(info.max))
    rng = np.random.default_rng(24)
    x = rng.integers(lo, hi + 1, (6, 40)).astype(dtype) if dtype != "bool" else rng.random((6, 40)) < 0.3
    x[0, :3] = [lo, hi, hi] if dtype != "bool" else [True, False, True]
    bound = (lambda x: jnp.clip(x, lo, hi)) if dtype == "int32" else (lambda x: x)
    fns = [lambda x: (bound(x).max(axis=1), bound(x).min(axis=1)), lambda x: bound(x).max(axis=0),
           lambda x: bound(x).min(axis=0)]
    if dtype not in ("bool", "int32"):
        fns.append(lambda x: jnp.sum(x, axis=1, dtype=x.dtype))
    for fn in fns:
        _exact(fn, x)


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int32"])
def test_integer_sums_over_leading_axes_and_reductions_from_another_start_are_exact(dtype: str) -> None:
    """An integer sum over the leading axes: fp32 on TensorE (exact below 2**24), a narrow type's wrapped after
    the loop; a ``reduce`` from an init that is not the identity (3, or a float max from 0.5) folds it in. int32
    values are clipped within 2**16 in the group: 200 of them sum within 2**24."""
    info = np.iinfo(dtype)
    lo, hi = (-(1 << 16), 1 << 16) if dtype == "int32" else (int(info.min), int(info.max))
    x = np.random.default_rng(25).integers(lo, hi + 1, (200, 24)).astype(dtype)      # 2 row tiles
    x[:3, 0] = [lo, hi, hi]
    f = np.random.default_rng(26).standard_normal((200, 24)).astype(np.float32)
    three, half = np.asarray(3, dtype), np.float32(0.5)
    bound = (lambda x: jnp.clip(x, lo, hi)) if dtype == "int32" else (lambda x: x)
    _exact(lambda x: jnp.sum(bound(x), axis=0, dtype=x.dtype), x)
    _exact(lambda x: (jax.lax.reduce(bound(x), three, jax.lax.add, (0,)),
                      jax.lax.reduce(bound(x), three, jax.lax.add, (1,)),
                      jax.lax.reduce(bound(x), three, jax.lax.max, (0,))), x)
    _exact(lambda f: (jax.lax.reduce(f, half, jax.lax.max, (1,)), jax.lax.reduce(f, half, jax.lax.min, (0,))), f)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_reduce_precision_to_a_format_at_least_as_wide_is_a_copy(dtype: str) -> None:
    """``reduce_precision`` to e11m52, or to the type's own exponent width, keeps every value (subnormals,
    infinities, NaN: the op flushes only where the format's exponent is narrower): a copy. To a narrower
    mantissa it rounds, which keeps the analytic cost."""
    tiny = float(jnp.finfo(dtype).smallest_subnormal)
    x = np.resize(np.asarray([1.5, -0.0, tiny, -tiny, np.inf, -np.inf, np.nan, 3e4], np.float32), 64)
    x = x.reshape(4, 16).astype(dtype)
    own = 5 if dtype == "float16" else 8
    for exponent_bits, mantissa_bits in ((11, 52), (own, 23)):
        (recipe,) = _exact(lambda x, e=exponent_bits, m=mantissa_bits: jax.lax.reduce_precision(
            x, exponent_bits=e, mantissa_bits=m), x)
        assert [s[0] for s in recipe.steps] == ["copy"]
    narrower = _compile(lambda x: jax.lax.reduce_precision(x, exponent_bits=own, mantissa_bits=2), x)
    assert [s.kernel for s in narrower.plan.steps] == ["fused_elementwise"]


def test_wrapped_integers_rounding_and_shifts_in_rows_longer_than_max_row_are_exact() -> None:
    """Rows over ``MAX_ROW`` run in column chunks (``chunked``): a ``wrap`` of a row's sum is made once per tile
    like the sum, and composed ops (floor, round, shifts by a per-row amount) run chunk by chunk."""
    rng = np.random.default_rng(27)
    x = rng.integers(-128, 128, (16, 5000)).astype(np.int8)
    f = (rng.standard_normal((16, 5000)) * 3).astype(np.float32)
    s = rng.integers(-2, 10, (16, 1)).astype(np.int8)
    cases = [(lambda x: jnp.sum(x, axis=1, dtype=jnp.int8), (x,), True),
             (lambda f: jnp.floor(f) - jnp.max(jnp.round(f), axis=1, keepdims=True), (f,), False),
             (lambda x, s: jax.lax.shift_left(x, jnp.broadcast_to(s, x.shape)) + x.max(axis=1, keepdims=True),
              (x, s), True)]
    for fn, args, wraps in cases:
        (recipe,) = _exact(fn, *args)
        assert recipe.chunk and any(step[0] == "wrap" for step in recipe.steps) == wraps


def test_splat_constants_are_immediates_and_boolean_all_any_are_min_max() -> None:
    """A constant of one repeated value (a chlo decomposition's ``dense<c> : tensor<20x20xf32>`` coefficients,
    or a numpy array a jitted function closes over) is an instruction immediate, not a kernel input; ``all``
    / ``any`` of i1 masks (``reduce`` with ``and`` / ``or``) are min / max of 0/1 bytes along either axis."""
    rng = np.random.default_rng(28)
    x = rng.standard_normal((20, 20)).astype(np.float32)
    coefficients = [np.full((20, 20), c, np.float32) for c in (0.5, -1.25, 3.0, np.nan)]
    (recipe,) = _exact(lambda x: ((x * coefficients[0] + coefficients[1]) * x - coefficients[2]) + coefficients[3], x)
    assert len(recipe.inputs) == 1
    m = rng.random((20, 40)) < 0.9
    m[3] = True
    _exact(lambda m: (jnp.all(m, axis=1), jnp.any(~m, axis=1)), m)
    _exact(lambda m: (jnp.all(m, axis=0), jnp.any(m, axis=0)), m)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape, strip", [
    ((200, 8192), 4096),            # a 70B norm-scale gradient's width: two strips on partitions 0 and 1
    ((200, 4708), 2560),            # 4608 + 100: strips of 5 banks, the second ending inside a bank and a chunk
    ((3, 50, 4708), 2560),          # period 50 (per-tile selections): partitions 0-49 and 50-99
])
def test_a_leading_axis_sum_wider_than_psum_folds_its_strips_onto_partitions_and_is_exact(
        shape: tuple[int, ...], strip: int, dtype: str) -> None:
    """Sums over more columns than PSUM's 8 banks hold: the columns fold onto PSUM partitions in strips (rows
    in chunks of ``MAX_ROW`` too); sums of small integers are exact in any order and dtype."""
    x = np.random.default_rng(30).integers(-8, 9, shape).astype(dtype)
    program = _compile(lambda x: (x * 2.0).sum(axis=0), x)
    assert all(s.kernel != "fused_elementwise" for s in program.plan.steps)
    step = next(s.index for s in program.plan.steps if s.kernel == "generated_elementwise")
    recipe = _check_step(program, [x], step, 0.0)
    (lead,) = [s for s in recipe.steps if s[0] == "lead"]
    assert lead[2][1:] == (("imm", float(shape[1] if len(shape) == 3 else 1)), ("imm", float(strip)))
    assert recipe.chunk == tilegen.recipe.MAX_ROW


def test_folded_sums_meet_group_inputs_of_their_shape_in_the_folded_layout() -> None:
    """Two sums multiplied and a bias added after the loop: the inputs of the result's shape are loaded strip
    by strip into the ``[P·k, strip]`` layout (its tail zeroed), the result stored strip by strip."""
    rng = np.random.default_rng(31)
    x = rng.integers(-8, 9, (200, 4708)).astype(np.float32)
    g = rng.integers(-8, 9, (4708,)).astype(np.float32)
    program = _compile(lambda x, g: (x * 2.0).sum(0) * (x * x).sum(0) + g, x, g)
    assert all(s.kernel == "generated_elementwise" for s in program.plan.steps)
    recipes = [_check_step(program, [x, g], s.index, 0.0) for s in program.plan.steps]
    assert any([k for _, k in r.inputs].count("red") == 2 for r in recipes)


def test_sums_needing_more_banks_than_psum_share_them_and_fold() -> None:
    """Three sums of 3000 columns in one kernel (18 banks side by side): 2 banks each, three strips of 1024
    columns on partitions 0-2, and one of them added to a group input after the loop."""
    from trnsim.compiler.tilegen.recipe import lead_strips

    assert lead_strips([(1, 3000)] * 3) == [1024] * 3
    assert lead_strips([(1, 4096), (1, 512)]) == [2048, 512]                # 9 banks: 4 each, one folded
    assert lead_strips([(1, 4096), (1, 512)] * 2) == [1024, 512] * 2         # 2 banks each
    assert lead_strips([(64, 8192)]) == [4096] and lead_strips([(128, 8192)]) is None   # 128 partitions
    assert lead_strips([(1, 512)] * 9) is None
    rng = np.random.default_rng(32)
    x = rng.integers(-8, 9, (200, 3000)).astype(np.float32)
    g = rng.integers(-8, 9, (1, 3000)).astype(np.float32)
    fold = ("imm", 1.0), ("imm", 1024.0)
    steps: tuple[tilegen.Step, ...] = (
        ("lead", "add", (("in", 0), *fold), "fp32"),
        ("alu", "mul", (("in", 0), ("in", 0)), "fp32"),
        ("lead", "add", (("tmp", 1), *fold), "fp32"),
        ("act", "abs", (("in", 0),), "fp32"),
        ("lead", "add", (("tmp", 3), *fold), "fp32"),
        ("alu", "add", (("tmp", 4), ("in", 1)), "fp32"),
    )
    recipe = tilegen.Recipe(x.size, (("fp32", "full"), ("fp32", "red")), steps,
                            tuple((("tmp", k), "fp32") for k in (0, 2, 5)), cols=3000, output_kinds=("red",) * 3,
                            phases=("block",) * 5 + ("post",), input_shapes=((200, 3000), (1, 3000)),
                            output_shapes=((1, 3000),) * 3)
    verify(tilegen.kernel_program("trn3", recipe), registry.get("trn3"))
    outs = trnsim.run_kernel(tilegen.kernel(), x, g, recipe=recipe).outputs
    for got, want in zip(outs, (x.sum(0), (x * x).sum(0), np.abs(x).sum(0) + g[0]), strict=True):
        np.testing.assert_array_equal(np.asarray(got).reshape(-1), want)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", ["global_average_pool", "two_tiles", "one_slice_chunk", "narrow"])
def test_middle_axis_reductions_of_rows_longer_than_max_row_fold_whole_slices_per_chunk(name: str,
                                                                                         dtype: str) -> None:
    """Rows of ``R · inner`` over ``MAX_ROW``: chunks of whole ``inner`` slices, each reduced over its middle
    axis and folded into a running ``[rows, inner]`` tile (fp32), which the ops after it read."""
    rng = np.random.default_rng(33)
    cases = {
        "global_average_pool": ((8, 16, 16, 32), lambda x: x.mean(axis=(1, 2)), 4096),     # 8 rows of 256 × 32
        "two_tiles": ((130, 40, 128), lambda x: x.sum(axis=1) * 0.5, 4096),                 # chunks 4096, 1024
        "one_slice_chunk": ((130, 5, 1000), lambda x: x.max(axis=1), 4000),                # chunks 4000, 1000
        "narrow": ((20, 2100, 2), lambda x: x.min(axis=1) - 1.0, 4096),                    # a tensor_reduce
    }
    shape, fn, chunk = cases[name]
    x = rng.integers(-8, 9, shape).astype(dtype)
    program = _compile(fn, x)
    assert all(s.kernel != "fused_elementwise" for s in program.plan.steps)
    step = next(s.index for s in program.plan.steps if s.kernel == "generated_elementwise")
    # integers: sums exact; a mean divides once (one rounding in fp32, one more in bf16)
    recipe = _check_step(program, [x], step, (2.0 ** -8 if dtype == "bfloat16" else 1e-6)
                         if name == "global_average_pool" else 0.0)
    assert recipe.chunk == chunk and recipe.output_kinds == ("mid",)
    assert any(s[0] == "middle" for s in recipe.steps)


def test_a_leading_axis_sum_of_a_row_reduction_over_rows_in_chunks_is_generated() -> None:
    """The mean over tokens of a logsumexp over a large vocabulary: the rows' columns (made chunk by chunk)
    summed across tiles on TensorE."""
    x = np.random.default_rng(34).standard_normal((200, 8192)).astype(np.float32)
    program = _compile(lambda x: jax.nn.logsumexp(x, -1).mean(), x)
    assert all(s.kernel != "fused_elementwise" for s in program.plan.steps)
    step = next(s.index for s in program.plan.steps if s.kernel == "generated_elementwise")
    recipe = _check_step(program, [x], step, 1e-5)
    assert recipe.chunk and any(s[0] == "lead" for s in recipe.steps)


@pytest.mark.parametrize("fn, shape, dtype", [
    (lambda x: x.sum(axis=0), (4096, 8192), "bfloat16"),              # the 70B norm-scale gradient, folded
    (lambda x: x.sum(axis=1), (4096, 40, 128), "float32"),            # a middle axis in chunks
])
def test_wide_leading_and_middle_axis_reductions_are_timed_on_samples_within_3_percent(
        fn, shape: tuple[int, ...], dtype: str) -> None:  # type: ignore[no-untyped-def]
    recipe = _recipe(_compile(fn, np.ones(shape, dtype)))
    assert recipe is not None and recipe.chunk
    sampled, whole = tilegen.fused_time("trn3", recipe), tilegen.fused_time("trn3", recipe, sample=False)
    assert sampled.seconds == pytest.approx(whole.seconds, rel=0.03)
    assert sampled.busy["tensor" if recipe.steps[-1][0] == "lead" else "vector"] == pytest.approx(
        whole.busy["tensor" if recipe.steps[-1][0] == "lead" else "vector"], rel=0.03)


# ScalarE's sin, cos, tan, arctan, log1p, expm1 and cbrt: the exact function rounded once to fp32, as the interpreter
# has StableHLO's ops (f64, rounded once), so bit for bit in f32; huge arguments, the poles and domain edges too
_MATHS_EDGES = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-30, -1e-40, 1e-8, -1e-7, 0.5, -0.5, 1.0, -1.0,
                -0.99999994, -0.9999, -1.0000001, -2.0, 3.1415927, -3.1415927, 1.5707964, -1.5707964, 88.7, 89.0,
                -104.0, 1e5 * np.pi, 2.0 ** 24 + 2, 12345.678, 1e10, -1e10, 1e30, -3.4e38, 3.4028235e38, 27.0, -8.0]


def _maths_inputs(dtype: str, seed: int) -> np.ndarray:
    """The edge values, then normal values over magnitudes 2**-20 .. 2**20: an [8, 128] array."""
    rng = np.random.default_rng(seed)
    rest = rng.standard_normal(8 * 128 - len(_MATHS_EDGES)) * np.exp2(rng.uniform(-20, 20, 8 * 128 - len(_MATHS_EDGES)))
    with np.errstate(over="ignore"):
        return np.concatenate([np.asarray(_MATHS_EDGES), rest]).astype(np.float32).astype(dtype).reshape(8, 128)


def _maths(x: jax.Array) -> tuple[jax.Array, ...]:
    return jnp.sin(x), jnp.cos(x), jnp.tan(x), jnp.log1p(x), jnp.expm1(x), jnp.cbrt(x), jnp.arctan(x)


def test_sine_cosine_tan_log1p_expm1_cbrt_and_atan_are_scalare_functions_bit_for_bit() -> None:
    """One ScalarE activation each (``chlo.atan`` is ``atan2(x, 1)``: an ``arctan`` of ``x`` itself); the
    functions with f(-0) = -0 take the bias -0.0, so ``sin(-0)`` stays -0 (the default +0 bias would make it +0)."""
    recipes = _exact(_maths, _maths_inputs("float32", 40))
    acts = [(s[1], s[2][1:]) for r in recipes for s in r.steps if s[0] == "act"]
    assert sorted(f for f, _ in acts) == ["arctan", "cbrt", "cos", "expm1", "log1p", "sin", "tan"]
    assert all((bias == (("imm", -0.0),)) == (f != "cos") for f, bias in acts)
    assert not [s for r in recipes for s in r.steps if s[0] == "alu"]    # atan2(x, 1): no division, no fix-up


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_sine_cosine_tan_log1p_expm1_cbrt_and_atan_round_once_more_to_narrow_types(dtype: str) -> None:
    """The interpreter rounds numpy's fp32 function to the narrow type, the kernel ScalarE's correctly rounded fp32
    value: both fp32 values are within a few fp32 ulps of the function, so their roundings to bf16 / f16 differ
    only where those straddle a rounding boundary: by at most 1 ulp of the narrow type. Specials are exact."""
    from trnsim.conformance import ulp_distance

    x = _maths_inputs(dtype, 41)
    program = _compile(_maths, x)
    assert all(s.kernel == "generated_elementwise" for s in program.plan.steps)
    special = np.isin(x.astype(np.float32).reshape(-1), np.asarray([0.0, np.inf, -np.inf])) | \
        np.isnan(x.astype(np.float32).reshape(-1))
    for step in range(len(program.plan.steps)):
        _, pairs = _run_step(program, [x], step)
        for got, want in pairs:
            g = got[:want.size].astype(want.dtype)
            assert ulp_distance(g, want).max() <= 1
            np.testing.assert_array_equal(g.astype(np.float32)[special], want.astype(np.float32)[special])


def test_rope_tables_and_softplus_and_elu_are_generated_and_exact() -> None:
    """In-graph RoPE tables (sin/cos of positions times inverse frequencies), a stable softplus / log-sigmoid
    (log1p(exp(-|x|))) and ELU's expm1: every step generated, bit for bit."""
    x = (np.random.default_rng(42).standard_normal((64, 128)) * 6.0).astype(np.float32)
    x[0, :4] = [-0.0, 0.0, np.inf, -np.inf]
    freqs = (1.0 / 10000.0 ** (np.arange(64) / 64.0)).astype(np.float32)

    def rope(freqs: jax.Array) -> tuple[jax.Array, jax.Array]:
        angles = jnp.arange(512, dtype=jnp.float32)[:, None] * freqs[None, :]
        return jnp.sin(angles), jnp.cos(angles)

    _exact(rope, freqs)
    _exact(lambda x: (jnp.maximum(x, 0.0) + jnp.log1p(jnp.exp(-jnp.abs(x))), jax.nn.log_sigmoid(x), jax.nn.elu(x)),
           x)


_ATAN2_EDGES = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e-45, -1e-45, 3.4e38, -3.4e38, 2.5, -0.75]


@pytest.mark.parametrize("shape_x", [(128, 512), (1, 512)])
def test_atan2_is_arctan_of_the_quotient_with_quadrant_fixes_within_its_bound(shape_x: tuple[int, int]) -> None:
    """``build._atan2``: every pair of zeros, infinities and NaN exact (signed zeros, ±π, ±π/2, ±π/4, ±3π/4, NaN);
    elsewhere within the method's bound of the interpreter's correctly rounded atan2: 1 ulp where ``x > 0``, 3
    where ``x < 0`` (``fl(π)`` and the sum's rounding). A ``[1, 512]`` ``x`` broadcast down the rows is a table."""
    from trnsim.conformance import ulp_distance

    rng = np.random.default_rng(43)
    y = (rng.standard_normal((128, 512)) * np.exp2(rng.uniform(-30, 30, (128, 512)))).astype(np.float32)
    x = (rng.standard_normal(shape_x) * np.exp2(rng.uniform(-30, 30, shape_x))).astype(np.float32)
    e = np.asarray(_ATAN2_EDGES, np.float32)
    ey, ex = (m.reshape(-1) for m in np.meshgrid(e, e))
    y[0, :ey.size], y[1, :ey.size] = ey, ey[::-1]
    x[0, :ex.size] = ex
    if shape_x[0] > 1:
        x[1, :ex.size] = ex[::-1]
        x[2:4] = -np.abs(x[2:4])
    program = _compile(lambda y, x: jnp.arctan2(y, x), y, x)
    (step,) = program.plan.steps
    assert step.kernel == "generated_elementwise"
    _, ((got, want),) = _run_step(program, [y, x], 0)
    got, want = got[:want.size], want.reshape(-1)
    xs = np.broadcast_to(x, y.shape).reshape(-1)
    edges = np.isin(y.reshape(-1), e[np.isinf(e) | (e == 0)]) | np.isin(xs, e[np.isinf(e) | (e == 0)]) | \
        np.isnan(y.reshape(-1)) | np.isnan(xs)
    np.testing.assert_array_equal(got[edges], want[edges])
    np.testing.assert_array_equal(np.signbit(got[edges & ~np.isnan(want)]), np.signbit(want[edges & ~np.isnan(want)]))
    distance = ulp_distance(got, want)
    assert distance[xs > 0].max() <= 1 and distance[xs < 0].max() <= 3


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_atan2_of_narrow_types_is_within_one_of_their_ulps(dtype: str) -> None:
    """The fp32 result within 3 fp32 ulps rounds to bf16 / f16 at most 1 of their ulps from the correctly
    rounded value; zeros, infinities and NaN exactly."""
    from trnsim.conformance import ulp_distance

    rng = np.random.default_rng(44)
    y, x = (rng.standard_normal((2, 16, 256)) * np.exp2(rng.uniform(-8, 8, (2, 16, 256)))).astype(dtype)
    e = np.asarray(_ATAN2_EDGES, np.float32)
    ey, ex = (m.reshape(-1) for m in np.meshgrid(e, e))
    with np.errstate(over="ignore"):
        y[0, :ey.size], x[0, :ex.size] = ey.astype(dtype), ex.astype(dtype)
    program = _compile(lambda y, x: jnp.arctan2(y, x), y, x)
    _, ((got, want),) = _run_step(program, [y, x], 0)
    got = got[:want.size].astype(want.dtype)
    assert ulp_distance(got, want).max() <= 1
    wide_y, wide_x = (v.astype(np.float32).reshape(-1) for v in (y, x))
    edges = ~np.isfinite(wide_y) | ~np.isfinite(wide_x) | (wide_y == 0) | (wide_x == 0)
    np.testing.assert_array_equal(got.astype(np.float32)[edges], want.astype(np.float32)[edges])


def test_activations_keep_the_sign_of_zero() -> None:
    """``-x``, ``tanh``, ``sqrt`` and ``rsqrt`` of ±0 are bit for bit the interpreter's (-(-0) = +0, tanh(-0) =
    sqrt(-0) = -0, rsqrt(-0) = -inf): their activations take the bias -0.0, as the default +0 would make -0 into +0
    before the function."""
    x = np.resize(np.asarray([-0.0, 0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 4.0], np.float32), (8, 128)).copy()

    def f(x: jax.Array) -> tuple[jax.Array, ...]:
        return -x, jnp.tanh(x), jnp.sqrt(x), jax.lax.rsqrt(x)

    recipes = _exact(f, x)
    acts = {s[1]: s[2][1:] for r in recipes for s in r.steps if s[0] == "act"}
    assert acts == dict.fromkeys(["neg", "tanh", "sqrt", "rsqrt"], (("imm", -0.0),))


def test_an_integer_column_stored_whole_keeps_every_bit() -> None:
    """A broadcast int32 column written as a whole tensor is combined with the zero tile by an integer ``or``
    (exact on all 32 bits), not an fp32 ``add``, which rounds values beyond 2**24."""
    x = np.arange(300 * 40, dtype=np.int32).reshape(300, 40)
    c = (np.arange(300, dtype=np.int64) * 7919 + 2**30 + 1).astype(np.int32)
    _exact(lambda x, c: (x + 1, jnp.broadcast_to(c[:, None], x.shape) + 0), x, c)


def test_float_maxima_and_minima_of_signed_zeros_are_ieee_s() -> None:
    """``max(+0, -0) = +0`` and ``min(+0, -0) = -0`` in either order (the ALU returns its second operand on
    ties; a fuzzer found ``max(x, -0.0)`` of +0 giving -0): an immediate zero goes where it wins the tie, two
    tiles are taken in both orders where the result is a zero."""
    values = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 1e-45], np.float32)
    a, b = (m.reshape(4, 16) for m in np.meshgrid(values, values))
    _exact(lambda a, b: (jnp.maximum(a, b), jnp.minimum(a, b), jnp.maximum(a, -0.0), jnp.minimum(a, 0.0),
                         jnp.maximum(0.0, a), jnp.minimum(-0.0, a), jnp.maximum(a, 2.0)), a, b)


def test_zero_immediates_keep_their_sign() -> None:
    """``-0.0`` and ``0.0`` are equal in Python: a constant tile of -0.0 is not the one of +0.0 made before it
    (a fuzzer found a select of -0.0 storing +0), and ``x - (-0.0)`` is not an identity (it turns -0 into +0)."""
    x = np.array([0.0, -0.0, 1.5, -2.0] * 16, np.float32).reshape(4, 16)
    _exact(lambda x: (jnp.where(x > 0, x, 0.0), jnp.where(x < 1, -0.0, x), jnp.sign(x - (-0.0)), jnp.sign(x - 0.0)), x)
