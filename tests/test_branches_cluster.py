"""The branch tier on a 3-node KV cluster in the simulator: the Python API over the
replicated KV, the delete sensor and the compactor as supervised processes, the
compactor killed at each step (failpoints), a commit and a second compactor racing a
compaction held after its first step, and the KV leader killed mid-compaction. Every
history (the API's events and the compactor's, collected by a process) goes through
the branch checker."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sediment.actors.branches.api import Branches
from sediment.actors.branches.apply import SplitRule
from sediment.actors.branches.compactor import Compaction
from sediment.actors.branches.entry import Entry
from sediment.actors.branches.errors import CompactionConflict, CompactionThrottled
from sediment.actors.branches.history import Event, History
from sediment.actors.branches.sensor import SensorConfig
from sediment.actors.branches.shell.compactor import FAILPOINTS, CompactorConfig
from sediment.actors.branches.shell.names import COMPACTOR_NAME, SENSOR_NAME
from sediment.actors.branches.shell.protocol import Compact, Compacted, CompactFailed
from sediment.actors.branches.shell.recorder import CollectedEvents, TakeEvents, collector
from sediment.actors.branches.shell.service import start_branch_services
from sediment.actors.branches.tier import TierConfig
from sediment.runtime import api
from sediment.runtime.common_calls import Status
from sediment.runtime.messages import Call
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process
from sediment.scenarios.checkers.branch_reads import check_branch_reads
from sediment.wiring.cluster import Cluster

R = "repo1"
RULE = SplitRule(min_entries=2, max_entries=16, raggedness=4)


def e(tag: str) -> Entry:
    return Entry(f"s3://bucket/{tag}", len(tag), tag)


@dataclass
class Setup:
    rt: Any
    cluster: Cluster
    lake: Branches
    history: History
    collector: Pid
    root: str

    def events(self) -> list[Event]:
        collected = self.rt.call(self.collector, TakeEvents(), timeout=30)
        assert isinstance(collected, CollectedEvents) and collected.dropped == 0
        return [*self.history.events, *collected.events]

    def check(self) -> None:
        result = check_branch_reads(self.events())
        assert result.ok, result.report()

    def content(self, ref: str = "main") -> dict[str, str]:
        page = self.lake.ls(R, ref, amount=10_000)
        return {p: entry.checksum for p, entry in page.entries}

    def diff(self, branch: str = "main") -> list[tuple[str, str]]:
        return [(d.path, d.kind) for d in self.lake.diff(R, branch).diffs]


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    rt = api.start("sim", seed=11, nodes=("n1", "n2", "n3"))
    try:
        cluster = Cluster.start(runtime=rt, data_dir=str(tmp_path / "kv"), backend="sim")
        root = str(tmp_path / "blocks")
        history = History()
        config = TierConfig(compaction_interval=30.0)
        lake = Branches.connect(cluster, root, config=config, recorder=history, seed=5)
        lake.tier.store.rule = RULE
        coll = rt.spawn(collector, node="n1")
        start_branch_services(rt, SensorConfig(threshold=5),
                              CompactorConfig(cluster.nodes, root, config, RULE,
                                              poll_interval=2.0, recorder=coll, seed=7))
        lake.repo_create(R)
        yield Setup(rt, cluster, lake, history, coll, root)
    finally:
        rt.shutdown()


async def ask(ctx: Process, target: str, request: Any) -> None:
    """Call `target` and keep the answer (or the error) until asked for it."""
    try:
        answer: Any = await ctx.call(target, request, timeout=600)
    except Exception as err:  # the compactor died under the call
        answer = ("died", type(err).__name__)
    msg = await ctx.receive(lambda m: isinstance(m, Call))
    ctx.reply(msg.from_, answer)


def until(rt: Any, condition: Any, what: str, rounds: int = 600) -> None:
    for _ in range(rounds):
        if condition():
            return
        rt.sleep(0.1)
    raise AssertionError(f"never happened: {what}")


def seed_branch(s: Setup) -> None:
    for i in range(12):
        s.lake.put(R, "main", f"data/{i:02d}", e(f"v{i}"))
    s.lake.commit(R, "main", "base")
    for i in range(0, 12, 3):
        s.lake.rm(R, "main", f"data/{i:02d}")
    s.lake.put(R, "main", "data/new", e("n"))


def test_the_python_api_over_the_replicated_kv(setup: Setup) -> None:
    s = setup
    seed_branch(s)
    assert s.lake.repo_list() == [R]
    s.lake.branch_create(R, "dev", "main")
    assert sorted(s.lake.branch_list(R)) == ["dev", "main"]
    want = s.content()
    assert len(want) == 9 and s.diff()[0] == ("data/00", "removed")
    done = s.lake.compact(R, "main")
    assert isinstance(done, Compaction) and s.content() == want
    commit_id = s.lake.commit(R, "main", "second")
    assert s.content(commit_id) == want and s.lake.is_staging_empty(R, "main")
    assert [c.message for _, c in s.lake.log(R, "main")] == [
        "second", "base", "Repository created"]
    s.check()


def test_the_sensor_triggers_the_compactor_process(setup: Setup) -> None:
    s = setup
    seed_branch(s)  # 4 deletes: below the threshold of 5
    assert s.lake.branch(R, "main").compacted_metarange is None
    want = s.content()
    s.lake.rm(R, "main", "data/01")  # the fifth delete on this token
    want.pop("data/01")
    until(s.rt, lambda: s.lake.branch(R, "main").compacted_metarange is not None,
          "a sensor-triggered compaction")
    assert s.content() == want
    status = s.rt.call(SENSOR_NAME, Status(), timeout=10)
    assert status["queued"] == 1 and status["taken"] == 1
    assert s.rt.call(COMPACTOR_NAME, Status(), timeout=10)["counts"] == {"done": 1}
    # five more deletes within the interval: the claim (CompactionStartTime) refuses
    for i in (1, 2, 4, 5, 7):
        s.lake.rm(R, "main", f"data/{i:02d}x")
    until(s.rt, lambda: s.rt.call(COMPACTOR_NAME, Status(), timeout=10)["counts"].get(
        "CompactionThrottled") == 1, "a throttled second trigger")
    s.check()


@pytest.mark.parametrize("failpoint", FAILPOINTS)
def test_a_compactor_killed_at_each_step(setup: Setup, failpoint: str) -> None:
    s = setup
    seed_branch(s)
    want = (s.content(), s.diff())
    victim = s.rt.whereis(COMPACTOR_NAME)
    s.rt.arm_failpoint(victim, failpoint, "crash")
    helper = s.rt.spawn(ask, COMPACTOR_NAME, Compact(R, "main", True), node="n2")
    assert s.rt.call(helper, "answer", timeout=600)[0] == "died"
    until(s.rt, lambda: s.rt.whereis(COMPACTOR_NAME) not in (None, victim),
          "the supervisor restarting the compactor")
    b = s.lake.branch(R, "main")
    if failpoint.endswith("step3"):  # step 3 done, its tokens not dropped yet
        assert b.compacted_metarange is not None and not b.sealed_tokens
    else:  # killed before step 3: the sealed token is still read through
        assert b.compacted_metarange is None and len(b.sealed_tokens) == 1
    assert (s.content(), s.diff()) == want  # readable and equivalent
    s.lake.put(R, "main", "after", e("kill"))
    answer = s.rt.call(COMPACTOR_NAME, Compact(R, "main", True), timeout=600)
    assert isinstance(answer, Compacted), answer
    commit_id = s.lake.commit(R, "main", "after the kill")
    assert s.content(commit_id) == {**want[0], "after": "kill"}
    s.check()


def hold_after_step1(s: Setup) -> Pid:
    """Start a compaction in the compactor process and hold it after step 1; the
    helper process that waits for its answer."""
    victim = s.rt.whereis(COMPACTOR_NAME)
    s.rt.arm_failpoint(victim, FAILPOINTS[0], "pause")
    helper = s.rt.spawn(ask, COMPACTOR_NAME, Compact(R, "main", True), node="n2")
    until(s.rt, lambda: s.lake.branch(R, "main").compaction_start_time is not None,
          "compaction step 1")
    return helper


def test_a_commit_racing_a_held_compaction(setup: Setup) -> None:
    s = setup
    seed_branch(s)
    helper = hold_after_step1(s)
    s.lake.put(R, "main", "during", e("compaction"))
    commit_id = s.lake.commit(R, "main", "races the compaction")
    s.rt.release_failpoint(s.rt.whereis(COMPACTOR_NAME), FAILPOINTS[0])
    answer = s.rt.call(helper, "answer", timeout=600)
    assert isinstance(answer, CompactFailed) and isinstance(answer.error, CompactionConflict), \
        answer
    b = s.lake.branch(R, "main")
    assert b.commit_id == commit_id and b.compacted_metarange is None
    assert "during" in s.content(commit_id) and s.lake.is_staging_empty(R, "main")
    s.check()


def test_two_compactors_racing(setup: Setup) -> None:
    s = setup
    seed_branch(s)
    want = (s.content(), s.diff())
    helper = hold_after_step1(s)
    mine = s.lake.compact(R, "main", force=True)  # the driver's compaction wins
    s.rt.release_failpoint(s.rt.whereis(COMPACTOR_NAME), FAILPOINTS[0])
    answer = s.rt.call(helper, "answer", timeout=600)
    assert isinstance(answer, CompactFailed) and isinstance(answer.error, CompactionConflict), \
        answer
    assert s.lake.branch(R, "main").compacted_metarange == mine.metarange
    assert (s.content(), s.diff()) == want
    with pytest.raises(CompactionThrottled):
        s.lake.compact(R, "main", force=False)
    s.check()


def test_the_kv_leader_killed_mid_compaction(setup: Setup) -> None:
    """The pair runs beside the KV leader: killing the leader's raft member kills the
    compaction held after step 1 with it; the new leader's compactor redoes it once its
    claim expires (`recovery.py`), and the branch reads the same throughout."""
    s = setup
    seed_branch(s)
    want = (s.content(), s.diff())
    old = s.rt.whereis(COMPACTOR_NAME)
    helper = hold_after_step1(s)
    leader = s.cluster.leader()
    assert leader is not None and old is not None and old.node == leader
    s.cluster.node(leader).kill_process("raft:kv")
    status, result = s.rt.call(helper, "answer", timeout=600)
    assert (status, result) == ("died", "CallExit"), (status, result)
    s.cluster.wait_ready()
    until(s.rt, lambda: (s.rt.whereis(COMPACTOR_NAME) or old).node == s.cluster.leader()
          and s.rt.whereis(COMPACTOR_NAME) != old, "the pair beside the new leader")
    assert len(s.lake.branch(R, "main").sealed_tokens) == 1
    assert (s.content(), s.diff()) == want  # the sealed token is read through
    until(s.rt, lambda: not s.lake.branch(R, "main").sealed_tokens,
          "the new compactor redoing the killed compaction")
    assert s.lake.branch(R, "main").compacted_metarange is not None
    assert s.rt.call(COMPACTOR_NAME, Status(), timeout=10)["counts"] == {"done": 1}
    assert (s.content(), s.diff()) == want
    s.lake.commit(R, "main", "after the leader change")
    assert s.lake.is_staging_empty(R, "main")
    s.check()
