"""Block merge benchmark: the Spark path (RayDP) vs the in-process pyarrow path vs a plain
pyarrow baseline, at growing sizes.

For each size, four level-0-like source blocks are written (disjoint revision ranges, keys
drawn from a keyspace a quarter the size of the row count so later revisions supersede
earlier ones, ~5 % tombstones, 100-byte values), then merged three ways with the
compaction revision at three quarters of the history:
  spark      `spark_merge` on a Spark-on-Ray session (started once, warmed, its start time
             reported separately): verify the sources, range shuffle by key, window rules,
             streamed into the block writer.
  pyarrow    `merge_blocks` in this process: verify, concat, sort, compaction rules, write.
  baseline   plain pyarrow: read_table each source, concat, sort by (key, revision),
             write_table + fsync. No verification, no compaction rule: the floor of what a
             merge costs on this machine.
Rows/s and MB/s are of source rows and source bytes on disk.

Then, on the same Ray: the time from a level-0 block's creation (its AddBlocks committed)
to its first compaction (a merge replaced it in the index), on a 3-node block tier with
Pyroscope's default planner (L0: a job at 20 blocks or 36 s) under steady ingest: one
add every `--ttfc-interval` seconds of rows over every shard, for `--ttfc-seconds`.
Pyroscope publishes a median under 15 s for this; that figure is quoted, not run here.

Usage: python benchmarks/blocks_bench.py [--sizes-mb 64 256 1024 2048] [--skip-spark]
       [--executor-memory 2g] [--dir DIR] [--json PATH] [--ttfc-seconds 60]
       [--ttfc-interval 0.5] [--ttfc-only]
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

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from sediment.actors.blocks import block as blk  # noqa: E402
from sediment.actors.blocks.merge import merge_blocks  # noqa: E402
from sediment.actors.blocks.meta import BlockMeta, level0_block_id  # noqa: E402

ROW_BYTES = 130  # revision 8 + key ~14 + value 100 + flags 1, plus overhead
SOURCES = 4


def make_sources(root: str, rows: int, seed: int = 7) -> list[BlockMeta]:
    """Four sorted source blocks holding `rows` rows in all."""
    rng = np.random.default_rng(seed)
    keys = max(1, rows // 4)
    per = rows // SOURCES
    out = []
    for i in range(SOURCES):
        lo = i * per + 1
        revision = np.arange(lo, lo + per, dtype=np.int64)
        key_ids = rng.integers(0, keys, per)
        key = pa.array([b"key/%010d" % k for k in key_ids.tolist()], pa.binary())
        tomb = rng.random(per) < 0.05
        raw = rng.integers(0, 256, per * 100, dtype=np.uint8).tobytes()
        value = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(100), per, [None, pa.py_buffer(raw)]).cast(pa.binary())
        value = pa.array(np.where(tomb, None, value.to_numpy(zero_copy_only=False)),
                         pa.binary())
        flags = pa.array(tomb.astype(np.uint8), pa.uint8())
        table = pa.table([pa.array(revision), key, value, flags], schema=blk.SCHEMA)
        table = table.sort_by([("key", "ascending"), ("revision", "ascending")])
        out.append(blk.write_block(root, table, block_id=level0_block_id(0, lo, lo + per - 1),
                                   shard=0, level=0, created_at=0.0))
    return out


def baseline(root: str, sources: list[BlockMeta], out_path: str) -> float:
    t0 = time.perf_counter()
    tables = [pq.read_table(blk.block_path(root, s.shard, s.id)) for s in sources]
    table = pa.concat_tables(tables).sort_by([("key", "ascending"), ("revision", "ascending")])
    pq.write_table(table, out_path, compression=blk.COMPRESSION)
    fd = os.open(out_path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def time_to_first_compaction(base: str, seconds: float, interval: float) -> dict[str, Any]:
    """Feed level-0 blocks steadily into a Ray block tier; seconds from each block's
    AddBlocks commit until it left the live index (merged), polled every 0.2 s."""
    from sediment.actors.blocks.shell.cluster import BlocksCluster

    cluster = BlocksCluster.start(3, data_dir=os.path.join(base, "ttfc"), backend="ray")
    try:
        cluster.wait_ready(timeout=300)
        client = cluster.client(timeout=60)
        created: dict[str, float] = {}
        merged: dict[str, float] = {}
        revision, t_start = 0, time.monotonic()
        next_add = t_start
        drain_until = t_start + seconds + 120  # let the last batches reach a job
        while time.monotonic() < drain_until and (len(merged) < len(created) or not created):
            now = time.monotonic()
            if now - t_start < seconds and now >= next_add:
                rows = []
                for _ in range(64):
                    revision += 1
                    rows.append(blk.Row(revision, f"key-{(revision * 7919) % 4096:05d}".encode(),
                                        b"v" * 100))
                result = client.add_level0(rows)
                stamp = time.monotonic()
                for block_id in result.added:
                    created[block_id] = stamp
                next_add += interval
            live = {b.id for b in client.blocks()}
            stamp = time.monotonic()
            for block_id in created:
                if block_id not in merged and block_id not in live:
                    merged[block_id] = stamp
            time.sleep(0.2)
        waits = sorted(merged[b] - created[b] for b in merged)
        return {"blocks": len(created), "merged": len(merged), "waits_s": waits,
                "ingest_s": seconds, "interval_s": interval}
    finally:
        cluster.stop()


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - t0, result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes-mb", type=int, nargs="+", default=[64, 256, 1024, 2048])
    ap.add_argument("--skip-spark", action="store_true")
    ap.add_argument("--executor-memory", default="2g")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--ttfc-seconds", type=float, default=60.0)
    ap.add_argument("--ttfc-interval", type=float, default=0.5)
    ap.add_argument("--ttfc-only", action="store_true",
                    help="only the time-to-first-compaction part")
    args = ap.parse_args(argv)
    base = tempfile.mkdtemp(prefix="blocks-bench-", dir=args.dir)
    spark: Any = None
    results: list[dict[str, Any]] = []
    started: dict[str, float] = {}
    ttfc: dict[str, Any] = {}
    try:
        import ray

        t0 = time.perf_counter()
        ray.init(logging_level="ERROR", log_to_driver=False)
        started["ray_init_s"] = time.perf_counter() - t0
        ttfc = time_to_first_compaction(base, args.ttfc_seconds, args.ttfc_interval)
        print(f"  time to first compaction done: {ttfc['merged']}/{ttfc['blocks']} blocks",
              file=sys.stderr)
        if not args.skip_spark and not args.ttfc_only:
            from sediment.actors.spark.merge_job import spark_merge
            from sediment.actors.spark.session import SparkSettings, spark_session

            t0 = time.perf_counter()
            spark = spark_session(SparkSettings(executor_memory=args.executor_memory,
                                                driver_memory=args.executor_memory))
            started["spark_start_s"] = time.perf_counter() - t0
            warm_root = os.path.join(base, "warm")
            warm = make_sources(warm_root, 40_000)
            t0 = time.perf_counter()
            spark_merge(spark, warm_root, warm, block_id="warm", level=1,
                        compaction_revision=30_000, created_at=0.0)
            started["first_job_s"] = time.perf_counter() - t0
        for size in [] if args.ttfc_only else args.sizes_mb:
            rows = size * 1_000_000 // ROW_BYTES // SOURCES * SOURCES
            root = os.path.join(base, f"s{size}")
            t0 = time.perf_counter()
            sources = make_sources(root, rows)
            gen = time.perf_counter() - t0
            src_bytes = sum(s.size_bytes for s in sources)
            c = rows * 3 // 4
            row: dict[str, Any] = {"size_mb": size, "rows": rows, "source_bytes": src_bytes,
                                   "generate_s": gen}
            row["baseline_s"] = baseline(root, sources, os.path.join(root, "baseline.parquet"))
            row["pyarrow_s"], out = timed(merge_blocks, root, sources, block_id="merged",
                                          level=1, compaction_revision=c, created_at=0.0)
            row["output_rows"] = out.row_count
            if spark is not None:  # the same block again: the files must be identical
                blk.delete_block_file(root, out.shard, out.id)
                row["spark_s"], sout = timed(spark_merge, spark, root, sources,
                                             block_id="merged", level=1,
                                             compaction_revision=c, created_at=0.0)
                row["same_output"] = sout.checksum == out.checksum
            results.append(row)
            shutil.rmtree(root, ignore_errors=True)
            print(f"  {size} MB done: {json.dumps(row)}", file=sys.stderr)
    finally:
        if spark is not None:
            from sediment.actors.spark.session import stop_spark

            stop_spark()
        shutil.rmtree(base, ignore_errors=True)

    print("# block merge benchmark\n")
    if started and "spark_start_s" in started:
        print(f"Spark on Ray: ray.init {started['ray_init_s']:.1f} s, Spark start "
              f"{started['spark_start_s']:.1f} s, first (warm-up) job "
              f"{started['first_job_s']:.1f} s; not in the rows below.\n")
    if results:
        print("| source size | rows | baseline (plain pyarrow) | pyarrow merge | Spark merge "
              "(RayDP) | pyarrow / baseline | Spark / baseline | same output |")
        print("|---|---|---|---|---|---|---|---|")
    for r in results:
        mb = r["source_bytes"] / 1e6

        def rate(seconds: float, r: dict[str, Any] = r, mb: float = mb) -> str:
            return f"{r['rows'] / seconds:,.0f} rows/s ({mb / seconds:.0f} MB/s, {seconds:.1f} s)"

        spark_cell = rate(r["spark_s"]) if "spark_s" in r else "-"
        spark_ratio = f"{r['baseline_s'] / r['spark_s']:.2f}x" if "spark_s" in r else "-"
        print(f"| {mb:,.0f} MB on disk ({r['size_mb']} MB raw) | {r['rows']:,} | "
              f"{rate(r['baseline_s'])} | {rate(r['pyarrow_s'])} | {spark_cell} | "
              f"{r['baseline_s'] / r['pyarrow_s']:.2f}x | {spark_ratio} | "
              f"{r.get('same_output', '-')} |")
    waits = ttfc.get("waits_s") or []
    if waits:
        print(f"\nTime from a level-0 block's creation to its first compaction (3-node block "
              f"tier on Ray, Pyroscope's default L0 trigger of 20 blocks / 36 s, one add "
              f"over all shards every {ttfc['interval_s']:g} s for {ttfc['ingest_s']:g} s):\n")
        print("| blocks created | merged | median | p90 | max | Pyroscope (published) |")
        print("|---|---|---|---|---|---|")
        print(f"| {ttfc['blocks']} | {ttfc['merged']} | {percentile(waits, 0.5):.1f} s | "
              f"{percentile(waits, 0.9):.1f} s | {waits[-1]:.1f} s | median < 15 s |")
    if args.json:
        Path(args.json).write_text(json.dumps({"started": started, "rows": results,
                                               "time_to_first_compaction": ttfc}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
