"""The `sediment` command.

Subcommands: ``demo`` (the headline demo, in ``sediment/demo.py``), ``version``,
``run`` (scenario files or directories, `scenarios/runner.py`), ``start`` (a local
cluster that stays up until Ctrl-C) and ``status`` (of a cluster ``start`` runs). Global
options set the log format and level; they are also exported to the environment so
processes started from here (local Ray workers inherit the driver's environment) log the
same way.

How ``status`` finds a cluster: ``start`` writes ``<data dir>/sediment-cluster.json``
(backend, nodes, its own pid, the Ray address) and rewrites it every second with what
every member reports (role, leader, term, commit, head, compaction revisions, admission
floor, watches, segments, snapshot). ``status --data-dir D`` reads that file and says
whether the ``start`` process is still alive; nothing else has to join the cluster.

Exit codes of ``run``: 0 every run passed, 1 a violation (or a run that failed),
3 undecided (a check answered unknown, nothing violated), 2 bad input (a scenario file
that does not load, a fault this runtime cannot inject).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from sediment import __version__, log

# Distributions whose versions `sediment version --all` reports (read from package
# metadata, so nothing heavy is imported).
STACK = ("ray", "raydp", "pyspark", "pandas", "pyarrow", "numpy", "sqlite-utils", "structlog")
BACKENDS = ("sim", "ray")
STATE_FILE = "sediment-cluster.json"
DEFAULT_DATA_DIR = "sediment-data"
STATUS_EVERY = 1.0  # seconds between two rewrites of the state file
EXIT_OK, EXIT_VIOLATION, EXIT_USAGE, EXIT_UNKNOWN = 0, 1, 2, 3


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
    run = sub.add_parser("run", help="run scenario files or directories of them")
    run.add_argument("paths", nargs="+", metavar="PATH", help="a scenario file or directory")
    run.add_argument("--backend", choices=BACKENDS, default="sim")
    run.add_argument("--seed", type=_non_negative, default=None,
                     help="the (first) seed; default: each scenario's own")
    run.add_argument("--seeds", type=_positive, default=1, metavar="N",
                     help="run N seeds from --seed on (default 1)")
    run.add_argument("--out", default=None, metavar="DIR",
                     help="where reports go (default: sediment-runs/<time>)")
    run.add_argument("--keep-data", action="store_true",
                     help="keep the cluster's files of passing runs too")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    start = sub.add_parser("start", help="start a local cluster (until Ctrl-C)")
    start.add_argument("--nodes", type=_positive, default=3)
    start.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR")
    start.add_argument("--backend", choices=BACKENDS, default="ray")
    start.add_argument("--compaction-interval", type=float, default=60.0, metavar="SECONDS")
    start.add_argument("--for", dest="run_for", type=float, default=None, metavar="SECONDS",
                       help="stop after this long instead of waiting for Ctrl-C")
    status = sub.add_parser("status", help="show the cluster `sediment start` runs")
    status.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR")
    status.add_argument("--json", action="store_true", help="print the state file as JSON")
    return parser


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def _non_negative(text: str) -> int:
    n = int(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


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


def _err(message: str) -> None:
    print(f"sediment: {message}", file=sys.stderr)


# ---- run ---------------------------------------------------------------------------------


def _load_scenarios(paths: Sequence[str]) -> list[Any]:
    """Every scenario of the files and directories, in order (ScenarioError if one is
    bad, ValueError if a path holds none)."""
    from sediment.scenarios import schema

    out: list[Any] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = schema.load_dir(path)
            if not found:
                raise ValueError(f"no scenario files (*.yaml) in {path}")
            out += found
        else:
            out.append(schema.load(path))
    return out


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


def _cmd_run(args: argparse.Namespace) -> int:
    from sediment.scenarios import nemesis, report, runner, schema

    try:
        scenarios = _load_scenarios(args.paths)
    except (schema.ScenarioError, ValueError) as exc:
        _err(str(exc))
        return EXIT_USAGE
    out = Path(args.out or f"sediment-runs/{datetime.now(UTC):%Y%m%d-%H%M%S}")
    show = not args.no_progress and sys.stderr.isatty()
    results = []
    code = EXIT_OK
    for s in scenarios:
        if args.backend not in s.backends:
            print(f"{s.name}: skipped (runs on {', '.join(s.backends)} only)")
            continue
        first = s.seed if args.seed is None else args.seed
        for seed in range(first, first + args.seeds):
            run_dir = out / s.name / f"seed-{seed}"
            try:
                with report.progress_bar(f"{s.name} seed {seed}", enabled=show) as bar:
                    result = runner.run_scenario(s, args.backend, seed, run_dir / "data",
                                                 progress=bar)
            except nemesis.UnsupportedScenario as exc:
                _err(str(exc))
                code = EXIT_USAGE
                break
            files = report.write_run(result, run_dir)
            results.append(result)
            secs = result.timings.get("wall", 0.0)
            print(f"{s.name} seed {seed}: {result.verdict.upper()} ({secs:.1f} s) "
                  f"{files['timeline']}", flush=True)
            if result.verdict != "pass":
                print(report.failure_text(result), flush=True)
            elif not args.keep_data:
                shutil.rmtree(run_dir / "data", ignore_errors=True)
            if result.verdict == "fail":
                code = EXIT_VIOLATION if code != EXIT_USAGE else code
            elif result.verdict == "unknown" and code == EXIT_OK:
                code = EXIT_UNKNOWN
    if results:
        print()
        print(report.summary_table(results))
        summary = report.write_summary(results, out)
        print(f"\nreport: {out} (summary {summary}; per run result.json, history.json, "
              "timeline.html)")
    return code


# ---- start / status ----------------------------------------------------------------------


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _write_state(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(tmp, path)


def _members(rt: Any, nodes: tuple[str, ...]) -> list[dict[str, Any]]:
    from dataclasses import asdict

    from sediment.scenarios import observers, runner

    view = rt.run(observers.view, nodes, node=runner.CLIENT_NODE, timeout=60)
    return [asdict(m) for m in view.members]


def _cmd_start(args: argparse.Namespace) -> int:
    from sediment.actors.kv.cluster import Cluster
    from sediment.runtime import api
    from sediment.scenarios.runner import CLIENT_NODE

    data_dir = Path(args.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    state_path = data_dir / STATE_FILE
    nodes = tuple(f"n{i}" for i in range(1, args.nodes + 1))
    print(f"starting {len(nodes)} nodes on {args.backend} in {data_dir} ...", flush=True)
    all_nodes = (CLIENT_NODE, *nodes)
    rt = (api.start("sim", seed=0, nodes=all_nodes, trace=False) if args.backend == "sim"
          else api.start("ray", nodes=all_nodes))
    state: dict[str, Any] = {
        "format": 1, "backend": args.backend, "nodes": list(nodes), "pid": os.getpid(),
        "data_dir": str(data_dir), "started_at": _now_iso(), "running": True,
        "ray_address": _ray_address() if args.backend == "ray" else None,
    }
    try:
        cluster = Cluster.start(nodes, data_dir=str(data_dir / "kv"), runtime=rt,
                                top_node=CLIENT_NODE,
                                compaction_interval=args.compaction_interval)
        state["leader"] = cluster.leader()
        state.update(updated_at=_now_iso(), members=_members(rt, nodes))
        _write_state(state_path, state)
        print(f"cluster up: leader {state['leader']}; state file {state_path}")
        print(f"  status:  sediment status --data-dir {args.data_dir}")
        if state["ray_address"]:
            print(f"  ray:     address {state['ray_address']} (namespace sediment)")
        print("  stop:    Ctrl-C", flush=True)
        deadline = None if args.run_for is None else time.monotonic() + args.run_for
        while deadline is None or time.monotonic() < deadline:
            if args.backend == "sim":  # virtual time keeps pace with the wall clock
                rt.sleep(STATUS_EVERY)
            time.sleep(STATUS_EVERY if args.backend == "ray" else 0.05)
            members = _members(rt, nodes)
            leaders = {m["leader"] for m in members if m["up"] and m["role"] == "leader"}
            state.update(updated_at=_now_iso(), members=members,
                         leader=next(iter(leaders)) if len(leaders) == 1 else None)
            _write_state(state_path, state)
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
    finally:
        state.update(running=False, updated_at=_now_iso())
        _write_state(state_path, state)
        rt.shutdown()
    print("stopped")
    return EXIT_OK


def _ray_address() -> str | None:
    try:
        import ray

        return str(ray.get_runtime_context().gcs_address)
    except Exception:  # noqa: BLE001 - only informative
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


STATUS_COLUMNS = (("node", "node"), ("up", "up"), ("role", "role"), ("leader", "leader"),
                  ("term", "term"), ("commit", "commit"), ("applied", "applied"),
                  ("head", "head"), ("compact", "compact_revision"),
                  ("finished", "finished_compact_revision"), ("floor", "floor"),
                  ("watches", "watches"), ("segments", "segments"),
                  ("snapshot", "snapshot_index"))


def _cmd_status(args: argparse.Namespace) -> int:
    path = Path(args.data_dir) / STATE_FILE
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        _err(f"no cluster state in {path}: start one with `sediment start --data-dir "
             f"{args.data_dir}`")
        return EXIT_USAGE
    except (OSError, ValueError) as exc:
        _err(f"cannot read {path}: {exc}")
        return EXIT_USAGE
    if not isinstance(state, dict) or state.get("format") != 1:
        _err(f"{path} is not a sediment cluster state file")
        return EXIT_USAGE
    running = bool(state.get("running")) and _alive(int(state.get("pid", 0)))
    if args.json:
        print(json.dumps({**state, "running": running}, indent=2))
        return EXIT_OK
    print(f"cluster in {state.get('data_dir')} on {state.get('backend')}: "
          f"{'running' if running else 'not running'} (pid {state.get('pid')}, "
          f"updated {state.get('updated_at')})")
    print(f"leader: {state.get('leader') or 'none'}; group kv over "
          f"{', '.join(state.get('nodes', []))}")
    rows = [[title for title, _ in STATUS_COLUMNS]]
    for m in state.get("members", []):
        rows.append(["-" if m.get(key) is None else str(m.get(key))
                     for _, key in STATUS_COLUMNS])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return EXIT_OK if running else EXIT_VIOLATION


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
    if args.command == "run":
        if args.backend == "sim" and argv is None:  # the program itself, not a caller
            _pin_hash_seed(sys.argv[1:])
        return _cmd_run(args)
    if args.command == "start":
        return _cmd_start(args)
    if args.command == "status":
        return _cmd_status(args)
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
