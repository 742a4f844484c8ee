"""`sediment start` and `sediment status`: a local KV cluster that stays up, and a look
at it from another shell.

``start`` writes ``<data dir>/sediment-cluster.json`` (backend, nodes, its own pid, the
Ray address, the log file) and rewrites it every second with what every member reports
(role, leader, term, commit, head, compaction revisions, admission floor, watches,
segments, snapshot) and the cluster's metrics (docs/metrics.md): on the simulator the
in-memory snapshot, on Ray what the nodes' Ray metrics agents serve (at most every
SCRAPE_EVERY seconds, as fresh as Ray's own export interval). ``status --data-dir D``
reads that file and says whether the ``start`` process is still alive; nothing else has
to join the cluster. The cluster's processes log to ``<data dir>/sediment.log``; the
console keeps the command's own lines.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import sys
import threading
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sediment import log

STATE_FILE = "sediment-cluster.json"
LOG_FILE = "sediment.log"
BLOCKS_DIR = "blocks"  # the branch tier's ranges and metaranges
DEFAULT_DATA_DIR = "sediment-data"
STATUS_EVERY = 1.0  # seconds between two rewrites of the state file
SCRAPE_EVERY = 5.0  # seconds between two reads of Ray's metrics agents
# The host the status polls join on the client node: on Ray a process of its own host is
# a new OS process (~1 s of CPU), which once a second kept a core busy and, on a loaded
# machine, a Ctrl-C waiting behind a spawn.
STATUS_HOST = "status"
EXIT_OK, EXIT_DOWN, EXIT_USAGE = 0, 1, 2


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _write_state(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(tmp, path)


def _members(rt: Any, nodes: tuple[str, ...]) -> list[dict[str, Any]]:
    from sediment.scenarios import observers, runner

    view = rt.run(observers.view, nodes, node=runner.CLIENT_NODE, timeout=60,
                  host=STATUS_HOST)
    return [asdict(m) for m in view.members]


def _stop_on_signals() -> threading.Event:
    """Ctrl-C (SIGINT) and SIGTERM stop the cluster and tear its actors down: the first
    sets the returned event, which the serving loop looks at (an exception raised at an
    arbitrary point, inside a logging or runtime lock, could leave the teardown waiting
    on that lock); a second one raises KeyboardInterrupt. Handled here because Python
    raises KeyboardInterrupt for SIGINT only when SIGINT was not ignored at its start,
    and a command a non-interactive shell runs with `&` starts with it ignored: such a
    `start` went on through every Ctrl-C and was killed, leaving its (detached) cluster
    running."""
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt(signal.Signals(signum).name)
        stop.set()

    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, on_signal)
    return stop


def cmd_start(args: argparse.Namespace) -> int:
    from sediment.detached import refuse_second_start

    data_dir = Path(args.data_dir).resolve()
    why = refuse_second_start(data_dir)
    if why is not None:  # two starts on one data dir would share its SQLite files
        print(f"sediment: {why}", file=sys.stderr)
        return EXIT_USAGE
    data_dir.mkdir(parents=True, exist_ok=True)
    stop = _stop_on_signals()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1`: where it waits
    with log.file_sink(data_dir / LOG_FILE, capture_processes=True):
        return _start(args, data_dir, stop)


def _start(args: argparse.Namespace, data_dir: Path, stop: threading.Event) -> int:
    from sediment.actors.etcd.shell.server import EtcdWire, TlsFiles
    from sediment.runtime import api
    from sediment.scenarios.runner import CLIENT_NODE
    from sediment.wiring.cluster import Cluster

    state_path = data_dir / STATE_FILE
    nodes = tuple(f"n{i}" for i in range(1, args.nodes + 1))
    wire = None
    if args.backend == "ray":
        if bool(args.tls_cert) != bool(args.tls_key) or (args.client_ca and not args.tls_cert):
            print("sediment: --tls-cert and --tls-key go together (and --client-ca needs "
                  "them)", file=sys.stderr)
            return EXIT_USAGE
        tls = (TlsFiles(args.tls_cert, args.tls_key, args.client_ca) if args.tls_cert
               else None)
        ports = tuple(args.etcd_port + 10000 * i if args.etcd_port else 0
                      for i in range(len(nodes)))
        wire = EtcdWire(ports, args.etcd_host, tls=tls)
    print(f"starting {len(nodes)} nodes on {args.backend} in {data_dir} ...", flush=True)
    all_nodes = (CLIENT_NODE, *nodes)
    rt = (api.start("sim", seed=0, nodes=all_nodes, trace=False) if args.backend == "sim"
          else api.start("ray", nodes=all_nodes))
    state: dict[str, Any] = {
        "format": 1, "backend": args.backend, "nodes": list(nodes), "pid": os.getpid(),
        "data_dir": str(data_dir), "started_at": _now_iso(), "running": True,
        "ray_address": _ray_address() if args.backend == "ray" else None,
        "ray_cluster": getattr(rt, "cluster", None),  # its actors' names (Ray)
        "log": str(data_dir / LOG_FILE), "blocks": str(data_dir / BLOCKS_DIR),
    }
    try:
        cluster = Cluster.start(nodes, data_dir=str(data_dir / "kv"), runtime=rt,
                                top_node=CLIENT_NODE,
                                compaction_interval=args.compaction_interval, etcd=wire,
                                branches=_branch_services(args, nodes, data_dir))
        state["leader"] = cluster.leader()
        state["endpoints"] = cluster.endpoints()
        state.update(updated_at=_now_iso(), members=_members(rt, nodes))
        metrics_view = _MetricsView(args.backend)
        state["metrics"] = metrics_view.read()
        _write_state(state_path, state)
        print_up(state, state_path, args.data_dir, stop_hint="Ctrl-C")
        deadline = None if args.run_for is None else time.monotonic() + args.run_for
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            if args.backend == "sim":  # virtual time keeps pace with the wall clock
                rt.sleep(STATUS_EVERY)
            if stop.wait(STATUS_EVERY if args.backend == "ray" else 0.05):
                break
            members = _members(rt, nodes)
            leaders = {m["leader"] for m in members if m["up"] and m["role"] == "leader"}
            state.update(updated_at=_now_iso(), members=members, metrics=metrics_view.read(),
                         leader=next(iter(leaders)) if len(leaders) == 1 else None)
            _write_state(state_path, state)
        if stop.is_set():
            print("\nstopping ...", flush=True)
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
    finally:
        state.update(running=False, updated_at=_now_iso())
        _write_state(state_path, state)
        rt.shutdown()
    print("stopped")
    return EXIT_OK


def print_up(state: dict[str, Any], state_path: Path, data_dir_arg: str,
             stop_hint: str) -> None:
    """What a started cluster tells its user: the leader, every endpoint, where to look."""
    print(f"cluster up: leader {state.get('leader')}; state file {state_path}")
    endpoints = state.get("endpoints") or {}
    for node, url in endpoints.items():
        print(f"  etcd {node}: {url}")
    if endpoints:
        urls = ",".join(endpoints.values())
        print(f"  try:     etcdctl --endpoints={urls} put greeting hello")
    print(f"  status:  sediment status --data-dir {data_dir_arg}")
    print(f"  logs:    {state.get('log')}")
    if state.get("ray_address"):
        print(f"  ray:     address {state['ray_address']} (namespace sediment)")
    print(f"  stop:    {stop_hint}", flush=True)


def _branch_services(args: argparse.Namespace, nodes: tuple[str, ...], data_dir: Path
                     ) -> Any:
    """The branch tier's sensor, compactor and collector beside the KV leader
    (docs/branches.md), over the block store `<data dir>/blocks`. Claims are on the wall
    clock: the command line (`sediment branches`, over the etcd API) writes them too."""
    from sediment.actors.branches.sensor import SensorConfig
    from sediment.actors.branches.shell.compactor import CompactorConfig
    from sediment.actors.branches.shell.service import ServicesConfig
    from sediment.actors.branches.tier import TierConfig

    tier = TierConfig(compaction_interval=args.branch_compaction_interval)
    return ServicesConfig(SensorConfig(threshold=args.branch_delete_threshold),
                          CompactorConfig(nodes, str(data_dir / BLOCKS_DIR), tier,
                                          wall_clock=True))


class _MetricsView:
    """The cluster's metrics as the state file keeps them: {metric: [{"tags", "value"}]}."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.read_at = -SCRAPE_EVERY
        self.last: dict[str, list[dict[str, Any]]] = {}

    def read(self) -> dict[str, list[dict[str, Any]]]:
        from sediment import metrics, metrics_ray

        if self.backend == "sim":
            return _as_json(metrics.snapshot())
        if time.monotonic() - self.read_at >= SCRAPE_EVERY:
            self.read_at = time.monotonic()
            try:
                self.last = _as_json(metrics_ray.scrape(metrics_ray.agent_addresses()))
            except Exception as exc:  # noqa: BLE001 - status shows what it can
                log.get_logger("sediment.cli").warning("cannot read Ray's metrics",
                                                       error=str(exc))
        return self.last


def _as_json(snap: dict[str, dict[tuple[tuple[str, str], ...], float]]
             ) -> dict[str, list[dict[str, Any]]]:
    return {name: [{"tags": dict(pairs), "value": v} for pairs, v in sorted(series.items())]
            for name, series in sorted(snap.items())}


def metric_lines(state_metrics: dict[str, Any]) -> list[str]:
    """A table: a row per metric and tags other than `node` (without the sediment_
    prefix), a column per node; series without a node tag in the column `-`."""
    rows: dict[str, dict[str, str]] = {}
    columns: set[str] = set()
    for name, series in sorted(state_metrics.items()):
        short = str(name).removeprefix("sediment_")
        for item in series if isinstance(series, list) else []:
            tags = dict(item.get("tags") or {})
            node = str(tags.pop("node", "-"))
            label = short + ("{" + ",".join(f"{k}={v}" for k, v in sorted(tags.items()))
                             + "}" if tags else "")
            number = float(item.get("value", 0.0))
            rows.setdefault(label, {})[node] = (str(int(number)) if number.is_integer()
                                                else f"{number:.4g}")
            columns.add(node)
    if not rows:
        return []
    order = sorted(columns, key=lambda c: (c == "-", c))
    table = [["metric", *order]] + [[label, *(cells.get(c, "") for c in order)]
                                    for label, cells in rows.items()]
    widths = [max(len(r[i]) for r in table) for i in range(len(order) + 1)]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in table]


def _ray_address() -> str | None:
    try:
        import ray

        return str(ray.get_runtime_context().gcs_address)
    except Exception:  # noqa: BLE001 - only informative
        return None


def alive(pid: int) -> bool:
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


def cmd_status(args: argparse.Namespace) -> int:
    path = Path(args.data_dir) / STATE_FILE
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        print(f"sediment: no cluster state in {path}: start one with `sediment start "
              f"--data-dir {args.data_dir}`", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, ValueError) as exc:
        print(f"sediment: cannot read {path}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not isinstance(state, dict) or state.get("format") != 1:
        print(f"sediment: {path} is not a sediment cluster state file", file=sys.stderr)
        return EXIT_USAGE
    running = bool(state.get("running")) and alive(int(state.get("pid", 0)))
    if args.json:
        print(json.dumps({**state, "running": running}, indent=2))
        return EXIT_OK
    print(f"cluster in {state.get('data_dir')} on {state.get('backend')}: "
          f"{'running' if running else 'not running'} (pid {state.get('pid')}, "
          f"updated {state.get('updated_at')})")
    print(f"leader: {state.get('leader') or 'none'}; group kv over "
          f"{', '.join(state.get('nodes', []))}")
    for node, url in (state.get("endpoints") or {}).items():
        print(f"etcd endpoint {node}: {url}")
    rows = [[title for title, _ in STATUS_COLUMNS]]
    for m in state.get("members", []):
        rows.append(["-" if m.get(key) is None else str(m.get(key))
                     for _, key in STATUS_COLUMNS])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    lines = metric_lines(state.get("metrics") or {})
    if lines:
        print("metrics (docs/metrics.md):")
        print("\n".join(lines))
    if state.get("log"):
        print(f"logs: {state['log']}")
    return EXIT_OK if running else EXIT_DOWN


__all__ = ["BLOCKS_DIR", "DEFAULT_DATA_DIR", "LOG_FILE", "STATE_FILE", "alive", "cmd_start",
           "cmd_status", "print_up"]
