"""The `sediment` command.

Subcommands so far: ``demo`` (the headline demo, in ``sediment/demo.py``) and
``version``. Global options set the log format and level; they are also exported to the
environment so processes started from here (local Ray workers inherit the driver's
environment) log the same way.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from collections.abc import Sequence
from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

from sediment import __version__, log

# Distributions whose versions `sediment version --all` reports (read from package
# metadata, so nothing heavy is imported).
STACK = ("ray", "raydp", "pyspark", "pandas", "pyarrow", "numpy", "sqlite-utils", "structlog")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sediment",
        description="Sediment: a compaction-aware store built as Erlang-style processes on Ray.",
    )
    parser.add_argument(
        "--log-format",
        choices=log.FORMATS,
        default=None,
        help=f"log line format (default: ${log.FORMAT_ENV} or console)",
    )
    parser.add_argument(
        "--log-level",
        choices=tuple(log.LEVELS),
        default=None,
        help=f"lowest level logged (default: ${log.LEVEL_ENV} or info)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    # `demo` owns its own options: everything after the word `demo` goes to
    # sediment.demo.main(argv), including --help.
    sub.add_parser(
        "demo",
        help="run the headline demo on an embedded local Ray (sediment demo --help)",
        add_help=False,
    )
    version_parser = sub.add_parser("version", help="print the version")
    version_parser.add_argument(
        "--all", action="store_true", help="also print Python and dependency versions"
    )
    return parser


def _cmd_version(show_all: bool) -> int:
    print(f"sediment {__version__}")
    if show_all:
        print(f"python {platform.python_version()}")
        for dist in STACK:
            try:
                print(f"{dist} {version(dist)}")
            except PackageNotFoundError:
                print(f"{dist} (not installed)")
    return 0


def _cmd_demo(argv: list[str]) -> int:
    try:
        demo = import_module("sediment.demo")
    except ModuleNotFoundError as exc:
        if exc.name != "sediment.demo":
            raise  # the demo exists but one of its own imports is missing
        print(
            "sediment: the demo is not available in this build "
            "(module sediment.demo, file sediment/demo.py, is missing)",
            file=sys.stderr,
        )
        return 2
    result = demo.main(argv)
    return int(result) if result is not None else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    if args.command != "demo" and rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")

    if args.log_format is not None:
        os.environ[log.FORMAT_ENV] = args.log_format
    if args.log_level is not None:
        os.environ[log.LEVEL_ENV] = args.log_level
    log.configure(fmt=args.log_format, level=args.log_level)

    if args.command == "demo":
        return _cmd_demo(rest)
    if args.command == "version":
        return _cmd_version(args.all)
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
