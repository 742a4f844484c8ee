"""The compactor's merger (`shell/merging.py`) on `sim`: merges at or above the
threshold go to the Spark bridge process (the real `spark_bridge`, "merge_ranges"),
the rest run here; with no bridge, a refusing bridge or a failing Spark job the same
merge runs here; the tier's typed errors are raised, not retried. Either way the
metarange is the in-process merge's.

Spark itself is stood in for by `LocalSpark` (the three calls `spark_merge` makes:
parallelize, map, collect, run in this process); the real session is tested in
`test_spark_range_merge.py`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sediment.actors.branches import rangefile as rf
from sediment.actors.branches import span_merge as sm
from sediment.actors.branches.apply import ApplyStats, SplitRule
from sediment.actors.branches.entry import Entry, Record
from sediment.actors.branches.errors import CorruptRange
from sediment.actors.branches.metarange import InProcessMerge, MetaRangeStore
from sediment.actors.branches.shell.merging import BridgeMerger, SparkPolicy
from sediment.actors.branches.shell.process_env import ProcessEnv
from sediment.actors.spark.session import SparkSettings
from sediment.actors.spark.shell.bridge import BRIDGE_NAME, run_inline, spark_bridge
from sediment.actors.spark.shell.bridge_protocol import Stop
from sediment.runtime import api
from sediment.runtime.common_calls import Status
from sediment.runtime.process import Process

R = "repo1"
RULE = SplitRule(min_entries=4, max_entries=32, raggedness=8)


class _Rdd:
    def __init__(self, items: list[Any], fail: bool) -> None:
        self.items, self.fail = items, fail

    def map(self, fn: Callable[[Any], Any]) -> _Rdd:
        return _Rdd([fn(x) for x in self.items] if not self.fail else [], self.fail)

    def collect(self) -> list[Any]:
        if self.fail:
            raise RuntimeError("Job aborted: executor lost")
        return self.items


class _Context:
    defaultParallelism = 2  # noqa: N815 - Spark's name

    def __init__(self, owner: LocalSpark) -> None:
        self.owner = owner

    def setJobDescription(self, text: str) -> None:  # noqa: N802 - Spark's name
        pass

    def parallelize(self, items: list[Any], slices: int) -> _Rdd:
        self.owner.jobs.append(slices)
        return _Rdd(list(items), self.owner.fail)


class LocalSpark:
    """Stands in for a SparkSession: the job's tasks run here, in order."""

    def __init__(self, fail: bool = False) -> None:
        self.jobs: list[int] = []
        self.fail = fail
        self.sparkContext = _Context(self)  # noqa: N815 - Spark's name


def e(tag: str) -> Entry:
    return Entry(f"s3://b/{tag}", len(tag), tag)


def prepared(root: Path) -> tuple[MetaRangeStore, str, list[Record]]:
    store = MetaRangeStore(str(root), RULE)
    content = {f"d{d}/{i:04d}": e(f"{d}.{i}") for d in range(3) for i in range(200)}
    base, _ = store.apply(R, store.empty(R), sorted(content.items()))
    changes: list[Record] = sorted([(f"d1/{i:04d}", None) for i in range(0, 200, 2)]
                                   + [(f"d2/{i:04d}x", e("new")) for i in range(0, 200, 9)])
    return store, base, changes


def expected(tmp_path: Path) -> tuple[str, ApplyStats]:
    store, base, changes = prepared(tmp_path / "expected")
    return InProcessMerge().apply(store, R, base, changes)


def run_merge(tmp_path: Path, policy: SparkPolicy, spark: LocalSpark | None,
              max_queued: int = 2,
              prepare: Callable[[Path], tuple[MetaRangeStore, str, list[Record]]] = prepared,
              ) -> tuple[Any, dict[str, Any] | None, MetaRangeStore]:
    store, base, changes = prepare(tmp_path / "run")

    async def merging(ctx: Process) -> Any:
        merger = BridgeMerger(ctx, ProcessEnv(ctx), policy)
        try:
            result: Any = await merger.merge(store, R, base, changes)
        except CorruptRange as err:
            result = err
        status = None
        if spark is not None:
            status = await ctx.call(BRIDGE_NAME, Status(), timeout=10)
            await ctx.call(BRIDGE_NAME, Stop(), timeout=10)
        return result, status

    with api.start("sim", seed=1, nodes=("n1",)) as rt:
        if spark is not None:
            rt.spawn(spark_bridge, SparkSettings(), lambda _s: spark, lambda: None, max_queued,
                     run_inline)
        result, status = rt.run(merging, timeout=120)
    scratch = sm.scratch_dir(str(tmp_path / "run"), R)
    assert not os.path.isdir(scratch) or not os.listdir(scratch)  # no change file left
    return result, status and {"completed": status.completed, "failed": status.failed}, store


def work_of(tmp_path: Path) -> int:
    store, base, changes = prepared(tmp_path / "work")
    return sm.base_read(store.ranges(R, base), [p for p, _ in changes])


def test_a_merge_at_the_threshold_runs_on_the_bridge(tmp_path: Path) -> None:
    spark = LocalSpark()
    work = work_of(tmp_path)
    result, status, _ = run_merge(tmp_path, SparkPolicy(threshold=work), spark)
    assert result == expected(tmp_path)
    assert status == {"completed": 1, "failed": 0} and spark.jobs == [2]


def test_a_merge_below_the_threshold_runs_here(tmp_path: Path) -> None:
    spark = LocalSpark()
    result, status, _ = run_merge(tmp_path, SparkPolicy(threshold=work_of(tmp_path) + 1),
                                  spark)
    assert result == expected(tmp_path)
    assert status == {"completed": 0, "failed": 0} and spark.jobs == []
    result, status, _ = run_merge(tmp_path / "never", SparkPolicy(threshold=None), spark)
    assert result == expected(tmp_path) and spark.jobs == []


def mostly_changes(root: Path) -> tuple[MetaRangeStore, str, list[Record]]:
    """A merge of more changes than base entries: `spark_pays` says no at any threshold."""
    store = MetaRangeStore(str(root), RULE)
    base, _ = store.apply(R, store.empty(R), [(f"d/{i:04d}", e(str(i))) for i in range(10)])
    return store, base, [(f"d/{i:04d}", e(f"v{i}")) for i in range(40)]


def test_threshold_zero_sends_every_merge_to_the_bridge_whatever_its_shape(
        tmp_path: Path) -> None:
    store, base, changes = mostly_changes(tmp_path / "want")
    want = InProcessMerge().apply(store, R, base, changes)
    spark = LocalSpark()
    result, status, _ = run_merge(tmp_path / "one", SparkPolicy(threshold=1), spark,
                                  prepare=mostly_changes)
    assert result == want and status == {"completed": 0, "failed": 0}  # the ratio rule
    result, status, _ = run_merge(tmp_path / "zero", SparkPolicy(threshold=0), spark,
                                  prepare=mostly_changes)
    assert result == want and status == {"completed": 1, "failed": 0}


def test_without_a_bridge_the_merge_runs_here(tmp_path: Path) -> None:
    result, status, _ = run_merge(tmp_path, SparkPolicy(threshold=0), None)
    assert result == expected(tmp_path) and status is None


def test_a_failing_spark_job_falls_back_to_the_same_merge_here(tmp_path: Path) -> None:
    spark = LocalSpark(fail=True)
    result, status, _ = run_merge(tmp_path, SparkPolicy(threshold=0), spark)
    assert result == expected(tmp_path)
    assert status == {"completed": 0, "failed": 1} and spark.jobs == [2]


def test_a_corrupt_range_is_raised_not_merged_around(tmp_path: Path) -> None:
    store, base, _ = prepared(tmp_path / "run")
    victim = Path(rf.file_path(str(tmp_path / "run"), R, "range",
                               store.ranges(R, base)[len(store.ranges(R, base)) // 2].id))
    victim.write_bytes(victim.read_bytes()[:-4] + b"oops")
    spark = LocalSpark()
    result, status, _ = run_merge(tmp_path, SparkPolicy(threshold=0), spark)
    assert isinstance(result, CorruptRange)
    assert status == {"completed": 0, "failed": 1}  # the bridge's answer, typed


@pytest.mark.parametrize("bad", [{"threshold": -1}, {"threshold": True},
                                 {"threshold": 1.5}, {"timeout": 0}, {"timeout": float("inf")}])
def test_spark_policy_is_checked(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SparkPolicy(**bad)


def test_local_spark_stands_in_faithfully() -> None:
    spark = LocalSpark()
    rdd = spark.sparkContext.parallelize([1, 2], 2)
    assert rdd.map(lambda x: x * 10).collect() == [10, 20] and spark.jobs == [2]
