"""A KV cluster with its block tier (Cluster.start(blocks=BlockTier(...))) end to end:
committed history flushed into level-0 blocks by the flusher beside the KV leader, the
KV's compaction held at or below the flushed history, the blocks compacted level by
level, and reads below the KV's compaction answered through the KV client.

The main scenario writes through the client while flushes, KV compaction cycles and
block merges run, crashes the flusher between writing its blocks and proposing them,
kills the KV leader's raft member, then checks that every committed row is in exactly
one live block (or was merged away below the blocks' compaction revision) and still in
the hot store above the KV's compaction, and that reads at old revisions answer what
the KV answered before it compacted. Backend-parametrized through `rt`.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import eventually

from sediment.actors.blocks import block as blk
from sediment.actors.blocks.meta import FlushPolicy
from sediment.actors.blocks.planner import LevelConfig, PlannerConfig
from sediment.actors.blocks.scheduler import SchedulerConfig
from sediment.actors.blocks.shell.flusher import BEFORE_PROPOSE
from sediment.actors.blocks.shell.names import flusher_name
from sediment.actors.blocks.shell.tier import BlockTier
from sediment.actors.blocks.worker import WorkerConfig
from sediment.actors.kv.cluster import Client, Cluster
from sediment.actors.kv.errors import ErrCompacted, ErrFutureRev, ErrNotFlushed, InvalidRequest
from sediment.actors.kv.names import KV_GROUP
from sediment.actors.kv.types import ALL_KEYS, Put, RangeResult
from sediment.actors.log.shell.names import raft_name

TIER = BlockTier(
    shards=3,
    flush=FlushPolicy(max_rows=6, max_bytes=0, max_age=1.0),
    workers_per_node=1,
    planner=PlannerConfig(levels=(LevelConfig(3, 2.0), LevelConfig(3, 4.0)), cleanup_delay=2.0),
    scheduler=SchedulerConfig(lease_duration=8.0),
    worker=WorkerConfig(capacity=2, poll_interval=2.0),
    flush_tick=0.2,
    tuning={"cleanup_interval": 2.0},
)
KEYS = [b"a", b"b", b"c", b"d", b"e", b"f", b"g"]
Row = tuple[int, bytes, bytes | None]


class Model:
    """Every row the client's writes committed, and what a read at each revision
    answered right after it was written (before any compaction could reach it)."""

    def __init__(self, kv: Client) -> None:
        self.kv = kv
        self.rows: list[Row] = []
        self.answers: dict[int, RangeResult] = {}
        self.n = 0

    def write(self) -> int:
        """One write, picked by a counter (deterministic on any backend)."""
        self.n += 1
        n, kv = self.n, self.kv
        key = KEYS[(n * 5) % len(KEYS)]
        if n % 9 == 0:
            res = kv.delete(key, prev_kv=True)
            if not res.deleted:
                return self.write()
            rev = res.revision
            self.rows += [(rev, p.key, None) for p in res.prev_kvs]
        elif n % 13 == 0:
            res = kv.delete(b"b", b"e", prev_kv=True)  # a range delete: several rows
            if not res.deleted:
                return self.write()
            rev = res.revision
            self.rows += [(rev, p.key, None) for p in res.prev_kvs]
        elif n % 7 == 0:
            other = KEYS[(n * 3 + 1) % len(KEYS)]
            res_txn = kv.txn([], [Put(key, b"t%d" % n), Put(other, b"u%d" % n)])
            rev = res_txn.revision
            self.rows += sorted([(rev, key, b"t%d" % n), (rev, other, b"u%d" % n)])
        else:
            rev = kv.put(key, b"v%d" % n).revision
            self.rows.append((rev, key, b"v%d" % n))
        self.answers[rev] = kv.range(b"\0", ALL_KEYS, revision=rev)
        return rev

    def events(self, key: bytes, start: int) -> list[tuple[int, str, bytes]]:
        return [(rev, "delete" if v is None else "put", v or b"")
                for rev, k, v in self.rows if k == key and rev >= start]


def start(rt: Any, tmp_path: Path, tier: BlockTier = TIER, **kw: Any) -> Cluster:
    return Cluster.start(runtime=rt, data_dir=str(tmp_path / "kv"), compaction_interval=1.0,
                         blocks=tier, **kw)


def compact_revision(cluster: Cluster) -> int:
    views = [cluster.node(n).status() for n in cluster.nodes]
    return min(v["compact_revision"] for v in views if v is not None)


def flusher_pid(cluster: Cluster) -> Any:
    leader = cluster.leader()
    return None if leader is None else cluster.rt.whereis(flusher_name(leader))


def live_rows(cluster: Cluster) -> list[Row]:
    assert cluster.blocks is not None
    out: list[Row] = []
    for meta in cluster.blocks.client().blocks():
        out += [(r.revision, r.key, r.value)
                for r in blk.table_rows(blk.read_block(cluster.blocks.root, meta))]
    return out


def test_flush_hold_failover_and_history_reads(rt: Any, tmp_path: Path) -> None:
    cluster = start(rt, tmp_path)
    assert cluster.blocks is not None
    kv, blocks = cluster.client(), cluster.blocks.client()
    model = Model(kv)

    first = model.write()
    with pytest.raises(ErrNotFlushed):  # not flushed yet: the hot store keeps it
        kv.compact(first)
    for _ in range(13):
        model.write()
    assert eventually(rt, lambda: compact_revision(cluster) >= model.rows[-1][0] - 1,
                      timeout=60)
    assert compact_revision(cluster) <= blocks.flush_cursor().through

    # the flusher crashes with its blocks written and the AddBlocks not proposed
    victim = flusher_pid(cluster)
    assert victim is not None
    rt.arm_failpoint(victim, BEFORE_PROPOSE, "crash")
    for _ in range(10):
        model.write()
    assert eventually(rt, lambda: flusher_pid(cluster) not in (None, victim), timeout=60)
    block_floor = model.rows[len(model.rows) // 3][0]
    blocks.set_compaction_revision(block_floor)  # merges from now on drop history below

    # the KV leader's raft member dies (its flusher and coordinator with it)
    leader = cluster.wait_ready()
    cluster.node(leader).kill_process(f"raft:{KV_GROUP}")
    for _ in range(10):
        model.write()
    head = model.rows[-1][0]

    def settled() -> bool:
        cursor = blocks.flush_cursor().through
        return cursor >= head and compact_revision(cluster) >= head - 1 and blocks.idle()

    assert eventually(rt, settled, timeout=120), (blocks.flush_cursor(), blocks.queues())
    assert any(b.level >= 1 for b in blocks.blocks())
    kv_floor = compact_revision(cluster)

    # every committed row in exactly one live block, unless a merge at the blocks'
    # compaction revision dropped it (a row superseded at or below it); no other rows
    held = live_rows(cluster)
    counts = Counter((rev, key) for rev, key, _ in held)
    assert all(n == 1 for n in counts.values()), [k for k, n in counts.items() if n > 1]
    assert {(rev, key) for rev, key, _ in held} <= {(rev, key) for rev, key, _ in model.rows}
    by_id = {(rev, key): value for rev, key, value in held}
    latest_at_floor = {key: rev for rev, key, _ in model.rows if rev <= block_floor}
    for rev, key, value in model.rows:
        if rev > block_floor or latest_at_floor[key] == rev:
            assert by_id.get((rev, key), "missing") == value, (rev, key)
    # ... and the hot store still holds every row above its compaction revision
    hot = rt.call(raft_name(KV_GROUP, cluster.nodes[0]),
                  ("query", ("events", kv_floor + 1, head, b"\0", ALL_KEYS)))
    assert [(e.kv.mod_revision, e.kv.key) for e in hot] == [
        (rev, key) for rev, key, _ in model.rows if rev > kv_floor]

    # reads at old revisions answer what the KV answered before it compacted
    for rev, expected in model.answers.items():
        if rev < block_floor:
            with pytest.raises(ErrCompacted) as info:
                kv.range(b"\0", ALL_KEYS, revision=rev)
            assert info.value.compact_revision == block_floor
            continue
        got = kv.range(b"\0", ALL_KEYS, revision=rev)
        assert (got.kvs, got.count) == (expected.kvs, expected.count), rev
    for rev in sorted(model.answers)[-12::4]:  # a member's own skeleton, too
        serial = kv.range(b"\0", ALL_KEYS, revision=rev, serializable=True, node="n2")
        assert serial.kvs == model.answers[rev].kvs
    for key in KEYS:
        got_events = kv.history(key, start_revision=block_floor)
        assert [(e.kv.mod_revision, e.kind, e.kv.value) for e in got_events] == model.events(
            key, block_floor)
    with pytest.raises(ErrCompacted):
        kv.history(b"a", start_revision=block_floor - 1)
    whole = kv.history(b"\0", ALL_KEYS, start_revision=block_floor, end_revision=head)
    assert [(e.kv.mod_revision, e.kv.key) for e in whole] == [
        (rev, key) for rev, key, _ in model.rows if rev >= block_floor]
    with pytest.raises(ErrFutureRev):
        kv.range(b"a", revision=head + 100)
    with pytest.raises(ErrFutureRev):
        kv.history(b"a", start_revision=head + 100)
    with pytest.raises(InvalidRequest):
        kv.history(b"", start_revision=1)
    with pytest.raises(ErrNotFlushed):
        kv.compact(head + 50)


def test_a_stalled_flusher_holds_the_kv_compaction(rt: Any, tmp_path: Path) -> None:
    """The flusher pauses with its blocks written and not proposed: the cursor stands
    still, and the KV's compaction cycles stay at or below it while writes go on; once
    the flush commits, compaction moves up to the new cursor."""
    cluster = start(rt, tmp_path)
    assert cluster.blocks is not None
    kv, blocks = cluster.client(), cluster.blocks.client()
    for i in range(8):
        kv.put(KEYS[i % 3], b"%d" % i)

    def caught_up() -> bool:  # the KV compacts up to head - 1 at most (no watch: min = head)
        through = blocks.flush_cursor().through
        return through > 0 and compact_revision(cluster) >= through - 1

    assert eventually(rt, caught_up, timeout=60)
    stalled = flusher_pid(cluster)
    assert stalled is not None
    rt.arm_failpoint(stalled, BEFORE_PROPOSE, "pause")
    held = blocks.flush_cursor().through
    head = 0
    for i in range(10):
        head = kv.put(KEYS[i % 3], b"x%d" % i).revision
    rt.sleep(5.0)  # several compaction cycles
    assert blocks.flush_cursor().through == held < head
    assert compact_revision(cluster) <= held
    with pytest.raises(ErrNotFlushed):
        kv.compact(head)
    rt.release_failpoint(stalled, BEFORE_PROPOSE)
    assert eventually(rt, lambda: compact_revision(cluster) >= head - 1, timeout=60)
    assert blocks.flush_cursor().through >= head


def test_without_a_block_tier_old_reads_stay_compacted(rt: Any, tmp_path: Path) -> None:
    cluster = Cluster.start(runtime=rt, data_dir=str(tmp_path / "kv"))
    assert cluster.blocks is None
    kv = cluster.client()
    r1 = kv.put(b"a", b"1").revision
    r2 = kv.put(b"a", b"2").revision
    assert [e.kv.value for e in kv.history(b"a", start_revision=r1)] == [b"1", b"2"]
    kv.compact(r2)
    with pytest.raises(ErrCompacted):
        kv.range(b"a", revision=r1)
    with pytest.raises(ErrCompacted) as info:
        kv.history(b"a", start_revision=r1)
    assert info.value.compact_revision == r2
    assert [e.kv.value for e in kv.history(b"a", start_revision=r2)] == [b"2"]
