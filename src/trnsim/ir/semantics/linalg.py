"""Contractions: dot_general and convolution (TensorE's ops), and triangular_solve.

TensorE multiplies in the operand format and accumulates in fp32 (ARCHITECTURE.md "Numerics"): float
operands are widened to fp32 exactly, contracted with fp32 accumulation, and rounded once to the result
type. Integer operands accumulate in 64 bits and wrap to the result type.
"""

from __future__ import annotations

import itertools
from math import prod

import numpy as np

from trnsim.ir.graph import Node
from trnsim.ir.interp import Interpreter
from trnsim.ir.rules import semantics
from trnsim.ir.semantics._util import compute, is_float, to

Arrays = list[np.ndarray]


def _acc(x: np.ndarray, result: np.dtype | None = None) -> np.ndarray:
    """An operand in its accumulation type: fp32 for floats; for integers 64 bits (their wrapped sum is the
    integer result's), or the float result's type when the result is a float (XLA converts the operands to a
    preferred float type first: a 64-bit sum of int32 products would wrap at 2**64)."""
    x = compute(x)
    if is_float(x.dtype):
        return x.astype(np.float32)
    if result is not None and is_float(result):
        return x.astype(np.float64 if result == np.float64 else np.float32)
    return x.astype(np.uint64 if x.dtype.kind == "u" else np.int64)


def dot_general_arrays(lhs: np.ndarray, rhs: np.ndarray, dims: dict[str, tuple[int, ...]]) -> np.ndarray:
    """The contraction itself, in the accumulation type; result dims are (batch, lhs free, rhs free)."""
    lb, rb = dims["lhs_batching_dimensions"], dims["rhs_batching_dimensions"]
    lc, rc = dims["lhs_contracting_dimensions"], dims["rhs_contracting_dimensions"]
    lf = [d for d in range(lhs.ndim) if d not in lb and d not in lc]
    rf = [d for d in range(rhs.ndim) if d not in rb and d not in rc]
    batch = [lhs.shape[d] for d in lb]
    m = [lhs.shape[d] for d in lf]
    n = [rhs.shape[d] for d in rf]
    k = prod(lhs.shape[d] for d in lc)
    a = np.transpose(lhs, [*lb, *lf, *lc]).reshape(prod(batch), prod(m), k)
    b = np.transpose(rhs, [*rb, *rc, *rf]).reshape(prod(batch), k, prod(n))
    return np.matmul(a, b).reshape((*batch, *m, *n))


@semantics("dot_general", kind="matmul")
def _dot_general(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result[b, m, n] = Σ_k lhs[b, m, k] · rhs[b, k, n] over the batching and contracting dims (fp32 accumulate)"""
    lhs, rhs = (_acc(a, node.out.type.np_dtype) for a in args)
    if lhs.dtype != rhs.dtype:
        common = np.result_type(lhs, rhs)
        lhs, rhs = lhs.astype(common), rhs.astype(common)
    return [to(node.out, dot_general_arrays(lhs, rhs, node.attrs["dot_dimension_numbers"]))]


@semantics("convolution", kind="conv")
def _convolution(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result[n, o, y] = Σ_{c, w} lhs'[n, c, y·stride + w·rhs_dilation] · rhs[o, c, w] where lhs' is the input
    dilated by lhs_dilation and padded; feature and batch groups split channels and batch"""
    lhs, rhs = (_acc(a, node.out.type.np_dtype) for a in args)
    a = node.attrs
    dn = a["dimension_numbers"]
    nsp = len(dn["input_spatial_dimensions"])
    x = np.transpose(lhs, [dn["input_batch_dimension"], dn["input_feature_dimension"],
                           *dn["input_spatial_dimensions"]])
    w = np.transpose(rhs, [dn["kernel_output_feature_dimension"], dn["kernel_input_feature_dimension"],
                           *dn["kernel_spatial_dimensions"]])
    strides = tuple(a.get("window_strides") or (1,) * nsp)
    lhs_dil = tuple(a.get("lhs_dilation") or (1,) * nsp)
    rhs_dil = tuple(a.get("rhs_dilation") or (1,) * nsp)
    pad = np.asarray(a.get("padding") if a.get("padding") is not None else np.zeros((nsp, 2), np.int64))
    pad = pad.reshape(nsp, 2)
    if a.get("window_reversal") and any(a["window_reversal"]):
        w = np.flip(w, axis=tuple(2 + i for i, r in enumerate(a["window_reversal"]) if r))
    # dilate and pad the input (negative padding crops)
    dil_shape = [(s - 1) * d + 1 if s else 0 for s, d in zip(x.shape[2:], lhs_dil, strict=True)]
    full = [s + int(lo) + int(hi) for s, (lo, hi) in zip(dil_shape, pad, strict=True)]
    big = np.zeros((*x.shape[:2], *[s + max(0, -int(lo)) + max(0, -int(hi)) + max(0, int(lo)) + max(0, int(hi))
                                    for s, (lo, hi) in zip(dil_shape, pad, strict=True)]), x.dtype)
    place = tuple(slice(max(0, int(lo)), max(0, int(lo)) + (s - 1) * d + 1 if s else max(0, int(lo)), d)
                  for s, d, (lo, _) in zip(x.shape[2:], lhs_dil, pad, strict=True))
    big[(slice(None), slice(None), *place)] = x
    crop = tuple(slice(max(0, -int(lo)), max(0, -int(lo)) + f) for (lo, _), f in zip(pad, full, strict=True))
    xp = big[(slice(None), slice(None), *crop)]
    out_sp = [node.out.type.shape[d] for d in dn["output_spatial_dimensions"]]
    fg, bg = int(a.get("feature_group_count", 1)), int(a.get("batch_group_count", 1))
    n = xp.shape[0]
    o, ci = w.shape[:2]
    out = np.zeros((n // bg, o, *out_sp), np.result_type(xp, w))
    for g in range(fg * bg):
        fi = g % fg if fg > 1 else 0
        bi = g if bg > 1 else 0
        xs = xp[bi * (n // bg):(bi + 1) * (n // bg), fi * ci:(fi + 1) * ci] if bg > 1 else xp[:, fi * ci:(fi + 1) * ci]
        og = o // (fg * bg)
        ws = w[g * og:(g + 1) * og]
        acc = np.zeros((xs.shape[0], og, *out_sp), out.dtype)
        for offset in itertools.product(*(range(k) for k in w.shape[2:])):
            index = tuple(slice(off * rd, off * rd + (m - 1) * s + 1, s)
                          for off, rd, m, s in zip(offset, rhs_dil, out_sp, strides, strict=True))
            patch = xs[(slice(None), slice(None), *index)]           # (n, ci, *out_sp)
            acc += np.einsum("nc...,oc->no...", patch, ws[(slice(None), slice(None), *offset)])
        out[:, g * og:(g + 1) * og] = acc
    perm = [0] * (2 + nsp)
    perm[dn["output_batch_dimension"]] = 0
    perm[dn["output_feature_dimension"]] = 1
    for i, d in enumerate(dn["output_spatial_dimensions"]):
        perm[d] = 2 + i
    return [to(node.out, np.transpose(out, perm))]


@semantics("triangular_solve", kind="matmul")
def _triangular_solve(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = x solving op(a)·x = b (left_side) or x·op(a) = b, a triangular (lower/upper, unit diagonal)"""
    a, b = (compute(x).astype(np.float64) for x in args)
    attrs = node.attrs
    tri = np.tril(a) if attrs["lower"] else np.triu(a)
    if attrs["unit_diagonal"]:
        eye = np.eye(a.shape[-1], dtype=bool)
        tri = np.where(eye, 1.0, tri)
    if attrs.get("transpose_a", "NO_TRANSPOSE") != "NO_TRANSPOSE":
        tri = np.swapaxes(tri, -1, -2)
    if attrs["left_side"]:
        x = np.linalg.solve(tri, b)
    else:
        x = np.swapaxes(np.linalg.solve(np.swapaxes(tri, -1, -2), np.swapaxes(b, -1, -2)), -1, -2)
    return [to(node.out, x)]


@semantics("dot", kind="matmul")
def _dot(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """(legacy) result = lhs · rhs contracting lhs's last dim with rhs's first (vector or matrix operands)"""
    lhs, rhs = (_acc(a) for a in args)
    if lhs.dtype != rhs.dtype:
        common = np.result_type(lhs, rhs)
        lhs, rhs = lhs.astype(common), rhs.astype(common)
    dims = {"lhs_batching_dimensions": (), "rhs_batching_dimensions": (),
            "lhs_contracting_dimensions": (lhs.ndim - 1,), "rhs_contracting_dimensions": (0,)}
    return [to(node.out, dot_general_arrays(lhs, rhs, dims))]


@semantics("einsum", "unary_einsum", kind="matmul")
def _einsum(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """(legacy) result = einsum(einsum_config, operands...) with fp32 (floats) or 64-bit (integers) accumulation"""
    operands = [_acc(a) for a in args]
    if len(operands) == 2 and operands[0].dtype != operands[1].dtype:
        common = np.result_type(*operands)
        operands = [x.astype(common) for x in operands]
    config = str(node.attrs["einsum_config"]).replace(" ", "")
    return [to(node.out, np.einsum(config, *operands))]


@semantics("cholesky", kind="matmul")
def _cholesky(node: Node, args: Arrays, interp: Interpreter) -> Arrays:
    """result = L with a = L·Lᵀ (lower) or U with a = Uᵀ·U (upper), from that triangle of each matrix of a
    (batched over the leading dims); the other triangle is zero, a matrix that is not positive definite
    gives NaN (implementation-defined in the spec)"""
    a = compute(args[0]).astype(np.float64)
    lower = bool(node.attrs.get("lower", False))
    n = a.shape[-1]
    flat = a.reshape(-1, n, n)
    out = np.full(flat.shape, np.nan)
    for i, m in enumerate(flat):
        tri = np.tril(m) if lower else np.triu(m)
        sym = tri + np.swapaxes(tri, -1, -2) - np.diag(np.diag(m))
        try:
            factor = np.linalg.cholesky(sym)          # lower
        except np.linalg.LinAlgError:
            continue
        out[i] = factor if lower else factor.T
    return [to(node.out, out.reshape(a.shape))]
