"""The Spark bridge's typed calls and replies on the simulator, without Spark: the
session factory hands out a stand-in that is never used, and the offload answers each
job itself (a finished merge, or a typed failure), so what is tested is the bridge's
protocol: `Merge` / `MergeRanges` / `Stop` / Status() and their answers, its queue
bound, its refusals and `merge_via_bridge`. The Spark-backed tests
(`test_spark_merge.py`, `test_spark_range_merge.py`) run real merges."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Callable
from typing import Any

import pytest

from sediment.actors.blocks.errors import MissingBlock
from sediment.actors.blocks.meta import BlockMeta
from sediment.actors.spark.session import SparkSettings
from sediment.actors.spark.shell import bridge as bridge_module
from sediment.actors.spark.shell.bridge import (
    BRIDGE_NAME,
    BadBridgeRequest,
    BridgeBusy,
    BridgeStatus,
    BridgeStopped,
    MergeRequest,
    merge_via_bridge,
    spark_bridge,
)
from sediment.actors.spark.shell.bridge_protocol import (
    JobFailed,
    Merge,
    Merged,
    MergeRanges,
    Stop,
    Stopped,
)
from sediment.runtime import api
from sediment.runtime.common_calls import Status
from sediment.runtime.process import Process

SOURCE = BlockMeta("S0-L1-a", 0, 1, 1, 2, b"a", b"b", 2, 10, 1.0)


def request(block_id: str) -> MergeRequest:
    return MergeRequest("/nowhere", (SOURCE,), block_id, 2, 0, 5.0)


def output(block_id: str) -> BlockMeta:
    return BlockMeta(block_id, 0, 2, 1, 2, b"a", b"b", 2, 10, 5.0)


class FakeJobs:
    """Stands in for Spark: `spark_merge` 'merges' to the output its request names, or
    fails as a missing source when the id says so; each job first holds the bridge's
    slot for `seconds` of virtual time (the process keeps serving meanwhile)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.requests: list[str] = []

    def spark_merge(self, spark: Any, root: str, sources: Any, *, block_id: str,
                    level: int, compaction_revision: int, created_at: float) -> BlockMeta:
        self.requests.append(block_id)
        if block_id.endswith("missing"):
            raise MissingBlock("S0-L1-gone", "/nowhere/S0-L1-gone")
        return output(block_id)

    async def offload(self, job: Callable[[], Any]) -> Any:
        await asyncio.sleep(self.seconds)
        return job()


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch) -> FakeJobs:
    fake = FakeJobs(5.0)
    monkeypatch.setattr(bridge_module, "spark_merge", fake.spark_merge)
    return fake


def _start(rt: Any, jobs: FakeJobs, max_queued: int) -> Any:
    return rt.spawn(spark_bridge, SparkSettings(), lambda _s: object(), lambda: None,
                    max_queued, jobs.offload)


async def busy_client(ctx: Process) -> tuple[Any, ...]:
    before = await ctx.call(BRIDGE_NAME, Status(), timeout=10)
    loop = asyncio.get_running_loop()
    first = loop.create_task(ctx.call(BRIDGE_NAME, Merge(request("S0-L2-x")), timeout=60))
    second = loop.create_task(ctx.call(BRIDGE_NAME, Merge(request("S0-L2-y")), timeout=60))
    await ctx.sleep(1.0)
    refused = await ctx.call(BRIDGE_NAME, Merge(request("S0-L2-z")), timeout=10)
    during = await ctx.call(BRIDGE_NAME, Status(), timeout=10)
    results = (await first, await second)
    failed: BaseException | None = None
    try:
        await merge_via_bridge(ctx, request("S0-L2-missing"), 60)
    except MissingBlock as err:
        failed = err
    merged = await merge_via_bridge(ctx, request("S0-L2-w"), 60)
    bad = [await ctx.call(BRIDGE_NAME, r, timeout=10)
           for r in (Merge("not a request"), MergeRanges("not one either"), ("frobnicate",))]
    stopped = await ctx.call(BRIDGE_NAME, Stop(), timeout=60)
    return before, refused, during, results, failed, merged, bad, stopped


def test_the_bridge_answers_typed_replies(jobs: FakeJobs) -> None:
    with api.start("sim", seed=3, nodes=("n1",)) as rt:
        pid = _start(rt, jobs, 1)
        before, refused, during, results, failed, merged, bad, stopped = rt.run(
            busy_client, timeout=120)
        assert rt.whereis(BRIDGE_NAME) is None
        assert rt.exit_reason(pid) == "normal"
    assert before == BridgeStatus("not started", None, 0, 0, 0, 0)
    assert isinstance(refused, JobFailed) and isinstance(refused.error, BridgeBusy)
    assert during == BridgeStatus("not started", "S0-L2-x", 1, 0, 0, 1)  # Spark: lazily
    assert results == (Merged(output("S0-L2-x")), Merged(output("S0-L2-y")))
    assert isinstance(failed, MissingBlock)
    assert merged == output("S0-L2-w")
    assert all(isinstance(b, JobFailed) and isinstance(b.error, BadBridgeRequest)
               for b in bad)
    assert stopped == Stopped()
    assert jobs.requests == ["S0-L2-x", "S0-L2-y", "S0-L2-missing", "S0-L2-w"]


async def stopping_client(ctx: Process) -> tuple[Any, ...]:
    loop = asyncio.get_running_loop()
    running = loop.create_task(ctx.call(BRIDGE_NAME, Merge(request("S0-L2-a")), timeout=60))
    queued = loop.create_task(ctx.call(BRIDGE_NAME, Merge(request("S0-L2-b")), timeout=60))
    await ctx.sleep(1.0)
    stopping = loop.create_task(ctx.call(BRIDGE_NAME, Stop(), timeout=60))
    await ctx.sleep(1.0)
    again = await ctx.call(BRIDGE_NAME, Stop(), timeout=10)
    late = await ctx.call(BRIDGE_NAME, Merge(request("S0-L2-c")), timeout=10)
    status = await ctx.call(BRIDGE_NAME, Status(), timeout=10)
    return await running, await queued, again, late, status, await stopping


def test_stop_refuses_queued_and_late_jobs_and_answers_the_running_one(
        jobs: FakeJobs) -> None:
    with api.start("sim", seed=5, nodes=("n1",)) as rt:
        _start(rt, jobs, 4)
        running, queued, again, late, status, stopped = rt.run(stopping_client, timeout=120)
    assert running == Merged(output("S0-L2-a"))
    for refused in (queued, again, late):
        assert isinstance(refused, JobFailed) and isinstance(refused.error, BridgeStopped)
    assert status == BridgeStatus("stopping", "S0-L2-a", 0, 0, 0, 2)
    assert stopped == Stopped()
    assert jobs.requests == ["S0-L2-a"]


@pytest.mark.parametrize("reply", [Merged(output("S0-L2-x")), JobFailed(BridgeBusy("x")),
                                   Stopped()])
def test_replies_pickle(reply: Any) -> None:
    back = pickle.loads(pickle.dumps(reply))
    assert type(back) is type(reply)
