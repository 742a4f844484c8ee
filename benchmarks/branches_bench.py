"""Branch tier benchmark: lakeFS issue #2092's workload, and the metarange merge in
process against the same merge on Spark (RayDP), with the crossover measured.

lakeFS #2092: listing a branch gets slow when its staging area holds many deletes,
because every listing merges them with the committed data again. Here:

1. A repository whose main branch commits a metarange of `--entries` (1,000,000)
   entries: `data/part-*` and, sorted after them, `--deletes` (100,000) under `tmp/`.
   Branch `dev` from main, then every `tmp/` entry deleted on `dev` through the API
   (staged tombstones). Branch `dev-spark` gets the same deletes.
2. Latency on `dev` before and after its staging compaction (in-process merge): `get`
   of a deleted and of a live path, the first page (1,000) of `ls` under `tmp/` (all
   deleted), under `data/`, and from the root. Medians and p95 over repeats.
3. The compaction of `dev` with the in-process merge and of `dev-spark` with the merge
   on Spark: whole compactions through the API, and the metarange they write must be
   the same (same id: same bytes).
4. The crossover: the merge alone (`MetaRangeStore.apply`, caches dropped first) on
   growing change sets over the same base, in process and on Spark, each in its own
   copy of the block store (files are content-addressed: a second writer would find
   them written), `--repeats` times, the two alternating; medians. Read = the entries
   of the base ranges the changes fall in (`span_merge.base_read`); work = read +
   changes. The crossover is taken over the read-heavy rows (one change per ten
   entries) in entries read: what `span_merge.spark_pays` compares with its threshold.

The KV is one `Store` (SQLite, no raft, synchronous=NORMAL): the figures are the branch
tier's own costs, not the replicated KV's. Spark runs on an embedded local Ray with the
block compaction service's session settings (`SparkSettings`: one executor, one core,
by default); its start and a warm-up job are reported apart from the rows.

Usage: python benchmarks/branches_bench.py [--entries 1000000] [--deletes 100000]
       [--skip-spark] [--executor-cores 1] [--sweep-only] [--repeats 3] [--json PATH]
       [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("SEDIMENT_LOG_LEVEL", "error")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from sediment.actors.branches import span_merge as sm  # noqa: E402
from sediment.actors.branches.api import Branches  # noqa: E402
from sediment.actors.branches.entry import Entry, Record  # noqa: E402
from sediment.actors.branches.errors import ObjectNotFound  # noqa: E402
from sediment.actors.branches.metarange import (  # noqa: E402
    InProcessMerge,
    MergeBackend,
    MetaRangeStore,
)
from sediment.actors.branches.ports import StoreKv, SyncEnv  # noqa: E402
from sediment.actors.kv.store import Store  # noqa: E402

REPO = "bench"
PAGE = 1000
SWEEP = ((0.02, 10), (0.05, 10), (0.1, 10), (0.25, 10), (0.5, 10), (1.0, 10), (1.0, 2),
         (1.0, 1))
"""(fraction of the base, every n-th entry in it updated): work from ~2 % to ~2x the base."""


def entry(i: int) -> Entry:
    return Entry(f"s3://bucket/objects/{i:08x}", 1000 + i % 977, f"{i:032x}")


def paths(entries: int, deletes: int) -> tuple[list[str], list[str]]:
    live = [f"data/part-{i:08d}.parquet" for i in range(entries - deletes)]
    doomed = [f"tmp/part-{i:08d}.parquet" for i in range(deletes)]
    return live, doomed


def timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def latency(fn: Callable[[], Any], budget: float = 3.0, least: int = 3,
            most: int = 50) -> dict[str, float]:
    """Median and p95 (ms) of repeated calls: at least `least`, until `budget` s."""
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < most and (len(samples) < least
                                   or time.perf_counter() - start < budget):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return {"p50_ms": statistics.median(samples),
            "p95_ms": samples[min(len(samples) - 1, int(0.95 * len(samples)))],
            "n": len(samples)}


def lake_over(kv: Store, root: str, merge: MergeBackend) -> Branches:
    return Branches.over(StoreKv(kv), SyncEnv(), MetaRangeStore(root, merge=merge))


def probe(lake: Branches, branch: str, live: list[str], doomed: list[str]) -> dict[str, Any]:
    def get_missing() -> None:
        try:
            lake.get(REPO, branch, doomed[len(doomed) // 2])
        except ObjectNotFound:
            return
        raise AssertionError("a deleted path was found")

    def ls(prefix: str, want: int) -> Callable[[], None]:
        def run() -> None:
            page = lake.ls(REPO, branch, prefix=prefix, amount=PAGE)
            assert len(page.entries) == want, (prefix, len(page.entries))
        return run

    lake.tier.store.forget()
    return {
        "get deleted path": latency(get_missing),
        "get live path": latency(lambda: lake.get(REPO, branch, live[len(live) // 2])),
        "ls tmp/ (all deleted), first page": latency(ls("tmp/", 0)),
        "ls data/, first page": latency(ls("data/", PAGE)),
        "ls from the root, first page": latency(ls("", PAGE)),
    }


def start_spark(cores: int) -> tuple[Any, dict[str, float]]:
    import ray

    from sediment.actors.spark.session import SparkSettings, spark_session

    started: dict[str, float] = {}
    t0 = time.perf_counter()
    ray.init(logging_level="ERROR", log_to_driver=False)
    started["ray_init_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    spark = spark_session(SparkSettings(executor_cores=cores))
    started["spark_start_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    spark.sparkContext.parallelize(range(4), 2).map(lambda x: x).collect()
    started["first_job_s"] = time.perf_counter() - t0
    return spark, started


def stop_spark() -> None:
    import ray

    from sediment.actors.spark.session import stop_spark as stop

    stop()
    ray.shutdown()


def sweep_changes(live: list[str], fraction: float, every: int) -> list[Record]:
    upto = int(len(live) * fraction)
    return [(p, Entry(f"s3://bucket/rewritten/{i:08x}", 2000 + i % 331, f"new-{i:028x}"))
            for i, p in enumerate(live[:upto:every])]


def crossover(rows: list[dict[str, Any]], by: str = "read") -> dict[str, Any]:
    """The smallest size (`by`) at which Spark was faster, interpolated (log-log)
    between the last size it lost and the first it won; None if it never won."""
    ordered = sorted(rows, key=lambda r: r[by])
    for prev, cur in zip([None, *ordered], ordered, strict=False):
        if cur["spark_s"] < cur["in_process_s"]:
            if prev is None:
                return {"read": cur[by], "bracket": [None, cur[by]]}
            import math

            lo, hi = math.log(prev[by]), math.log(cur[by])
            a = math.log(prev["spark_s"] / prev["in_process_s"])
            b = math.log(cur["spark_s"] / cur["in_process_s"])
            at = lo + (hi - lo) * (a / (a - b)) if a != b else hi
            return {"read": int(math.exp(at)), "bracket": [prev[by], cur[by]]}
    return {"read": None, "bracket": [ordered[-1][by] if ordered else None, None]}


def commit_of_tree() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--deletes", type=int, default=100_000)
    ap.add_argument("--skip-spark", action="store_true")
    ap.add_argument("--executor-cores", type=int, default=1)
    ap.add_argument("--sweep-only", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    base = tempfile.mkdtemp(prefix="branches-bench-", dir=args.dir)
    out: dict[str, Any] = {"commit": commit_of_tree(), "entries": args.entries,
                           "deletes": args.deletes, "executor_cores": args.executor_cores}
    spark: Any = None
    try:
        kv = Store(os.path.join(base, "kv.db"), synchronous="NORMAL")
        here_root, spark_root = os.path.join(base, "here"), os.path.join(base, "spark")
        lake = lake_over(kv, here_root, InProcessMerge())
        live, doomed = paths(args.entries, args.deletes)
        lake.repo_create(REPO)
        records = [(p, entry(i)) for i, p in enumerate([*live, *doomed])]
        out["build_s"], (metarange, _) = timed(
            lake.tier.store.apply, REPO, lake.tier.store.empty(REPO), records)
        del records
        lake.commit(REPO, "main", "import", source_metarange=metarange)
        shutil.copytree(here_root, spark_root)
        log(f"base of {args.entries:,} entries built in {out['build_s']:.1f} s")
        if not args.skip_spark:
            spark, out["spark_started"] = start_spark(args.executor_cores)
            log(f"spark up: {out['spark_started']}")
        if not args.sweep_only:
            workload(out, kv, lake, spark, spark_root, live, doomed)
        out["sweep"] = sweep(lake.tier.store, spark, spark_root, metarange, live,
                             args.repeats)
        if out["sweep"] and spark is not None:
            out["crossover"] = crossover([r for r in out["sweep"] if r["every"] >= 10])
    finally:
        if spark is not None:
            stop_spark()
        shutil.rmtree(base, ignore_errors=True)
    report(out)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


def log(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def workload(out: dict[str, Any], kv: Store, lake: Branches, spark: Any, spark_root: str,
             live: list[str], doomed: list[str]) -> None:
    """#2092: deletes staged on two branches; latency before and after compaction; the
    compaction in process and on Spark."""
    from sediment.actors.branches.spark_merge import SparkMerge

    branches = ["dev"] + (["dev-spark"] if spark is not None else [])
    for b in branches:
        lake.branch_create(REPO, b, "main")
        seconds, _ = timed(lambda b=b: [lake.rm(REPO, b, p) for p in doomed])
        out.setdefault("deletes_per_s", []).append(len(doomed) / seconds)
        log(f"{len(doomed):,} deletes on {b} in {seconds:.1f} s")
    out["before"] = probe(lake, "dev", live, doomed)
    log(f"before: {out['before']}")
    seconds, done = timed(lake.compact, REPO, "dev")
    out["compaction_in_process"] = {"seconds": seconds, "metarange": done.metarange,
                                    "stats": vars_of(done.stats)}
    out["after"] = probe(lake, "dev", live, doomed)
    log(f"after: {out['after']}")
    if spark is not None:
        other = lake_over(kv, spark_root, SparkMerge(lambda: spark))
        seconds, done = timed(other.compact, REPO, "dev-spark")
        out["compaction_spark"] = {"seconds": seconds, "metarange": done.metarange,
                                   "stats": vars_of(done.stats)}
        out["same_metarange"] = done.metarange == out["compaction_in_process"]["metarange"]
        log(f"spark compaction: {out['compaction_spark']}")


def vars_of(stats: Any) -> dict[str, int]:
    return {k: getattr(stats, k) for k in ("changes", "reused", "loaded", "written",
                                           "entries_written")}


def sweep(store: MetaRangeStore, spark: Any, spark_root: str, metarange: str,
          live: list[str], repeats: int) -> list[dict[str, Any]]:
    from sediment.actors.branches.spark_merge import SparkMerge

    there = MetaRangeStore(spark_root, merge=SparkMerge(lambda: spark)) if spark else None
    rows = []
    for fraction, every in SWEEP:
        changes = sweep_changes(live, fraction, every)
        base = store.ranges(REPO, metarange)
        read = sm.base_read(base, [p for p, _ in changes])
        work = read + len(changes)
        row: dict[str, Any] = {"fraction": fraction, "every": every, "changes": len(changes),
                               "read": read, "work": work, "in_process_runs": [],
                               "spark_runs": []}
        for _ in range(repeats):
            store.forget()
            seconds, (mine, _) = timed(store.apply, REPO, metarange, changes)
            row["in_process_runs"].append(seconds)
            if there is not None:
                there.forget()
                seconds, (theirs, _) = timed(there.apply, REPO, metarange, changes)
                row["spark_runs"].append(seconds)
                row["same_metarange"] = row.get("same_metarange", True) and theirs == mine
        row["in_process_s"] = statistics.median(row["in_process_runs"])
        if row["spark_runs"]:
            row["spark_s"] = statistics.median(row["spark_runs"])
        rows.append(row)
        log(f"sweep: {row}")
    return rows


def report(out: dict[str, Any]) -> None:
    print(f"# branch tier benchmark (commit {out['commit']})\n")
    if "before" in out:
        print(f"lakeFS #2092: {out['entries']:,} committed entries, {out['deletes']:,} "
              f"uncommitted deletes under `tmp/` (staged through the API at "
              f"{min(out['deletes_per_s']):,.0f}-{max(out['deletes_per_s']):,.0f} deletes/s)."
              "\n")
        print("| operation | before compaction p50 (p95) | after compaction p50 (p95) | "
              "before / after |")
        print("|---|---:|---:|---:|")
        for name, before in out["before"].items():
            after = out["after"][name]
            print(f"| {name} | {before['p50_ms']:,.1f} ms ({before['p95_ms']:,.1f}) | "
                  f"{after['p50_ms']:,.1f} ms ({after['p95_ms']:,.1f}) | "
                  f"{before['p50_ms'] / after['p50_ms']:,.1f}x |")
        c = out["compaction_in_process"]
        print(f"\nCompaction of `dev`: in process {c['seconds']:.2f} s "
              f"({c['stats']['changes'] / c['seconds']:,.0f} changes/s; {c['stats']})")
        if "compaction_spark" in out:
            s = out["compaction_spark"]
            print(f"Compaction of `dev-spark` on Spark: {s['seconds']:.2f} s "
                  f"({s['stats']['changes'] / s['seconds']:,.0f} changes/s); "
                  f"Spark / in process {s['seconds'] / c['seconds']:.2f}x; same metarange: "
                  f"{out['same_metarange']}")
    if "spark_started" in out:
        st = out["spark_started"]
        print(f"\nSpark on Ray ({out['executor_cores']} executor core(s)): ray.init "
              f"{st['ray_init_s']:.1f} s, Spark start {st['spark_start_s']:.1f} s, first job "
              f"{st['first_job_s']:.1f} s; not in the figures.")
    if out.get("sweep"):
        print("\nThe merge alone (`MetaRangeStore.apply`, caches dropped), same inputs:\n")
        print("| changes | base entries read | work | in process | Spark | "
              "Spark / in process | same metarange |")
        print("|---:|---:|---:|---:|---:|---:|---|")
        for r in out["sweep"]:
            rate = f"{r['in_process_s']:.2f} s ({r['work'] / r['in_process_s']:,.0f}/s)"
            spark = (f"{r['spark_s']:.2f} s ({r['work'] / r['spark_s']:,.0f}/s)"
                     if "spark_s" in r else "-")
            ratio = f"{r['spark_s'] / r['in_process_s']:.2f}x" if "spark_s" in r else "-"
            print(f"| {r['changes']:,} | {r['read']:,} | {r['work']:,} | {rate} | {spark} | "
                  f"{ratio} | "
                  f"{r.get('same_metarange', '-')} |")
        print("\n(work/s: entries of work per second; runs in the JSON file)")
    if "crossover" in out:
        x = out["crossover"]
        lo, hi = (f"{v:,}" if v is not None else "-" for v in x["bracket"])
        print(f"\nCrossover (read-heavy merges): {x['read']:,} base entries read (measured "
              f"between {lo} and {hi})" if x["read"] is not None
              else f"\nCrossover: none up to {lo} base entries read")


if __name__ == "__main__":
    raise SystemExit(main())
