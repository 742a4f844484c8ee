"""The delete sensor and the compactor follow the KV leader (`shell/service.py`) on a
3-node KV cluster in the simulator: the pair runs beside the leader, a leader change
moves it (the old pair ends, one pair is registered), and across repeated moves under
deletes no compaction is lost (every token a compaction sealed is folded in, the
branch ends with none) or doubled (every sealed token is folded in once, unforced
compactions of a branch start at least the claim interval apart). Every history goes
through the branch checker."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sediment.actors.branches.api import Branches
from sediment.actors.branches.apply import SplitRule
from sediment.actors.branches.entry import Entry
from sediment.actors.branches.history import Event, History, Updated
from sediment.actors.branches.ports import run_sync
from sediment.actors.branches.sensor import SensorConfig
from sediment.actors.branches.shell.compactor import CompactorConfig
from sediment.actors.branches.shell.gc_process import GC_NAME, GcConfig
from sediment.actors.branches.shell.names import COMPACTOR_NAME, SENSOR_NAME
from sediment.actors.branches.shell.protocol import Compact, Sweep, Swept
from sediment.actors.branches.shell.recorder import CollectedEvents, TakeEvents, collector
from sediment.actors.branches.shell.service import (
    services_name,
    start_branch_services,
    where_services_run,
)
from sediment.actors.branches.tier import TierConfig
from sediment.runtime import api
from sediment.runtime.common_calls import Status
from sediment.runtime.pid import Pid
from sediment.scenarios.checkers.branch_reads import check_branch_reads
from sediment.wiring.cluster import Cluster

R = "repo1"
RULE = SplitRule(min_entries=2, max_entries=16, raggedness=4)
INTERVAL = 10.0
THRESHOLD = 5


def e(tag: str) -> Entry:
    return Entry(f"s3://bucket/{tag}", len(tag), tag)


@dataclass
class Setup:
    rt: Any
    cluster: Cluster
    lake: Branches
    history: History
    collector: Pid

    def events(self) -> list[Event]:
        collected = self.rt.call(self.collector, TakeEvents(), timeout=30)
        assert isinstance(collected, CollectedEvents) and collected.dropped == 0
        return [*self.history.events, *collected.events]

    def until(self, condition: Any, what: str, rounds: int = 900) -> None:
        for _ in range(rounds):
            if condition():
                return
            self.rt.sleep(0.1)
        raise AssertionError(f"never happened: {what}")

    def pair(self) -> tuple[Pid | None, Pid | None]:
        return self.rt.whereis(SENSOR_NAME), self.rt.whereis(COMPACTOR_NAME)

    def beside_leader(self) -> bool:
        leader = self.cluster.leader()
        sensor, compactor = self.pair()
        return (leader is not None and sensor is not None and compactor is not None
                and sensor.node == leader and compactor.node == leader)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    yield from make_setup(tmp_path)


def make_setup(tmp_path: Path, gc: GcConfig | None = None) -> Iterator[Setup]:
    rt = api.start("sim", seed=23, nodes=("n1", "n2", "n3"))
    try:
        cluster = Cluster.start(runtime=rt, data_dir=str(tmp_path / "kv"), backend="sim")
        root = str(tmp_path / "blocks")
        history = History()
        config = TierConfig(compaction_interval=INTERVAL)
        lake = Branches.connect(cluster, root, config=config, recorder=history, seed=5)
        lake.tier.store.rule = RULE
        coll = rt.spawn(collector, node="n1")
        start_branch_services(rt, SensorConfig(threshold=THRESHOLD),
                              CompactorConfig(cluster.nodes, root, config, RULE,
                                              poll_interval=1.0, recorder=coll, seed=7),
                              gc=gc)
        lake.repo_create(R)
        yield Setup(rt, cluster, lake, history, coll)
    finally:
        rt.shutdown()


def check_compactions(events: list[Event]) -> tuple[int, int]:
    """No compaction lost or doubled: every token a compaction sealed is folded in
    (by its compaction's finish, a later one's or a commit) exactly once, and unforced
    compaction starts of the branch are at least the interval apart. (starts,
    finishes)."""
    updates = [ev for ev in events if isinstance(ev, Updated) and ev.branch == "main"]
    updates.sort(key=lambda u: u.revision)
    sealed_by_compaction: set[str] = set()
    folded: list[str] = []
    starts = finishes = 0
    last_start: float | None = None
    for u in updates:
        before = u.before.sealed_tokens if u.before is not None else ()
        if u.kind == "compaction_start":
            starts += 1
            sealed_by_compaction.add(u.after.sealed_tokens[0])
            at = u.after.compaction_start_time
            assert at is not None
            assert last_start is None or at - last_start >= INTERVAL, (last_start, at)
            last_start = at
        if u.kind in ("compaction_finish", "commit"):
            finishes += u.kind == "compaction_finish"
            folded += [t for t in before if t not in u.after.sealed_tokens]
    assert len(folded) == len(set(folded)), "a sealed token was folded in twice"
    assert sealed_by_compaction <= set(folded), "a compaction's token was never folded in"
    return starts, finishes


def test_the_pair_follows_the_leader_and_no_compaction_is_lost_or_doubled(
        setup: Setup) -> None:
    s = setup
    s.until(s.beside_leader, "the pair beside the first leader")
    statuses = where_services_run(s.rt, s.cluster.nodes)
    running = [n for n, st in statuses.items() if st.get("services") is not None]
    assert running == [s.cluster.leader()]
    model: dict[str, str] = {}
    for i in range(40):
        s.lake.put(R, "main", f"data/{i:02d}", e(f"v{i}"))
        model[f"data/{i:02d}"] = f"v{i}"
    s.lake.commit(R, "main", "base")
    moves = 0
    for round_ in range(4):
        s.rt.sleep(INTERVAL)  # past the last compaction's claim
        for i in range(round_ * 8, round_ * 8 + THRESHOLD + 1):
            s.lake.rm(R, "main", f"data/{i:02d}")
            model.pop(f"data/{i:02d}")
        s.lake.put(R, "main", f"new/{round_}", e(f"n{round_}"))
        model[f"new/{round_}"] = f"n{round_}"
        s.until(lambda: s.lake.branch(R, "main").compacted_metarange is not None
                and not s.lake.branch(R, "main").sealed_tokens, "a sensor-triggered compaction")
        page = s.lake.ls(R, "main", amount=1000)
        assert {p: entry.checksum for p, entry in page.entries} == model
        # the leader goes: the pair moves
        old = s.pair()
        leader = s.cluster.leader()
        assert leader is not None
        s.cluster.node(leader).kill_process("raft:kv")
        s.cluster.wait_ready()
        s.until(lambda old=old: s.beside_leader() and s.pair() != old,
                "the pair beside the new leader")
        assert all(p is not None and s.rt.exit_reason(p) is not None for p in old)
        statuses = where_services_run(s.rt, s.cluster.nodes)
        running = [n for n, st in statuses.items() if st.get("services") is not None]
        assert running == [s.cluster.leader()], statuses
        moves += 1
    starts, finishes = check_compactions(s.events())
    assert moves == 4 and starts >= 4 and finishes >= 4
    result = check_branch_reads(s.events())
    assert result.ok, result.report()


def test_a_compaction_killed_by_a_move_is_redone_once(setup: Setup) -> None:
    """A compaction held after step 1 when the leader goes is killed with the pair; the
    new pair's compactor redoes it once its claim expires, and only once."""
    s = setup
    s.until(s.beside_leader, "the pair beside the first leader")
    for i in range(12):
        s.lake.put(R, "main", f"data/{i:02d}", e(f"v{i}"))
    s.lake.commit(R, "main", "base")
    for i in range(0, 12, 3):
        s.lake.rm(R, "main", f"data/{i:02d}")
    want = {p: entry.checksum for p, entry in s.lake.ls(R, "main", amount=100).entries}
    _, victim = s.pair()
    assert victim is not None
    s.rt.arm_failpoint(victim, "branches.compactor.after_step1", "pause")
    s.rt.spawn(_compact, node="n2")
    s.until(lambda: s.lake.branch(R, "main").compaction_start_time is not None, "step 1")
    leader = s.cluster.leader()
    assert leader is not None
    s.cluster.node(leader).kill_process("raft:kv")
    s.cluster.wait_ready()
    s.until(lambda: s.beside_leader() and s.pair()[1] != victim, "the pair moved")
    assert len(s.lake.branch(R, "main").sealed_tokens) == 1
    s.until(lambda: not s.lake.branch(R, "main").sealed_tokens, "the compaction redone")
    s.rt.sleep(3 * INTERVAL)  # time for a second, doubled redo (there must be none)
    starts, finishes = check_compactions(s.events())
    assert (starts, finishes) == (2, 1)
    assert {p: entry.checksum for p, entry in s.lake.ls(R, "main", amount=100).entries} == want
    result = check_branch_reads(s.events())
    assert result.ok, result.report()


async def _compact(ctx: Any) -> None:
    with contextlib.suppress(Exception):  # the compactor is killed with the leadership
        await ctx.call(COMPACTOR_NAME, Compact(R, "main", True), timeout=600)


def test_the_collector_runs_periodically_beside_the_compactor(tmp_path: Path) -> None:
    """A compaction killed after step 3 leaves its token named by no branch; a periodic
    pass of the collector (beside the leader, with the compactor) drops it."""
    for s in make_setup(tmp_path, GcConfig(interval=5.0, grace=0.0)):
        s.until(s.beside_leader, "the pair beside the first leader")
        gc_pid = s.rt.whereis(GC_NAME)
        assert gc_pid is not None and gc_pid.node == s.cluster.leader()
        for i in range(6):
            s.lake.put(R, "main", f"data/{i}", e(f"v{i}"))
        s.lake.commit(R, "main", "base")
        s.lake.rm(R, "main", "data/0")
        want = s.lake.ls(R, "main", amount=100).entries
        _, victim = s.pair()
        assert victim is not None
        s.rt.arm_failpoint(victim, "branches.compactor.after_step3", "crash")
        s.rt.spawn(_compact, node="n2")
        s.until(lambda s=s, victim=victim: s.pair()[1] not in (None, victim),
                "the compactor restarted")
        finishes = [ev for ev in s.events() if isinstance(ev, Updated)
                    and ev.kind == "compaction_finish"]
        assert len(finishes) == 1 and finishes[0].before is not None
        (token,) = finishes[0].before.sealed_tokens
        s.until(lambda s=s: s.rt.call(GC_NAME, Status(), timeout=10)["tokens"] >= 1,
                "a periodic pass dropping the token")
        assert not run_sync(s.lake.tier.staging.has_entries(R, token, 0))
        assert s.lake.ls(R, "main", amount=100).entries == want
        status = s.rt.call(GC_NAME, Status(), timeout=10)
        assert status["passes"] >= 1 and status["failed"] == 0
        answer = s.rt.call(GC_NAME, Sweep(R), timeout=30)
        assert isinstance(answer, Swept) and answer.result.tokens == ()


def test_names_of_the_services() -> None:
    assert services_name("n1") == "branches-services@n1"


def test_recoveries_are_the_branches_with_sealed_tokens_due_when_their_claim_expires() -> None:
    from sediment.actors.branches.branch import Branch
    from sediment.actors.branches.recovery import Recovery, due, recoveries

    clean = Branch("c1", "t1")
    killed = Branch("c1", "t2", sealed_tokens=("t1",), compaction_start_time=100.0)
    committing = Branch("c1", "t3", sealed_tokens=("t2", "t1"))  # a commit in flight
    found = recoveries([("r", "a", clean), ("r", "b", killed), ("r", "c", committing)],
                       now=50.0, interval=30.0)
    assert found == [Recovery(50.0, "r", "c"), Recovery(130.0, "r", "b")]
    assert recoveries([("r", "b", killed)], now=200.0, interval=30.0) == [
        Recovery(200.0, "r", "b")]
    assert len(recoveries([("r", f"b{i}", killed) for i in range(5)], 0.0, 1.0, limit=3)) == 3
    ready, rest = due(found, 130.0)
    assert (ready, rest) == (found, [])
    ready, rest = due(found, 129.9)
    assert (ready, rest) == (found[:1], found[1:])


def test_under_the_node_supervisors_a_whole_node_killed_takes_only_its_follower(
        tmp_path: Path) -> None:
    """`Cluster.start(..., branches=...)`: each node's follower is its node supervisor's
    child. The leader's whole node is killed (with `start_branch_services` the first
    node held the followers' top supervisor): the pair starts beside the new leader,
    the killed node's restart brings its follower back, and a sensor-triggered
    compaction still runs."""
    from sediment.actors.branches.shell.service import ServicesConfig, follower_name

    rt = api.start("sim", seed=29, nodes=("client", "n1", "n2", "n3"))
    try:
        root = str(tmp_path / "blocks")
        config = TierConfig(compaction_interval=INTERVAL)
        coll = rt.spawn(collector, node="client")
        services = ServicesConfig(SensorConfig(threshold=THRESHOLD),
                                  CompactorConfig(("n1", "n2", "n3"), root, config, RULE,
                                                  poll_interval=1.0, recorder=coll, seed=7))
        cluster = Cluster.start(("n1", "n2", "n3"), runtime=rt, data_dir=str(tmp_path / "kv"),
                                backend="sim", top_node="client", branches=services)
        history = History()
        lake = Branches.connect(cluster, root, config=config, recorder=history, seed=5)
        lake.tier.store.rule = RULE
        s = Setup(rt, cluster, lake, history, coll)
        for n in cluster.nodes:
            assert cluster.node(n).processes()["branches"] == rt.whereis(follower_name(n))
        assert rt.whereis("branches") is None  # no top supervisor of their own
        s.until(s.beside_leader, "the pair beside the first leader")
        lake.repo_create(R)
        for i in range(12):
            lake.put(R, "main", f"data/{i:02d}", e(f"v{i}"))
        lake.commit(R, "main", "base")

        leader = cluster.leader()
        assert leader is not None
        old = s.pair()
        followers = {n: rt.whereis(follower_name(n)) for n in cluster.nodes}
        cluster.node(leader).kill()
        s.until(lambda: s.beside_leader() and s.pair() != old, "the pair beside the new leader")
        for n in cluster.nodes:  # the other nodes' followers never stopped
            if n != leader:
                assert rt.whereis(follower_name(n)) == followers[n]
        s.until(lambda: rt.whereis(follower_name(leader)) not in (None, followers[leader]),
                "the killed node's follower back with its node")
        cluster.wait_ready()

        for i in range(THRESHOLD + 1):
            lake.rm(R, "main", f"data/{i:02d}")
        s.until(lambda: lake.branch(R, "main").compacted_metarange is not None
                and not lake.branch(R, "main").sealed_tokens, "a sensor-triggered compaction")
        assert lake.ls(R, "main").paths == [f"data/{i:02d}" for i in range(THRESHOLD + 1, 12)]
        result = check_branch_reads(s.events())
        assert result.ok, result.report()
    finally:
        rt.shutdown()
