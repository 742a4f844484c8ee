"""The metarange merge on Spark (`branches/spark_merge.py`, the bridge's
"merge_ranges") on local-mode Spark.

The in-process merge (`apply.apply_changes`) is the specification: for seeded
workloads (a prefix mostly deleted, scattered puts, overwrites and tombstones of absent
paths, user metadata) and several span counts, the Spark job must write the same
metarange id and the same range files, byte for byte, with the same stats. A damaged
base range is the same typed error through Spark. The bridge process runs on `sim`
with the local session injected, and answers a "merge_ranges" call with the result and
a bad one with a typed refusal.

One local-mode SparkSession (two cores) per module; no Ray, no RayDP.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sediment.actors.branches import rangefile as rf
from sediment.actors.branches import span_merge as sm
from sediment.actors.branches.apply import SplitRule
from sediment.actors.branches.entry import Entry, Record
from sediment.actors.branches.errors import CorruptRange, MergeFailed
from sediment.actors.branches.metarange import InProcessMerge, MetaRangeStore
from sediment.actors.branches.span_merge import RangeMergeRequest, RangeMergeResult
from sediment.actors.branches.spark_merge import SparkMerge, spark_apply, spark_run_all
from sediment.actors.spark.session import SparkSettings, spark_configs
from sediment.actors.spark.shell.bridge import (
    BRIDGE_NAME,
    BadBridgeRequest,
    merge_ranges_via_bridge,
    run_inline,
    spark_bridge,
)
from sediment.actors.spark.shell.bridge_protocol import JobFailed, MergeRanges, Stop, Stopped
from sediment.runtime import api
from sediment.runtime.common_calls import Status
from sediment.runtime.process import Process

pytestmark = pytest.mark.slow

R = "repo1"
RULE = SplitRule(min_entries=16, max_entries=256, raggedness=64)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """A local-mode session with the production settings (JDK 17 options, quiet logs,
    Python workers on this interpreter, as `session.spark_session` sets them)."""
    from pyspark.sql import SparkSession

    before = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = SparkSession.builder.master("local[2]").appName("sediment-test-range-merge")
    for key, value in spark_configs(SparkSettings(shuffle_partitions=2)).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    if before is None:
        os.environ.pop("PYSPARK_PYTHON", None)
    else:
        os.environ["PYSPARK_PYTHON"] = before


def e(tag: str, meta: int = 0) -> Entry:
    return Entry(f"s3://b/{tag}", len(tag) * 7, f"sum-{tag}",
                 tuple((f"key-{i}", f"välue {i}") for i in range(meta)))


def workload(seed: int) -> tuple[dict[str, Entry], list[Record]]:
    rng = random.Random(seed)
    content = {f"{d}/part-{i:05d}.parquet": e(f"{d}{i}", i % 3) for d in ("logs", "raw", "tmp")
               for i in range(rng.randrange(1500, 3000))}
    changes: dict[str, Entry | None] = {}
    for p in content:
        if p.startswith("tmp/") and rng.random() < 0.95:
            changes[p] = None
    for _ in range(rng.randrange(100, 800)):
        p = f"{rng.choice(['logs', 'raw', 'new', 'zzz'])}/part-{rng.randrange(4000):05d}.parquet"
        changes[p] = rng.choice([None, e("put", 1), e(f"over{rng.randrange(5)}")])
    return content, sorted(changes.items())


def prepared(root: Path, seed: int) -> tuple[MetaRangeStore, str, list[Record]]:
    store = MetaRangeStore(str(root), RULE)
    content, changes = workload(seed)
    base, _ = store.apply(R, store.empty(R), sorted(content.items()))
    return store, base, changes


def files(root: Path) -> dict[str, bytes]:
    top = root / "branches" / R
    return {str(p.relative_to(top)): p.read_bytes() for p in top.rglob("*.parquet")}


@pytest.mark.parametrize(("seed", "spans"), [(0, None), (1, 2), (2, 5), (3, 16)])
def test_spark_writes_the_in_process_merge_byte_for_byte(spark: Any, tmp_path: Path,
                                                         seed: int, spans: int | None) -> None:
    here, base, changes = prepared(tmp_path / "here", seed)
    want, want_stats = InProcessMerge().apply(here, R, base, changes)
    there, base2, _ = prepared(tmp_path / "spark", seed)
    assert base2 == base
    got, stats = SparkMerge(lambda: spark, spans=spans).apply(there, R, base, changes)
    assert got == want and stats == want_stats
    theirs, mine = files(tmp_path / "here"), files(tmp_path / "spark")
    assert mine[f"metaranges/{got}.parquet"] == theirs[f"metaranges/{want}.parquet"]
    for r in there.ranges(R, got):
        assert mine[f"ranges/{r.id}.parquet"] == theirs[f"ranges/{r.id}.parquet"]
    assert not os.listdir(sm.scratch_dir(str(tmp_path / "spark"), R))


def test_a_damaged_base_range_is_the_same_typed_error_through_spark(
        spark: Any, tmp_path: Path) -> None:
    store, base, _ = prepared(tmp_path, 4)
    ranges = store.ranges(R, base)
    everything = [(p, None) for p, _ in store.iterate(R, base)]
    store.forget()
    victim = Path(rf.file_path(str(tmp_path), R, "range", ranges[3].id))
    victim.write_bytes(victim.read_bytes()[:-8] + b"garbage!")
    metaranges = set(rf.list_files(str(tmp_path), R, "metarange"))
    with pytest.raises(CorruptRange) as info:
        SparkMerge(lambda: spark, spans=4).apply(store, R, base, everything)
    assert info.value.range_id == ranges[3].id
    assert set(rf.list_files(str(tmp_path), R, "metarange")) == metaranges


def test_a_spark_failure_is_merge_failed(spark: Any, tmp_path: Path) -> None:
    store, base, changes = prepared(tmp_path, 5)
    path = sm.write_changes(str(tmp_path), R, changes)
    request = RangeMergeRequest(str(tmp_path), R, base, path, RULE, spans=2)

    def broken(tasks: Any) -> Any:
        return spark_run_all(spark)([*tasks, "not a task"])  # a task that raises in Spark

    with pytest.raises(MergeFailed, match="Spark failed"):
        sm.merge_by_spans(request, broken)
    assert spark_apply(spark, request).metarange_id == \
        InProcessMerge().apply(store, R, base, changes)[0]


async def ranges_client(ctx: Process, good: RangeMergeRequest) -> tuple[Any, ...]:
    refused = await ctx.call(BRIDGE_NAME, MergeRanges("not a request"), timeout=10)
    bad_path = await ctx.call(BRIDGE_NAME, MergeRanges(RangeMergeRequest(
        good.root, good.repo, good.base_id, "/etc/passwd", good.rule)), timeout=10)
    result = await merge_ranges_via_bridge(ctx, good, 600)
    status = await ctx.call(BRIDGE_NAME, Status(), timeout=10)
    stopped = await ctx.call(BRIDGE_NAME, Stop(), timeout=60)
    return refused, bad_path, result, status, stopped


def test_the_bridge_runs_metarange_merges(spark: Any, tmp_path: Path) -> None:
    store, base, changes = prepared(tmp_path / "spark", 6)
    here, _, _ = prepared(tmp_path / "here", 6)
    want = InProcessMerge().apply(here, R, base, changes)
    path = sm.write_changes(str(tmp_path / "spark"), R, changes)
    stops: list[int] = []
    with api.start("sim", seed=3, nodes=("n1",)) as rt:
        rt.spawn(spark_bridge, SparkSettings(), lambda _s: spark, lambda: stops.append(1), 2,
                 run_inline)
        refused, bad_path, result, status, stopped = rt.run(
            ranges_client, RangeMergeRequest(str(tmp_path / "spark"), R, base, path, RULE),
            timeout=600)
    assert isinstance(refused, JobFailed) and isinstance(refused.error, BadBridgeRequest)
    assert isinstance(bad_path, JobFailed) and "scratch" in str(bad_path.error)
    assert isinstance(result, RangeMergeResult)
    assert (result.metarange_id, result.stats) == want and result.spans >= 2
    assert status.completed == 1 and status.refused == 2
    assert stopped == Stopped() and stops == [1]
