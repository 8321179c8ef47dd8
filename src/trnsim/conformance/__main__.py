"""``python -m trnsim.conformance PATH... [--target trn3] [--json] [--jobs N] [--ops] [-v]``: the conformance
runner as a command (the same as ``trnsim conformance``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from trnsim.errors import TrnsimError


def main(argv: Sequence[str] | None = None) -> int:
    from trnsim.cli.conformance import build_parser

    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except TrnsimError as exc:
        print(f"trnsim conformance: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
