"""KV benchmark: the Netsy KV through a 3-node cluster on Ray against raw SQLite.

Rows, in one run (all on the same disk, the KV's data dir and the raw files side by side):
  puts/s            Put through the raft leader, fsynced in the WALs of a majority,
                    committed, applied to SQLite, answered to the client; 1 client and 16
                    concurrent clients (client processes on the leader's node, each waiting
                    for its answer) vs raw SQLite: the same rows inserted one transaction
                    per row (WAL mode, synchronous=FULL: durable per row, as a put is).
  store puts/s      the same puts straight into one `Store` (no raft, no Ray), FULL and
                    NORMAL (the raft-hosted machine runs NORMAL: the raft WAL is its
                    durability), each against the raw loop with the same setting.
  range/s           a one-key Range: linearizable (through the log) and serializable (one
                    member's applied state), 1 and 16 clients.
  watch latency     a writer on the leader puts one key at a time; a watch on another
                    node pulls; per event: time from the put's invocation, and from its
                    acknowledgement, to the event in the watching client's hands (p50/p99).
  compaction rows/s value-only compaction of the superseded rows of a loaded history on
                    every node, from the Compact entry's commit until every member has
                    finished, vs raw SQLite inserting the same number of rows in one
                    transaction (the issue's baseline) and vs a raw UPDATE nulling them.

Usage: python benchmarks/kv_bench.py [--puts 1000] [--watch-events 200]
       [--history 20000] [--keys 2000] [--dir DIR] [--json PATH]
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
os.environ.setdefault("SEDIMENT_LOG_LEVEL", "error")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from sediment.actors.kv.machine import DB_FILE  # noqa: E402
from sediment.actors.kv.store import Store  # noqa: E402
from sediment.actors.kv.types import Put, Range, Txn  # noqa: E402

VALUE = b"v" * 100
RAW_SCHEMA = ("CREATE TABLE records (revision INTEGER PRIMARY KEY, key BLOB, value BLOB, "
              "create_revision INTEGER, mod_revision INTEGER, version INTEGER, "
              "deleted INTEGER, compacted_at INTEGER)")


def _key(i: int, keys: int) -> bytes:
    return b"bench/%08d" % (i % keys)


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


async def _client(ctx: Any, target: str, kind: str, n: int, keys: int, offset: int,
                  report_to: Any) -> None:
    server = await ctx.whereis(target)
    ctx.send(report_to, "ready")
    await ctx.receive(lambda m: m == "go")
    for i in range(n):
        key = _key(offset + i, keys)
        if kind == "put":
            msg: Any = ("propose", Put(key, VALUE))
        elif kind == "range":
            msg = ("propose", Range(key))
        else:
            msg = ("query", Range(key))
        reply = await ctx.call(server, msg, timeout=60)
        if kind != "query" and reply[0] != "ok":  # a query answers its result itself
            raise RuntimeError(f"{kind} failed: {reply!r}")
    ctx.send(report_to, "done")


async def _drive(ctx: Any, target: str, kind: str, n: int, k: int, keys: int,
                 node: str) -> tuple[int, float]:
    """Start k clients, wait until all are up, then time n requests shared among them."""
    pids = [await ctx.spawn(_client, target, kind, n // k, keys, j * (n // k), ctx.self(),
                            node=node, link=True) for j in range(k)]
    for _ in pids:
        await ctx.receive(lambda m: m == "ready", timeout=600)
    t0 = time.perf_counter()
    for pid in pids:
        ctx.send(pid, "go")
    for _ in pids:
        await ctx.receive(lambda m: m == "done", timeout=600)
    return (n // k) * k, time.perf_counter() - t0


async def _writer(ctx: Any, target: str, n: int, report_to: Any) -> None:
    """One put at a time; tells report_to each revision's invoke and ack times."""
    server = await ctx.whereis(target)
    await ctx.receive(lambda m: m == "go")
    for i in range(n):
        invoked = time.time()
        reply = await ctx.call(server, ("propose", Put(b"watched", b"%d" % i)), timeout=60)
        ctx.send(report_to, ("acked", reply[1], invoked, time.time()))
        await ctx.sleep(0.005)
    ctx.send(report_to, "written")


async def _watch_latency(ctx: Any, leader: str, watch_node: str, n: int) -> dict[str, Any]:
    """A watch on watch_node, pulled by this process, while a writer on the leader puts."""
    from sediment.actors.kv import watch_protocol as wp
    from sediment.actors.kv.names import KV_GROUP, kv_node_name
    from sediment.actors.log.shell.names import raft_name
    from sediment.runtime.errors import ReceiveTimeout

    session = await ctx.call(kv_node_name(watch_node), ("open_watcher",), timeout=30)
    created = await ctx.call(session, ("create", wp.CreateWatch(b"watched")), timeout=30)
    assert isinstance(created, wp.Created), created
    writer = await ctx.spawn(_writer, raft_name(KV_GROUP, leader), n, ctx.self(), node=leader)
    ctx.send(writer, "go")
    received: dict[int, float] = {}
    acked: dict[int, tuple[float, float]] = {}
    written = False
    while len(received) < n or not written:
        reply = await ctx.call(session, ("next", 0.5), timeout=30)
        now = time.time()
        for r in reply[1] if reply[0] != "closed" else reply[2]:
            if isinstance(r, wp.Deliver):
                for e in r.events:
                    received.setdefault(e.kv.mod_revision, now)
        while True:
            try:
                m = await ctx.receive(None, timeout=0)
            except ReceiveTimeout:
                break
            if m == "written":
                written = True
            elif isinstance(m, tuple) and m[0] == "acked":
                acked[m[1]] = (m[2], m[3])
    await ctx.call(session, ("close",), timeout=30)
    from_invoke = sorted(received[r] - acked[r][0] for r in acked)
    from_ack = sorted(received[r] - acked[r][1] for r in acked)
    return {"events": len(acked), "from_invoke": from_invoke, "from_ack": from_ack}


async def _history_loader(ctx: Any, target: str, rows: int, keys: int, per_txn: int) -> int:
    """Load `rows` puts over `keys` keys as txns of `per_txn` distinct-key puts."""
    server = await ctx.whereis(target)
    written = 0
    while written < rows:
        ops = tuple(Put(_key(written + j, keys), VALUE) for j in range(per_txn))
        reply = await ctx.call(server, ("propose", Txn((), ops, ())), timeout=60)
        if reply[0] != "ok":
            raise RuntimeError(f"load failed: {reply!r}")
        written += per_txn
    return written


# -- the cluster part ---------------------------------------------------------------------


def percentile(sorted_values: list[float], p: float) -> float:
    k = min(len(sorted_values) - 1, max(0, round(p / 100 * (len(sorted_values) - 1))))
    return sorted_values[k]


def cluster_rows(base: str, puts: int, keys: int, watch_events: int, history: int,
                 ) -> dict[str, Any]:
    from sediment.actors.kv.cluster import Cluster
    from sediment.actors.kv.names import KV_GROUP
    from sediment.actors.kv.types import Compact
    from sediment.actors.log.shell.names import raft_name

    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    cluster = Cluster.start(3, data_dir=os.path.join(base, "kv"), backend="ray",
                            compaction_interval=3600.0)
    out["start_seconds"] = time.perf_counter() - t0
    try:
        rt = cluster.rt
        leader = cluster.wait_ready()
        follower = next(n for n in cluster.nodes if n != leader)
        target = raft_name(KV_GROUP, leader)
        for kind in ("put", "range", "query"):
            for k in (1, 16):
                n = puts if kind == "put" else puts * 2
                done, seconds = rt.run(_drive, target, kind, n, k, keys, leader, node=leader,
                                       timeout=1200)
                out[f"{kind}/{k}"] = done / seconds
        lat = rt.run(_watch_latency, leader, follower, watch_events, node=follower,
                     timeout=1200)
        out["watch"] = {
            "events": lat["events"],
            "invoke_p50_ms": 1e3 * percentile(lat["from_invoke"], 50),
            "invoke_p99_ms": 1e3 * percentile(lat["from_invoke"], 99),
            "ack_p50_ms": 1e3 * percentile(lat["from_ack"], 50),
            "ack_p99_ms": 1e3 * percentile(lat["from_ack"], 99),
        }
        rt.run(_history_loader, target, history, keys, 100, node=leader, timeout=1200)
        out["compaction"] = _timed_compaction(cluster, Compact)
    finally:
        cluster.stop()
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
            reply = cluster.rt.call(raft_name(KV_GROUP, n), ("query", ("compaction",)),
                                    timeout=60)
            _, finished = reply[1] if reply[0] == "ok" else reply
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--puts", type=int, default=1000, help="puts per put row")
    ap.add_argument("--keys", type=int, default=2000)
    ap.add_argument("--watch-events", type=int, default=200)
    ap.add_argument("--history", type=int, default=20_000,
                    help="rows loaded before the compaction row")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args(argv)
    base = tempfile.mkdtemp(prefix="kv-bench-", dir=args.dir)
    t0 = time.perf_counter()
    try:
        raw = {sync: raw_insert_per_row(base, args.puts * 2, args.keys, sync)
               for sync in ("FULL", "NORMAL")}
        store = {sync: store_puts(base, args.puts * 2, args.keys, sync)
                 for sync in ("FULL", "NORMAL")}
        batch = raw_batch(base, args.history, args.keys)
        kv = cluster_rows(base, args.puts, args.keys, args.watch_events, args.history)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    elapsed = time.perf_counter() - t0
    comp = kv["compaction"]
    w = kv["watch"]
    print(f"# KV benchmark ({elapsed:.0f} s; 3-node cluster on local Ray started in "
          f"{kv['start_seconds']:.0f} s)\n")
    print("| row | Sediment | raw SQLite | ratio |")
    print("|---|---|---|---|")
    full = raw["FULL"]
    for k in (1, 16):
        print(f"| puts/s, {k} client(s), 3-node Ray (each put fsynced on a majority) | "
              f"{kv[f'put/{k}']:,.0f} | {full:,.0f} rows/s (insert + commit per row, "
              f"synchronous=FULL) | {kv[f'put/{k}'] / full:.3f}x |")
    for sync in ("FULL", "NORMAL"):
        print(f"| puts/s into one Store, synchronous={sync} (no raft, no Ray) | "
              f"{store[sync]:,.0f} | {raw[sync]:,.0f} rows/s (same synchronous) | "
              f"{store[sync] / raw[sync]:.2f}x |")
    for k in (1, 16):
        print(f"| range/s linearizable, {k} client(s) | {kv[f'range/{k}']:,.0f} | | |")
    for k in (1, 16):
        print(f"| range/s serializable, {k} client(s) | {kv[f'query/{k}']:,.0f} | | |")
    print(f"| watch delivery, from put invoke (p50 / p99) | {w['invoke_p50_ms']:.1f} / "
          f"{w['invoke_p99_ms']:.1f} ms | | |")
    print(f"| watch delivery, after put ack (p50 / p99) | {w['ack_p50_ms']:.1f} / "
          f"{w['ack_p99_ms']:.1f} ms | | |")
    print(f"| compaction rows/s ({comp['rows']:,} superseded rows, slowest of 3 nodes) | "
          f"{comp['rows_per_s']:,.0f} | {batch['insert_rows_per_s']:,.0f} rows/s inserted in "
          f"one txn | {comp['rows_per_s'] / batch['insert_rows_per_s']:.3f}x |")
    print(f"| compaction vs a raw UPDATE nulling the same rows | {comp['rows_per_s']:,.0f} | "
          f"{batch['update_rows_per_s']:,.0f} rows/s | "
          f"{comp['rows_per_s'] / batch['update_rows_per_s']:.3f}x |")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"raw_rows_per_s": raw, "store_puts_per_s": store, "raw_batch": batch,
             "cluster": kv, "elapsed_s": elapsed}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
