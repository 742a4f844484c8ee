"""`sediment catalog status`: the catalog's versions and what holds its compaction back.

With `--data-dir DIR` it shows the tables cluster that `sediment tables` commands keep
in DIR (started over it on the simulator, as those commands do, for one coordinator
iteration, then stopped). Without it (there is no long-running tables cluster to
attach to: `sediment start` runs the KV) the command starts a tables cluster on the
simulator, runs a short seeded workload that leaves one transaction open across several
DDL changes, and prints the status
`TablesCluster.catalog_status()` returns: the earliest and latest catalog versions,
the update log's size, the coordinator's last iterations and, per node, its low
watermark, its oldest active transaction (and the version it pins) and its partitions
that have not published a minimum tx time yet; the running index builds and
rebalances, each with the version it pins. `render` is the text form.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any

from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.wiring.tables import TEST_ANSWER_TIMEOUT_MS, TEST_LWM, TablesCluster


def _ts(value: Any) -> str:
    return str(value) if isinstance(value, HybridTimestamp) else "-"


def render(status: dict[str, Any], iterations: int = 5) -> str:
    lines = [
        f"catalog versions  {status['earliest_version']}..{status['latest_version']} "
        f"(earliest active since {_ts(status['earliest_activation'])}, latest since "
        f"{_ts(status['latest_activation'])})",
        f"update log        {status['log_size']} entries (the snapshot and the updates "
        "above it)",
        f"coordinator       {status['leader'] or '-'} (the metastore leader)",
    ]
    coordinator = status.get("coordinator") or {}
    it = coordinator.get("iteration")
    if it:
        lines.append(f"  running         iteration {it['id']} ({it['phase']}, waiting for "
                     f"{', '.join(it['waiting']) or 'nothing'})")
    for o in list(coordinator.get("outcomes", ()))[-iterations:]:
        version = f" to {o['version']}" if o.get("version") is not None else ""
        detail = f": {o['detail']}" if o.get("detail") else ""
        lines.append(f"  iteration {o['iteration']:<5} {o['outcome']}{version}{detail}")
    builds = status.get("index_builds") or {}
    for b in builds.get("builds", ()):
        waiting = f", waiting for {', '.join(b['waiting_nodes'])}" if b["waiting_nodes"] else ""
        lines.append(f"index build       {b['name']} {b['stage']} (pins version "
                     f"{b['created_version']}; {b['built']}/{b['partitions']} partitions "
                     f"backfilled{waiting})")
    for r in (status.get("rebalances") or {}).get("running", ()):
        lines.append(f"rebalance         {r['group']} {r.get('stable', [])} -> "
                     f"{r.get('target', [])} (pins version {r['catalog_version']})")
    lines.append("what holds compaction back, per node:")
    for node, s in sorted(status["nodes"].items()):
        if s is None:
            lines.append(f"  {node:<6} down")
            continue
        oldest = s["oldest_tx"]
        tx = (f"oldest tx {oldest[0]} (began {oldest[1]}, pins version {oldest[2]})"
              if oldest else "no active transaction")
        unpublished = s["unpublished"]
        parts = (f"unpublished partitions {', '.join(unpublished)}" if unpublished
                 else f"{len(s['partitions'])} partitions published")
        lines.append(f"  {node:<6} low watermark {_ts(s['lwm'])}; {tx}; {parts}")
    return "\n".join(lines)


def demo_status(seed: int = 0) -> dict[str, Any]:
    """A sim cluster, a workload with a transaction held open, then its status."""
    with TablesCluster.start(nodes=3, backend="sim", seed=seed, lwm=TEST_LWM,
                             answer_timeout_ms=TEST_ANSWER_TIMEOUT_MS,
                             data_dir=tempfile.mkdtemp(prefix="sediment-catalog-")) as c:
        c.create_zone("Z", partitions=4, replicas=2)
        c.create_table("T", "Z", [("k", "int", False), ("v", "str")], ["k"])
        for i in range(3):
            c.add_column("T", (f"a{i}", "int"))
        held = c.begin("n2")
        held.insert("T", {"k": 1, "v": "held open"})
        for i in range(4):
            tx = c.begin(f"n{i % 3 + 1}")
            tx.insert("T", {"k": 10 + i, "v": str(i)})
            tx.commit()
            c.add_column("T", (f"b{i}", "int"))
        c.rt.sleep(3 * c.config.lwm.data_availability_ms / 1000)
        return c.catalog_status()


def data_dir_status(args: argparse.Namespace) -> dict[str, Any]:
    """The status of the tables cluster kept in `args.data_dir` by `sediment tables`
    commands, started over it on the simulator (as those commands do) and stopped."""
    from sediment import tables_cli

    opts = argparse.Namespace(data_dir=args.data_dir, nodes=3, seed=args.seed,
                              data_availability=600.0)  # `sediment tables`' default
    with tables_cli.cluster(opts) as c:
        c.rt.sleep(2 * c.config.lwm.update_interval_ms / 1000)  # a coordinator iteration
        return c.catalog_status()  # type: ignore[no-any-return]


def cmd_status(args: argparse.Namespace) -> int:
    if getattr(args, "data_dir", None) is not None:
        from sediment.tables_cli import NODES_FILE

        if not os.path.exists(os.path.join(args.data_dir, NODES_FILE)):
            print(f"sediment: no tables cluster in {args.data_dir} (create one with "
                  "`sediment tables --data-dir DIR create-zone ...`)", file=sys.stderr)
            return 1
        status = data_dir_status(args)
    else:
        status = demo_status(args.seed)
    if args.json:
        print(json.dumps(status, default=str, indent=2, sort_keys=True))
    else:
        print(render(status))
    return 0


__all__ = ["cmd_status", "data_dir_status", "demo_status", "render"]
