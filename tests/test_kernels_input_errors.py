"""Bad inputs to the kernel library and to ``run_kernel``: each is a trnsim error that names the problem (never
a plain Python error from inside a kernel, never a silently wrong or truncated result), and the inputs that
used to be mishandled but are legitimate give the right answer (the fuzz report of /tmp/fuzz3)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import trnsim
from trnsim import dsl
from trnsim import kernels as K
from trnsim.dsl import KernelError, typed
from trnsim.errors import SimError
from trnsim.kernels.rowwise import activation_kernel

R = np.random.default_rng(0)


def ones(*shape: int) -> np.ndarray:
    return np.ones(shape, np.float32)


A, B = ones(5, 8), ones(8, 9)
P = ones(5, 3)
Q = R.standard_normal((2, 5, 16)).astype(np.float32)
TABLE = np.arange(20, dtype=np.float32).reshape(10, 2)


def _attention_backward(**swap: Any) -> Callable[[], object]:
    """flash_attention_backward_kernel with one of o, do, lse replaced."""
    def run() -> object:
        o, lse = K.flash_attention(Q, Q, Q)
        args = {"o": o, "do": o, "lse": lse} | swap
        return trnsim.run_kernel(K.flash_attention_backward_kernel, Q, Q, Q, args["o"], args["do"], args["lse"])
    return run


@trnsim.kernel
def _slice_past_the_end(x: dsl.Tensor) -> dsl.Tensor:
    out = dsl.hbm_tensor((64, 2), x.dtype)
    dsl.store(out, dsl.load(x[0:64, 30:40]))  # x has 32 columns
    return out


@trnsim.kernel
def _slice_step_zero(x: dsl.Tensor) -> dsl.Tensor:
    out = dsl.hbm_tensor((64, 2), x.dtype)
    dsl.store(out, dsl.load(x[:, 0:2:0]))
    return out


BAD: dict[str, tuple[Callable[[], object], type[Exception], str]] = {
    # fail_03: the bias is [N]
    "matmul bias [M, N]": (lambda: K.matmul(A, B, bias=np.ones((5, 9))), KernelError, r"bias of shape \(5, 9\)"),
    "matmul bias longer than N": (lambda: K.matmul(A, B, bias=np.ones(20)), KernelError, r"bias of shape \(20,\)"),
    "matmul bias shorter than N": (lambda: K.matmul(A, B, bias=np.ones(7)), KernelError, r"bias of shape \(7,\)"),
    "sparse matmul bias longer than N": (lambda: K.matmul(A, B, sparsity="2:4", bias=np.ones(20)), KernelError,
                                         r"bias of shape \(20,\)"),
    "matmul_kernel bias of 12 for N = 9": (lambda: trnsim.run_kernel(K.matmul_kernel, A, B, None, None, None,
                                                                     np.ones(12, np.float32)),
                                           KernelError, r"bias of shape \(12,\)"),
    # fail_04: b's rows are K (dense) or K·n/m (sparse)
    "matmul_kernel b rows != K": (lambda: trnsim.run_kernel(K.matmul_kernel, A, ones(10, 9)), KernelError,
                                  "b has 10 rows for K = 8"),
    "sparse matmul_kernel b rows != K/2": (lambda: trnsim.run_kernel(K.matmul_kernel, A, ones(8, 9), None, None,
                                                                     np.zeros((8, 9), np.uint8), sparsity="2:4"),
                                           KernelError, r"b has 8 rows for K = 8(.|\n)*K·2/4"),
    "matmul_kernel unknown sparsity": (lambda: trnsim.run_kernel(K.matmul_kernel, A, ones(4, 9), sparsity="1:3"),
                                       KernelError, "unknown sparsity '1:3'"),
    # fail_05: gamma and beta are [D]
    "layernorm gamma longer than D": (lambda: K.layernorm(ones(4, 6), np.ones(7), np.zeros(6)), KernelError,
                                      r"gamma of shape \(7,\)"),
    "layernorm beta longer than D": (lambda: K.layernorm(ones(4, 6), np.ones(6), np.zeros(9)), KernelError,
                                     r"beta of shape \(9,\)"),
    "layernorm gamma shorter than D": (lambda: K.layernorm(ones(4, 6), np.ones(5), np.zeros(6)), KernelError,
                                       r"gamma of shape \(5,\)"),
    "rmsnorm gamma longer than D": (lambda: K.rmsnorm(ones(4, 6), np.ones(8)), KernelError, r"gamma of shape \(8,\)"),
    # fail_06: rank
    "layernorm x 3-D": (lambda: K.layernorm(ones(2, 3, 6), np.ones(6), np.zeros(6)), KernelError,
                        r"layernorm of x \(2, 3, 6\)"),
    "layernorm x 1-D": (lambda: K.layernorm(ones(6), np.ones(6), np.zeros(6)), KernelError, r"layernorm of x \(6,\)"),
    "rmsnorm x 3-D": (lambda: K.rmsnorm(ones(2, 3, 6), np.ones(6)), KernelError, r"rmsnorm of x \(2, 3, 6\)"),
    "transpose 1-D": (lambda: K.transpose(ones(5)), KernelError, r"transpose of x \(5,\)"),
    "transpose 3-D": (lambda: K.transpose(ones(2, 3, 4)), KernelError, r"transpose of x \(2, 3, 4\)"),
    "embedding table 1-D": (lambda: K.embedding(ones(10), [1, 2]), KernelError, r"embedding table of shape \(10,\)"),
    "softmax_kernel 3-D": (lambda: trnsim.run_kernel(K.softmax_kernel, ones(2, 3, 4)), KernelError,
                           r"softmax of x \(2, 3, 4\)"),
    "activation_kernel 1-D": (lambda: trnsim.run_kernel(activation_kernel, ones(4), func="gelu"),
                              KernelError, r"gelu of x \(4,\)"),
    "matmul_kernel a 3-D": (lambda: trnsim.run_kernel(K.matmul_kernel, ones(2, 4, 8), ones(8, 3)), KernelError,
                            r"matmul of a \(2, 4, 8\)"),
    # fail_07: an empty last axis
    "softmax (3, 0)": (lambda: K.softmax(np.zeros((3, 0), np.float32)), KernelError, r"empty array of shape \(3, 0\)"),
    "gelu (0,)": (lambda: K.gelu(np.zeros(0, np.float32)), KernelError, r"empty array of shape \(0,\)"),
    "silu (2, 0)": (lambda: K.silu(np.zeros((2, 0), np.float32)), KernelError, r"empty array of shape \(2, 0\)"),
    # fail_08: dtypes the kernels do not compute in
    "softmax in int4": (lambda: K.softmax(ones(2, 3), "int4"), KernelError, "softmax in int4"),
    "gelu in int8": (lambda: K.gelu(ones(2, 3), "int8"), KernelError, "gelu in int8"),
    "silu in mxfp8": (lambda: K.silu(ones(2, 3), "mxfp8_e4m3"), KernelError, "silu in mxfp8_e4m3"),
    "softmax_kernel into int8": (lambda: trnsim.run_kernel(K.softmax_kernel, ones(2, 3), out_dtype="int8"),
                                 KernelError, "softmax into int8"),
    "layernorm in int8": (lambda: K.layernorm(ones(2, 3), np.ones(3), np.zeros(3), dtype="int8"), KernelError,
                          "layernorm in int8"),
    "layernorm in fp8": (lambda: K.layernorm(ones(2, 3), np.ones(3), np.zeros(3), dtype="fp8_e4m3"), KernelError,
                         "layernorm in fp8_e4m3"),
    "rmsnorm in fp16": (lambda: K.rmsnorm(ones(2, 3), np.ones(3), dtype="fp16"), KernelError, "rmsnorm in fp16"),
    # fail_09: int64 narrowed to int32 only when the values fit
    "int64 beyond int32": (lambda: K.transpose(np.array([[1, 2**31], [3, 4]], np.int64)), KernelError,
                           "int64 value 2147483648 of transpose_kernel's x does not fit int32"),
    "int64 below int32": (lambda: K.transpose(np.array([[1, -(2**35)], [3, 4]], np.int64)), KernelError,
                          "int64 value -34359738368"),
    # fail_10: ids are whole numbers within range, never truncated or wrapped
    "embedding id 2**32 + 1": (lambda: K.embedding(TABLE, np.array([2**32 + 1])), KernelError,
                               r"embedding id 4294967297 is outside \[0, 10\)"),
    "embedding float ids": (lambda: K.embedding(TABLE, [1.9, 2.2]), KernelError, "embedding ids of dtype float64"),
    "embedding_backward float ids": (lambda: K.embedding_backward(ones(2, 6), [1.0, 2.0], 4), KernelError,
                                     "embedding_backward ids of dtype float64"),
    "embedding_kernel fp32 ids": (lambda: trnsim.run_kernel(K.embedding_kernel, TABLE, np.array([1.0], np.float32)),
                                  KernelError, "embedding ids of dtype fp32"),
    # fail_11: dout is [*ids.shape, D]
    "embedding_backward dout [3, 6] for ids [2]": (lambda: K.embedding_backward(ones(3, 6), [1, 2], 4), KernelError,
                                                   r"dout \(3, 6\) for ids \(2,\)"),
    "embedding_backward dout [2, 6] for ids [2, 2]": (lambda: K.embedding_backward(ones(2, 6), [[1, 2], [0, 3]], 4),
                                                      KernelError, r"dout \(2, 6\) for ids \(2, 2\)"),
    # fail_12: adamw's arguments
    "adamw shapes differ": (lambda: K.adamw(P, ones(5, 4), P, P, lr=0.1), KernelError, r"grad \(5, 4\)"),
    "adamw_kernel shapes differ": (lambda: trnsim.run_kernel(K.adamw_kernel, P, P, ones(5, 4), P, lr=0.1),
                                   KernelError, r"m \(5, 4\)"),
    "adamw step=0": (lambda: K.adamw(P, P, P, P, lr=0.1, step=0), KernelError, "step=0"),
    "adamw step=-1": (lambda: K.adamw(P, P, P, P, lr=0.1, step=-1), KernelError, "step=-1"),
    "adamw step=1.5": (lambda: K.adamw(P, P, P, P, lr=0.1, step=1.5), KernelError,  # type: ignore[arg-type]
                       r"step=1\.5"),
    "adamw beta2=1": (lambda: K.adamw(P, P, P, P, lr=0.1, beta2=1.0), KernelError, r"beta2=1\.0(.|\n)*\[0, 1\)"),
    "adamw beta1<0": (lambda: K.adamw(P, P, P, P, lr=0.1, beta1=-0.1), KernelError, r"beta1=-0\.1"),
    # fail_15: run_kernel's arguments against the kernel's signature
    "run_kernel missing keyword": (lambda: trnsim.run_kernel(K.adamw_kernel, P, P, P, P), KernelError,
                                   r"adamw_kernel: missing a required argument: 'lr'(.|\n)*adamw_kernel\(param, grad"),
    "run_kernel unknown keyword": (lambda: trnsim.run_kernel(K.adamw_kernel, P, P, P, P, lr=0.1, foo=1), KernelError,
                                   "unexpected keyword argument 'foo'"),
    "run_kernel too few tensors": (lambda: trnsim.run_kernel(K.adamw_kernel, P, P, lr=0.1), KernelError,
                                   "missing a required argument: 'm'"),
    "run_kernel too many tensors": (lambda: trnsim.run_kernel(K.adamw_kernel, P, P, P, P, P, lr=0.1), KernelError,
                                    "takes 4 tensors, got 5"),
    # fail_16, fail_17: attention
    "flash_attention scale=inf": (lambda: K.flash_attention(Q, Q, Q, scale=math.inf), KernelError,
                                  "scale=inf(.|\n)*positive and finite"),
    "flash_attention scale=nan": (lambda: K.flash_attention(Q, Q, Q, scale=math.nan), KernelError, "scale=nan"),
    "attention backward lse int32": (_attention_backward(lse=np.zeros((2, 5), np.int32)), KernelError,
                                     "lse int32"),
    "attention backward do fp8": (_attention_backward(do=typed(Q, "fp8_e4m3")), KernelError, "do fp8_e4m3"),
    "attention backward o bf16": (_attention_backward(o=typed(Q, "bf16")), KernelError, "o bf16"),
    "DSL slice step 0": (lambda: trnsim.run_kernel(_slice_step_zero, ones(64, 32)), KernelError,
                         "slice step 0 for dimension 1"),
    # fail_14: a slice past the end of a dimension
    "DSL slice past the end": (lambda: trnsim.run_kernel(_slice_past_the_end, ones(64, 32)), KernelError,
                               "slice 30:40 is out of bounds for dimension 1 of size 32"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_a_trnsim_error_naming_it(case: str) -> None:
    run, error, match = BAD[case]
    with pytest.raises(error, match=match) as info:
        run()
    assert isinstance(info.value, trnsim.TrnsimError)
    assert info.value.hint, "an error says what to do next"


def test_the_slice_error_points_at_the_kernel_line() -> None:
    with pytest.raises(KernelError) as info:
        trnsim.run_kernel(_slice_past_the_end, ones(64, 32))
    assert info.value.where is not None and info.value.where.startswith(f"{__file__}:")
    assert "x[0:64, 30:40]" in str(info.value)


@pytest.mark.parametrize("index", [np.s_[-32:], np.s_[0:32], np.s_[-1:], np.s_[::-1], np.s_[-32:-30]])
def test_slices_within_the_dimension_are_numpy_slices(index: slice) -> None:
    @trnsim.kernel
    def cols(x: dsl.Tensor) -> dsl.Tensor:
        view = x[:, index]
        out = dsl.hbm_tensor(view.shape, x.dtype)
        dsl.store(out, dsl.load(view))
        return out

    x = np.arange(4 * 32, dtype=np.float32).reshape(4, 32)
    assert np.array_equal(trnsim.run_kernel(cols, x).outputs[0], x[:, index])


def test_integer_input_to_softmax_and_activations_gives_float_results() -> None:
    """numpy/JAX promote integers to float: softmax of an int array is probabilities, not zeros and ones."""
    x = np.arange(6).reshape(2, 3)
    e = np.exp(x - x.max(1, keepdims=True))
    got = K.softmax(x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=1e-6)
    v = np.arange(-3, 3, dtype=np.int32)
    gelu = 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))
    np.testing.assert_allclose(K.gelu(v), gelu, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(K.silu(np.array([True, False])), [1 / (1 + math.exp(-1)), 0.0], rtol=1e-6)
    raw = trnsim.run_kernel(K.softmax_kernel, x.astype(np.int32)).outputs[0]
    assert raw.dtype == np.float32 and np.allclose(raw.sum(1), 1.0)


def test_int64_within_int32_is_accepted_and_narrowed() -> None:
    x = np.array([[1, -(2**31), 2**31 - 1], [-5, 0, 7]], np.int64)
    got = K.transpose(x)
    assert np.array_equal(got, x.T)
    assert np.array_equal(K.embedding(TABLE, np.array([[9, 0]], np.int64)), TABLE[[[9, 0]]])


def test_correct_shapes_still_run() -> None:
    """The new checks accept what the kernels document: a [N] bias, [D] gamma/beta, dout [*ids.shape, D]."""
    a, b, bias = R.integers(-3, 3, (5, 8)).astype(np.float32), R.integers(-3, 3, (8, 9)).astype(np.float32), \
        np.arange(9, dtype=np.float32)
    assert np.array_equal(K.matmul(a, b, bias=bias, out_dtype="fp32"), a @ b + bias)
    dout = ones(2, 2, 3)
    got = K.embedding_backward(dout, np.array([[1, 2], [1, 0]], np.int64), 4)
    assert got.tolist() == [[1.0] * 3, [2.0] * 3, [1.0] * 3, [0.0] * 3]
    p, m, v = K.adamw(P, P, P, P, lr=0.1, step=np.int64(3))
    assert np.isfinite(p).all() and np.isfinite(m).all() and np.isfinite(v).all()


def test_arrays_of_other_libraries_are_data_not_shape_descriptions() -> None:
    """A jax array has ``.shape`` and ``.dtype`` like a ``ShapeDtypeStruct``, but it is data (``__array__``):
    run_kernel computes with it rather than timing only."""
    jnp = pytest.importorskip("jax.numpy")
    x = R.random((4, 6)).astype(np.float32)
    res = trnsim.run_kernel(K.softmax_kernel, jnp.asarray(x))
    assert len(res.outputs) == 1
    np.testing.assert_allclose(res[0], trnsim.run_kernel(K.softmax_kernel, x)[0])
    mixed = trnsim.run_kernel(K.layernorm_kernel, jnp.asarray(x), np.ones(6, np.float32), np.zeros(6, np.float32))
    assert mixed[0].shape == (4, 6)
    jax = pytest.importorskip("jax")
    timing = trnsim.run_kernel(K.softmax_kernel, jax.ShapeDtypeStruct((4, 6), jnp.float32))
    assert timing.outputs == [] and timing.profile is not None  # a shape description is still timing-only


@trnsim.kernel
def _read_unwritten(x: dsl.Tensor) -> dsl.Tensor:
    out = dsl.hbm_tensor(x.shape, x.dtype)
    t = dsl.sbuf(x.shape, x.dtype)
    dsl.store(out, dsl.multiply(t, 2.0))  # t was never written
    return out


@trnsim.kernel
def _accumulate_into_fresh_psum(a: dsl.Tensor, b: dsl.Tensor) -> dsl.Tensor:
    out = dsl.hbm_tensor((128, 64), "fp32")
    acc = dsl.psum((128, 64))
    dsl.matmul(acc, dsl.load(a), dsl.load(b), accumulate=True)  # acc was never written
    dsl.store(out, dsl.copy(acc))
    return out


def test_strict_reads_is_opt_in_and_reports_the_kernel_line() -> None:
    x = ones(64, 32)
    assert not trnsim.run_kernel(_read_unwritten, x)[0].any()  # the default is unchanged: fresh memory is 0
    with pytest.raises(SimError, match="read of never-written") as info:
        trnsim.run_kernel(_read_unwritten, x, strict_reads=True)
    assert info.value.where is not None and info.value.where.startswith(f"{__file__}:")
    with pytest.raises(SimError, match="accumulate into never-written"):
        trnsim.run_kernel(_accumulate_into_fresh_psum, ones(128, 128), ones(128, 64), strict_reads=True)
    good = trnsim.run_kernel(K.softmax_kernel, R.random((4, 6)).astype(np.float32), strict_reads=True)
    np.testing.assert_allclose(good[0].sum(1), 1.0, rtol=1e-6)
