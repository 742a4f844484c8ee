"""Catalog benchmark (issue 17): the catalog's update log before and after compaction,
and transactions/s of the tables tier on Ray beside the KV's puts/s, in one run.

  log size, load    10,000 DDL changes (columns added and dropped, indexes created and
                    dropped on 20 tables) executed into one catalog log; then the log's
                    entries and its stored bytes (the metastore's raft snapshot of it),
                    and the time a starting metastore member takes to load it (the
                    machine's `restore`: decode and replay every update on the snapshot),
                    before compaction, after compacting all but the last 100 versions,
                    and after compacting to the latest. Pure Python, no Ray.
  tx/s, puts/s      a 3-node tables cluster on Ray (one zone of 8 partitions, 3 replicas)
                    and a 3-node KV on Ray, one after the other in the same run. Tables:
                    a transaction is begin, one upsert (one partition) or two upserts
                    (two partitions), commit, each fsynced through raft. KV: one put per
                    proposal. 1 client (the Python API from the driver) and 8 client
                    processes on one node (inside the runtime, as kv_bench's loader).
                    The low watermark is Ignite's default (`--lwm test`: the tests'
                    0.3 s interval).

Usage: python benchmarks/catalog_bench.py [--ddl 10000] [--txs 160] [--puts 1500]
       [--lwm default|test] [--no-ray] [--dir DIR] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("SEDIMENT_LOG_LEVEL", "error")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from sediment.actors.catalog import catalog_log, codec, ddl  # noqa: E402
from sediment.actors.catalog.descriptors import Column  # noqa: E402
from sediment.actors.catalog.hlc import hts  # noqa: E402
from sediment.actors.catalog.machine import CatalogMachine  # noqa: E402
from sediment.actors.log.shell.protocol import Done, Propose
from sediment.actors.tables.shell import node_protocol as tn

TABLES = 20
KEEP = 100  # versions kept by the partial compaction
VALUE = b"x" * 100
LOAD_ROUNDS = 3


# -- the catalog log ----------------------------------------------------------------------


def _change(i: int) -> ddl.DdlCommand:
    """The i-th DDL change: per table, add a column, index it, drop the index, drop the
    column, so the latest catalog stays small while the log grows."""
    table, step, n = f"T{(i // 4) % TABLES}", i % 4, i // (4 * TABLES)
    if step == 0:
        return ddl.AddColumn(table, Column(f"c{n}", "int"))
    if step == 1:
        return ddl.CreateIndex(f"{table}_c{n}", table, (f"c{n}",))
    if step == 2:
        return ddl.DropIndex(f"{table}_c{n}")
    return ddl.DropColumn(table, f"c{n}")


def build_log(changes: int) -> tuple[catalog_log.CatalogLog, float]:
    """A log with a zone, TABLES tables and `changes` more versions; seconds to build."""
    log = catalog_log.initial()
    t = 1_000
    log, _ = catalog_log.execute(log, [ddl.CreateZone("Z", 8, 3)], hts(t), 0)
    for k in range(TABLES):
        t += 1
        log, _ = catalog_log.execute(log, [ddl.CreateTable(
            f"T{k}", "Z", (Column("k", "int", False), Column("v", "int")), ("k",))], hts(t), 0)
    t0 = time.perf_counter()
    for i in range(changes):
        t += 1
        log, _ = catalog_log.execute(log, [_change(i)], hts(t), 0)
    return log, time.perf_counter() - t0


def _load_seconds(data: bytes) -> float:
    """Best of LOAD_ROUNDS: a fresh metastore machine restoring the stored log."""
    best = float("inf")
    for _ in range(LOAD_ROUNDS):
        machine = CatalogMachine()
        t0 = time.perf_counter()
        machine.restore(data, 1, lambda _i: None)
        best = min(best, time.perf_counter() - t0)
    return best


def _measure(log: catalog_log.CatalogLog) -> dict[str, Any]:
    data = codec.encode_log(log)
    return {"earliest_version": log.earliest_version, "latest_version": log.latest_version,
            "entries": catalog_log.log_size(log), "bytes": len(data),
            "load_seconds": _load_seconds(data)}


def catalog_rows(changes: int) -> dict[str, Any]:
    log, build = build_log(changes)
    before = _measure(log)
    t0 = time.perf_counter()
    partial, _ = catalog_log.save_snapshot(log, log.latest_version - KEEP)
    partial_s = time.perf_counter() - t0
    full, _ = catalog_log.save_snapshot(log, log.latest_version)
    # the latest catalog is the same whichever way it is loaded
    assert codec.decode_log(codec.encode_log(full)).latest == log.latest
    return {"changes": changes, "build_seconds": build, "before": before,
            "after_keep": {**_measure(partial), "kept": KEEP,
                           "compaction_seconds": partial_s},
            "after_all": _measure(full)}


# -- the clusters on Ray (client processes run inside the runtime) -------------------------


async def _tx_client(ctx: Any, target: str, n: int, writes: int, base: int,
                     report_to: Any) -> None:
    node = await ctx.whereis(target)
    ctx.send(report_to, "ready")
    await ctx.receive(lambda m: m == "go")
    committed = 0
    for i in range(n):
        began = await ctx.call(node, tn.Begin(), timeout=60)
        if not isinstance(began, tn.Began):
            raise RuntimeError(f"begin failed: {began!r}")
        for w in range(writes):
            key = (base + i * writes + w) % 4096
            reply = await ctx.call(node, tn.Write(began.tx_id, "T", {"k": key, "v": i}),
                                   timeout=60)
            if not isinstance(reply, tn.Written):
                raise RuntimeError(f"write failed: {reply!r}")
        ended = await ctx.call(node, tn.Commit(began.tx_id), timeout=60)
        committed += bool(isinstance(ended, tn.Ended) and ended.committed)
    ctx.send(report_to, ("done", committed))


async def _put_client(ctx: Any, target: str, n: int, base: int, report_to: Any) -> None:
    from sediment.actors.kv.types import Put, Txn

    server = await ctx.whereis(target)
    ctx.send(report_to, "ready")
    await ctx.receive(lambda m: m == "go")
    for i in range(n):
        key = b"k%06d" % ((base + i) % 4096)
        reply = await ctx.call(server, Propose(Txn((), (Put(key, VALUE),), ())), timeout=60)
        if not isinstance(reply, Done):
            raise RuntimeError(f"put failed: {reply!r}")
    ctx.send(report_to, ("done", n))


async def _drive(ctx: Any, node: str, clients: list[tuple[Any, ...]]) -> tuple[int, float]:
    """Start the clients on `node`, wait until all are up, then time them to the end."""
    pids = [await ctx.spawn(fn, *args, ctx.self(), node=node) for fn, *args in clients]
    for _ in pids:
        await ctx.receive(lambda m: m == "ready", timeout=600)
    t0 = time.perf_counter()
    for pid in pids:
        ctx.send(pid, "go")
    done = 0
    for _ in pids:
        msg = await ctx.receive(lambda m: isinstance(m, tuple) and m[0] == "done", timeout=600)
        done += msg[1]
    return done, time.perf_counter() - t0


def _progress(what: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


def tables_rows(base: str, txs: int, lwm_name: str, backend: str = "ray") -> dict[str, Any]:
    """`lwm_name`: "default" (Ignite's: the watermark moves every 5 minutes) or "test"
    (every 0.3 s, as the tests and scenarios run: each move is a GC proposal to every
    partition and a compaction iteration with its proposals and flushes). `backend`
    "sim" runs the same steps on the simulator (the test of this bench; its rates mean
    nothing)."""
    from sediment.actors.catalog.low_watermark import LowWatermarkConfig
    from sediment.actors.tables.names import table_node_name
    from sediment.wiring.tables import TEST_LWM, TablesCluster

    _ray_init(backend)
    t0 = time.perf_counter()
    _progress(f"tables: starting ({lwm_name} low watermark)")
    lwm = TEST_LWM if lwm_name == "test" else LowWatermarkConfig()
    c = TablesCluster.start(3, backend=backend, data_dir=os.path.join(base, "tables"), lwm=lwm)
    out: dict[str, Any] = {"start_seconds": time.perf_counter() - t0}
    try:
        c.rt.wait_warm(60)
        _progress("tables: ready")
        c.create_zone("Z", partitions=8, replicas=3)
        c.create_table("T", "Z", [("k", "int", False), ("v", "int")], ["k"])
        _progress("tables: zone and table")
        tx = c.begin(c.nodes[0])  # warm every partition's leader once
        for k in range(16):
            tx.insert("T", {"k": k, "v": 0})
        tx.commit()
        _progress("tables: warm")
        node = c.nodes[0]
        for writes in (1, 2):
            t0 = time.perf_counter()
            ok = 0
            for i in range(txs // 4):
                tx = c.begin(node)
                for w in range(writes):
                    tx.insert("T", {"k": (i * writes + w) % 4096, "v": i})
                ok += tx.commit()
            out[f"tx{writes}/1"] = ok / (time.perf_counter() - t0)
            _progress(f"tables: tx{writes}/1 {out[f'tx{writes}/1']:.1f}/s")
            per = txs // 8
            clients = [(_tx_client, table_node_name(node), per, writes, j * 512)
                       for j in range(8)]
            done, seconds = c.rt.run(_drive, node, clients, node=node, timeout=900)
            out[f"tx{writes}/8"] = done / seconds
            out[f"tx{writes}/8_committed"] = done
            _progress(f"tables: tx{writes}/8 {out[f'tx{writes}/8']:.1f}/s")
        out["partitions"] = 8
        out["lwm"] = lwm_name
    finally:
        c.stop()
        _ray_shutdown(backend)
    return out


def _ray_init(backend: str) -> None:
    if backend == "ray":
        import ray

        ray.init(include_dashboard=False, log_to_driver=False)


def _ray_shutdown(backend: str) -> None:
    if backend == "ray":
        import ray

        ray.shutdown()


def kv_rows(base: str, puts: int, backend: str = "ray") -> dict[str, Any]:
    from sediment.actors.kv.names import KV_GROUP
    from sediment.actors.log.shell.names import raft_name
    from sediment.wiring.cluster import Cluster

    _ray_init(backend)
    cluster = Cluster.start(3, data_dir=os.path.join(base, "kv"), backend=backend,
                            compaction_interval=3600.0)
    leader = cluster.wait_ready()
    cluster.rt.wait_warm(60)
    out: dict[str, Any] = {}
    try:
        client = cluster.client()
        client.put(b"warm", VALUE)
        n = puts // 4
        t0 = time.perf_counter()
        for i in range(n):
            client.put(b"k%06d" % (i % 4096), VALUE)
        out["put/1"] = n / (time.perf_counter() - t0)
        clients = [(_put_client, raft_name(KV_GROUP, leader), puts // 8, j * 512)
                   for j in range(8)]
        done, seconds = cluster.rt.run(_drive, leader, clients, node=leader, timeout=900)
        out["put/8"] = done / seconds
        out["put/8_done"] = done
        _progress(f"kv: {out['put/1']:.0f} and {out['put/8']:.0f} puts/s")
    finally:
        cluster.stop()
        _ray_shutdown(backend)
    return out


# -- main ---------------------------------------------------------------------------------


def print_tables(cat: dict[str, Any], tables: dict[str, Any] | None,
                 kv: dict[str, Any] | None) -> None:
    rows = (("before compaction", cat["before"]),
            (f"after compaction, last {KEEP} versions kept", cat["after_keep"]),
            ("after compaction to the latest version", cat["after_all"]))
    b = cat["before"]
    print(f"| catalog log, {cat['changes']:,} DDL changes | versions | entries | bytes "
          "| load at start | load vs before |")
    print("|---|---|---:|---:|---:|---:|")
    for label, r in rows:
        print(f"| {label} | {r['earliest_version']}-{r['latest_version']} | "
              f"{r['entries']:,} | {r['bytes']:,} | {r['load_seconds'] * 1000:,.1f} ms | "
              f"{r['load_seconds'] / b['load_seconds']:.4f}x |")
    if tables is None or kv is None:
        return
    print("\n| row | tables tier, 3 nodes, 8 partitions (tx/s) | KV puts/s, 3 nodes | "
          "ratio |")
    print("|---|---:|---:|---:|")
    for k in (1, 8):
        for writes in (1, 2):
            what = "1 upsert" if writes == 1 else "2 upserts (2 partitions)"
            print(f"| {k} client{'s' if k > 1 else ''}, tx = begin + {what} + commit | "
                  f"{tables[f'tx{writes}/{k}']:,.1f} | {kv[f'put/{k}']:,.0f} | "
                  f"{tables[f'tx{writes}/{k}'] / kv[f'put/{k}']:.3f}x |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ddl", type=int, default=10_000, help="DDL changes in the log")
    ap.add_argument("--txs", type=int, default=160, help="transactions per 8-client row")
    ap.add_argument("--puts", type=int, default=1500, help="puts per 8-client row")
    ap.add_argument("--no-ray", action="store_true", help="the catalog log rows only")
    ap.add_argument("--lwm", choices=("default", "test"), default="default",
                    help="the tables cluster's low watermark config (default: Ignite's)")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args(argv)
    base = tempfile.mkdtemp(prefix="catalog-bench-", dir=args.dir)
    t0 = time.perf_counter()
    tables = kv = None
    try:
        cat = catalog_rows(args.ddl)
        if not args.no_ray:
            kv = kv_rows(base, args.puts)
            tables = tables_rows(base, args.txs, args.lwm)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    elapsed = time.perf_counter() - t0
    print(f"# Catalog benchmark ({elapsed:.0f} s; one run)\n")
    print_tables(cat, tables, kv)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"catalog": cat, "tables": tables, "kv": kv, "elapsed_s": elapsed}, indent=2,
            default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
