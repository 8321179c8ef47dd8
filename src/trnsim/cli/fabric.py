"""``trnsim fabric``: the cost of one collective over a range of message sizes, nccl-tests style.

One row per size: time, algbw = S/t and busbw = algbw × the op's nccl-tests factor (GB/s = 1e9 bytes/s),
the algorithm the policy picks, and the time of every algorithm valid for the group, so the choice can be
checked by eye. ``--json`` prints the same with the topology, the group and each phase, in SI units.
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

from trnsim import hw
from trnsim.cli._output import print_json, print_table
from trnsim.errors import ConfigError
from trnsim.fabric import ALGORITHMS, OPS, POLICIES, CollectiveCost, Topology, collective
from trnsim.hw.units import format_quantity

if TYPE_CHECKING:
    from trnsim.cli._output import SubParsers

EPILOG = """examples:
  trnsim fabric --target trn3 --chips 64 --op all-reduce
  trnsim fabric --target a100 --chips 256 --op all-reduce --stride 8 --group-size 32   # DP across nodes
  trnsim fabric --target trn3 --chips 64 --op all-gather --algorithm ring --factor 2 --max 64MiB
  trnsim fabric --target my_chip.toml --chips 128 --op all-to-all --json

ops: """ + ", ".join(OPS) + """
algorithms: """ + "; ".join(f"{op}: {', '.join(algs)}" for op, algs in ALGORITHMS.items()) + """
sizes are nccl-tests' S: the all-reduce buffer, reduce-scatter's input, all-gather's output, all-to-all's
send buffer. GB/s = 1e9 bytes/s; busbw = algbw x 2(n-1)/n (all-reduce), (n-1)/n (reduce-scatter,
all-gather, all-to-all), 1 (broadcast, reduce, send-recv).
"""


def register(subparsers: SubParsers) -> None:
    """Add ``fabric`` to the top-level parser."""
    p = subparsers.add_parser(
        "fabric", help="collective cost over a chip topology (nccl-tests style table)",
        description="Time, algbw and busbw of one collective over message sizes, on a preset's topology "
                    "(node, scale-up domain, scale-out network), with the algorithm the runtime would pick.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", help="preset name or path to a .toml preset (default: TRNSIM_TARGET)")
    p.add_argument("--chips", type=int, help="chips in the topology (default: one node)")
    p.add_argument("--op", default="all-reduce", help="collective (default: all-reduce)")
    p.add_argument("--algorithm", help="force an algorithm instead of letting the policy choose")
    p.add_argument("--policy", default="fastest", help=f"how to choose: {', '.join(POLICIES)} (default: fastest)")
    p.add_argument("--stride", type=int, default=1, help="distance between consecutive ranks, in chips")
    p.add_argument("--group-size", type=int, help="ranks in the group (default: as many as fit)")
    p.add_argument("--min", default="1KiB", help="smallest size (default: 1KiB)")
    p.add_argument("--max", default="4GiB", help="largest size (default: 4GiB)")
    p.add_argument("--factor", type=int, default=4, help="ratio between sizes (default: 4)")
    p.add_argument("--gamma", type=float, default=0.0, help="reduction cost, s/byte (default 0: no source)")
    p.add_argument("--json", action="store_true", help="print JSON (SI base units) instead of a table")
    p.set_defaults(handler=cmd_fabric)


def _sizes(args: argparse.Namespace) -> list[int]:
    low, high = hw.parse_bytes(args.min, where="--min"), hw.parse_bytes(args.max, where="--max")
    if args.factor < 2 or low < 1 or high < low:
        raise ConfigError(f"need 1 <= --min <= --max and --factor >= 2, got --min {args.min} --max {args.max} "
                          f"--factor {args.factor}", hint="e.g. --min 1KiB --max 4GiB --factor 4")
    sizes = [low]
    while sizes[-1] * args.factor <= high:
        sizes.append(sizes[-1] * args.factor)
    return sizes


def cmd_fabric(args: argparse.Namespace) -> int:
    spec = hw.get(args.target)
    chips = args.chips if args.chips is not None else spec.topology.chips_per_node
    topo = Topology.for_chip(spec, chips)
    if args.stride < 1:
        raise ConfigError(f"--stride must be at least 1, got {args.stride}")
    if not 0 <= args.gamma < math.inf:
        raise ConfigError(f"--gamma must be a finite number >= 0, got {args.gamma}",
                          hint="gamma is the reduction cost in seconds per byte, e.g. --gamma 1e-12 (default 0)")
    size = args.group_size if args.group_size is not None else (chips - 1) // args.stride + 1
    group = topo.group(size, args.stride)
    rows = [collective(args.op, s, group, args.algorithm, policy=args.policy, gamma=args.gamma)
            for s in _sizes(args)]
    if args.json:
        print_json({"topology": topo.to_dict(), "group": group.to_dict(), "op": args.op, "policy": args.policy,
                    "gamma": args.gamma, "rows": [r.to_dict() for r in rows]})
        return 0
    names = list(dict.fromkeys(name for r in rows for name in r.candidates))
    columns = ["size", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "algorithm", *(f"{n} (us)" for n in names)]
    print_table(
        f"{args.op} on {spec.name}: {size} ranks, stride {args.stride}, of {chips} chips; ranks per level "
        f"{group.ranks_per_level}; {'forced ' + args.algorithm if args.algorithm else 'policy ' + args.policy}",
        columns, [_row(r, names) for r in rows],
        caption=f"levels: {topo.describe()}\nS = {OPS[args.op].size_is}; GB/s = 1e9 bytes/s; busbw = algbw x "
                f"{OPS[args.op].busbw_factor(size):.4g} (nccl-tests); reduction cost gamma = {args.gamma:g} s/B")
    return 0


def _row(cost: CollectiveCost, names: list[str]) -> list[str]:
    others = [f"{cost.candidates[n] * 1e6:.1f}" if n in cost.candidates else "—" for n in names]
    return [format_quantity(cost.nbytes, "bytes"), f"{cost.time_s * 1e6:.1f}", f"{cost.algbw / 1e9:.2f}",
            f"{cost.busbw / 1e9:.2f}", cost.algorithm, *others]
