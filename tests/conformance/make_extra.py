"""Regenerate tests/conformance/extra/*.mlir: hand-made programs in the JAX testdata form (``@inputs``,
``@expected``, a ``check.expect_*`` custom_call) for ops the corpus sample does not contain.

Expected values come from jaxlib's reference interpreter where it implements the op, else from float64 numpy
rounded once (named in each file's header). Run ``.venv/bin/python tests/conformance/make_extra.py`` and
review the diff.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from conformance.oracle import NP, attr_text, reference, ttype  # noqa: E402


@dataclass
class Case:
    name: str
    inputs: list[tuple[np.ndarray, str]]
    body: str                       # uses %0#i (or %0) for the inputs, defines %r of type out
    out: tuple[tuple[int, ...], str]
    check: str = "expect_close"
    numpy: Callable[..., np.ndarray] | None = None   # expected from numpy (f64), when the reference lacks the op
    extra_funcs: str = ""


def _ref_module(case: Case) -> str:
    params = ", ".join(f"%a{i}: {ttype(a.shape, t)}" for i, (a, t) in enumerate(case.inputs))
    body = case.body
    for i in range(len(case.inputs)):
        body = body.replace(f"%0#{i}", f"%a{i}")
    if len(case.inputs) == 1:
        body = body.replace("%0", "%a0")
    out = ttype(*case.out)
    return (f"module {{\n  func.func @main({params}) -> {out} {{\n{body}\n    func.return %r : {out}\n  }}\n"
            f"{case.extra_funcs}}}\n")


def expected(case: Case) -> tuple[np.ndarray, str]:
    if case.numpy is not None:
        value = case.numpy(*(a.astype(np.float64) if t.startswith(("f", "bf")) else a for a, t in case.inputs))
        return np.asarray(value).astype(np.float32).astype(NP[case.out[1]]), "float64 numpy, rounded once"
    out = reference(_ref_module(case), [a for a, _ in case.inputs], [t for _, t in case.inputs])
    return out[0], "jaxlib's StableHLO reference interpreter (stablehlo.eval_module)"


def render(case: Case) -> str:
    value, source = expected(case)
    types = [ttype(a.shape, t) for a, t in case.inputs]
    out = ttype(*case.out)
    multi = len(case.inputs) > 1
    in_sig = f"({', '.join(types)})" if multi else types[0]
    consts = "\n".join(f"    %c{i} = stablehlo.constant {attr_text(a, t)}" for i, (a, t) in enumerate(case.inputs))
    rets = ", ".join(f"%c{i}" for i in range(len(case.inputs)))
    call = f"%0:{len(case.inputs)}" if multi else "%0"
    return f"""// Hand-made for trnsim's conformance tests (tests/conformance/make_extra.py); expected: {source}.
module @jit_main attributes {{mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32}} {{
  func.func public @main() -> ({out} {{jax.result_info = ""}}) {{
    {call} = call @inputs() : () -> {in_sig}
    %1 = call @expected() : () -> {out}
{case.body}
    stablehlo.custom_call @check.{case.check}(%r, %1) {{has_side_effect = true}} : ({out}, {out}) -> ()
    return %r : {out}
  }}
  func.func private @inputs() -> {in_sig} {{
{consts}
    return {rets} : {', '.join(types)}
  }}
  func.func private @expected() -> ({out} {{jax.result_info = ""}}) {{
    %c = stablehlo.constant {attr_text(value, case.out[1])}
    return %c : {out}
  }}
{case.extra_funcs}}}
"""


def _rand(shape: Sequence[int], t: str, seed: int, lo: float = -3, hi: float = 3) -> tuple[np.ndarray, str]:
    r = np.random.default_rng(seed)
    if t.startswith(("f", "bf")):
        return r.uniform(lo, hi, shape).astype(np.float32).astype(NP[t]), t
    return r.integers(int(lo), int(hi), shape).astype(NP[t]), t


EPS = np.float64(np.float32(1e-3))


def _bn_grad(x: np.ndarray, s: np.ndarray, m: np.ndarray, v: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """grad_operand of batch_norm_grad as the StableHLO spec writes it (i1 ... i6)."""
    n = x.size // x.shape[-1]
    centered = x - m
    stddev = np.sqrt(v + EPS)
    i1 = dy * n
    i2 = dy.sum((0, 1))
    i3 = (dy * centered).sum((0, 1))
    i5 = i3 * centered / (v + EPS)
    return s / stddev / n * (i1 - i2 - i5)


def cases() -> list[Case]:
    f32 = "f32"
    x = _rand((2, 3, 4), f32, 1)
    spd = np.array([[4.0, 2.0, 0.4], [2.0, 5.0, 1.0], [0.4, 1.0, 3.0]], np.float32)
    spd_b = np.stack([spd, spd * 2 + np.eye(3, dtype=np.float32)])
    bn = ("{epsilon = 1.000000e-03 : f32, feature_index = 2 : i64}")
    feat = lambda s: _rand((4,), f32, s, 0.5, 2.0)  # noqa: E731
    s, t = ttype((), f32), ttype((2, 3), f32)
    out: list[Case] = [
        Case("map_float32_2_3", [_rand((2, 3), f32, 2), _rand((2, 3), f32, 3)],
             f'    %r = "stablehlo.map"(%0#0, %0#1) ({{\n    ^bb0(%p: {s}, %q: {s}):\n'
             f'      %m = stablehlo.multiply %p, %q : {s}\n      %a = stablehlo.add %m, %p : {s}\n'
             f'      stablehlo.return %a : {s}\n    }}) {{dimensions = array<i64: 0, 1>}} : ({t}, {t}) -> {t}',
             ((2, 3), f32), "expect_eq"),
        Case("dot_float32_2_3_float32_3_4", [_rand((2, 3), f32, 4), _rand((3, 4), f32, 5)],
             f'    %r = "stablehlo.dot"(%0#0, %0#1) : ({t}, tensor<3x4xf32>) -> tensor<2x4xf32>', ((2, 4), f32),
             numpy=lambda a, b: a @ b),
        Case("dot_int32_3_int32_3", [_rand((3,), "i32", 6), _rand((3,), "i32", 7)],
             '    %r = "stablehlo.dot"(%0#0, %0#1) : (tensor<3xi32>, tensor<3xi32>) -> tensor<i32>', ((), "i32"),
             "expect_eq", numpy=lambda a, b: np.dot(a, b)),
        Case("broadcast_bfloat16_2_3", [_rand((2, 3), "bf16", 8)],
             '    %r = "stablehlo.broadcast"(%0) {broadcast_sizes = array<i64: 4>} : (tensor<2x3xbf16>) -> '
             "tensor<4x2x3xbf16>", ((4, 2, 3), "bf16"), "expect_eq", numpy=lambda a: np.broadcast_to(a, (4, 2, 3))),
        Case("batch_norm_inference_float32_2_3_4", [x, feat(9), feat(10), _rand((4,), f32, 11), feat(12)],
             f'    %r = "stablehlo.batch_norm_inference"(%0#0, %0#1, %0#2, %0#3, %0#4) {bn} : '
             f"(tensor<2x3x4xf32>, {', '.join(['tensor<4xf32>'] * 4)}) -> tensor<2x3x4xf32>", ((2, 3, 4), f32),
             numpy=lambda x, s, o, m, v: (x - m) / np.sqrt(v + EPS) * s + o),
        Case("batch_norm_training_float32_2_3_4", [x, feat(13), feat(14)],
             f'    %r, %mean, %var = "stablehlo.batch_norm_training"(%0#0, %0#1, %0#2) {bn} : '
             "(tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>)",
             ((2, 3, 4), f32), numpy=lambda x, s, o: (x - x.mean((0, 1))) / np.sqrt(x.var((0, 1)) + EPS) * s + o),
        Case("batch_norm_grad_float32_2_3_4", [x, feat(15), _rand((4,), f32, 16), feat(17), _rand((2, 3, 4), f32, 18)],
             f'    %r, %gs, %go = "stablehlo.batch_norm_grad"(%0#0, %0#1, %0#2, %0#3, %0#4) {bn} : '
             "(tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x3x4xf32>) -> "
             "(tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>)", ((2, 3, 4), f32), "expect_almost_eq", numpy=_bn_grad),
        Case("cholesky_float32_2_3_3", [(spd_b, f32)],
             '    %r = "stablehlo.cholesky"(%0) {lower = true} : (tensor<2x3x3xf32>) -> tensor<2x3x3xf32>',
             ((2, 3, 3), f32), numpy=lambda a: np.linalg.cholesky(a)),
        Case("cholesky_upper_float32_3_3", [(spd, f32)],
             '    %r = "stablehlo.cholesky"(%0) {lower = false} : (tensor<3x3xf32>) -> tensor<3x3xf32>',
             ((3, 3), f32), numpy=lambda a: np.linalg.cholesky(a).T),
        Case("einsum_float32_2_3_float32_3_4", [_rand((2, 3), f32, 19), _rand((3, 4), f32, 20)],
             f'    %r = "stablehlo.einsum"(%0#0, %0#1) {{einsum_config = "ab,bc->ca"}} : ({t}, tensor<3x4xf32>) -> '
             "tensor<4x2xf32>", ((4, 2), f32), numpy=lambda a, b: np.einsum("ab,bc->ca", a, b)),
        Case("unary_einsum_float32_2_3", [_rand((2, 3), f32, 21)],
             f'    %r = "stablehlo.unary_einsum"(%0) {{einsum_config = "ab->b"}} : ({t}) -> tensor<3xf32>',
             ((3,), f32), numpy=lambda a: np.einsum("ab->b", a)),
        Case("torch_index_select_float32_5_2_int32_3", [_rand((5, 2), f32, 22), (np.array([4, 0, 2], np.int32), "i32")],
             '    %r = "stablehlo.torch_index_select"(%0#0, %0#1) {batch_dims = 0 : i64, dim = 0 : i64} : '
             "(tensor<5x2xf32>, tensor<3xi32>) -> tensor<3x2xf32>", ((3, 2), f32), "expect_eq",
             numpy=lambda a, i: a[i]),
        Case("torch_index_select_batch_float32_2_4_int32_2_3",
             [_rand((2, 4), f32, 23), (np.array([[3, 0, 1], [2, 2, 0]], np.int32), "i32")],
             '    %r = "stablehlo.torch_index_select"(%0#0, %0#1) {batch_dims = 1 : i64, dim = 1 : i64} : '
             "(tensor<2x4xf32>, tensor<2x3xi32>) -> tensor<2x3xf32>", ((2, 3), f32), "expect_eq",
             numpy=lambda a, i: np.take_along_axis(a, i.astype(np.int64), axis=1)),
        Case("composite_float32_2_3", [_rand((2, 3), f32, 24), _rand((2, 3), f32, 25)],
             f'    %r = stablehlo.composite "trnsim.fma" %0#0, %0#1 {{composite_attributes = {{k = 2 : i64}}, '
             f"decomposition = @trnsim.fma.impl}} : ({t}, {t}) -> {t}", ((2, 3), f32), "expect_eq",
             extra_funcs=f"  func.func private @trnsim.fma.impl(%x: {t}, %y: {t}) -> {t} {{\n"
                         f"    %m = stablehlo.multiply %x, %y : {t}\n    %a = stablehlo.add %m, %x : {t}\n"
                         f"    return %a : {t}\n  }}\n"),
    ]
    # rng: the stream is implementation-defined, so the program checks a property: every value in [2, 3)
    rng_body = (
        "    %lo = stablehlo.constant dense<2.0> : tensor<f32>\n    %hi = stablehlo.constant dense<3.0> : tensor<f32>\n"
        "    %shape = stablehlo.constant dense<[4, 5]> : tensor<2xi64>\n"
        '    %v = "stablehlo.rng"(%lo, %hi, %shape) {rng_distribution = #stablehlo<rng_distribution UNIFORM>} : '
        "(tensor<f32>, tensor<f32>, tensor<2xi64>) -> tensor<4x5xf32>\n"
        "    %b = stablehlo.broadcast_in_dim %0, dims = [] : (tensor<f32>) -> tensor<4x5xf32>\n"
        "    %w = stablehlo.add %v, %b : tensor<4x5xf32>\n"
        "    %lob = stablehlo.broadcast_in_dim %lo, dims = [] : (tensor<f32>) -> tensor<4x5xf32>\n"
        "    %hib = stablehlo.broadcast_in_dim %hi, dims = [] : (tensor<f32>) -> tensor<4x5xf32>\n"
        "    %ge = stablehlo.compare GE, %w, %lob, FLOAT : (tensor<4x5xf32>, tensor<4x5xf32>) -> tensor<4x5xi1>\n"
        "    %lt = stablehlo.compare LT, %w, %hib, FLOAT : (tensor<4x5xf32>, tensor<4x5xf32>) -> tensor<4x5xi1>\n"
        "    %in = stablehlo.and %ge, %lt : tensor<4x5xi1>\n"
        "    %t = stablehlo.constant dense<true> : tensor<i1>\n"
        "    %r = stablehlo.reduce(%in init: %t) applies stablehlo.and across dimensions = [0, 1] : "
        "(tensor<4x5xi1>, tensor<i1>) -> tensor<i1>")
    out.append(Case("rng_uniform_float32_4_5", [(np.zeros((), np.float32), f32)], rng_body, ((), "i1"), "expect_eq",
                    numpy=lambda z: np.array(True)))
    return out


def main() -> None:
    extra = HERE / "extra"
    extra.mkdir(exist_ok=True)
    for case in cases():
        (extra / f"{case.name}.mlir").write_text(render(case))
        print("wrote", case.name)


if __name__ == "__main__":
    main()
