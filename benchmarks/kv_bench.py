"""KV benchmark: the Netsy KV as a 3-node Sediment cluster on Ray beside a real etcd 3.4,
and its SQLite layer beside raw SQLite, in one run.

Both clusters are driven by the same etcd v3 gRPC client code (benchmarks/etcd_load.py,
one thread and channel per client, 100-byte values); Sediment serves etcd's API on
every node (`Cluster.start(etcd=EtcdWire())`), so a ratio compares the servers.
  puts/s            1 and 16 clients against the leader's endpoint; each put fsynced in
                    the WALs of a majority, committed, applied, answered.
  range/s           a one-key Range, linearizable (ReadIndex at the leader) and
                    serializable (the member's own state), 1 and 16 clients.
  watch latency     a watch on a follower's endpoint while one writer puts one key at a
                    time on the leader's: per event, time from the put's invocation and
                    from its acknowledgement to the event in the watcher's hands.
  start, RSS        seconds from `Cluster.start` to a ready leader (after ray.init), and
                    the resident memory of every Ray process / every etcd member.
  store puts/s      puts straight into one `Store` (no raft, no Ray) vs raw SQLite, one
                    transaction per row, synchronous FULL and NORMAL.
  compaction rows/s value-only compaction of the superseded rows of a loaded history on
                    every node, from the Compact's commit until every member finished, vs
                    raw SQLite inserting the same rows in one transaction and nulling them.
The etcd side needs Debian's `etcd-server` (apt-get install etcd-server etcd-client);
without it that column is skipped with a message.

Usage: python benchmarks/kv_bench.py [--puts 3000] [--watch-events 200]
       [--history 20000] [--keys 2000] [--dir DIR] [--json PATH] [--no-etcd]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("SEDIMENT_LOG_LEVEL", "error")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import etcd_load  # noqa: E402  (benchmarks/, beside this file)
import grpc  # noqa: E402

from sediment.actors.kv.machine import DB_FILE  # noqa: E402
from sediment.actors.kv.queries import CompactRevisions
from sediment.actors.kv.store import Store  # noqa: E402
from sediment.actors.kv.types import Put, Txn  # noqa: E402
from sediment.actors.log.shell.protocol import Done, Propose, Query

VALUE = etcd_load.VALUE  # one value size for every row
RAW_SCHEMA = ("CREATE TABLE records (revision INTEGER PRIMARY KEY, key BLOB, value BLOB, "
              "create_revision INTEGER, mod_revision INTEGER, version INTEGER, "
              "deleted INTEGER, compacted_at INTEGER)")


_key = etcd_load.key


# -- raw SQLite ---------------------------------------------------------------------------


def _raw_db(path: str, synchronous: str = "NORMAL") -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute(RAW_SCHEMA)
    return db


def raw_insert_per_row(base: str, n: int, keys: int, synchronous: str) -> float:
    """Rows/s: one INSERT and COMMIT per row, like one put per request."""
    db = _raw_db(os.path.join(base, f"raw-rows-{synchronous}.db"), synchronous)
    t0 = time.perf_counter()
    for i in range(1, n + 1):
        db.execute("BEGIN")
        db.execute("INSERT INTO records VALUES (?,?,?,?,?,?,0,NULL)",
                   (i, _key(i, keys), VALUE, i, i, 1))
        db.execute("COMMIT")
    seconds = time.perf_counter() - t0
    db.close()
    return n / seconds


def raw_batch(base: str, n: int, keys: int) -> dict[str, float]:
    """Rows/s for n rows inserted in one transaction, then nulling all but each key's last."""
    db = _raw_db(os.path.join(base, "raw-batch.db"))
    rows = [(i, _key(i, keys), VALUE, i, i, 1) for i in range(1, n + 1)]
    t0 = time.perf_counter()
    db.execute("BEGIN")
    db.executemany("INSERT INTO records VALUES (?,?,?,?,?,?,0,NULL)", rows)
    db.execute("COMMIT")
    insert = time.perf_counter() - t0
    db.execute("CREATE INDEX by_key ON records (key, revision)")
    t0 = time.perf_counter()
    db.execute("BEGIN")
    cur = db.execute("UPDATE records SET value = NULL, compacted_at = ? WHERE revision < "
                     "(SELECT MAX(revision) FROM records r WHERE r.key = records.key)", (n,))
    db.execute("COMMIT")
    update = time.perf_counter() - t0
    nulled = cur.rowcount
    db.close()
    return {"insert_rows_per_s": n / insert, "update_rows_per_s": nulled / update,
            "nulled": nulled}


def store_puts(base: str, n: int, keys: int, synchronous: str) -> float:
    """Puts/s into one Store directly (the KV's SQLite layer without raft or Ray)."""
    with Store(os.path.join(base, f"store-{synchronous}.db"), synchronous=synchronous) as store:
        t0 = time.perf_counter()
        for i in range(n):
            store.put(_key(i, keys), VALUE)
        return n / (time.perf_counter() - t0)


# -- processes driving the cluster (run inside the runtime, on the leader's node) ---------


async def _history_loader(ctx: Any, target: str, rows: int, keys: int, per_txn: int) -> int:
    """Load `rows` puts over `keys` keys as txns of `per_txn` distinct-key puts."""
    server = await ctx.whereis(target)
    written = 0
    while written < rows:
        ops = tuple(Put(_key(written + j, keys), VALUE) for j in range(per_txn))
        reply = await ctx.call(server, Propose(Txn((), ops, ())), timeout=60)
        if not isinstance(reply, Done):
            raise RuntimeError(f"load failed: {reply!r}")
        written += per_txn
    return written


# -- the cluster part ---------------------------------------------------------------------


def ray_rss() -> int:
    """Bytes resident in every Ray process on this machine (workers and daemons)."""
    import psutil

    total = 0
    for proc in psutil.process_iter(["cmdline", "memory_info"]):
        cmd = " ".join(proc.info["cmdline"] or ())
        if proc.pid != os.getpid() and ("ray::" in cmd or "/ray/" in cmd or "raylet" in cmd
                                        or "gcs_server" in cmd):
            total += proc.info["memory_info"].rss
    return total


def cluster_rows(base: str, puts: int, keys: int, watch_events: int, history: int,
                 ) -> dict[str, Any]:
    import ray

    from sediment.actors.etcd.shell.server import EtcdWire
    from sediment.actors.kv.names import KV_GROUP
    from sediment.actors.kv.types import Compact
    from sediment.actors.log.shell.names import raft_name
    from sediment.wiring.cluster import Cluster

    ray.init(include_dashboard=False, log_to_driver=False)
    t0 = time.perf_counter()
    cluster = Cluster.start(3, data_dir=os.path.join(base, "kv"), backend="ray",
                            compaction_interval=3600.0, etcd=EtcdWire())
    leader = cluster.wait_ready()
    out: dict[str, Any] = {"start_seconds": time.perf_counter() - t0}
    cluster.rt.wait_warm(60)  # Ray starting the warm pools' actors is not the KV's load
    try:
        urls = {n: u.removeprefix("http://") for n, u in cluster.endpoints().items()}
        follower = next(n for n in cluster.nodes if n != leader)
        out.update(etcd_load.rows(urls[leader], urls[follower], puts, keys, watch_events))
        out["rss_bytes"] = ray_rss()
        rt = cluster.rt
        rt.run(_history_loader, raft_name(KV_GROUP, leader), history, keys, 100,
               node=leader, timeout=1200)
        out["compaction"] = _timed_compaction(cluster, Compact)
    finally:
        cluster.stop()
        ray.shutdown()
    return out


def etcd_rows(members: int, puts: int, keys: int, watch_events: int) -> dict[str, Any]:
    """The same rows against a real etcd of `members` members on loopback."""
    import psutil

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from etcd_helpers import RealEtcd

    from sediment.actors.etcd.pb import rpc_pb2 as pb
    from sediment.actors.etcd.pb import rpc_pb2_grpc as pbg

    with RealEtcd(members=members) as etcd:
        leader = follower = etcd.endpoints[0]
        for endpoint in etcd.endpoints:
            with grpc.insecure_channel(endpoint) as channel:
                status = pbg.MaintenanceStub(channel).Status(pb.StatusRequest(), timeout=10)
            if status.leader == status.header.member_id:
                leader = endpoint
            else:
                follower = endpoint
        out = etcd_load.rows(leader, follower, puts, keys, watch_events)
        out["rss_bytes"] = sum(psutil.Process(p.pid).memory_info().rss for p in etcd._procs)
    return out


def _timed_compaction(cluster: Any, compact: Any) -> dict[str, Any]:
    """Compact at head; seconds until every member's value-only compaction finished."""
    from sediment.actors.kv.names import KV_GROUP
    from sediment.actors.log.shell.names import raft_name

    client = cluster.client()
    head = client.range(b"\0", count_only=True).revision
    t0 = time.perf_counter()
    client.compact(head)
    per_node: dict[str, float] = {}
    deadline = time.monotonic() + 1200
    while len(per_node) < len(cluster.nodes) and time.monotonic() < deadline:
        for n in cluster.nodes:
            if n in per_node:
                continue
            _, finished = cluster.rt.call(raft_name(KV_GROUP, n), Query(CompactRevisions()),
                                          timeout=60)
            if finished >= head:
                per_node[n] = time.perf_counter() - t0
        time.sleep(0.02)
    seconds = max(per_node.values())
    rows = _compacted_rows(os.path.join(cluster.spec.group_dir(cluster.nodes[0]), DB_FILE))
    return {"rows": rows, "head": head, "seconds": seconds, "rows_per_s": rows / seconds,
            "per_node_seconds": per_node}


def _compacted_rows(path: str) -> int:
    """Rows the value-only compaction nulled, read from a member's database file."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(db.execute(
            "SELECT count(*) FROM records WHERE compacted_at IS NOT NULL").fetchone()[0])
    finally:
        db.close()


# -- main ---------------------------------------------------------------------------------


TARGETS = {"put/16": 0.5, "put/1": 0.25, "linearizable/16": 0.5}  # issue 15: x etcd 3


def print_table(kv: dict[str, Any], etcd: dict[int, dict[str, Any]]) -> None:
    e3, e1 = etcd.get(3), etcd.get(1)

    def cell(side: dict[str, Any] | None, row: str) -> str:
        return f"{side[row]:,.0f}" if side else "-"

    print("| row | Sediment, 3 nodes on Ray | etcd 3.4, 3 members | ratio | target "
          "| etcd 3.4, 1 member |")
    print("|---|---:|---:|---:|---:|---:|")
    names = {"put": "puts/s", "linearizable": "linearizable range/s",
             "serializable": "serializable range/s"}
    for kind, label in names.items():
        for k in (1, 16):
            row = f"{kind}/{k}"
            ratio = f"{kv[row] / e3[row]:.2f}x" if e3 else "-"
            target = f">= {TARGETS[row]}x" if row in TARGETS else ""
            print(f"| {label}, {k} client{'s' if k > 1 else ''} | {cell(kv, row)} | "
                  f"{cell(e3, row)} | {ratio} | {target} | {cell(e1, row)} |")
    for frm in ("invoke", "ack"):
        def lat(side: dict[str, Any] | None, frm: str = frm) -> str:
            if not side:
                return "-"
            w = side["watch"]
            return f"{w[f'{frm}_p50_ms']:.1f} / {w[f'{frm}_p99_ms']:.1f} ms"
        target = "p99 <= 20 ms" if frm == "invoke" else ""
        print(f"| watch delivery from put {frm}, p50 / p99 | {lat(kv)} | {lat(e3)} | | "
              f"{target} | {lat(e1)} |")
    mib = 1 << 20
    print(f"| resident memory, whole cluster | {kv['rss_bytes'] / mib:,.0f} MiB | "
          + (f"{e3['rss_bytes'] / mib:,.0f} MiB" if e3 else "-") + " | | | "
          + (f"{e1['rss_bytes'] / mib:,.0f} MiB" if e1 else "-") + " |")
    print(f"| cluster start to a ready leader (after ray.init) | {kv['start_seconds']:.1f} s "
          "| | | < 10 s | |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--puts", type=int, default=3000, help="puts per put row")
    ap.add_argument("--keys", type=int, default=2000)
    ap.add_argument("--watch-events", type=int, default=200)
    ap.add_argument("--history", type=int, default=20_000,
                    help="rows loaded before the compaction row")
    ap.add_argument("--no-etcd", action="store_true", help="skip the real etcd side")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args(argv)
    base = tempfile.mkdtemp(prefix="kv-bench-", dir=args.dir)
    t0 = time.perf_counter()
    etcd: dict[int, dict[str, Any]] = {}
    try:
        raw = {sync: raw_insert_per_row(base, args.puts * 2, args.keys, sync)
               for sync in ("FULL", "NORMAL")}
        store = {sync: store_puts(base, args.puts * 2, args.keys, sync)
                 for sync in ("FULL", "NORMAL")}
        batch = raw_batch(base, args.history, args.keys)
        kv = cluster_rows(base, args.puts, args.keys, args.watch_events, args.history)
        if args.no_etcd:
            print("etcd side skipped (--no-etcd)\n")
        elif shutil.which("etcd") is None:
            print("etcd side skipped: no `etcd` binary (apt-get install etcd-server "
                  "etcd-client)\n")
        else:
            for members in (3, 1):
                etcd[members] = etcd_rows(members, args.puts, args.keys, args.watch_events)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    elapsed = time.perf_counter() - t0
    comp = kv["compaction"]
    print(f"# KV benchmark ({elapsed:.0f} s; one run, same client code on both sides)\n")
    print_table(kv, etcd)
    print("\n| row | Sediment | raw SQLite | ratio |")
    print("|---|---|---|---|")
    for sync in ("FULL", "NORMAL"):
        print(f"| puts/s into one Store, synchronous={sync} (no raft, no Ray) | "
              f"{store[sync]:,.0f} | {raw[sync]:,.0f} rows/s (same synchronous) | "
              f"{store[sync] / raw[sync]:.2f}x |")
    print(f"| compaction rows/s ({comp['rows']:,} superseded rows, slowest of 3 nodes) | "
          f"{comp['rows_per_s']:,.0f} | {batch['insert_rows_per_s']:,.0f} rows/s inserted in "
          f"one txn | {comp['rows_per_s'] / batch['insert_rows_per_s']:.3f}x |")
    print(f"| compaction vs a raw UPDATE nulling the same rows | {comp['rows_per_s']:,.0f} | "
          f"{batch['update_rows_per_s']:,.0f} rows/s | "
          f"{comp['rows_per_s'] / batch['update_rows_per_s']:.3f}x |")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"raw_rows_per_s": raw, "store_puts_per_s": store, "raw_batch": batch,
             "cluster": kv, "etcd": etcd, "elapsed_s": elapsed}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
