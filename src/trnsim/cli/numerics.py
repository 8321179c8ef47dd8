"""``trnsim numerics``: the format table, and quantizing values to see exactly what a format keeps."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import numpy as np

import trnsim.numerics as tn
from trnsim.cli._output import fmt_float, print_json, print_table
from trnsim.errors import NumericsError
from trnsim.numerics.formats import FloatFormat, IntFormat, MXFormat
from trnsim.numerics.rounding import ROUNDING

if TYPE_CHECKING:
    from trnsim.cli._output import SubParsers


def _format_row(f: tn.Format) -> dict[str, Any]:
    row: dict[str, Any] = {"name": f.name, "kind": f.kind, "bits": f.bits}
    if isinstance(f, FloatFormat):
        row |= {"exp_bits": f.exp_bits, "man_bits": f.man_bits, "bias": f.bias, "max": f.max,
                "min_normal": f.min_normal, "min_subnormal": f.min_subnormal, "inf": f.has_inf,
                "nan": f.has_nan}
    elif isinstance(f, MXFormat):
        row |= {"element": f.element.name, "block": f.block, "scale": f.scale.name,
                "bits_per_value": f.bits_per_value, "max": f.element.max * 2.0**127}
    else:
        row |= {"min": f.min, "max": f.max}
    return row


def cmd_formats(args: argparse.Namespace) -> int:
    rows = [_format_row(f) for f in tn.FORMATS.values()]
    if args.json:
        print_json(rows)
        return 0
    cols = ["name", "kind", "bits", "layout", "max", "min normal", "min subnormal", "inf/NaN"]
    table = []
    for r, f in zip(rows, tn.FORMATS.values(), strict=True):
        if isinstance(f, FloatFormat):
            sign = "s" if f.signed else ""
            table.append([f.name, "float", f.bits, f"{sign}e{f.exp_bits}m{f.man_bits} bias {f.bias}",
                          fmt_float(f.max), fmt_float(f.min_normal), fmt_float(f.min_subnormal),
                          {"ieee": "inf, NaN", "fn": "NaN only", "none": "none"}[f.nan]])
        elif isinstance(f, MXFormat):
            table.append([f.name, "mx", f"{f.bits_per_value:g}/value",
                          f"{f.element.name} × e8m0 per {f.block}", fmt_float(r["max"]), "", "", "scale NaN"])
        else:
            assert isinstance(f, IntFormat)
            table.append([f.name, "int", f.bits, "two's complement" if f.signed else "unsigned",
                          f.max, "", "", "none"])
    print_table("number formats", cols, table,
                caption="limits derived from each bit layout; OCP MX v1.0 blocks share one E8M0 scale")
    return 0


def cmd_quantize(args: argparse.Namespace) -> int:
    fmt = tn.get_format(args.format)
    x = np.array(args.values, dtype=np.float64)
    if isinstance(fmt, MXFormat):
        mx = tn.mx_quantize(x, fmt, rounding=args.rounding, seed=args.seed, scale_rule=args.scale_rule)
        q = mx.dequantize()
        codes = [f"{c:#04x}" for c in mx.element_codes().tolist()]
        extra = f"block scales 2^{mx.scale_exponents.tolist()} ({args.scale_rule} rule)"
    elif isinstance(fmt, FloatFormat):
        q = tn.quantize(x, fmt, rounding=args.rounding, saturate=not args.no_saturate, seed=args.seed)
        width = max(2, -(-fmt.bits // 4))
        try:
            codes = [f"{c:#0{width + 2}x}" for c in tn.encode(q, fmt, saturate=not args.no_saturate).tolist()]
        except NumericsError:
            codes = ["-"] * len(q)
        extra = f"rounding {args.rounding}, {'saturating' if not args.no_saturate else 'overflow as a cast'}"
    else:
        iq = tn.quantize_int(x, fmt, symmetric=not args.asymmetric)
        q = iq.dequantize()
        codes = [str(v) for v in iq.values.tolist()]
        extra = f"scale {iq.scale.item():.7g}, zero point {iq.zero_point.item()}"
    if args.json:
        print_json({"format": fmt.name, "inputs": x.tolist(), "values": q.astype(float).tolist(),
                    "codes": codes, "note": extra})
        return 0
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(q - x) / np.abs(x)
    rows = [[fmt_float(float(v)), fmt_float(float(w)), c, f"{float(r):.3e}" if np.isfinite(r) else "-"]
            for v, w, c, r in zip(x, q, codes, rel, strict=True)]
    print_table(f"quantize to {fmt.name}", ["input", "value", "code", "rel. error"], rows, caption=extra)
    return 0


def register(sub: SubParsers) -> None:
    p = sub.add_parser("numerics", help="number formats and bit-exact quantization",
                       description="Number formats and bit-exact quantization.",
                       epilog="example: trnsim numerics quantize --format fp8_e4m3 0.1 1.0625 500",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s = p.add_subparsers(dest="numerics_command", metavar="COMMAND", required=True)
    f = s.add_parser("formats", help="list every format with its derived limits",
                     epilog="example: trnsim numerics formats --json")
    f.add_argument("--json", action="store_true", help="machine-readable output")
    f.set_defaults(handler=cmd_formats)
    q = s.add_parser("quantize", help="round values to a format and show value, code and error",
                     epilog="example: trnsim numerics quantize --format mxfp6_e2m3 0.1 1.0 3.14159 -7.9")
    q.add_argument("values", nargs="+", type=float, help="numbers to quantize")
    q.add_argument("--format", "-f", required=True, help=f"one of: {', '.join(tn.FORMATS)}")
    q.add_argument("--rounding", default="rne", choices=list(ROUNDING), help="rounding mode (default rne)")
    q.add_argument("--seed", type=int, default=None, help="seed for stochastic rounding")
    q.add_argument("--no-saturate", action="store_true", help="overflow like a cast (inf/NaN) instead of ±max")
    q.add_argument("--scale-rule", default="floor", choices=list(tn.SCALE_RULES), help="MX scale rule")
    q.add_argument("--asymmetric", action="store_true", help="integer formats: asymmetric (zero point)")
    q.add_argument("--json", action="store_true", help="machine-readable output")
    q.set_defaults(handler=cmd_quantize)
