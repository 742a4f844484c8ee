"""A metarange merge on real Spark (RayDP) whose executor is killed mid-merge.

The compactor's merger (`shell/merging.py`, `BridgeMerger`) sends a large merge to the
Spark bridge (`actors/spark/shell/bridge.py`), which runs it in the cluster's one Spark-on-Ray
session. Here a real RayDP executor actor is killed while that merge runs: RayDP does
not restart it, the bridge finds no live executor, cancels the job and answers
SparkMergeFailed, and the merger runs the same merge in process. The metarange is the
in-process merge's (the same id, so the same files) and a read of it answers exactly
the model's entries. A first merge through the same bridge starts Spark and is checked
the same way (the Spark path itself gives the in-process result).

Ray and Spark: run alone, under the machine's shared lock (Spark peaks near 6 GB and
takes 20-40 s to start).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sediment.actors.branches.apply import ApplyStats, SplitRule
from sediment.actors.branches.entry import Entry, Record
from sediment.actors.branches.metarange import InProcessMerge, MetaRangeStore
from sediment.actors.branches.shell.merging import BridgeMerger, SparkPolicy
from sediment.actors.branches.shell.process_env import ProcessEnv
from sediment.actors.spark.session import SparkSettings
from sediment.actors.spark.shell.bridge import BRIDGE_NAME, spark_bridge
from sediment.runtime import api
from sediment.runtime.common_calls import Status
from sediment.runtime.messages import Call
from sediment.runtime.process import Process

pytestmark = pytest.mark.slow

R = "repo1"
RULE = SplitRule(min_entries=256, max_entries=4096, raggedness=1024)
NODE = "control"
BASE_ENTRIES = 300_000
WAIT = 600.0  # bound on waiting for Spark (start, merges): not a timing claim


def entry(i: int, tag: str = "") -> Entry:
    return Entry(f"s3://bucket/{tag}{i}", i % 997, f"sum-{tag}{i}")


def changes_for(step: int, n: int) -> list[Record]:
    """Every `step`-th path deleted, every (step+1)-th overwritten (sorted, unique)."""
    out: dict[str, Entry | None] = {}
    for i in range(0, n, step):
        out[f"d/{i:07d}"] = None
    for i in range(1, n, step + 1):
        out[f"d/{i:07d}"] = entry(i, "v2-")
    return sorted(out.items())


def model(n: int, changes: list[Record]) -> list[tuple[str, Entry]]:
    content = {f"d/{i:07d}": entry(i) for i in range(n)}
    for path, e in changes:
        if e is None:
            content.pop(path, None)
        else:
            content[path] = e
    return sorted(content.items())


async def merge_then_answer(ctx: Process, root: str, base_id: str, step: int) -> None:
    """Merge through the bridge as the compactor does (every merge goes to Spark:
    threshold 0), then answer ("result",) with (metarange id, stats)."""
    store = MetaRangeStore(root, RULE)
    merger = BridgeMerger(ctx, ProcessEnv(ctx), SparkPolicy(threshold=0, timeout=WAIT))
    result = await merger.merge(store, R, base_id, changes_for(step, BASE_ENTRIES))
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call):
            ctx.reply(msg.from_, result)
            return


def _executors() -> list[Any]:
    """RayDP's Spark executor actors that are alive."""
    from ray.util.state import list_actors

    return [a for a in list_actors(filters=[("state", "=", "ALIVE")], limit=10_000)
            if "Executor" in (a.class_name or "")]


@pytest.fixture
def ray_rt(ray_cluster: Any) -> Iterator[Any]:
    runtime = api.start("ray", nodes=(NODE,), reap_delay=1.0, warm_pool=0)
    yield runtime
    runtime.shutdown()


@pytest.fixture
def bridge(ray_rt: Any) -> Iterator[Any]:
    """The Spark bridge; its session starts on the first merge. Health checked every
    second, so a lost executor is found soon after the kill."""
    pid = ray_rt.spawn(spark_bridge, SparkSettings(executor_memory="1g"), None, None, 2,
                       None, 900.0, 1.0, node=NODE)
    yield pid
    ray_rt.call(pid, ("stop",), timeout=120)


def _status(rt: Any) -> Any:
    return rt.call(BRIDGE_NAME, Status(), timeout=30)


def _merge(rt: Any, root: Path, base: str, step: int) -> Any:
    return rt.spawn(merge_then_answer, str(root), base, step, node=NODE)


def _result(rt: Any, pid: Any) -> tuple[str, ApplyStats]:
    got: tuple[str, ApplyStats] = rt.call(pid, ("result",), timeout=WAIT)
    return got


@pytest.mark.timeout(1200)
def test_a_spark_executor_killed_mid_merge_still_gives_the_in_process_metarange(
        ray_rt: Any, bridge: Any, tmp_path: Path) -> None:
    import ray

    here = MetaRangeStore(str(tmp_path / "here"), RULE)
    base, _ = here.apply(R, here.empty(R), [(f"d/{i:07d}", entry(i))
                                           for i in range(BASE_ENTRIES)])
    shutil.copytree(tmp_path / "here", tmp_path / "spark")  # the same content-addressed files
    spark_root = tmp_path / "spark"

    # 1. Spark starts and merges: the in-process merge's metarange
    warm = changes_for(7, BASE_ENTRIES)
    want_warm = InProcessMerge().apply(here, R, base, warm)
    assert _result(ray_rt, _merge(ray_rt, spark_root, base, 7)) == want_warm
    status = _status(ray_rt)
    assert (status.completed, status.failed) == (1, 0)  # it ran on Spark
    executors = _executors()
    assert executors, "RayDP started no executor actor"

    # 2. a second merge; its executor killed while the bridge runs it
    changes = changes_for(4, BASE_ENTRIES)
    want = InProcessMerge().apply(here, R, base, changes)
    pid = _merge(ray_rt, spark_root, base, 4)
    deadline = time.monotonic() + WAIT
    while _status(ray_rt).running is None:
        assert time.monotonic() < deadline, "the merge never reached Spark"
        time.sleep(0.1)
    victim = executors[0]
    ray.kill(ray.get_actor(victim.name, namespace=victim.ray_namespace))
    got = _result(ray_rt, pid)
    status = _status(ray_rt)
    # the kill landed mid-merge: the bridge failed the job, the merger merged in process
    assert (status.completed, status.failed) == (1, 1), status
    assert got == want
    reader = MetaRangeStore(str(spark_root), RULE)
    assert list(reader.iterate(R, got[0])) == model(BASE_ENTRIES, changes)
    assert {r.id for r in reader.ranges(R, got[0])} == {r.id for r in here.ranges(R, want[0])}
