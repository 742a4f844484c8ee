"""The metastore machine (sediment.actors.blocks.metastore): commands, queries, errors as
results, snapshots, replicas, and a pure end-to-end loop with real block files (flushes,
a worker core running real merges, history reads, cleanup, a corrupt source)."""

from __future__ import annotations

import functools
import os
import pickle
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sediment.actors.blocks import block as blk
from sediment.actors.blocks import merge as mg
from sediment.actors.blocks import metastore as ms
from sediment.actors.blocks import service as svc
from sediment.actors.blocks import worker as wk
from sediment.actors.blocks.codec import RestoreError
from sediment.actors.blocks.errors import (
    CorruptBlock,
    ErrCompactionRevision,
    ErrEntryNotAfterApplied,
    ErrInvalidBlock,
    ErrMalformedCommand,
    ErrTermMismatch,
    ErrUnknownBlock,
    ErrUnknownCommand,
    MetastoreError,
    MissingBlock,
)
from sediment.actors.blocks.jobs import (
    CompactedBlocks,
    JobStatus,
    PlanUpdate,
    PollRequest,
    PollResponse,
    StatusUpdate,
)
from sediment.actors.blocks.meta import BlockMeta, compacted_block_id, level0_block_id
from sediment.actors.blocks.planner import LevelConfig, PlannerConfig
from sediment.actors.blocks.scheduler import SchedulerConfig
from sediment.actors.log.raft.types import Entry
from sediment.actors.log.shell.hosted import HostedMachine

CONFIG = svc.MetastoreConfig(
    planner=PlannerConfig(levels=(LevelConfig(2, 30.0), LevelConfig(2, 60.0)),
                          cleanup_delay=50.0),
    scheduler=SchedulerConfig(lease_duration=15.0, max_failures=3, max_queue_size=10),
)


def l0(shard: int, low: int, high: int | None = None, **changes: Any) -> BlockMeta:
    high = low if high is None else high
    meta = BlockMeta(level0_block_id(shard, low, high), shard, 0, low, high, b"a", b"m",
                     high - low + 1, 64, 1.0)
    return replace(meta, **changes)


class Replica:
    """A MetastoreMachine fed entries with consecutive indexes."""

    def __init__(self, config: svc.MetastoreConfig = CONFIG) -> None:
        self.machine = ms.metastore("", config)
        self.entries: list[Entry] = []
        self.term = 1

    def run(self, command: Any, now: float = 0.0) -> Any:
        entry = Entry(len(self.entries) + 1, self.term, now, command)
        self.entries.append(entry)
        return self.machine.apply(entry)

    def poll(self, request: PollRequest, now: float) -> Any:
        plan = self.run(ms.PreparePlan(request), now)
        if not isinstance(plan, PlanUpdate):
            return plan
        return self.run(ms.ApplyPlan(plan), now)


def test_the_machine_is_a_hosted_machine_with_a_picklable_factory(tmp_path: Path) -> None:
    factory = functools.partial(ms.metastore, config=CONFIG)
    machine: HostedMachine = pickle.loads(pickle.dumps(factory))(str(tmp_path))
    assert machine.applied == 0 and machine.background() is False
    assert machine.snapshot()[1] == []
    assert machine.status()["applied"] == 0
    machine.close()
    err = pickle.loads(pickle.dumps(ErrTermMismatch(1, 2)))
    assert err == ErrTermMismatch(1, 2) and err.plan_term == 1


def test_add_blocks_indexes_and_queues_in_one_command() -> None:
    r = Replica()
    a, b, c = l0(0, 1, 3), l0(0, 4, 6), l0(1, 2, 5)
    assert r.run(ms.AddBlocks((a, b, c)), now=7.0) == svc.AddBlocksResult((a.id, b.id, c.id))
    state = r.machine.state
    assert ms.query(state, ms.BlocksQuery(shard=0)) == ms.BlocksResult((a, b), 0)
    assert [q.id for q in state.planner.queued((0, 0))] == [a.id, b.id]
    assert {(q.index, q.appended_at) for q in state.planner.queued((0, 0))} == {(1, 7.0)}
    assert state.index.flushed == {0: 6, 1: 5}
    stats = ms.query(state, ms.QueuesQuery()).queues
    assert [(q.shard, q.level, q.blocks) for q in stats] == [(0, 0, 2), (1, 0, 1)]
    assert r.machine.status()["blocks"] == 3


@pytest.mark.parametrize("command,error", [
    (ms.AddBlocks(()), ErrMalformedCommand),
    (ms.AddBlocks([l0(0, 9)]), ErrMalformedCommand),  # type: ignore[arg-type]
    (ms.AddBlocks((l0(0, 9, level=1),)), ErrInvalidBlock),
    (ms.AddBlocks((l0(0, 9, row_count=0),)), ErrInvalidBlock),
    (ms.AddBlocks((l0(0, 9, id="../escape"),)), ErrInvalidBlock),
    (ms.AddBlocks((l0(0, 9, min_key=b"z"),)), ErrInvalidBlock),
    (ms.AddBlocks((l0(0, 9, created_at=float("nan")),)), ErrInvalidBlock),
    (ms.AddBlocks((l0(0, 9), l0(0, 9))), ErrInvalidBlock),
    (ms.AddBlocks((l0(0, 1, 3, size_bytes=1),)), ErrInvalidBlock),  # id in use, other meta
    (ms.AddBlocks((l0(0, 5, 8),)), ErrInvalidBlock),  # overlaps history already flushed
    (ms.AddBlocks((l0(1, 20), l0(0, 2))), ErrInvalidBlock),  # all or nothing
    (ms.SetCompactionRevision(0), ErrCompactionRevision),
    (ms.SetCompactionRevision(True), ErrCompactionRevision),  # a bool is not a revision
    (ms.PreparePlan("poll"), ErrMalformedCommand),  # type: ignore[arg-type]
    (ms.ApplyPlan(None), ErrMalformedCommand),  # type: ignore[arg-type]
    ("put", ErrUnknownCommand),
    (("add_blocks", ()), ErrUnknownCommand),
])
def test_bad_commands_are_answered_with_errors_and_change_nothing(
    command: Any, error: type[MetastoreError]
) -> None:
    r = Replica()
    r.run(ms.AddBlocks((l0(0, 1, 3), l0(0, 4, 6))), now=1.0)
    before = r.machine.snapshot()
    result = r.run(command, now=2.0)
    assert isinstance(result, error), result
    after = r.machine.snapshot()
    assert after[0].replace(b'"applied":2', b'"applied":1') == before[0]
    assert r.machine.applied == 2


def test_an_unexpected_failure_inside_a_command_is_an_error_result() -> None:
    class Poison(int):
        def __lt__(self, other: object) -> bool:
            raise RuntimeError("boom")

    r = Replica()
    result = r.run(ms.AddBlocks((replace(l0(0, 1), shard=Poison(0)),)))
    assert result == ErrMalformedCommand("malformed AddBlocks: RuntimeError")
    assert r.machine.state == ms.initial()


def test_a_retried_flush_is_a_no_op_even_after_its_block_was_compacted() -> None:
    r = Replica()
    a, b = l0(0, 1, 3), l0(0, 4, 6)
    r.run(ms.AddBlocks((a, b)), now=1.0)
    assert r.run(ms.AddBlocks((b, a))) == svc.AddBlocksResult((), (b.id, a.id))
    r.poll(PollRequest((), 1), now=2.0)
    (job,) = r.poll(PollRequest((), 1), now=3.0).assigned
    token = job.state.token
    out = replace(l0(0, 1, 6), id=compacted_block_id(0, 0, (a.id, b.id), token), level=1)
    done = StatusUpdate(job.plan.name, token, JobStatus.SUCCESS,
                        CompactedBlocks((a.id, b.id), out))
    assert r.poll(PollRequest((done,), 0), now=4.0).completed == (job.plan.name,)
    assert isinstance(r.run(ms.AddBlocks((a,))), ErrInvalidBlock)  # not live, but flushed


def test_entries_at_or_below_applied_are_refused() -> None:
    r = Replica()
    r.run(ms.AddBlocks((l0(0, 1),)))
    state = r.machine.state
    result = r.machine.apply(Entry(1, 1, 0.0, ms.AddBlocks((l0(0, 2),))))
    assert isinstance(result, ErrEntryNotAfterApplied)
    assert r.machine.state == state and r.machine.applied == 1
    assert r.run(None) is None and r.machine.applied == 2


def test_the_compaction_revision_moves_forward_and_rides_on_assignments() -> None:
    r = Replica()
    r.run(ms.AddBlocks((l0(0, 1), l0(0, 2))), now=1.0)
    assert r.run(ms.SetCompactionRevision(2)) == 2
    assert isinstance(r.run(ms.SetCompactionRevision(2)), ErrCompactionRevision)
    r.poll(PollRequest((), 1), now=2.0)
    (job,) = r.poll(PollRequest((), 1), now=3.0).assigned
    assert job.compaction_revision == 2
    assert ms.query(r.machine.state, ms.BlocksQuery()).compaction_revision == 2


def test_queries() -> None:
    r = Replica()
    a = l0(0, 1, 3, min_key=b"a", max_key=b"c")
    b = l0(0, 4, 6, min_key=b"d", max_key=b"f")
    c = l0(1, 7, 9)
    r.run(ms.AddBlocks((a, b, c)), now=1.0)
    state = r.machine.state
    q = functools.partial(ms.query, state)
    assert q(ms.BlocksQuery()).blocks == (a, b, c)
    assert q(ms.BlocksQuery(shard=0, min_revision=4)).blocks == (b,)
    assert q(ms.BlocksQuery(shard=0, max_revision=3)).blocks == (a,)
    assert q(ms.BlocksQuery(shard=0, key=b"e")).blocks == (b,)
    assert q(ms.BlocksQuery(shard=2)).blocks == ()
    assert q(ms.BlocksById(0, (b.id, a.id))).blocks == (b, a)
    assert isinstance(q(ms.BlocksById(1, (a.id,))), ErrUnknownBlock)
    assert isinstance(q("blocks"), ErrUnknownCommand)
    assert isinstance(q(ms.BlocksById(0, None)), ErrMalformedCommand)  # type: ignore[arg-type]
    r.poll(PollRequest((), 2), now=2.0)
    jobs = ms.query(r.machine.state, ms.JobsQuery()).jobs
    assert [(j.shard, j.source_blocks, j.state.status) for j in jobs] == [
        (0, (a.id, b.id), JobStatus.UNSPECIFIED)]
    assert ms.query(r.machine.state, ms.TombstonesQuery()).tombstones == ()
    assert r.machine.query(ms.QueuesQuery()) == ms.query(r.machine.state, ms.QueuesQuery())


# ---- snapshots and replicas ------------------------------------------------------------


def busy_replica() -> Replica:
    """Blocks, jobs in every state, a completion (a tombstone, a queued output)."""
    r = Replica()
    r.run(ms.AddBlocks(tuple(l0(s, 10 * s + i) for s in range(2) for i in range(1, 6))), 1.0)
    r.run(ms.SetCompactionRevision(3))
    r.poll(PollRequest((), 3), now=2.0)
    assigned = r.poll(PollRequest((), 3), now=3.0).assigned
    job = assigned[0]
    token = job.state.token
    ids = job.plan.source_blocks
    out = replace(l0(job.plan.shard, 1, 9), id=compacted_block_id(job.plan.shard, 0, ids, token),
                  level=1)
    done = StatusUpdate(job.plan.name, token, JobStatus.SUCCESS, CompactedBlocks(ids, out))
    r.poll(PollRequest((done,), 0), now=4.0)
    return r


def test_snapshot_and_restore_give_the_same_state() -> None:
    r = busy_replica()
    data, live = r.machine.snapshot()
    assert live == []
    other = ms.metastore("", CONFIG)
    other.restore(data, r.machine.applied, lambda i: None)
    assert other.state == r.machine.state and other.applied == r.machine.applied
    assert other.snapshot() == (data, [])
    assert r.machine.state.index.tombstones and r.machine.state.scheduler.jobs
    # both go on identically
    entry = Entry(r.machine.applied + 1, 1, 100.0, ms.PreparePlan(PollRequest((), 5)))
    assert r.machine.apply(entry) == other.apply(entry)
    assert other.snapshot() == r.machine.snapshot()


@pytest.mark.parametrize("data", [b"", b"nonsense", b"sediment-metastore/1\n{}",
                                  b"sediment-metastore/1\n[1]"])
def test_restoring_garbage_is_a_restore_error(data: bytes) -> None:
    with pytest.raises(RestoreError):
        ms.metastore("").restore(data, 0, lambda i: None)


def test_a_snapshot_cannot_stand_for_a_later_index() -> None:
    r = busy_replica()
    with pytest.raises(RestoreError):
        ms.metastore("").restore(r.machine.snapshot()[0], r.machine.applied + 1, lambda i: None)


add_st = st.tuples(st.just("add"), st.integers(0, 1), st.integers(1, 3))
poll_st = st.tuples(st.just("poll"), st.integers(1, 3))
report_st = st.tuples(st.just("report"), st.integers(0, 5))
command_st = st.one_of(
    add_st, add_st, add_st, poll_st, poll_st, report_st, report_st,
    st.tuples(st.just("compact"), st.integers(-2, 5)),
    st.tuples(st.just("term")),
    st.tuples(st.just("replay")),
    st.tuples(st.just("garbage")),
)


@settings(max_examples=60, deadline=None)
@given(commands=st.lists(command_st, min_size=20, max_size=60), cut=st.integers(0, 150))
def test_replicas_fed_the_same_entries_reach_the_same_state(commands: list[Any], cut: int) -> None:
    """Random commands (flushes, replayed flushes, polls that assign and complete jobs,
    compaction revisions, leader changes, garbage) go into a log; a second replica
    replays it, a third restores a snapshot taken at `cut` and replays the rest."""
    leader = Replica()
    now = 0.0
    revision = 0
    held: list[Any] = []
    flushed: list[BlockMeta] = []
    for tag, *args in commands:
        now += 7.0
        if tag == "add":
            block = l0(args[0], revision + 1, revision + args[1])
            revision += args[1]
            flushed.append(block)
            leader.run(ms.AddBlocks((block,)), now)
        elif tag == "poll":
            response = leader.poll(PollRequest((), args[0]), now)
            if isinstance(response, PollResponse):
                held += response.assigned
        elif tag == "report" and held:
            job = held.pop(args[0] % len(held))
            token, ids = job.state.token, job.plan.source_blocks
            out = replace(l0(job.plan.shard, 1, 2), level=job.plan.level + 1,
                          id=compacted_block_id(job.plan.shard, job.plan.level, ids, token))
            done = StatusUpdate(job.plan.name, token, JobStatus.SUCCESS, CompactedBlocks(ids, out))
            leader.poll(PollRequest((done,), 1), now)
        elif tag == "compact":
            current = leader.machine.state.compaction_revision
            leader.run(ms.SetCompactionRevision(current + args[0]), now)
        elif tag == "term":
            plan = leader.run(ms.PreparePlan(PollRequest((), 1)), now)
            leader.term += 1
            assert isinstance(leader.run(ms.ApplyPlan(plan), now), ErrTermMismatch)
        elif tag == "replay" and flushed:
            leader.run(ms.AddBlocks((flushed[len(flushed) // 2],)), now)
        elif tag == "garbage":
            leader.run(("garbage", now), now)
    follower = ms.metastore("", CONFIG)
    cut = min(cut, len(leader.entries))
    for entry in leader.entries[:cut]:
        follower.apply(entry)
    restored = ms.metastore("", CONFIG)
    restored.restore(follower.snapshot()[0], cut, lambda i: None)
    for entry in leader.entries[cut:]:
        assert follower.apply(entry) == restored.apply(entry)
    assert follower.state == restored.state == leader.machine.state
    assert follower.snapshot() == leader.machine.snapshot()


# ---- end to end with real blocks ---------------------------------------------------------

E2E = svc.MetastoreConfig(
    planner=PlannerConfig(levels=(LevelConfig(3, 20.0), LevelConfig(2, 40.0)),
                          cleanup_delay=30.0),
    scheduler=SchedulerConfig(lease_duration=15.0, max_failures=2, max_queue_size=10),
)


class Cluster:
    """The metastore, a writer flushing a model history, one worker running real merges;
    the shells are a few lines here because every decision is in a core."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.meta = Replica(E2E)
        self.worker = wk.initial(wk.WorkerConfig(capacity=2, poll_interval=5.0))
        self.now = 0.0
        self.revision = 0
        self.history: list[blk.Row] = []
        self.abandoned: list[str] = []
        self.corrupt: set[str] = set()

    def flush(self, shard: int, ops: list[tuple[str, str | None]]) -> BlockMeta:
        rows = []
        for key, value in ops:
            self.revision += 1
            rows.append(blk.Row(self.revision, key.encode(), None if value is None
                                else value.encode()))
        self.history += rows
        block = blk.write_level0(self.root, shard, rows, created_at=self.now)
        assert self.meta.run(ms.AddBlocks((block,)), self.now).added == (block.id,)
        return block

    def step(self, event: wk.Event) -> None:
        self.worker, effects = wk.step(self.worker, event)
        for effect in effects:
            if isinstance(effect, wk.SendPoll):
                response = self.meta.poll(effect.request, self.now)
                reply = (wk.PollReply(self.now, response) if isinstance(response, PollResponse)
                         else wk.PollFailed(self.now))
                self.step(reply)
            elif isinstance(effect, wk.Execute):
                self.step(self.execute(effect.job))
            elif isinstance(effect, wk.Abandoned):
                self.abandoned.append(effect.reason)

    def execute(self, job: Any) -> wk.Event:
        plan = job.plan
        found = ms.query(self.meta.machine.state, ms.BlocksById(plan.shard, plan.source_blocks))
        try:
            if not isinstance(found, ms.BlocksResult):
                raise MissingBlock(plan.source_blocks[0], "?")
            result = mg.run_job(self.root, job, found.blocks, created_at=self.now)
            mg.cleanup(self.root, plan.tombstones)
        except (MissingBlock, CorruptBlock) as err:
            return wk.JobFailed(plan.name, job.state.token, type(err).__name__)
        return wk.JobDone(plan.name, job.state.token, result)

    def run(self, seconds: float) -> None:
        end = self.now + seconds
        while self.now < end:
            self.now += 1.0
            self.step(wk.Tick(self.now))

    def live(self) -> list[BlockMeta]:
        return list(ms.query(self.meta.machine.state, ms.BlocksQuery()).blocks)

    def model(self, at: int) -> list[tuple[bytes, bytes]]:
        state: dict[bytes, bytes | None] = {}
        for r in self.history:
            if r.revision <= at:
                state[r.key] = r.value
        return sorted((k, v) for k, v in state.items() if v is not None)


def test_end_to_end_flush_compact_read_and_clean_up(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    keys = "abcdefgh"
    for i in range(12):
        ops: list[tuple[str, str | None]] = [(keys[(i * 3 + j) % 8], f"v{i}.{j}")
                                             for j in range(3)]
        if i % 4 == 3:
            ops.append((keys[i % 8], None))
        c.flush(0, ops)
        c.run(3.0)
    c.meta.run(ms.SetCompactionRevision(c.revision // 2), c.now)
    c.run(200.0)
    live = c.live()
    assert {b.level for b in live} == {2}  # everything merged twice
    floor = c.revision // 2
    for at in range(floor, c.revision + 1):
        assert mg.read_keyspace(c.root, live, at, compaction_revision=floor) == c.model(at)
    expected = [r for r in c.history if r.key == b"a" and r.revision >= floor]
    assert mg.read_key_history(c.root, live, b"a", floor, compaction_revision=floor) == expected
    # replaced files were deleted by later jobs once the cleanup delay had passed
    files = {p.stem for p in tmp_path.rglob("*.parquet")}
    tombs = ms.query(c.meta.machine.state, ms.TombstonesQuery()).tombstones
    pending = {b for t in tombs for b in t.blocks}
    assert {b.id for b in live} <= files <= {b.id for b in live} | pending
    assert not list(tmp_path.rglob("*.tmp"))


def test_end_to_end_a_corrupt_source_parks_its_job_and_nothing_is_replaced(
    tmp_path: Path,
) -> None:
    c = Cluster(tmp_path)
    blocks = [c.flush(1, [("k", f"v{i}")]) for i in range(3)]
    path = blk.block_path(c.root, 1, blocks[1].id)
    data = bytearray(Path(path).read_bytes())
    data[len(data) // 2] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    c.run(200.0)
    assert c.abandoned and set(c.abandoned) == {"CorruptBlock"}
    (job,) = c.meta.machine.state.scheduler.jobs.values()
    assert job.failures == 2 and job.status == JobStatus.IN_PROGRESS  # parked after 3 tries
    assert len(c.abandoned) == 3
    assert {b.id for b in c.live()} == {b.id for b in blocks}
    assert sorted(os.listdir(tmp_path / "shard-1")) == sorted(f"{b.id}.parquet" for b in blocks)
