"""Garbage in the block store (sediment.actors.blocks.orphans, .gc, FindOrphans).

Tables of the rule (names, verdicts, what may be deleted, bounded passes), the command
through the metastore machine (bad input refused, nothing changes), and a seeded
simulation of flushers that crash before proposing or propose late and workers whose
attempts are fenced, report late or die: a file judged garbage at a committed entry is
never referenced by the index at any later entry, and every file that is neither
referenced nor still wanted by an attempt in flight ends up judged garbage.
"""

from __future__ import annotations

import os
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sediment.actors.blocks import gc
from sediment.actors.blocks import metastore as ms
from sediment.actors.blocks import orphans as orph
from sediment.actors.blocks import service as svc
from sediment.actors.blocks.errors import ErrInvalidBlock, ErrMalformedCommand
from sediment.actors.blocks.index import IndexState
from sediment.actors.blocks.jobs import (
    CompactedBlocks,
    JobState,
    JobStatus,
    PollRequest,
    PollResponse,
    StatusUpdate,
    Tombstone,
)
from sediment.actors.blocks.meta import (
    SCRATCH_SUFFIX,
    BlockMeta,
    Level0Name,
    OutputName,
    compacted_block_id,
    job_digest,
    job_name,
    level0_block_id,
    parse_block_id,
    parse_file_name,
)
from sediment.actors.blocks.planner import LevelConfig, PlannerConfig
from sediment.actors.blocks.scheduler import SchedulerConfig
from sediment.actors.log.raft.types import Entry
from sediment.actors.spark import merge_job

L0 = level0_block_id
SOURCES = (L0(0, 1, 2), L0(0, 3, 4))
DIGEST = job_digest(SOURCES)
JOB = job_name(0, 0, SOURCES)


def out(token: int, shard: int = 0) -> str:
    return compacted_block_id(shard, 0, SOURCES, token)


# ---- names -------------------------------------------------------------------------------

ID_CASES: list[tuple[str, Level0Name | OutputName | None]] = [
    (L0(3, 5, 9), Level0Name(3, 5, 9)),
    (out(12), OutputName(0, 1, DIGEST, 12)),
    (compacted_block_id(2, 1, SOURCES, 7), OutputName(2, 2, DIGEST, 7)),
    ("S0-L0-R5-9", None),  # not zero-padded: not a name level0_block_id gives
    ("S01-L0-R00000000000000000005-00000000000000000009", None),
    (f"S0-L1-{DIGEST}-T007", None),
    (f"S0-L0-{DIGEST}-T7", None),  # an output is at level 1 or above
    (f"S0-L1-{DIGEST.upper()}-T7", None),
    (f"{L0(0, 1, 2)}-again", None),
    ("B", None),
]


@pytest.mark.parametrize("block_id,expected", ID_CASES)
def test_block_names_read_back(block_id: str, expected: object) -> None:
    assert parse_block_id(block_id) == expected


def test_an_output_name_names_its_job() -> None:
    name = parse_block_id(out(5))
    assert isinstance(name, OutputName) and name.job == JOB


FILE_CASES: list[tuple[str, tuple[str, str] | None]] = [
    (f"{L0(0, 1, 2)}.parquet", (L0(0, 1, 2), "block")),
    (f".{out(4)}.k2j_x9aq.tmp", (out(4), "temp")),
    (f".{out(4)}.abc{SCRATCH_SUFFIX}", (out(4), "scratch")),
    (".a.b.c.xyz.tmp", ("a.b.c", "temp")),  # an id may hold dots; the random part cannot
    ("notes.txt", None),
    (".parquet", None),
    (".tmp", None),
    ("..x.tmp", None),
    (".B.tmp", None),  # no random part
    ("../B.parquet", None),
]


@pytest.mark.parametrize("name,expected", FILE_CASES)
def test_file_names_read_back(name: str, expected: object) -> None:
    assert parse_file_name(name) == expected


def test_the_scratch_suffix_is_the_spark_merges() -> None:
    assert SCRATCH_SUFFIX == merge_job.TEMP_SUFFIX


# ---- the rule ----------------------------------------------------------------------------

LIVE = BlockMeta(L0(0, 1, 2), 0, 0, 1, 2, b"a", b"b", 2, 10, 1.0)
INDEX = IndexState(
    shards={0: {LIVE.id: LIVE}},
    tombstones={"t": Tombstone("t", 0, (L0(0, 3, 4), out(3)), 1.0, 5)},
    flushed={0: 20, 1: 4},
)
JOBS = {JOB: JobState(JOB, 0, JobStatus.IN_PROGRESS, 0.0, token=30, lease_expires_at=50.0)}
ENTRY = 40

VERDICTS: list[tuple[str, tuple[int, str], int | None, orph.Verdict]] = [
    ("a live block", (0, LIVE.id), ENTRY, "live"),
    ("a replaced block waiting for its cleanup delay", (0, L0(0, 3, 4)), ENTRY, "tombstoned"),
    ("a tombstoned job output", (0, out(3)), ENTRY, "tombstoned"),
    ("level 0 at the shard's watermark: AddBlocks refuses it", (0, L0(0, 20, 25)), ENTRY,
     "orphan"),
    ("level 0 below the watermark", (0, L0(0, 5, 9)), ENTRY, "orphan"),
    ("level 0 above the watermark: a flush in flight may add it", (0, L0(0, 21, 25)), ENTRY,
     "in_flight"),
    ("level 0 of a shard never flushed", (2, L0(2, 1, 1)), ENTRY, "in_flight"),
    ("level 0 against another shard's watermark", (1, L0(1, 5, 6)), ENTRY, "in_flight"),
    ("an attempt fenced by a newer token", (0, out(29)), ENTRY, "orphan"),
    ("the current attempt", (0, out(30)), ENTRY, "in_flight"),
    ("no job, token below the entry: completed elsewhere or evicted",
     (3, compacted_block_id(3, 0, SOURCES, 39)), ENTRY, "orphan"),
    ("no job, token not below the entry: not judged", (3, compacted_block_id(3, 0, SOURCES, 40)),
     ENTRY, "in_flight"),
    ("no job, local pre-selection", (3, compacted_block_id(3, 0, SOURCES, 99)), None, "orphan"),
    ("a name that is not ours", (0, "B"), ENTRY, "unknown"),
    ("a name of another shard than its directory", (1, L0(0, 1, 1)), ENTRY, "unknown"),
]


@pytest.mark.parametrize("case", VERDICTS, ids=[c[0] for c in VERDICTS])
def test_the_rule(case: tuple[str, tuple[int, str], int | None, orph.Verdict]) -> None:
    _, candidate, entry, expected = case
    assert orph.verdicts(INDEX, JOBS, entry, [candidate]) == (expected,)


DELETABLE: list[tuple[str, orph.Verdict, bool]] = [
    ("block", "orphan", True),
    ("block", "live", False),
    ("block", "tombstoned", False),
    ("block", "in_flight", False),
    ("block", "unknown", False),
    ("temp", "orphan", True),
    ("temp", "live", True),  # the block is installed: the write keeps it or failed
    ("temp", "tombstoned", True),
    ("temp", "in_flight", False),  # maybe being written right now
    ("temp", "unknown", False),
    ("scratch", "orphan", True),
    ("scratch", "in_flight", False),
]


@pytest.mark.parametrize("kind,verdict,expected", DELETABLE)
def test_what_may_be_deleted(kind: Any, verdict: orph.Verdict, expected: bool) -> None:
    assert orph.deletable(kind, verdict) is expected


def test_bounded_passes_visit_every_file_in_turn() -> None:
    files = [orph.StoreFile(s, f"b{i}", "block", f"b{i}.parquet")
             for s in (1, 0) for i in range(5)]
    seen: list[str] = []
    after = None
    ends = []
    for _ in range(5):
        batch, after = orph.next_batch(files, after, 3)
        assert len(batch) <= 3
        seen += [f"{f.shard}/{f.name}" for f in batch]
        ends.append(after)
    everything = sorted(f"{f.shard}/{f.name}" for f in files)
    assert seen == everything + everything[:3]  # the fifth pass started over
    assert ends == [(0, "b2.parquet"), (1, "b0.parquet"), (1, "b3.parquet"), None,
                    (0, "b2.parquet")]
    assert orph.next_batch([], None, 3) == ([], None)
    assert orph.next_batch(files, None, 0) == ([], None)


# ---- through the machine -----------------------------------------------------------------

CONFIG = svc.MetastoreConfig(
    planner=PlannerConfig(levels=(LevelConfig(2, 30.0), LevelConfig(2, 60.0)),
                          cleanup_delay=50.0),
    scheduler=SchedulerConfig(lease_duration=15.0, max_failures=3, max_queue_size=10),
    max_orphan_candidates=8,
)


class Replica:
    """A MetastoreMachine fed entries with consecutive indexes."""

    def __init__(self) -> None:
        self.machine = ms.metastore("", CONFIG)
        self.index = 0

    def run(self, command: Any, now: float) -> Any:
        self.index += 1
        return self.machine.apply(Entry(self.index, 1, now, command))

    def poll(self, request: PollRequest, now: float) -> PollResponse | None:
        plan = self.run(ms.PreparePlan(request), now)
        response = self.run(ms.ApplyPlan(plan), now)
        return response if isinstance(response, PollResponse) else None


def l0(shard: int, low: int, high: int) -> BlockMeta:
    return BlockMeta(L0(shard, low, high), shard, 0, low, high, b"a", b"z", high - low + 1,
                     64, 1.0)


@pytest.mark.parametrize("files", [
    [(0, "B")],  # a list, not a tuple
    ((0, "B", 1),),
    (("0", "B"),),
    ((True, "B"),),
    ((-1, "B"),),
    ((0, b"B"),),
    tuple((0, f"B{i}") for i in range(9)),  # over max_orphan_candidates
])
def test_bad_find_orphans_is_refused_and_changes_nothing(files: Any) -> None:
    r = Replica()
    r.run(ms.AddBlocks((l0(0, 1, 2),)), 1.0)
    before = r.machine.state
    assert isinstance(r.run(ms.FindOrphans(files), 2.0), ErrMalformedCommand)
    assert isinstance(r.machine.query(ms.OrphansQuery(files)), ErrMalformedCommand)
    assert r.machine.state == before


def test_find_orphans_answers_at_its_entry_and_is_read_only() -> None:
    r = Replica()
    r.run(ms.AddBlocks((l0(0, 1, 2), l0(0, 3, 4))), 1.0)
    snapshot = r.machine.snapshot()[0]
    files = ((0, L0(0, 1, 2)), (0, L0(0, 1, 3)), (0, L0(0, 5, 6)), (0, "notes"))
    answer = r.run(ms.FindOrphans(files), 2.0)
    assert answer == ms.OrphanVerdicts(2, ("live", "orphan", "in_flight", "unknown"))
    assert r.machine.query(ms.OrphansQuery(files)) == replace(answer, entry=None)
    assert r.machine.snapshot()[0] == snapshot.replace(b'"applied":1', b'"applied":2')


@pytest.mark.parametrize("block_id", [
    out(5),  # a job output's name: its fate would be read as an attempt's
    L0(0, 1, 3),  # a level-0 name of other revisions
    L0(1, 1, 2),  # ... of another shard
])
def test_a_level0_block_must_carry_its_own_name(block_id: str) -> None:
    r = Replica()
    assert isinstance(r.run(ms.AddBlocks((replace(l0(0, 1, 2), id=block_id),)), 1.0),
                      ErrInvalidBlock)
    assert r.run(ms.AddBlocks((replace(l0(0, 1, 2), id="custom"),)), 1.0).added == ("custom",)


# ---- a seeded simulation -----------------------------------------------------------------

class Sim:
    """Flushers and workers against one metastore; `written` is every file any of them
    ever wrote, `garbage` every file a committed FindOrphans judged garbage (and the
    collector deleted at once)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.r = Replica()
        self.now = 0.0
        self.next_lo = {0: 1, 1: 1}
        self.late_adds: list[BlockMeta] = []
        self.held: list[Any] = []  # assigned jobs whose output is not written yet
        self.late_reports: list[StatusUpdate] = []
        self.written: set[tuple[int, str]] = set()
        self.garbage: set[tuple[int, str]] = set()

    def referenced(self) -> set[tuple[int, str]]:
        index = self.r.machine.state.index
        live = {(s, b) for s, blocks in index.shards.items() for b in blocks}
        return live | {(t.shard, b) for t in index.tombstones.values() for b in t.blocks}

    def flush(self) -> None:
        shard = self.rng.choice((0, 1))
        lo = self.next_lo[shard]
        block = l0(shard, lo, lo + self.rng.randrange(0, 3))
        self.written.add((shard, block.id))
        fate = self.rng.random()
        if fate < 0.25:
            return  # crashed between writing and proposing: the range is flushed again
        if fate < 0.35:
            self.late_adds.append(block)  # an unanswered proposal that commits later
            return
        if not isinstance(self.r.run(ms.AddBlocks((block,)), self.now), ErrInvalidBlock):
            self.next_lo[shard] = block.max_revision + 1

    def work(self) -> None:
        if self.held and self.rng.random() < 0.6:
            i = self.rng.randrange(len(self.held))
            job = self.held.pop(i)
            plan, token = job.plan, job.state.token
            output = compacted_block_id(plan.shard, plan.level, plan.source_blocks, token)
            self.written.add((plan.shard, output))
            meta = replace(l0(plan.shard, 1, 2), id=output, level=plan.level + 1)
            done = StatusUpdate(plan.name, token, JobStatus.SUCCESS,
                                CompactedBlocks(plan.source_blocks, meta))
            fate = self.rng.random()
            if fate < 0.2:
                return  # the worker dies after writing its output
            if fate < 0.4:
                self.late_reports.append(done)  # paused past its lease, reports later
                return
            self.r.poll(PollRequest((done,), 0), self.now)
            return
        response = self.r.poll(PollRequest((), 2), self.now)
        if response is not None:
            self.held += response.assigned

    def late(self) -> None:
        if self.late_adds and self.rng.random() < 0.5:
            block = self.late_adds.pop(0)
            result = self.r.run(ms.AddBlocks((block,)), self.now)
            if not isinstance(result, ErrInvalidBlock):
                self.next_lo[block.shard] = max(self.next_lo[block.shard],
                                                block.max_revision + 1)
        elif self.late_reports:
            self.r.poll(PollRequest((self.late_reports.pop(0),), 0), self.now)

    def collect(self) -> None:
        listed = sorted(self.written - self.garbage)
        for at in range(0, len(listed), CONFIG.max_orphan_candidates):
            batch = tuple(listed[at:at + CONFIG.max_orphan_candidates])
            local = self.r.machine.query(ms.OrphansQuery(batch))
            answer = self.r.run(ms.FindOrphans(batch), self.now)
            assert isinstance(answer, ms.OrphanVerdicts) and answer.entry == self.r.index
            for candidate, mine, committed in zip(batch, local.verdicts, answer.verdicts,
                                                  strict=True):
                if committed == "orphan":
                    assert mine == "orphan"  # the pre-selection never hides garbage
                    self.garbage.add(candidate)

    def check(self) -> None:
        assert not self.garbage & self.referenced(), "a file judged garbage is referenced"


@pytest.mark.parametrize("seed", range(12))
def test_garbage_stays_garbage_and_is_all_found(seed: int) -> None:
    sim = Sim(seed)
    for _ in range(300):
        sim.now += sim.rng.choice((0.5, 1.0, 4.0, 9.0))
        action = sim.rng.random()
        if action < 0.35:
            sim.flush()
        elif action < 0.75:
            sim.work()
        elif action < 0.9:
            sim.late()
        else:
            sim.collect()
        sim.check()
    # quiesce: the in-flight proposals land, every shard flushes past what crashed, the
    # held attempts report, and leases run out for the dead ones
    while sim.late_adds or sim.late_reports:
        sim.late()
        sim.check()
    for shard in (0, 1):
        tops = [name.max_revision for s, bid in sim.written
                if s == shard and isinstance(name := parse_block_id(bid), Level0Name)]
        top = max([sim.next_lo[shard] - 1, *tops]) + 1
        block = l0(shard, top, top)
        sim.written.add((shard, block.id))
        assert sim.r.run(ms.AddBlocks((block,)), sim.now).added == (block.id,)
        sim.next_lo[shard] = top + 1
    sim.collect()
    sim.check()
    state = sim.r.machine.state
    current = {(p.shard, compacted_block_id(p.shard, p.level, p.source_blocks,
                                            state.scheduler.jobs[n].token))
               for n, p in state.scheduler.plans.items()}
    left = sim.written - sim.garbage - sim.referenced()
    assert left <= current, "a file nothing references and no attempt wants was kept"
    assert sim.garbage, "the simulation made no garbage"


# ---- the store side ----------------------------------------------------------------------

def test_listing_and_removing_touch_only_our_entries(tmp_path: Path) -> None:
    shard0 = tmp_path / "shard-0"
    shard0.mkdir()
    (shard0 / f"{L0(0, 1, 2)}.parquet").write_bytes(b"x")
    (shard0 / f".{out(4)}.abc.tmp").write_bytes(b"x")
    scratch = shard0 / f".{out(4)}.def{SCRATCH_SUFFIX}"
    (scratch / "rows").mkdir(parents=True)
    (scratch / "rows" / "part-0.parquet").write_bytes(b"x")
    (shard0 / "notes.txt").write_bytes(b"x")
    (tmp_path / "shard-x").mkdir()
    (tmp_path / "shard-x" / f"{L0(0, 5, 6)}.parquet").write_bytes(b"x")
    (tmp_path / "raft").mkdir()
    listed = gc.list_store(str(tmp_path))
    assert [(f.block_id, f.kind) for f in listed] == [
        (out(4), "temp"), (out(4), "scratch"), (L0(0, 1, 2), "block")]
    assert gc.remove(str(tmp_path), listed) == listed
    assert gc.remove(str(tmp_path), listed) == []  # already gone
    assert sorted(os.listdir(shard0)) == ["notes.txt"]
    assert gc.list_store(str(tmp_path / "missing")) == []
