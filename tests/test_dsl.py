"""trnsim.dsl: tracing, views, run_kernel, errors that point at the kernel's line."""

from __future__ import annotations

import inspect
from typing import NamedTuple

import ml_dtypes
import numpy as np
import pytest

import trnsim
from trnsim import dsl
from trnsim.dsl import KernelError, typed

RNG = np.random.default_rng(0)


class Shape(NamedTuple):
    """A shape description (anything with .shape and .dtype traces)."""

    shape: tuple[int, ...]
    dtype: str
HERE = __file__


def line_of(marker: str) -> int:
    """The line of this file holding ``marker`` (errors must point there)."""
    lines = inspect.getsource(inspect.getmodule(line_of)).splitlines()  # type: ignore[arg-type]
    return next(i + 1 for i, text in enumerate(lines) if marker in text and "line_of" not in text)


@trnsim.kernel
def scaled_softmax(x, *, scale=1.0):
    rows, cols = x.shape
    out = dsl.hbm_tensor((rows, cols), x.dtype)
    for r in range(0, rows, 128):
        n = min(128, rows - r)
        t = dsl.load(x[r : r + n, :])
        neg_max = dsl.reduce_max(t, negate=True)
        e, s = dsl.activation_reduce("exp", t, scale=scale, bias=dsl.multiply(neg_max, scale))
        dsl.store(out[r : r + n, :], dsl.multiply(e, dsl.reciprocal(s)))
    return out


def test_docstring_example_softmax() -> None:
    x = RNG.standard_normal((300, 64)).astype(np.float32)
    res = trnsim.run_kernel(scaled_softmax, x, scale=0.5)
    ref = np.exp(0.5 * x - 0.5 * x.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    assert res.outputs[0].shape == (300, 64)
    np.testing.assert_allclose(res.outputs[0], ref, rtol=1e-5, atol=1e-7)
    assert {e for e, _ in res.program.streams.items()} == {"vector", "scalar", "sync"}


def test_compile_is_cached_per_shape_and_constant() -> None:
    a = scaled_softmax.compile(Shape((4, 8), "fp32"), scale=2.0)
    assert scaled_softmax.compile(Shape((4, 8), "fp32"), scale=2.0) is a
    assert scaled_softmax.compile(Shape((4, 8), "fp32"), scale=3.0) is not a
    assert scaled_softmax.compile(Shape((5, 8), "float32"), scale=2.0) is not a


@trnsim.kernel
def views(x, bias):
    """Rows, a transposed load, a broadcast load and a column view, written to three outputs."""
    r, c = x.shape
    t_out = dsl.hbm_tensor((c, r), x.dtype, name="xt")
    b_out = dsl.hbm_tensor((r, c), "fp32", name="xb")
    col = dsl.hbm_tensor((r, 1), x.dtype, name="col")
    dsl.store(t_out, dsl.load(x.T))
    b = dsl.load(bias.broadcast_to((r, c)))
    dsl.store(b_out, dsl.add(dsl.load(x), b, dtype="fp32"))
    dsl.store(col, dsl.load(x)[:, 2:3])
    return t_out, b_out, col


def test_views_transpose_broadcast_column() -> None:
    x = RNG.integers(-50, 50, (24, 40)).astype(np.float32)
    bias = RNG.integers(-5, 5, (40,)).astype(np.float32)
    xt, xb, col = trnsim.run_kernel(views, typed(x, "bf16"), bias).outputs
    assert np.array_equal(xt, x.T) and np.array_equal(xb, x + bias) and np.array_equal(col, x[:, 2:3])


def test_tensor_views_shapes_and_aps() -> None:
    @trnsim.kernel
    def k(x):
        v = x[2:10:2, 1]
        assert v.shape == (4,) and v.ap().partition_stride == 2 * 8 and v.ap().offset == (2 * 8 + 1) * 4
        assert x[..., 3].shape == (16,) and x[:, ::-1].ap().free == ((-1, 8),)
        t = dsl.sbuf((128, 4, 8), "bf16")
        assert t[:, 1, :].shape == (128, 8) and t[:, 1, :].ap().offset == t.ap().offset + 16
        assert t[5].shape == (1, 4, 8) and t[5].ap().partition_start == 5
        assert t[:, :, 0:1].ap().free == ((8, 4),)
        assert x.T.shape == (8, 16) and x.T.ap().partition_stride == 1
        assert x[2:4, None].shape == (2, 1, 8) and x[..., None].shape == (16, 8, 1) and x[1, ..., None].shape == (8, 1)
        assert t[:, None].shape == (128, 1, 4, 8)
        out = dsl.hbm_tensor((1, 1), "fp32")
        dsl.store(out, dsl.zeros((1, 1)))
        return out

    trnsim.run_kernel(k, np.zeros((16, 8), np.float32))


def test_optional_inputs_and_multiple_outputs_in_return_order() -> None:
    @trnsim.kernel
    def k(x, maybe):
        assert maybe is None
        a, b = dsl.hbm_tensor(x.shape, "fp32", name="a"), dsl.hbm_tensor(x.shape, "fp32", name="b")
        t = dsl.load(x)
        dsl.store(b, dsl.add(t, 1.0))
        dsl.store(a, dsl.add(t, 2.0))
        return b, a

    b, a = trnsim.run_kernel(k, np.zeros((3, 5), np.float32), None).outputs
    assert (b == 1).all() and (a == 2).all()


def test_bf16_and_fp8_inputs_round_on_the_way_in() -> None:
    @trnsim.kernel
    def copy_out(x):
        out = dsl.hbm_tensor(x.shape, "fp32")
        dsl.store(out, dsl.load(x))
        return out

    x = RNG.standard_normal((8, 16)).astype(np.float32)
    got = trnsim.run_kernel(copy_out, typed(x, "fp8_e4m3")).outputs[0]
    assert np.array_equal(got, x.astype(ml_dtypes.float8_e4m3fn).astype(np.float32))
    got = trnsim.run_kernel(copy_out, x.astype(ml_dtypes.bfloat16)).outputs[0]
    assert np.array_equal(got, x.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_kernels_compose_inside_a_trace() -> None:
    @trnsim.kernel
    def inner(t):
        return dsl.exp(t)

    @trnsim.kernel
    def outer(x):
        out = dsl.hbm_tensor(x.shape, "fp32")
        dsl.store(out, inner(dsl.load(x)))
        return out

    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(trnsim.run_kernel(outer, x).outputs[0], np.exp(x), rtol=1e-6)
    with pytest.raises(KernelError, match="outside a kernel"):
        inner(x)


# --- errors point at the kernel's line ---------------------------------------------------------------


def raises_at(marker: str | int, match: str, kernel: trnsim.dsl.Kernel, *arrays: object) -> KernelError:
    with pytest.raises(KernelError, match=match) as info:
        trnsim.run_kernel(kernel, *arrays)
    line = marker if isinstance(marker, int) else line_of(marker)
    assert info.value.where == f"{HERE}:{line}", info.value.render()
    assert info.value.hint
    return info.value


def test_error_partition_dimension_too_large() -> None:
    @trnsim.kernel
    def k(x):
        dsl.sbuf((256, 4))  # MARK-partitions
        return None

    err = raises_at("MARK-partitions", "partition dimension 256 > 128", k, np.zeros((1, 1), np.float32))
    assert "dsl.sbuf((256, 4))" in err.render()


def test_error_load_too_many_rows() -> None:
    @trnsim.kernel
    def k(x):
        dsl.load(x)  # MARK-rows
        return None

    raises_at("MARK-rows", "> 128", k, np.zeros((200, 4), np.float32))


def test_error_shape_mismatch() -> None:
    @trnsim.kernel
    def k(x):
        t = dsl.load(x)
        dsl.add(t, t[:, 0:3])  # MARK-shapes
        return None

    raises_at("MARK-shapes", "shapes", k, np.zeros((4, 8), np.float32))


def test_error_illegal_dtype_for_tensor_engine() -> None:
    @trnsim.kernel
    def k(x):
        t = dsl.load(x)
        dsl.matmul(dsl.psum((4, 4)), t, t)  # MARK-dtype
        return None

    raises_at("MARK-dtype", "not a TensorE input", k, np.zeros((4, 4), np.int32))


def test_error_matmul_tile_limits_and_psum_bank() -> None:
    @trnsim.kernel
    def k(x):
        t = dsl.load(x)
        dsl.matmul(dsl.psum((8, 1024)), t[:, 0:8], t)  # MARK-bank
        return None

    raises_at("MARK-bank", "moving free size 1024 > 512", k, np.zeros((16, 1024), np.float32))


def test_error_out_of_sbuf_names_sizes_and_live_tiles() -> None:
    @trnsim.kernel
    def k(x):
        keep = [dsl.sbuf((128, 16384)) for _ in range(3)]  # 3 × 64 KiB per partition
        dsl.sbuf((128, 40000), "bf16")  # MARK-oom
        return keep and None

    err = raises_at("MARK-oom", "out of sbuf", k, np.zeros((1, 1), np.float32))
    text = err.render()
    assert "needs 80000 bytes per partition, 65536 of 262144 are free" in text
    assert f"{HERE}:{line_of('3 × 64 KiB')}" in text  # the live tiles say where they came from
    assert "tile the free axis smaller" in text


def test_error_returning_an_input_and_unknown_dtype() -> None:
    @trnsim.kernel
    def k(x):
        return x

    raises_at(k.fn.__code__.co_firstlineno, "returns HBM tensors it declared", k, np.zeros((2, 2), np.float32))

    @trnsim.kernel
    def k2(x):
        dsl.sbuf((2, 2), "float32")  # MARK-dtype2
        return None

    raises_at("MARK-dtype2", "unknown dtype", k2, np.zeros((2, 2), np.float32))


def test_error_on_chip_transpose_view_and_use_after_release() -> None:
    @trnsim.kernel
    def k(x):
        dsl.load(x).T  # MARK-T  # noqa: B018
        return None

    raises_at("MARK-T", "cannot be transposed by a view", k, np.zeros((2, 2), np.float32))

    @trnsim.kernel
    def k2(x):
        t = dsl.load(x)
        dsl.release(t)
        dsl.exp(t)  # MARK-release
        return None

    raises_at("MARK-release", "after dsl.release", k2, np.zeros((2, 2), np.float32))


def test_lazy_exports() -> None:
    assert trnsim.kernel is dsl.kernel and trnsim.run_kernel is dsl.run_kernel
    assert trnsim.KernelResult is dsl.KernelResult


def test_ml_dtypes_inputs_reach_the_device_as_float32_or_as_bf16_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    """fp8 arrays (numpy kind "V", not "f") are widened to float32 before the device encodes them: its fast
    encoders take float32 (the general path took ~0.5 s per 8M values). A bfloat16 array for a bf16 tensor
    goes as it is: its codes are the tensor's, copied bit for bit (NaN payloads included)."""
    from trnsim.dsl import jit

    seen: list[np.dtype] = []
    real = jit.Device.run

    def spy(self: object, program: object, inputs: dict[str, np.ndarray], **kw: object) -> object:
        seen.extend(v.dtype for v in inputs.values())
        return real(self, program, inputs, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(jit.Device, "run", spy)

    @trnsim.kernel
    def copy_out(x):
        out = dsl.hbm_tensor(x.shape, "fp32")
        dsl.store(out, dsl.load(x))
        return out

    x = np.array([[1.5, -2.0, 3.25, 0.0]], ml_dtypes.bfloat16)
    x.view(np.uint16)[0, 3] = 0xFF81  # a negative NaN with a payload
    y = np.array([[0.5, 1.0]], ml_dtypes.float8_e4m3fn)
    @trnsim.kernel
    def copy_codes(x):
        out = dsl.hbm_tensor(x.shape, "bf16")
        dsl.store(out, dsl.load(x))
        return out

    got = trnsim.run_kernel(copy_codes, x).outputs[0]  # bf16 codes in and out, widened exactly
    assert got.view(np.uint32).tolist() == [[0x3FC00000, 0xC0000000, 0x40500000, 0xFF810000]]
    assert trnsim.run_kernel(copy_out, y).outputs[0].tolist() == [[0.5, 1.0]]
    got = trnsim.run_kernel(copy_out, typed(x, "fp16")).outputs[0]  # another dtype: rounded from float32
    assert got[0, :3].tolist() == [1.5, -2.0, 3.25] and np.isnan(got[0, 3])
    assert seen == [ml_dtypes.bfloat16, np.float32, np.float32]


def test_error_out_of_psum_banks() -> None:
    @trnsim.kernel
    def k(x):
        accs = [dsl.psum((128, 512)) for _ in range(8)]  # all 8 banks
        dsl.psum((128, 4))  # MARK-psum
        return accs and None

    err = raises_at("MARK-psum", "out of psum", k, np.zeros((1, 1), np.float32))
    assert "needs 2048 bytes per partition, 0 of 16384 are free" in err.render()


def test_release_frees_memory_for_the_next_tile() -> None:
    @trnsim.kernel
    def k(x):
        big = [dsl.sbuf((128, 32768)) for _ in range(2)]  # all of SBUF
        dsl.release(*big)
        dsl.sbuf((128, 16384))
        return None

    trnsim.run_kernel(k, np.zeros((1, 1), np.float32))


def test_run_time_faults_name_the_kernel_line() -> None:
    @trnsim.kernel
    def k(w, idx, v):
        out = dsl.hbm_tensor((4, 4), "fp32")
        acc = dsl.matmul(dsl.psum((4, 4)), dsl.load(w), dsl.load(v), sparsity="2:4",  # MARK-fault
                         stationary_index=dsl.load(idx))
        dsl.store(out, dsl.copy(acc))
        return out

    bad_index = np.full((2, 4), 7, np.uint8)  # positions must be < 4
    with pytest.raises(trnsim.SimError, match="sparse index 7") as info:
        trnsim.run_kernel(k, np.ones((2, 4), np.float32), bad_index, np.ones((4, 4), np.float32))
    assert (info.value.where or "").startswith(f"{HERE}:{line_of('MARK-fault')} (tensor[0] matmul")


def test_stochastic_rounding_is_seeded() -> None:
    def make(seed: int) -> trnsim.dsl.Kernel:
        @trnsim.kernel(rounding="stochastic", seed=seed)
        def k(x):
            out = dsl.hbm_tensor(x.shape, "bf16")
            dsl.store(out, dsl.copy(dsl.load(x), dtype="bf16"))
            return out
        return k

    x = np.full((8, 64), 1 + 2.0**-10, np.float32)  # between two bf16 values
    a, b, c = (trnsim.run_kernel(make(s), x).outputs[0] for s in (1, 1, 2))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert set(np.unique(a)) == {1.0, 1.0078125}
    with pytest.raises(KernelError, match="unknown rounding"):
        trnsim.kernel(rounding="rtz")(lambda x: None)


def test_run_kernel_timing_and_timing_only() -> None:
    """timing=True adds the profile to a functional run; shape descriptions give a timing-only run."""
    import trnsim.numerics
    from trnsim.kernels import matmul_kernel

    a = np.arange(128 * 256, dtype=np.float32).reshape(128, 256) % 7
    b = np.arange(256 * 512, dtype=np.float32).reshape(256, 512) % 5
    timed = trnsim.run_kernel(matmul_kernel, dsl.typed(a, "bf16"), dsl.typed(b, "bf16"), timing=True)
    assert timed.profile is not None and timed.profile.total_seconds > 0
    assert np.array_equal(timed.outputs[0], trnsim.numerics.quantize(a @ b, "bf16"))  # exact sums, bf16 out
    specs = trnsim.TensorSpec((128, 256), "bf16"), trnsim.TensorSpec((256, 512), "bf16")
    only = trnsim.run_kernel(matmul_kernel, *specs)
    assert only.outputs == [] and only.profile is not None
    assert only.profile.total_seconds == timed.profile.total_seconds  # the same timeline without data
    assert any(label.startswith("matmul_kernel:") for label in only.profile.labels)
    with pytest.raises(trnsim.TrnsimError, match="shape descriptions"):
        trnsim.run_kernel(matmul_kernel, dsl.typed(a, "bf16"), trnsim.TensorSpec((256, 512), "bf16"))


@trnsim.kernel
def _scale_split(x, *, split):
    out = dsl.hbm_tensor(x.shape, "fp32")
    for r in range(0, x.shape[0], 128):
        t = dsl.load(x[r : min(r + 128, x.shape[0]), :], split=split)
        dsl.store(out[r : min(r + 128, x.shape[0]), :], dsl.multiply(t, 2.0), split=split)
    return out


def test_split_dmas_move_blocks_of_partitions_on_their_own_queues() -> None:
    """``split=n``: n DMAs of consecutive partition blocks on n queues (a ragged last tile too), the same
    result, and a large tile moves faster than as one transfer on one queue."""
    x = np.random.default_rng(0).standard_normal((300, 2048)).astype(np.float32)
    times = {}
    for split in (1, 8):
        assert np.array_equal(dsl.run_kernel(_scale_split, x, split=split).outputs[0], 2 * x)
        program = _scale_split.compile(x, split=split).program
        dmas = program.streams["sync"]
        assert len(dmas) == 2 * 3 * split
        first = dmas[:split]
        assert len({d.queue for d in first}) == split  # type: ignore[attr-defined]
        assert sum(d.dst.partitions for d in first) == 128  # type: ignore[attr-defined]
        times[split] = trnsim.Device("trn3").run(program, timing_only=True, check=False).total_seconds
    assert times[8] < times[1] / 2


def test_split_dmas_from_a_given_queue_take_the_next_ones() -> None:
    @trnsim.kernel
    def pieces(x):
        out = dsl.hbm_tensor(x.shape, "fp32")
        dsl.store(out, dsl.load(x, queue=14, split=4))
        return out

    x = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    program = pieces.compile(x).program
    assert [d.queue for d in program.streams["sync"][:4]] == [14, 15, 0, 1]  # type: ignore[attr-defined]
    assert np.array_equal(dsl.run_kernel(pieces, x).outputs[0], x)
