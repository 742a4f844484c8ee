"""The `sediment` command: parsing, dispatch, and errors for people.

Subcommands: ``demo`` (`sediment/demo.py`), ``run`` (scenario files or directories,
`sediment/sweep.py`), ``start`` and ``status`` (a local cluster,
`sediment/local_cluster.py`), ``start --detach`` and ``stop`` (`sediment/detached.py`),
``catalog status`` (`sediment/catalog_status.py`), ``branches`` (repositories, branches
and commits, `sediment/branches_cli.py`), ``tables`` (zones, tables, indexes and rows in
transactions, `sediment/tables_cli.py`), ``inspect`` (a node's SQLite files,
`sediment/inspect_node.py`), ``version``. Every
option's help shows its default.

Logging: ``--log-level`` is what the console shows (default warning: a passing run
prints its table and report path and nothing else); a run's own log file in its report
directory takes info and above. Explicit ``--log-format``/``--log-level`` are exported
to the environment, so processes started from here (local Ray workers inherit the
driver's environment) log the same way.

Errors are one line on stderr, never a traceback: bad input (or a path that cannot be
read or written) exits 2, an unexpected error exits 4 (``--log-level debug`` shows its
traceback), Ctrl-C exits 130, and a closed stdout (``sediment ... --json | head``) ends
the command quietly with 141, the status of a command killed by SIGPIPE. Exit codes of
``run``: 0 every run passed, 1 a violation (or a run that failed), 3 undecided (a check
answered unknown, nothing violated).
"""

from __future__ import annotations

import argparse
import os
import platform
import select
import sys
from collections.abc import Sequence
from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

from sediment import __version__, log
from sediment.cli_args import HelpFormatter, int_at_least, positive_seconds
from sediment.local_cluster import DEFAULT_DATA_DIR, STATE_FILE

# Distributions whose versions `sediment version --all` reports (read from package
# metadata, so nothing heavy is imported).
STACK = ("ray", "raydp", "pyspark", "pandas", "pyarrow", "numpy", "sqlite-utils", "structlog")
BACKENDS = ("sim", "ray")
CONSOLE_LEVEL = "warning"  # the console's default level
EXIT_OK, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 2, 4, 130
EXIT_STDOUT_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for `yes | head`'s yes


def _log_options(parser: argparse.ArgumentParser, default: object) -> None:
    """--log-format and --log-level: on `sediment` (default None) and again on every
    command (default SUPPRESS, so `sediment run --log-level info` works too and an
    absent one does not reset the global one)."""
    parser.add_argument("--log-format", choices=log.FORMATS, default=default,
                        help=f"log line format (default: ${log.FORMAT_ENV}, else console)")
    parser.add_argument("--log-level", choices=tuple(log.LEVELS), default=default,
                        help=f"lowest level shown on the console (default: ${log.LEVEL_ENV}, "
                             f"else {CONSOLE_LEVEL}); a run's log file takes info and above")


def _sub(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str,
         text: str) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".",
                            formatter_class=HelpFormatter)
    _log_options(parser, argparse.SUPPRESS)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sediment", formatter_class=HelpFormatter,
        description="Sediment: a compaction-aware store built as Erlang-style processes "
                    "on Ray.",
        epilog="`sediment COMMAND --help` shows a command's options. Environment: "
               f"{log.FORMAT_ENV}, {log.LEVEL_ENV} (the defaults of --log-format and "
               "--log-level), RAY_ADDRESS (join an existing Ray cluster).")
    parser.add_argument("--version", action="version", version=f"sediment {__version__}",
                        help="print the version and exit")
    _log_options(parser, None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    # `demo` owns its own options: everything after the word `demo` goes to
    # sediment.demo.main(argv), including --help.
    sub.add_parser("demo", add_help=False,
                   help="run the headline demo on an embedded local Ray (see "
                        "`sediment demo --help`)")

    run = _sub(sub, "run", "run scenario files or directories of them, and check them")
    run.add_argument("paths", nargs="+", metavar="PATH",
                     help="a scenario file (.yaml) or a directory of them")
    run.add_argument("--backend", choices=BACKENDS, default="sim",
                     help="sim: deterministic simulator; ray: real processes")
    run.add_argument("--client", choices=("native", "grpc"), default=None,
                     help="how the traffic reaches the cluster: native process messages, "
                          "or grpc through every node's etcd API (ray only) (default: "
                          "each scenario's traffic.client)")
    run.add_argument("--seed", type=int_at_least(0), default=None,
                     help="the first seed (default: each scenario's own seed)")
    run.add_argument("--seeds", type=int_at_least(1), default=1, metavar="N",
                     help="run N seeds from the first seed on")
    run.add_argument("--duration", type=positive_seconds, default=None, metavar="SECONDS",
                     help="run each scenario this long instead of its file's duration "
                          "(its faults must fit; e.g. a Ray run, which commits less per "
                          "second, of a file sized for the simulator) (default: the "
                          "file's)")
    run.add_argument("--out", default=None, metavar="DIR",
                     help="where reports go (default: sediment-runs/<UTC time>)")
    run.add_argument("--keep-data", action="store_true",
                     help="keep the cluster's files of passing runs too (failing runs' "
                          "are always kept)")
    run.add_argument("--each", action="store_true",
                     help="print a line for every run as it ends, not only for those that "
                          "did not pass")
    run.add_argument("--no-progress", action="store_true",
                     help="no progress bar (there is none when stderr is not a terminal)")

    start = _sub(sub, "start", "start a local KV cluster and keep it up until Ctrl-C")
    start.add_argument("--nodes", type=int_at_least(1), default=3, help="how many KV nodes")
    start.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR",
                       help="the cluster's files, its state file and its log")
    start.add_argument("--backend", choices=BACKENDS, default="ray",
                       help="ray: an embedded local Ray (or RAY_ADDRESS); sim: the simulator")
    start.add_argument("--compaction-interval", type=positive_seconds, default=60.0,
                       metavar="SECONDS", help="seconds between compaction cycles")
    start.add_argument("--detach", action="store_true",
                       help="run the cluster in the background and return once it is up "
                            "(`sediment stop` ends it; its output goes to "
                            "<data dir>/sediment-start.out)")
    start.add_argument("--for", dest="run_for", type=positive_seconds, default=None,
                       metavar="SECONDS",
                       help="stop after this long (default: run until Ctrl-C)")
    start.add_argument("--etcd-port", type=int, default=2379, metavar="PORT",
                       help="node i serves etcd's gRPC API on PORT + 10000 * (i - 1) "
                            "(default 2379: 2379, 12379, 22379, ...); 0: any free ports")
    start.add_argument("--etcd-host", default="127.0.0.1", metavar="ADDRESS",
                       help="the address the etcd API binds (default 127.0.0.1)")
    start.add_argument("--tls-cert", default=None, metavar="PEM",
                       help="serve the etcd API over TLS with this certificate and --tls-key "
                            "(default: plain HTTP/2)")
    start.add_argument("--tls-key", default=None, metavar="PEM",
                       help="the TLS private key (default: none)")
    start.add_argument("--client-ca", default=None, metavar="PEM",
                       help="require client certificates signed by this CA, with TLS "
                            "(default: none required)")
    start.add_argument("--branch-delete-threshold", type=int_at_least(1), default=1000,
                       metavar="N",
                       help="the branch tier's delete sensor triggers a staging compaction "
                            "after N deletes on one staging token (default 1000)")
    start.add_argument("--branch-compaction-interval", type=positive_seconds,
                       default=300.0, metavar="SECONDS",
                       help="a branch's sensor-triggered compactions start at least this far "
                            "apart (default 300)")

    stop = _sub(sub, "stop", "stop the cluster `sediment start` runs (a detached one too)")
    stop.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR",
                      help="the --data-dir the cluster was started with")
    stop.add_argument("--wait", type=positive_seconds, default=60.0, metavar="SECONDS",
                      help="how long to wait for it to exit")

    status = _sub(sub, "status", "show the cluster `sediment start` runs")
    status.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR",
                        help="the --data-dir the cluster was started with")
    status.add_argument("--json", action="store_true", help="print the state file as JSON")

    from sediment import branches_cli

    branches_cli.add_parser(sub, lambda p: _log_options(p, argparse.SUPPRESS))
    catalog = _sub(sub, "catalog", "the versioned catalog of partitioned tables")
    catalog_sub = catalog.add_subparsers(dest="catalog_command", metavar="SUBCOMMAND")
    cstatus = catalog_sub.add_parser(
        "status", formatter_class=HelpFormatter,
        help="start a tables cluster on the simulator, run a short workload that holds "
             "one transaction open, and show the catalog's versions and what holds "
             "compaction back",
        description="There is no long-running tables cluster to attach to yet: this "
                    "starts one on the simulator, runs a seeded workload and shows its "
                    "catalog status.")
    cstatus.add_argument("--seed", type=int_at_least(0), default=0, help="the simulator's seed")
    cstatus.add_argument("--json", action="store_true", help="print the status as JSON")
    cstatus.add_argument("--data-dir", default=None, metavar="DIR",
                         help="show the tables cluster `sediment tables` keeps in DIR "
                              "(default: none, the seeded workload's)")

    from sediment import tables_cli

    tables_cli.add_parser(sub, lambda p: _log_options(p, argparse.SUPPRESS))

    from sediment import inspect_node

    inspect_node.add_parser(sub, lambda p: _log_options(p, argparse.SUPPRESS), HelpFormatter)

    version_parser = _sub(sub, "version", "print the version")
    version_parser.add_argument("--all", action="store_true",
                                help="also print Python's and the dependencies' versions")
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
    return EXIT_OK


def _cmd_demo(argv: list[str]) -> int:
    try:
        demo = import_module("sediment.demo")
    except ModuleNotFoundError as exc:
        if exc.name != "sediment.demo":
            raise  # the demo exists but one of its own imports is missing
        _err("the demo is not available in this build (module sediment.demo, file "
             "sediment/demo.py, is missing)")
        return EXIT_USAGE
    result = demo.main(argv)
    return int(result) if result is not None else EXIT_OK


def _err(message: str) -> None:
    print(f"sediment: {message}", file=sys.stderr)


HASH_SEED_ENV = "PYTHONHASHSEED"


def _pin_hash_seed(argv: Sequence[str]) -> None:
    """Re-execute once with a fixed PYTHONHASHSEED: process code iterates sets of
    strings and pids, whose order follows Python's per-process string hashing, so a sim
    seed replays exactly only under the same hash seed. Returns only when it is set."""
    if os.environ.get(HASH_SEED_ENV) is not None:
        return
    os.environ[HASH_SEED_ENV] = "0"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "sediment", *argv])


def main(argv: Sequence[str] | None = None) -> int:
    """The command; returns its exit code. Argument errors exit through argparse (2)."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # a closed stdout shows here, not at the interpreter's exit
        return code
    except BrokenPipeError as exc:
        if not _stdout_closed():
            return _unexpected(exc)  # another pipe or socket broke
        return EXIT_STDOUT_CLOSED
    except KeyboardInterrupt:
        _err("interrupted")
        return EXIT_INTERRUPTED
    except log.LogConfigError as exc:
        _err(str(exc))
        return EXIT_USAGE
    except OSError as exc:  # a path that cannot be read or written
        if exc.filename is None:
            return _unexpected(exc)
        _err(f"{exc.filename}: {exc.strerror or exc}")
        return EXIT_USAGE
    except Exception as exc:
        return _unexpected(exc)


def _stdout_closed() -> bool:
    """Whether stdout's reader went away (`sediment ... | head`), asked of the pipe itself
    (poll reports an error on a pipe without readers) so that a broken socket or
    subprocess pipe is still an unexpected error. If so, stdout is pointed at /dev/null,
    so that Python's own flush at exit does not print a second error."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        closed = any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # not a real file, or no poll here
        return False
    if closed:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    return closed


def _unexpected(exc: Exception) -> int:
    """One line; at debug level the traceback too (re-raised)."""
    if log.current_settings()["level"] == "debug":
        raise exc
    _err(f"unexpected error: {type(exc).__name__}: {exc} (`sediment --log-level debug "
         "...` shows where)")
    return EXIT_INTERNAL


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    args, rest = parser.parse_known_args(words)
    if args.command != "demo" and rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")

    if args.log_format is not None:
        os.environ[log.FORMAT_ENV] = args.log_format
    if args.log_level is not None:
        os.environ[log.LEVEL_ENV] = args.log_level
    log.check_environment()
    log.configure(fmt=args.log_format, level=args.log_level, default_level=CONSOLE_LEVEL)

    if args.command == "demo":
        return _cmd_demo(rest)
    if args.command == "version":
        return _cmd_version(args.all)
    if args.command == "run":
        from sediment import sweep

        if args.backend == "sim" and argv is None:  # the program itself, not a caller
            _pin_hash_seed(sys.argv[1:])
        return sweep.cmd_run(args)
    if args.command == "branches":
        from sediment import branches_cli

        return branches_cli.cmd_branches(args)
    if args.command == "catalog":
        if args.catalog_command != "status":
            parser.error("catalog needs a subcommand: status")
        from sediment import catalog_status

        return catalog_status.cmd_status(args)
    if args.command == "tables":
        from sediment import tables_cli

        return tables_cli.cmd_tables(args)
    if args.command == "inspect":
        from sediment import inspect_node

        return inspect_node.cmd_inspect(args)
    if args.command == "start" and args.detach:
        from pathlib import Path

        from sediment import detached

        return detached.start_detached([w for w in words if w != "--detach"],
                                       Path(args.data_dir).resolve(), args.data_dir)
    if args.command == "stop":
        from sediment import detached

        return detached.cmd_stop(args)
    if args.command in ("start", "status"):
        from sediment import local_cluster

        return (local_cluster.cmd_start if args.command == "start"
                else local_cluster.cmd_status)(args)
    parser.print_help(sys.stderr)
    return EXIT_USAGE


__all__ = ["STATE_FILE", "build_parser", "main"]


if __name__ == "__main__":
    raise SystemExit(main())
