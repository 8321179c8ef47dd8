"""The ``trnsim`` command. Each subcommand lives in its own module and registers itself in COMMANDS.

A ``TrnsimError`` becomes a short message on stderr and exit code 2; nothing else is caught, since any
other exception escaping is a bug we want to see.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib import import_module

from trnsim import __version__
from trnsim.config import help_text
from trnsim.errors import TrnsimError

# Subcommand name -> module under trnsim.cli that defines `register(subparsers)` (a table, so that adding a
# command touches one line here and one module).
COMMANDS: dict[str, str] = {
    "hw": "trnsim.cli.hw",
    "numerics": "trnsim.cli.numerics",
    "demo": "trnsim.cli.demo",
    "estimate": "trnsim.cli.cluster",
    "validate": "trnsim.cli.cluster",
    "fabric": "trnsim.cli.fabric",
    "plan": "trnsim.cli.plan",
    "profile": "trnsim.cli.profile",
    "tco": "trnsim.cli.tco",
    "claims": "trnsim.cli.tco",
    "report": "trnsim.cli.report",
    "cache": "trnsim.cli.cache",
    "conformance": "trnsim.cli.conformance",
    "compile": "trnsim.cli.compile",
    "run": "trnsim.cli.compile",
    "inspect": "trnsim.cli.compile",
}

EPILOG = """examples:
  trnsim hw list
  trnsim hw compare trn3 trn2 h200 b200
  trnsim numerics quantize --format mxfp6_e2m3 0.1 1.0 3.14159 -7.9
  trnsim fabric --target trn3 --chips 64 --op all-reduce
  trnsim estimate --model llama3-70b --target trn3 --chips 1024
  trnsim plan --model llama3-8b --target trn3 --chips 64
  trnsim tco --model llama3-70b --tokens 15T --deadline 60d
  trnsim claims
  trnsim report --model llama3-70b --tokens 15T -o report.html
  trnsim profile --example matmul --m 1024 --k 1024 --n 1024
  trnsim compile model.mlir -o model.neff --auto-cast matmul --auto-cast-type mxfp6
  trnsim run model.neff --inputs in.npz --trace trace.json
  trnsim inspect model.neff
  trnsim cache warm examples/gpt.py --jobs 2
  trnsim conformance ../shared/conformance/stablehlo --jobs 2
  trnsim demo

""" + help_text()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trnsim",
        description="Trainium3 in software: hardware specs, bit-exact numerics, a NeuronCore simulator and "
                    "kernel language, a StableHLO compiler with artifacts and a compile cache, collectives, "
                    "cluster-scale training estimates and their cost.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"trnsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in dict.fromkeys(COMMANDS.values()):  # a module may define several commands
        import_module(module).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C: no traceback (the cache and -o files are written atomically)
        print("trnsim: interrupted", file=sys.stderr)
        return 130


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 0
    try:
        return handler(args)
    except TrnsimError as exc:
        print(f"trnsim: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `trnsim hw list | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
