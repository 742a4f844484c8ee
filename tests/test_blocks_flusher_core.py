"""The level-0 flusher's pure core (actors/blocks/flusher_core.py).

Tables of each rule (sync, reads, the size/age thresholds and the pending bound, the
cursor a flush proposes, watermark skips, retries with and without a resync, leadership
changes and stale outcomes), then a seeded simulation against the real metastore
machine: a KV history that keeps growing, reads, writes and proposals that fail, lose
their answer or commit late (a former leader's flush), leaders that change; at the end
every committed row is in exactly one live block and the cursor is the head.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from sediment.actors.blocks import flusher_core as fc
from sediment.actors.blocks import metastore as ms
from sediment.actors.blocks.errors import MetastoreError
from sediment.actors.blocks.meta import BlockMeta, FlushPolicy, level0_block_id, shard_for_key
from sediment.actors.blocks.service import AddBlocksResult, MetastoreConfig
from sediment.actors.log.raft.types import Entry

SHARDS = 3
POLICY = FlushPolicy(max_rows=3, max_bytes=0, max_age=5.0)
CONFIG = fc.FlushConfig(SHARDS, POLICY, read_batch=10, max_pending_rows=12, retry_interval=1.0)


def key_of(shard: int, n: int = 0) -> bytes:
    """A key that lands in `shard` (the n-th such key)."""
    found = [k for k in (f"k{i}".encode() for i in range(200))
             if shard_for_key(k, SHARDS) == shard]
    return found[n]


A, B, C = key_of(0), key_of(1), key_of(2)


def feed(state: fc.FlusherState, *events: fc.Event) -> tuple[fc.FlusherState, list[fc.Effect]]:
    out: list[fc.Effect] = []
    for ev in events:
        state, fx = fc.step(state, ev)
        out += fx
    return state, out


def synced(cursor: int = 0, flushed: tuple[tuple[int, int], ...] = (),
           config: fc.FlushConfig = CONFIG) -> fc.FlusherState:
    """A flusher that synced at `cursor` and asked for the rows above it."""
    s, fx = feed(fc.initial(config), fc.Start(0.0, 1))
    assert fx == [fc.ReadCursor(1)]
    s, fx = feed(s, fc.CursorRead(1, cursor, flushed, 0.0))
    assert fx == [fc.ReadHistory(1, cursor + 1, min(config.read_batch, config.max_pending_rows))]
    return s


def rows(*spec: tuple[int, bytes]) -> tuple[fc.Row, ...]:
    return tuple((rev, key, b"v%d" % rev) for rev, key in spec)


def read(s: fc.FlusherState, got: tuple[fc.Row, ...], through: int, now: float = 1.0,
         more: bool = False) -> tuple[fc.FlusherState, list[fc.Effect]]:
    return feed(s, fc.HistoryRead(s.epoch, got, through, more, now))


# ---- sync and reads ------------------------------------------------------------------


def test_config_is_checked() -> None:
    for bad in ({"shards": 0}, {"read_batch": 0}, {"max_pending_rows": -1},
                {"retry_interval": 0.0}, {"shards": 5000}, {"policy": None}):
        args: dict[str, Any] = {"shards": 2, **bad}
        with pytest.raises(ValueError):
            fc.FlushConfig(**args)


def test_nothing_happens_before_start_or_after_stop() -> None:
    s = fc.initial(CONFIG)
    assert feed(s, fc.Tick(5.0)) == (s, [])
    s = synced()
    s, fx = feed(s, fc.Stop(1.0))
    assert fx == [] and s.phase == "stopped" and not s.pending
    assert feed(s, fc.Tick(50.0)) == (s, [])


def test_a_read_that_found_everything_waits_for_the_tick() -> None:
    s = synced()
    s, fx = read(s, rows((1, A)), through=4)
    assert fx == [] and s.phase == "idle" and s.read_through == 4
    s, fx = feed(s, fc.Tick(1.5))
    assert fx == [fc.ReadHistory(1, 5, 10)]


def test_a_full_batch_is_followed_by_another_read_at_once() -> None:
    s = synced()
    s, fx = read(s, rows((1, A), (2, A)), through=2, more=True)
    assert fx == [fc.ReadHistory(1, 3, 10)]


def test_reads_stop_at_the_pending_bound() -> None:
    config = replace(CONFIG, policy=FlushPolicy(0, 0, 0), max_pending_rows=4)
    s = synced(config=config)
    s, fx = read(s, rows((1, A), (2, B), (3, C)), through=3, more=True)
    assert fx == [fc.ReadHistory(1, 4, 1)]  # one row of room left


def test_rows_at_or_below_their_shards_watermark_are_skipped() -> None:
    """A flush committed after the cursor was read (a former leader's): its rows are in
    blocks already and must not be flushed twice."""
    s = synced(cursor=10, flushed=((0, 14),))
    s, _ = read(s, rows((12, A), (13, B), (15, A)), through=15)
    assert [r[0] for r in s.pending[0].rows] == [15]
    assert [r[0] for r in s.pending[1].rows] == [13]


# ---- thresholds -----------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "got", "now", "due"), [
    (FlushPolicy(3, 0, 0), ((1, A), (2, A), (3, A), (4, B)), 1.0, (0,)),  # rows
    (FlushPolicy(3, 0, 0), ((1, A), (2, A), (4, B)), 1.0, ()),
    (FlushPolicy(0, 40, 0), ((1, A), (2, B), (3, B)), 1.0, (1,)),  # bytes: 21 a row
    (FlushPolicy(0, 40, 0), ((1, A), (2, B)), 1.0, ()),
    (FlushPolicy(0, 0, 5.0), ((1, A), (2, B)), 4.9, ()),  # age: not yet
    (FlushPolicy(0, 0, 5.0), ((1, A), (2, B)), 5.0, (0, 1)),  # age: both read at 0
    (FlushPolicy(0, 0, 0), ((1, A), (2, B)), 99.0, ()),  # every threshold disabled
])
def test_a_shard_is_flushed_when_its_rows_are_due(policy: FlushPolicy,
                                                  got: tuple[tuple[int, bytes], ...],
                                                  now: float, due: tuple[int, ...]) -> None:
    s = synced(config=replace(CONFIG, policy=policy))
    s, fx = read(s, rows(*got), through=got[-1][0], now=0.0)
    s, fx = feed(s, fc.Tick(now)) if not fx else (s, fx)
    writes = [e for e in fx if isinstance(e, fc.WriteBlocks)]
    assert [shard for w in writes for shard, _ in w.batches] == list(due)


def test_the_pending_bound_flushes_every_shard() -> None:
    config = replace(CONFIG, policy=FlushPolicy(0, 0, 0), max_pending_rows=3)
    s = synced(config=config)
    s, fx = read(s, rows((1, A), (2, B), (3, C)), through=3)
    [write] = fx
    assert isinstance(write, fc.WriteBlocks)
    assert [shard for shard, _ in write.batches] == [0, 1, 2]


# ---- the cursor ---------------------------------------------------------------------


def flush(s: fc.FlusherState, now: float = 1.0) -> tuple[fc.FlusherState, fc.ProposeFlush]:
    """Answer the pending WriteBlocks with made-up metadata; the ProposeFlush."""
    assert s.phase == "writing" and s.inflight is not None
    blocks = tuple(meta(shard, s.pending[shard].rows) for shard in s.inflight.shards)
    s, fx = feed(s, fc.BlocksWritten(s.epoch, blocks, now))
    [proposal] = fx
    assert isinstance(proposal, fc.ProposeFlush) and proposal.blocks == blocks
    return s, proposal


def meta(shard: int, got: tuple[fc.Row, ...]) -> BlockMeta:
    revs = [r[0] for r in got]
    keys = sorted(r[1] for r in got)
    return BlockMeta(level0_block_id(shard, min(revs), max(revs)), shard, 0, min(revs),
                     max(revs), keys[0], keys[-1], len(got), 100, 1.0)


def test_a_flush_claims_only_up_to_the_oldest_row_still_pending_elsewhere() -> None:
    s = synced(cursor=10)
    s, _ = read(s, rows((11, A), (12, B), (13, A), (14, A), (15, C)), through=17)
    s, proposal = flush(s)  # shard 0 has 3 rows: due; B (12) and C (15) wait
    assert proposal.through == 11
    s, fx = feed(s, fc.FlushDone(s.epoch, 11, 2.0))
    assert fx[0] == fc.Flushed(1, 3, 11)
    assert s.cursor == 11 and s.flushed == {0: 14} and sorted(s.pending) == [1, 2]


def test_flushing_everything_claims_all_that_was_read() -> None:
    s = synced(cursor=10)
    s, _ = read(s, rows((11, A), (12, B)), through=20, now=0.0)
    s, fx = feed(s, fc.Tick(5.0))  # both aged
    s, proposal = flush(s)
    assert proposal.through == 20
    s, fx = feed(s, fc.FlushDone(s.epoch, 20, 5.5))
    assert s.cursor == 20 and not s.pending and s.phase == "idle"


def test_with_every_row_skipped_only_the_cursor_moves() -> None:
    s = synced(cursor=10, flushed=((0, 30),))
    s, fx = read(s, rows((11, A), (12, A)), through=25)
    assert fx == [fc.ProposeFlush(s.epoch, (), 25)]
    s, fx = feed(s, fc.FlushDone(s.epoch, 25, 2.0))
    assert s.cursor == 25 and fx[0] == fc.Flushed(0, 0, 25)


def test_a_cursor_someone_else_moved_means_a_resync() -> None:
    """The metastore's cursor after our flush is not ours: a former leader's flush
    committed meanwhile, so what is pending here may be in blocks already."""
    s = synced(cursor=10)
    s, _ = read(s, rows((11, A), (12, A), (13, A)), through=13)
    s, proposal = flush(s)
    s, fx = feed(s, fc.FlushDone(s.epoch, 40, 2.0))
    assert fx == [fc.ReadCursor(2)] and s.phase == "syncing" and not s.pending


# ---- failures and retries ------------------------------------------------------------


@pytest.mark.parametrize(("what", "resync"), [
    ("read", False), ("write", False), ("flush", True), ("cursor", True)])
def test_a_failure_backs_off_and_resyncs_only_after_a_proposal(what: fc.Failure,
                                                               resync: bool) -> None:
    s = synced(cursor=10)
    if what == "cursor":
        s, _ = feed(s, fc.Start(0.5, 2))
    elif what != "read":
        s, _ = read(s, rows((11, A), (12, A), (13, A)), through=13)
        if what == "flush":
            s, _ = flush(s)
    before = s.pending
    s, fx = feed(s, fc.Failed(s.epoch, what, "boom", 3.0))
    assert fx == [fc.Problem(what, "boom")] and s.phase == "backoff"
    assert feed(s, fc.Tick(3.5)) == (s, [])  # the backoff is not over
    s, fx = feed(s, fc.Tick(4.0))
    if resync:
        assert fx == [fc.ReadCursor(s.epoch)] and not s.pending
    else:
        assert s.pending == before
        assert fx and isinstance(fx[0], fc.WriteBlocks | fc.ReadHistory)


def test_a_retried_flush_after_a_lost_answer_uses_what_the_metastore_says() -> None:
    """The answer of the AddBlocks was lost but it committed: the resync reads the new
    cursor and watermarks, and nothing is flushed twice."""
    s = synced(cursor=10)
    s, _ = read(s, rows((11, A), (12, A), (13, A), (14, B)), through=14)
    s, _ = flush(s)  # through 13
    s, _ = feed(s, fc.Failed(s.epoch, "flush", "timeout", 2.0), fc.Tick(3.0))
    s, fx = feed(s, fc.CursorRead(s.epoch, 13, ((0, 13),), 3.1))
    assert fx == [fc.ReadHistory(s.epoch, 14, 10)]
    s, _ = read(s, rows((14, B)), through=14)
    assert list(s.pending) == [1] and s.cursor == 13


@pytest.mark.parametrize("late", [
    fc.CursorRead(1, 99, (), 1.0),
    fc.HistoryRead(1, ((11, b"a", b"x"),), 11, False, 1.0),
    fc.BlocksWritten(1, (), 1.0),
    fc.FlushDone(1, 99, 1.0),
    fc.Failed(1, "flush", "late", 1.0),
])
def test_outcomes_of_an_older_epoch_are_ignored(late: fc.Event) -> None:
    s = synced(cursor=10)
    s, fx = feed(s, fc.Start(0.5, 2))  # a new term: epoch 2
    assert fx == [fc.ReadCursor(2)]
    assert feed(s, late) == (s, [])


def test_outcomes_in_the_wrong_phase_are_ignored() -> None:
    s = synced(cursor=10)  # reading
    assert feed(s, fc.FlushDone(s.epoch, 11, 1.0)) == (s, [])
    assert feed(s, fc.BlocksWritten(s.epoch, (), 1.0)) == (s, [])
    assert feed(s, fc.Failed(s.epoch, "write", "x", 1.0)) == (s, [])


# ---- leadership -----------------------------------------------------------------------


def test_a_new_term_drops_what_is_pending_and_resyncs() -> None:
    s = synced(cursor=10)
    s, _ = read(s, rows((11, A), (12, A), (13, A)), through=13)
    s, _ = flush(s)
    s, fx = feed(s, fc.Start(2.0, 2))
    assert fx == [fc.ReadCursor(2)] and s.term == 2 and not s.pending and s.inflight is None


def test_an_older_or_repeated_start_is_ignored() -> None:
    s = synced()
    s2, _ = feed(s, fc.Start(1.0, 2))
    assert feed(s2, fc.Start(1.0, 1)) == (s2, [])
    assert feed(s2, fc.Start(1.0, 2)) == (s2, [])


# ---- a seeded simulation against the real metastore machine --------------------------


@dataclass
class World:
    """A growing committed history, the metastore machine, and block "files"."""

    rng: random.Random
    history: list[fc.Row] = field(default_factory=list)
    machine: ms.MetastoreMachine = field(default_factory=lambda: ms.metastore(
        "", MetastoreConfig()))
    files: dict[str, tuple[fc.Row, ...]] = field(default_factory=dict)
    late: list[Any] = field(default_factory=list)  # proposals that commit later
    term: int = 1
    faults: bool = True

    def write(self, n: int) -> None:
        rev = self.history[-1][0] if self.history else 0
        for _ in range(n):
            rev += self.rng.randrange(1, 4)  # revisions with no rows between (reads, ...)
            for key in self.rng.sample([b"a", b"b", b"c", b"d", b"e", b"f"],
                                       self.rng.choice((1, 1, 2))):
                value = None if self.rng.random() < 0.2 else b"v%d" % rev
                self.history.append((rev, key, value))

    def commit(self, command: Any) -> Any:
        entry = Entry(self.machine.applied + 1, self.term, 0.0, command)
        return self.machine.apply(entry)

    def fail(self, p: float) -> bool:
        return self.faults and self.rng.random() < p

    def run(self, effect: fc.Effect, now: float) -> fc.Event | None:
        if isinstance(effect, fc.ReadCursor):
            if self.fail(0.1):
                return fc.Failed(effect.epoch, "cursor", "no leader", now)
            cursor = self.commit(ms.ReadFlushCursor())
            return fc.CursorRead(effect.epoch, cursor.through, cursor.flushed, now)
        if isinstance(effect, fc.ReadHistory):
            if self.fail(0.1):
                return fc.Failed(effect.epoch, "read", "kv down", now)
            return self.read(effect, now)
        if isinstance(effect, fc.WriteBlocks):
            if self.fail(0.1):
                return fc.Failed(effect.epoch, "write", "disk", now)
            metas = []
            for shard, got in effect.batches:
                block = meta(shard, got)
                assert self.files.setdefault(block.id, got) == got, "a block id, other rows"
                metas.append(block)
            return fc.BlocksWritten(effect.epoch, tuple(metas), now)
        if isinstance(effect, fc.ProposeFlush):
            command = ms.AddBlocks(effect.blocks, effect.through)
            if self.fail(0.1):
                self.late.append(command)  # appended, commits after a leader change
                return fc.Failed(effect.epoch, "flush", "no answer", now)
            result = self.commit(command)
            if self.fail(0.1):
                return fc.Failed(effect.epoch, "flush", "answer lost", now)
            if isinstance(result, MetastoreError):
                return fc.Failed(effect.epoch, "flush", str(result), now)
            assert isinstance(result, AddBlocksResult)
            return fc.FlushDone(effect.epoch, result.through, now)
        return None

    def read(self, effect: fc.ReadHistory, now: float) -> fc.Event:
        """The KV machine's flush_rows: whole revisions, up to max_rows rows."""
        above = [r for r in self.history if r[0] >= effect.lo]
        head = self.history[-1][0] if self.history else 0
        if len(above) <= effect.max_rows:
            return fc.HistoryRead(effect.epoch, tuple(above), head, False, now)
        cut = above[effect.max_rows][0]
        through = max(cut - 1, above[0][0])
        got = tuple(r for r in above if r[0] <= through)
        return fc.HistoryRead(effect.epoch, got, through, True, now)


def drive(world: World, state: fc.FlusherState, event: fc.Event,
          now: float) -> fc.FlusherState:
    events = [event]
    while events:
        state, effects = fc.step(state, events.pop(0))
        for effect in effects:
            follow = world.run(effect, now)
            if follow is not None:
                events.append(follow)
    return state


@pytest.mark.parametrize("seed", range(60))
def test_seeded_flushes_put_every_row_in_exactly_one_block(seed: int) -> None:
    rng = random.Random(seed)
    world = World(rng)
    config = fc.FlushConfig(SHARDS, FlushPolicy(max_rows=rng.choice((2, 4, 8)), max_bytes=0,
                                                max_age=rng.choice((0.5, 2.0))),
                            read_batch=rng.choice((1, 3, 10)), max_pending_rows=12,
                            retry_interval=1.0)
    state = drive(world, fc.initial(config), fc.Start(0.0, 1), 0.0)
    now = 0.0
    for _ in range(150):
        now += 0.5
        if rng.random() < 0.5:
            world.write(rng.randrange(1, 4))
        if rng.random() < 0.05:  # a new KV leader: its flusher starts from the cursor
            world.term += 1
            for command in world.late:  # the old leader's proposals commit (or fail)
                world.commit(command)
            world.late.clear()
            state = drive(world, fc.initial(config), fc.Start(now, world.term), now)
        state = drive(world, state, fc.Tick(now), now)
        cursor = world.machine.state.flushed_through
        assert_flushed(world, cursor)
    world.faults = False  # quiet: everything must end up flushed
    for command in world.late:
        world.commit(command)
    for _ in range(40):
        now += 3.0
        state = drive(world, state, fc.Tick(now), now)
    head = world.history[-1][0]
    assert world.machine.state.flushed_through == head, (state, head)
    assert_flushed(world, head, exact=True)


def assert_flushed(world: World, cursor: int, exact: bool = False) -> None:
    """Every row at or below the cursor is in exactly one live block (no block
    compaction runs here, so every level-0 block stays live); no row twice."""
    live = [b for shard in world.machine.state.index.shards.values() for b in shard.values()]
    held = [(r[0], r[1]) for b in live for r in world.files[b.id]]
    assert len(held) == len(set(held)), "a row in two live blocks"
    wanted = {(r[0], r[1]) for r in world.history if r[0] <= cursor}
    assert wanted <= set(held), sorted(wanted - set(held))[:5]
    if exact:
        assert set(held) == {(r[0], r[1]) for r in world.history}
    contents = {(r[0], r[1]): r for b in live for r in world.files[b.id]}
    assert all(contents[(r[0], r[1])] == r for r in world.history if r[0] <= cursor)
