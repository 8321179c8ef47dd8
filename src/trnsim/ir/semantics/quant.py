"""Compiler-inserted ops (no StableHLO spelling): ``qdq`` (quantize-dequantize an operand to a narrow format)
and ``prune`` (N:M structured sparsity). The autocast and sparsity passes insert them before ``dot_general``.

``qdq`` gives the values a TensorE operand carries in that format, as f32 (or the operand's type): a matmul
of such values accumulated in fp32 is what TensorE computes from the encoded operand, since each product of
two narrow values is exact in fp32.
"""

from __future__ import annotations

import numpy as np

from trnsim.ir.graph import Node
from trnsim.ir.interp import Interpreter
from trnsim.ir.rules import semantics
from trnsim.ir.semantics._util import compute, to
from trnsim.numerics.formats import FloatFormat, get_format
from trnsim.numerics.quantize import quantize

Arrays = list[np.ndarray]

# auto_cast_type → (numerics format name, scaling): per-tensor amax scaling for fp8, 32-element blocks for MX,
# 32-element groups with an fp32 scale for int4 (reference/neuron.md §1.4 lists the formats).
QDQ_FORMATS: dict[str, tuple[str, str]] = {
    "bf16": ("bf16", "none"),
    "fp8_e4m3": ("fp8_e4m3", "tensor"),
    "fp8_e5m2": ("fp8_e5m2", "tensor"),
    "mxfp8": ("mxfp8_e4m3", "block"),
    "mxfp6": ("mxfp6_e2m3", "block"),
    "mxfp4": ("mxfp4_e2m1", "block"),
    "int4": ("int4", "group"),
}
GROUP = 32


@semantics("qdq", kind="elementwise")
def _qdq(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = dequantize(quantize(x, format)): fp8 scales the tensor so its amax maps to the format's max;
    MX shares one E8M0 scale per 32 elements along ``axis``; int4 one fp32 scale per 32 elements"""
    from trnsim.numerics.intq import quantize_int
    from trnsim.numerics.mx import mx_fake_quantize

    x = compute(args[0]).astype(np.float32)
    fmt_name, scaling = QDQ_FORMATS[node.attrs["format"]]
    axis = int(node.attrs.get("axis", -1))
    if scaling == "none":
        out = quantize(x, fmt_name)
    elif scaling == "tensor":
        fmt = get_format(fmt_name)
        assert isinstance(fmt, FloatFormat)
        amax = float(np.max(np.abs(x))) if x.size else 0.0
        if amax == 0.0 or not np.isfinite(amax):
            out = x
        else:
            scale = np.float32(fmt.max / amax)
            out = (quantize(x * scale, fmt_name) / scale).astype(np.float32)
    elif scaling == "block":
        out = mx_fake_quantize(x, fmt_name, axis=axis)
    else:
        ax = axis % x.ndim
        n = x.shape[ax]
        pad = -n % GROUP
        padded = np.pad(x, [(0, pad if d == ax else 0) for d in range(x.ndim)]) if pad else x
        out = quantize_int(padded, fmt_name, granularity="group", axis=ax, group_size=GROUP).dequantize()
        out = out.take(np.arange(n), axis=ax) if pad else out
    return [to(node.out, out)]


@semantics("prune", kind="elementwise")
def _prune(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = x with the smallest-magnitude M−N of every M consecutive elements along ``axis`` set to 0"""
    from trnsim.numerics.sparsity import prune

    x = args[0]
    n, m, axis = node.attrs["n"], node.attrs["m"], node.attrs["axis"]
    ax = axis % x.ndim
    size = x.shape[ax]
    pad = -size % m
    wide = compute(x).astype(np.float32)
    if pad:
        wide = np.pad(wide, [(0, pad if d == ax else 0) for d in range(x.ndim)])
    out = prune(wide, n, m, axis=ax)
    if pad:
        out = out.take(np.arange(size), axis=ax)
    return [to(node.out, out)]
