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

Garbage: a flusher that dies between writing and proposing is followed by one that
rewrites the same blocks and keeps the files on disk (the index describes them, with
their first `created_at` and checksum); the leader's cleanup collects the outputs of a
fenced worker and the level-0 files of a crashed flusher that were never added, plus
leftover temporary files, and never a live block, while no row is lost.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import eventually, sim_unless_ray_all

from sediment.actors.blocks import block as blk
from sediment.actors.blocks.meta import (
    FlushPolicy,
    Level0Name,
    compacted_block_id,
    level0_block_id,
    parse_block_id,
)
from sediment.actors.blocks.planner import LevelConfig, PlannerConfig
from sediment.actors.blocks.scheduler import SchedulerConfig
from sediment.actors.blocks.shell.compaction_worker import BEFORE_MERGE, BEFORE_REPORT
from sediment.actors.blocks.shell.flusher import BEFORE_PROPOSE
from sediment.actors.blocks.shell.names import flusher_name
from sediment.actors.blocks.shell.tier import BlockTier
from sediment.actors.blocks.worker import WorkerConfig
from sediment.actors.kv.errors import ErrCompacted, ErrFutureRev, ErrNotFlushed, InvalidRequest
from sediment.actors.kv.names import KV_GROUP
from sediment.actors.kv.queries import Events
from sediment.actors.kv.types import ALL_KEYS, Put, RangeResult
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Query
from sediment.wiring.client import Client
from sediment.wiring.cluster import Cluster

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


# The first test is this file's Ray half in CI (the whole tier, failover and history
# reads on real processes); the others run on Ray with SEDIMENT_RAY_ALL=1.
SIM_ONLY = sim_unless_ray_all()


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
                  Query(Events(kv_floor + 1, head, b"\0", ALL_KEYS)))
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


@SIM_ONLY
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
    # the last rows follow on the flush policy's age threshold, not at once
    assert eventually(rt, lambda: blocks.flush_cursor().through >= head, timeout=60)


@SIM_ONLY
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


# ---- retried flushes and garbage -------------------------------------------------------


def block_files(cluster: Cluster) -> dict[str, bytes]:
    """Every block file on disk by id, with its bytes."""
    assert cluster.blocks is not None
    return {p.stem: p.read_bytes() for p in Path(cluster.blocks.root).glob("shard-*/*.parquet")}


def unadded_level0(cluster: Cluster) -> dict[str, bytes]:
    """Level-0 files on disk that the index neither lists nor has tombstoned."""
    assert cluster.blocks is not None
    client = cluster.blocks.client()
    known = {b.id for b in client.blocks()}
    known |= {b for t in client.tombstones() for b in t.blocks}
    return {bid: data for bid, data in block_files(cluster).items()
            if isinstance(parse_block_id(bid), Level0Name) and bid not in known}


def pause_flusher_with_blocks_written(cluster: Cluster, write: Any) -> tuple[Any, dict[str, bytes]]:
    """Arm the flusher to stop before proposing, write until it has written blocks it
    has not proposed; (the flusher, those files)."""
    rt = cluster.rt
    victim = flusher_pid(cluster)
    assert victim is not None
    rt.arm_failpoint(victim, BEFORE_PROPOSE, "pause")
    for _ in range(20):
        write()
        rt.sleep(2.0)  # past the flush age: what is due is written before more comes
        if unadded_level0(cluster):
            break
    written = unadded_level0(cluster)
    assert written
    rt.sleep(1.0)
    assert unadded_level0(cluster) == written  # stopped there
    return victim, written


# flushes by age only, and no merges: what a flusher writes is all it read, and stays L0
STILL = replace(TIER, flush=FlushPolicy(max_rows=0, max_bytes=0, max_age=1.0),
                planner=PlannerConfig(levels=(LevelConfig(100, 1000.0),)))


@SIM_ONLY
def test_a_retried_flush_keeps_the_files_on_disk(rt: Any, tmp_path: Path) -> None:
    """The flusher dies between writing its blocks and proposing them; its successor
    flushes the same rows under the same ids a little later: the files on disk stay as
    they are, and the index describes them (first created_at, same checksum). Until
    then the cleanup leaves them alone: an AddBlocks may still add them."""
    cluster = start(rt, tmp_path, tier=STILL)
    assert cluster.blocks is not None
    kv, blocks = cluster.client(), cluster.blocks.client()
    n = iter(range(10_000))
    heads: list[int] = []

    def burst() -> None:  # rows the flusher reads in full before they are due
        heads.extend(kv.put(KEYS[next(n) % 4], b"v").revision for _ in range(6))

    victim, written = pause_flusher_with_blocks_written(cluster, burst)
    rt.sleep(6.0)  # several cleanup passes: nothing written and not yet added goes
    assert {bid: block_files(cluster).get(bid) for bid in written} == written
    killed_at = rt.now()
    rt.kill(victim)
    assert eventually(rt, lambda: blocks.flush_cursor().through >= heads[-1], timeout=60)
    live = {b.id: b for b in blocks.blocks()}
    reused = sorted(set(written) & set(live))
    assert reused, (sorted(written), sorted(live))
    for bid in reused:
        meta = live[bid]
        assert meta.checksum == blk.file_checksum(written[bid]) and meta.created_at < killed_at
        assert block_files(cluster)[bid] == written[bid]
        blk.read_block(cluster.blocks.root, meta)
    assert set(block_files(cluster)) == set(live)


GC_TIER = replace(
    TIER,
    planner=PlannerConfig(levels=(LevelConfig(3, 2.0), LevelConfig(3, 4.0)), cleanup_delay=2.0,
                          cleanup_batch_size=0),  # tombstones stay listed: "ever live"
    scheduler=SchedulerConfig(lease_duration=4.0),
    worker=WorkerConfig(capacity=2, poll_interval=1.0),
    tuning={"cleanup_interval": 1.0, "orphan_batch": 16},
)


@SIM_ONLY
def test_garbage_of_fenced_workers_and_crashed_flushers_is_collected(
        rt: Any, tmp_path: Path) -> None:
    cluster = start(rt, tmp_path, tier=GC_TIER)
    bc = cluster.blocks
    assert bc is not None
    kv, blocks = cluster.client(), bc.client()
    model = Model(kv)
    root = Path(bc.root)

    # a worker finishes its merge, then stops before reporting until its lease is gone
    for pid in bc.workers():
        rt.arm_failpoint(pid, BEFORE_MERGE, "pause")
    held: list[tuple[Any, Any, int]] = []

    def a_job_is_held() -> bool:
        model.write()
        held[:] = [(job, pid, token) for job in blocks.jobs()
                   for pid, token in bc.holders(job.state.name).items()]
        return bool(held)

    assert eventually(rt, a_job_is_held, timeout=60, step=0.5)
    job, first, token1 = held[0]
    name = job.state.name
    rt.arm_failpoint(first, BEFORE_REPORT, "pause")
    rt.release_failpoint(first, BEFORE_MERGE)
    stale = compacted_block_id(job.shard, job.state.level, job.source_blocks, token1)

    def moved() -> bool:
        now = {j.state.name: j.state.token for j in blocks.jobs()}
        return now.get(name, token1 + 1) > token1

    assert eventually(rt, moved, timeout=60, step=0.5)
    for pid in bc.workers():
        rt.release_failpoint(pid, BEFORE_MERGE)

    # the flusher dies with blocks written and not proposed; rows go on arriving
    victim, crashed = pause_flusher_with_blocks_written(cluster, model.write)
    for _ in range(8):
        model.write()
    rt.kill(victim)

    # leftovers of interrupted writes, and entries that are not ours
    pending = level0_block_id(0, 10**9, 10**9)  # far above any flush: may still come
    dead = sorted(crashed)[0]
    dead_shard = parse_block_id(dead)
    assert isinstance(dead_shard, Level0Name)
    strays = {
        "orphan temp": root / f"shard-{dead_shard.shard}" / f".{dead}.x1.tmp",
        "scratch": root / f"shard-{job.shard}" / f".{stale}.x2.spark",
        "pending temp": root / "shard-0" / f".{pending}.x3.tmp",
        "not ours": root / "shard-0" / "notes.txt",
    }
    for path in strays.values():
        path.parent.mkdir(exist_ok=True)
    strays["scratch"].mkdir()
    (strays["scratch"] / "part-0.parquet").write_bytes(b"rows")
    for key in ("orphan temp", "pending temp", "not ours"):
        strays[key].write_bytes(b"partial")

    rt.release_failpoint(first, BEFORE_REPORT)  # its late report is refused
    assert eventually(rt, lambda: bc.worker_status(first)["counts"].get("refused"), timeout=30)
    for _ in range(6):
        model.write()
    head = model.rows[-1][0]

    def settled() -> bool:
        if blocks.flush_cursor().through < head or not blocks.idle():
            return False
        return set(block_files(cluster)) == {b.id for b in blocks.blocks()}

    assert eventually(rt, settled, timeout=120, step=0.5), (
        blocks.flush_cursor(), head, blocks.jobs(),
        set(block_files(cluster)) ^ {b.id for b in blocks.blocks()}, bc.service_status())

    live = {b.id for b in blocks.blocks()}
    ever_live = live | {b for t in blocks.tombstones() for b in t.blocks}
    status = bc.service_status()
    assert status is not None
    deleted = {entry.split("/", 1)[1] for entry in status["recent_orphans"]}
    deleted_blocks = {d.removesuffix(".parquet") for d in deleted if d.endswith(".parquet")}
    assert not deleted_blocks & ever_live  # never a block the index listed
    assert stale in deleted_blocks and stale not in ever_live
    never_added = set(crashed) - ever_live
    assert never_added <= deleted_blocks
    assert status["orphans_deleted"]["block"] == len(deleted_blocks)
    assert not strays["orphan temp"].exists() and not strays["scratch"].exists()
    assert strays["pending temp"].exists() and strays["not ours"].exists()
    assert status["orphans_deleted"]["scratch"] == 1 and status["orphans_deleted"]["temp"] >= 1
    assert {p.name for p in root.rglob("*.tmp")} == {strays["pending temp"].name}

    # no row lost: every committed row in exactly one live block
    held_rows = live_rows(cluster)
    assert sorted((rev, key) for rev, key, _ in held_rows) == sorted(
        (rev, key) for rev, key, _ in model.rows)
