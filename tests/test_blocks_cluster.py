"""The block compaction service end to end (sediment.actors.blocks.shell): the metastore
raft group, the compaction service on its leader, worker pools on every node, cleanup.

A seeded history of puts and deletes goes in as level-0 blocks over several shards; the
workers compact it to L1 and L2 while reads (a key's history, the keyspace at each
revision) keep answering what a plain model answers, and every row ends in exactly one
live block. The scenarios of the issue: a worker killed holding a lease, a late report
of a stale token, a worker paused past its lease, the metastore leader killed between
prepare and apply, a corrupt source block.

Every scenario is written against the runtime API only, so the module runs on any
backend: `BACKENDS` lists the ones it runs on (add "ray" to run it there; the shared
conftest then marks those cases `ray`). Pauses and kills use the workers' failpoints
(`blocks.worker.pause`: the whole worker stops handling messages; `blocks.worker.
before_merge`: a job's task waits before reading anything; `blocks.worker.before_report`:
the report of a finished job waits).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import eventually

from sediment.actors.blocks import block as blk
from sediment.actors.blocks import merge as mg
from sediment.actors.blocks.block import Row
from sediment.actors.blocks.errors import (
    BlockError,
    CorruptBlock,
    ErrInvalidBlock,
    ErrMalformedCommand,
)
from sediment.actors.blocks.jobs import JobStatus, PollRequest
from sediment.actors.blocks.meta import BlockMeta, compacted_block_id, shard_for_key
from sediment.actors.blocks.metastore import ApplyPlan, JobInfo, PreparePlan
from sediment.actors.blocks.planner import LevelConfig, PlannerConfig
from sediment.actors.blocks.scheduler import SchedulerConfig
from sediment.actors.blocks.service import MetastoreConfig
from sediment.actors.blocks.shell.cluster import BlocksCluster, blocks_children, metastore_spec
from sediment.actors.blocks.shell.compaction_service import AFTER_PREPARE
from sediment.actors.blocks.shell.compaction_worker import BEFORE_MERGE, BEFORE_REPORT, PAUSE
from sediment.actors.blocks.shell.config import BlocksConfig
from sediment.actors.blocks.shell.names import METASTORE_GROUP, blocks_node_name, service_name
from sediment.actors.blocks.shell.service_protocol import Poll, Polled, PollRefused
from sediment.actors.blocks.worker import WorkerConfig
from sediment.actors.kv.errors import ErrCompacted
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Found, ReadEntry
from sediment.actors.spark.shell.executor import SparkBridgeExecutor
from sediment.runtime import api
from sediment.runtime.common_calls import UnknownRequest
from sediment.runtime.messages import Call
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

BACKENDS = ("sim",)
SEED = 20261122
NODES = ("n1", "n2", "n3")
CONTROL = "ctl"  # the runtime's first node, outside the cluster: the top supervisor and the
# driver's calls run there, so a partition of cluster nodes leaves them connected to all
SHARDS = 3
LEASE = 5.0
MAX_FAILURES = 2  # a job is parked after its third failed attempt
PLANNER = PlannerConfig(levels=(LevelConfig(4, 10.0), LevelConfig(3, 20.0)), cleanup_delay=10.0)
SCHEDULER = SchedulerConfig(lease_duration=LEASE, max_failures=MAX_FAILURES, max_queue_size=64)
WORKER = WorkerConfig(capacity=2, poll_interval=1.0)
FINAL_LEVEL = len(PLANNER.levels)  # blocks of this level are never compacted again


@pytest.fixture(params=BACKENDS)
def rt(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A runtime with the cluster's nodes and a control node (overrides the conftest's:
    these scenarios pick their backends from BACKENDS and their seed is fixed)."""
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")
        runtime = api.start("ray", nodes=(CONTROL, *NODES), reap_delay=1.0, warm_pool=0)
    else:
        runtime = api.start("sim", seed=SEED, nodes=(CONTROL, *NODES))
    yield runtime
    runtime.shutdown()


@pytest.fixture
def cluster(rt: Any, tmp_path: Path) -> BlocksCluster:
    return BlocksCluster.start(NODES, runtime=rt, data_dir=str(tmp_path), workers_per_node=2,
                               planner=PLANNER, scheduler=SCHEDULER, worker=WORKER,
                               shards=SHARDS, top_node=CONTROL,
                               tuning={"cleanup_interval": 5.0})


# ---- the model -------------------------------------------------------------------------


class History:
    """A seeded history of puts and deletes (a delete only of a key that exists, as
    etcd writes one), and what reads of it must answer."""

    def __init__(self, seed: int, keys: Sequence[bytes]) -> None:
        self.rng = random.Random(seed)
        self.keys = list(keys)
        self.rows: list[Row] = []
        self.live: dict[bytes, bytes] = {}

    @property
    def head(self) -> int:
        return len(self.rows)

    def write(self, count: int) -> list[Row]:
        batch = []
        for _ in range(count):
            key = self.rng.choice(self.keys)
            revision = self.head + 1
            if key in self.live and self.rng.random() < 0.25:
                row = Row(revision, key, None)
                del self.live[key]
            else:
                row = Row(revision, key, f"v{revision}".encode())
                self.live[key] = f"v{revision}".encode()
            self.rows.append(row)
            batch.append(row)
        return batch

    def put(self, key: bytes) -> Row:
        value = f"v{self.head + 1}".encode()
        row = Row(self.head + 1, key, value)
        self.rows.append(row)
        self.live[key] = value
        return row

    def delete(self, key: bytes) -> Row:
        row = Row(self.head + 1, key, None)
        self.rows.append(row)
        self.live.pop(key, None)
        return row

    def keyspace(self, revision: int) -> list[tuple[bytes, bytes]]:
        state: dict[bytes, bytes | None] = {}
        for row in self.rows[:revision]:
            state[row.key] = row.value
        return sorted((k, v) for k, v in state.items() if v is not None)

    def key_history(self, key: bytes, start: int = 0) -> list[Row]:
        return [r for r in self.rows if r.key == key and r.revision >= start]

    def required(self, floor: int) -> set[Row]:
        """The rows every compaction at `floor` keeps (`merge.py`'s rule, restated):
        all above it, and each key's latest at or below it unless that is a delete
        below it."""
        keep = {r for r in self.rows if r.revision > floor}
        latest: dict[bytes, Row] = {}
        for r in self.rows:
            if r.revision <= floor:
                latest[r.key] = r
        keep |= {r for r in latest.values() if not (r.value is None and r.revision < floor)}
        return keep


def keys_of_shard(shard: int, count: int) -> list[bytes]:
    found = (f"key-{i:03d}".encode() for i in range(10_000))
    return [k for k in found if shard_for_key(k, SHARDS) == shard][:count]


ALL_KEYS = [f"key-{i:03d}".encode() for i in range(24)]


def live_rows(cluster: Any) -> list[Row]:
    """Every row of every live block, duplicates kept."""
    out: list[Row] = []
    for meta in cluster.client().blocks():
        out += blk.table_rows(blk.read_block(cluster.root, meta))
    return out


def assert_reads_match(cluster: Any, history: History, floor: int = 0) -> None:
    client = cluster.client()
    low = max(floor, 1)
    for revision in sorted({low, low + 1, history.head, *range(low, history.head, 7)}):
        assert client.keyspace_at(revision) == history.keyspace(revision), revision
    for key in history.keys:
        assert client.history(key, start=floor or None) == history.key_history(key, floor), key
    if floor > 1:
        with pytest.raises(ErrCompacted):
            client.keyspace_at(floor - 1)
        with pytest.raises(ErrCompacted):
            client.history(history.keys[0], start=floor - 1)


def assert_each_row_once(cluster: Any, history: History, floor: int = 0) -> None:
    """No row lost (every row a compaction at `floor` keeps is live) or duplicated (no
    (key, revision) in two live blocks, or twice in one); nothing that was not written."""
    rows = live_rows(cluster)
    assert len(rows) == len({(r.key, r.revision) for r in rows}), "a row is duplicated"
    assert set(rows) <= set(history.rows)
    assert history.required(floor) <= set(rows), "a row was lost"


def compacted(cluster: Any) -> bool:
    """Nothing left to plan or run, and every block at the final level."""
    client = cluster.client()
    return client.idle() and {b.level for b in client.blocks()} == {FINAL_LEVEL}


def block_files(cluster: Any) -> set[str]:
    return {p.stem for p in Path(cluster.root).rglob("*.parquet")}


# ---- worker handles -------------------------------------------------------------------


def job_info(cluster: Any, name: str) -> JobInfo | None:
    return next((j for j in cluster.client().jobs() if j.state.name == name), None)


def token_of(cluster: Any, name: str) -> int:
    """The job's fencing token (0 once it left the schedule)."""
    info = job_info(cluster, name)
    return 0 if info is None else info.state.token


def failures_of(cluster: Any, name: str) -> int:
    info = job_info(cluster, name)
    return -1 if info is None else info.state.failures


def only_job(cluster: Any) -> JobInfo:
    jobs = cluster.client().jobs()
    assert len(jobs) == 1, jobs
    return jobs[0]


def holder(cluster: Any, job: str, skip: Sequence[Pid] = ()) -> tuple[Pid, int]:
    """A worker, not one of `skip`, that believes it holds `job`, and its token (waits
    for one)."""
    found: list[tuple[Pid, int]] = []

    def seen() -> bool:
        found.extend((p, t) for p, t in cluster.holders(job).items() if p not in skip)
        return bool(found)

    wait_for(cluster, seen)
    return found[0]


def arm_all(cluster: Any, point: str, skip: Sequence[Pid] = ()) -> None:
    for pid in cluster.workers():
        if pid not in skip:
            cluster.rt.arm_failpoint(pid, point, "pause")


def release_all(cluster: Any, point: str) -> None:
    for pid in cluster.workers():
        cluster.rt.release_failpoint(pid, point)


def wait_for(cluster: Any, predicate: Callable[[], Any], timeout: float = 60.0) -> None:
    assert eventually(cluster.rt, lambda: bool(predicate()), timeout=timeout, step=0.5)


def one_job_in_shard_zero(cluster: Any, history: History) -> JobInfo:
    """Four level-0 blocks of shard 0: one complete group, so one job at once."""
    client = cluster.client()
    for _ in range(4):
        client.add_level0(history.write(3))
    wait_for(cluster, lambda: len(client.jobs()) == 1)
    return only_job(cluster)


# ---- scenarios -----------------------------------------------------------------------


def test_history_compacts_level_by_level_and_reads_stay_the_same(cluster: Any) -> None:
    """Twelve flushes over three shards end as one L2 block per shard; then a history
    compaction applies to what is merged after it."""
    client = cluster.client()
    history = History(SEED, ALL_KEYS)
    for _ in range(12):
        added = client.add_level0(history.write(10))
        assert added.added and not added.already
    assert_reads_match(cluster, history)  # while the first jobs run
    assert_each_row_once(cluster, history)

    wait_for(cluster, lambda: compacted(cluster), timeout=120)
    assert len(client.blocks()) == SHARDS  # each shard's level-0 blocks became one L2 block
    assert sorted(live_rows(cluster), key=lambda r: r.revision) == history.rows  # exactly once
    assert_reads_match(cluster, history)
    # the replaced files are deleted once the cleanup delay has passed
    wait_for(cluster, lambda: block_files(cluster) == {b.id for b in client.blocks()})

    # a history compaction: merges from now on apply it, reads below it are refused
    floor = history.head // 2
    assert client.set_compaction_revision(floor) == floor
    for _ in range(8):
        client.add_level0(history.write(10))
    wait_for(cluster, lambda: compacted(cluster), timeout=120)
    assert_reads_match(cluster, history, floor)
    assert_each_row_once(cluster, history, floor)
    fresh = [b for b in client.blocks() if b.min_revision > floor]
    assert len(fresh) == SHARDS and all(b.compaction_revision == floor for b in fresh)


def test_a_delete_below_the_compaction_revision_keeps_hiding_older_blocks(
    cluster: Any,
) -> None:
    client = cluster.client()
    keys = keys_of_shard(0, 4)
    history = History(SEED, keys)
    for key in keys:  # one job: the puts
        client.add_level0([history.put(key)])
    wait_for(cluster, lambda: any(b.level == 1 for b in client.blocks()))
    later = [history.delete(keys[0]), *(history.put(k) for k in keys[1:])]
    client.set_compaction_revision(later[1].revision)  # above the delete
    for row in later:  # another job: the delete, merged at that revision
        client.add_level0([row])
    wait_for(cluster, lambda: compacted(cluster), timeout=120)
    assert_reads_match(cluster, history, later[1].revision)


def test_a_killed_worker_loses_its_job_and_a_late_stale_report_is_ignored(
    cluster: Any,
) -> None:
    """Owner 1 finishes but its report is late; owner 2 is killed holding the lease;
    owner 3 completes. Every move: a new token and one more failure; owner 1's report
    of its old token is refused and its output replaces nothing."""
    rt, client = cluster.rt, cluster.client()
    history = History(SEED, keys_of_shard(0, 6))
    arm_all(cluster, BEFORE_MERGE)  # every first attempt waits before reading its sources
    job = one_job_in_shard_zero(cluster, history)
    name, plan_sources = job.state.name, job.source_blocks
    first, token1 = holder(cluster, name)

    # the first owner finishes its merge, but its report is held back past the lease
    rt.arm_failpoint(first, BEFORE_REPORT, "pause")
    rt.release_failpoint(first, BEFORE_MERGE)
    wait_for(cluster, lambda: token_of(cluster, name) > token1)
    moved = job_info(cluster, name)
    assert moved is not None and moved.state.failures == 1
    second, token2 = holder(cluster, name, skip=[first])
    assert token2 == moved.state.token and second != first

    # the second owner is killed holding the lease: the job moves again, one more failure
    cluster.kill_worker(second)
    wait_for(cluster, lambda: second not in cluster.workers() and len(cluster.workers()) == 6)
    arm_all(cluster, BEFORE_MERGE, skip=[first])
    wait_for(cluster, lambda: token_of(cluster, name) > token2)
    third = job_info(cluster, name)
    assert third is not None and third.state.failures == 2
    token3 = third.state.token

    # the first owner's report of its finished merge arrives, under the old token
    rt.release_failpoint(first, BEFORE_REPORT)
    wait_for(cluster, lambda: cluster.worker_status(first)["counts"].get("refused"))
    status = cluster.worker_status(first)
    assert ("refused", name, token1, "") in status["recent"]
    assert "completed" not in status["counts"]
    stale = compacted_block_id(0, 0, plan_sources, token1)
    assert stale not in {b.id for b in client.blocks()}  # its output replaced nothing ...
    wait_for(cluster, lambda: stale not in block_files(cluster))  # ... and is garbage
    assert cluster.service_status()["orphans_deleted"]["block"] >= 1
    still = job_info(cluster, name)
    assert still is not None and still.state.token == token3

    release_all(cluster, BEFORE_MERGE)
    wait_for(cluster, lambda: job_info(cluster, name) is None)
    live = {b.id for b in client.blocks(shard=0)}
    assert compacted_block_id(0, 0, plan_sources, token3) in live
    assert not live & set(plan_sources)
    assert_reads_match(cluster, history)
    assert_each_row_once(cluster, history)


def test_a_worker_paused_past_its_lease_is_fenced_and_told_to_stop(cluster: Any) -> None:
    """A stopped worker's job moves on; when it resumes, its refresh under the old token
    gets no lease, so it cancels its attempt, which then never writes anything."""
    rt, client = cluster.rt, cluster.client()
    history = History(SEED, keys_of_shard(0, 6))
    arm_all(cluster, BEFORE_MERGE)
    job = one_job_in_shard_zero(cluster, history)
    name, plan_sources = job.state.name, job.source_blocks
    first, token1 = holder(cluster, name)
    rt.arm_failpoint(first, PAUSE, "pause")  # stopped with its merge not even started
    wait_for(cluster, lambda: token_of(cluster, name) > token1)
    token2 = token_of(cluster, name)
    assert failures_of(cluster, name) == 1

    # it resumes and refreshes its lease with the old token: no lease, so it stops
    rt.release_failpoint(first, PAUSE)
    wait_for(cluster, lambda: cluster.worker_status(first)["counts"].get("cancelled"))
    status = cluster.worker_status(first)
    assert ("cancelled", name, token1, "no lease") in status["recent"]
    assert name not in status["jobs"]
    rt.release_failpoint(first, BEFORE_MERGE)  # its stopped attempt never runs
    rt.sleep(2.0)
    assert compacted_block_id(0, 0, plan_sources, token1) not in block_files(cluster)

    release_all(cluster, BEFORE_MERGE)
    wait_for(cluster, lambda: job_info(cluster, name) is None)
    assert compacted_block_id(0, 0, plan_sources, token2) in {b.id for b in client.blocks()}
    assert "completed" not in cluster.worker_status(first)["counts"]
    assert_reads_match(cluster, history)
    assert_each_row_once(cluster, history)


def test_the_metastore_leader_killed_between_prepare_and_apply(cluster: Any) -> None:
    """A prepared plan is never applied; a new leader's service takes over and nothing
    prepared, planned or flushed before is lost."""
    rt, client = cluster.rt, cluster.client()
    history = History(SEED, ALL_KEYS)
    for _ in range(8):
        client.add_level0(history.write(10))
    leader = cluster.leader()
    term = cluster.node(leader).raft_status()["term"]
    rt.arm_failpoint(rt.whereis(service_name(leader)), AFTER_PREPARE, "pause")
    rt.sleep(2.0)  # the next poll is prepared, and the service stops before applying it
    status = cluster.node(leader).raft_status()
    last = rt.call(raft_name(METASTORE_GROUP, leader), ReadEntry(status["last_index"]))
    assert isinstance(last, Found) and isinstance(last.value, PreparePlan), last

    assert cluster.kill_leader() == leader
    wait_for(cluster, lambda: cluster.leader() is not None and cluster.service_status())
    new_leader = cluster.leader()
    assert cluster.node(new_leader).raft_status()["term"] > term
    for _ in range(4):
        client.add_level0(history.write(10))
    wait_for(cluster, lambda: compacted(cluster), timeout=120)
    assert sorted(live_rows(cluster), key=lambda r: r.revision) == history.rows
    assert_reads_match(cluster, history)


def test_idle_polls_write_only_their_prepare_entry_and_move_the_raft_clock(
        cluster: Any) -> None:
    """With nothing to compact, a poll's prepared update changes nothing: the service
    answers it without proposing the apply (Pyroscope writes both; the apply would change
    nothing), and the prepare entries alone move the raft clock the cleanup reads."""
    rt = cluster.rt
    wait_for(cluster, lambda: (cluster.service_status() or {}).get("idle", 0) >= 3)
    before = cluster.service_status()
    rt.sleep(2.0)
    after = cluster.service_status()
    assert before is not None and after is not None
    assert after["idle"] > before["idle"] and after["raft_time"] > before["raft_time"]
    leader = cluster.leader()
    status = cluster.node(leader).raft_status()
    first = max(status["snapshot_index"] + 1, status["last_index"] - 20)
    commands = [rt.call(raft_name(METASTORE_GROUP, leader), ReadEntry(i)).value
                for i in range(first, status["last_index"] + 1)]
    assert any(isinstance(c, PreparePlan) for c in commands)
    assert not any(isinstance(c, ApplyPlan) for c in commands), commands


def test_the_service_moves_with_leadership(cluster: Any) -> None:
    """The leader is cut off: the majority elects another, whose node starts the service
    and the workers find it; the old leader steps down and its node stops its service."""
    rt, client = cluster.rt, cluster.client()
    if not hasattr(rt, "partition"):
        pytest.skip("this backend cannot partition nodes")
    old = cluster.leader()
    rest = [n for n in cluster.nodes if n != old]
    rt.partition([old], rest)
    wait_for(cluster, lambda: rt.whereis(service_name(old)) is None)
    wait_for(cluster, lambda: any(rt.whereis(service_name(n)) for n in rest))
    history = History(SEED, ALL_KEYS)
    for _ in range(6):
        client.add_level0(history.write(10))
    wait_for(cluster, lambda: client.jobs() == () and any(
        b.level > 0 for b in client.blocks()), timeout=120)
    rt.heal()
    wait_for(cluster, lambda: compacted(cluster), timeout=120)
    new = cluster.leader()
    assert new != old and [n for n in cluster.nodes if rt.whereis(service_name(n))] == [new]
    assert cluster.node(old).status()["service"] is None
    assert_reads_match(cluster, history)
    assert_each_row_once(cluster, history)


def test_a_corrupt_source_fails_its_job_until_it_is_parked(cluster: Any) -> None:
    """Each attempt fails visibly (an abandoned job with the reason), the lease expiry
    counts it, the job is parked at the threshold and its sources stay as they were."""
    rt, client = cluster.rt, cluster.client()
    bad_keys, good_keys = keys_of_shard(0, 6), keys_of_shard(1, 6)
    history = History(SEED, bad_keys + good_keys)
    for _ in range(4):  # another shard's job, which must not be held up
        client.add_level0([history.put(k) for k in good_keys[:3]])
    bad = [blk.write_level0(cluster.root, 0, [history.put(k) for k in bad_keys[:3]],
                            created_at=rt.now()) for _ in range(4)]
    path = Path(blk.block_path(cluster.root, 0, bad[1].id))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    client.add_level0(bad)

    wait_for(cluster, lambda: any(j.shard == 0 for j in client.jobs()))
    broken = next(j for j in client.jobs() if j.shard == 0)
    wait_for(cluster, lambda: failures_of(cluster, broken.state.name) == MAX_FAILURES)
    parked = job_info(cluster, broken.state.name)
    rt.sleep(4 * LEASE)  # lease after lease passes: nobody takes it again
    assert job_info(cluster, broken.state.name) == parked
    assert parked is not None and parked.state.status == JobStatus.IN_PROGRESS

    reasons = [detail for pid in cluster.workers()
               for kind, job, _token, detail in cluster.worker_status(pid)["recent"]
               if kind == "abandoned" and job == broken.state.name]
    assert len(reasons) == MAX_FAILURES + 1 and all("CorruptBlock" in r for r in reasons)
    assert {b.id for b in client.blocks(shard=0)} == {b.id for b in bad}  # not replaced
    assert {b.id for b in bad} <= block_files(cluster)
    assert all(b.level >= 1 for b in client.blocks(shard=1))  # the healthy shard moved on
    with pytest.raises(CorruptBlock):
        client.history(bad_keys[0])


def test_bad_input_is_refused_at_the_boundary_and_crashes_nothing(cluster: Any) -> None:
    rt, client = cluster.rt, cluster.client()
    leader = cluster.leader()
    service = rt.whereis(service_name(leader))
    node = rt.whereis(blocks_node_name(leader))
    worker = cluster.workers()[0]
    reply = rt.call(service, Poll("not a request"))
    assert isinstance(reply, PollRefused) and isinstance(reply.reason, ErrMalformedCommand)
    for pid in (service, node, worker):
        rt.send(pid, ("garbage", 1))
        assert rt.call(pid, ("no such request",)) == UnknownRequest("('no such request',)")
    assert isinstance(rt.call(service, Poll(PollRequest())), Polled)
    rt.sleep(1.0)
    assert all(rt.is_alive(pid) for pid in (service, node, worker))

    history = History(SEED, ALL_KEYS)
    first = history.write(5)
    with pytest.raises(ValueError):
        client.add_level0([])
    with pytest.raises(ValueError):
        client.history(b"")
    with pytest.raises(ValueError):
        client.set_compaction_revision(0)
    result = client.add_level0(first)
    written = client.blocks()
    assert {b.id for b in written} == set(result.added)
    with pytest.raises(TypeError):
        client.add_level0([*first, *written])
    with pytest.raises(ErrInvalidBlock):  # revisions its shard already holds, another id
        client.add_level0([replace(written[0], id=f"{written[0].id}-again")])
    again = client.add_level0(written)  # a retried add of the same blocks is a no-op
    assert again.added == () and set(again.already) == set(result.added)
    rt.sleep(1.0)
    rewritten = client.add_level0(first)  # the same rows written again, later: the files
    assert rewritten.added == () and set(rewritten.already) == set(result.added)  # stay
    assert client.blocks() == written
    assert_reads_match(cluster, history)


async def pyarrow_bridge(ctx: Process) -> None:
    """Stands in for the Spark bridge (`actors/spark/shell/bridge.py`): its name and its call,
    answered by the pyarrow merge that the Spark merge must equal."""
    from sediment.actors.spark.shell.bridge import BRIDGE_NAME
    from sediment.actors.spark.shell.bridge_protocol import JobFailed, JobOutcome, Merge, Merged

    await ctx.register(BRIDGE_NAME)
    merges = 0
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call) and msg.request == ("merges",):
            ctx.reply(msg.from_, merges)
        elif isinstance(msg, Call) and isinstance(msg.request, Merge):
            merges += 1
            req = msg.request.request
            try:
                out: JobOutcome = Merged(mg.merge_blocks(
                    req.root, req.sources, block_id=req.block_id, level=req.level,
                    compaction_revision=req.compaction_revision, created_at=req.created_at))
            except BlockError as err:
                out = JobFailed(err)
            ctx.reply(msg.from_, out)


def test_workers_can_merge_through_the_spark_bridge(rt: Any, tmp_path: Path) -> None:
    bridge = rt.spawn(pyarrow_bridge, node=NODES[0])
    cluster = BlocksCluster.start(NODES, runtime=rt, data_dir=str(tmp_path), workers_per_node=1,
                                  planner=PLANNER, scheduler=SCHEDULER, worker=WORKER,
                                  shards=SHARDS, top_node=CONTROL,
                                  executor=SparkBridgeExecutor(timeout=30.0))
    history = History(SEED, ALL_KEYS)
    for _ in range(6):
        cluster.client().add_level0(history.write(10))
    wait_for(cluster, lambda: compacted(cluster), timeout=120)
    assert sorted(live_rows(cluster), key=lambda r: r.revision) == history.rows
    assert_reads_match(cluster, history)
    assert rt.call(bridge, ("merges",)) >= 2 * SHARDS  # every L1 and L2 block came from it


def test_config_is_checked(tmp_path: Path) -> None:
    good = BlocksConfig(NODES, str(tmp_path))
    assert good.workers_per_node == 2
    bad: list[dict[str, Any]] = [
        {"nodes": ()}, {"nodes": ("n1", "n1")}, {"root": ""}, {"workers_per_node": 0},
        {"poll_timeout": -1.0}, {"locate_backoff": (2.0, 1.0)}, {"executor": None},
        {"max_pending_polls": True},
    ]
    for change in bad:
        fields = {"nodes": NODES, "root": str(tmp_path), **change}
        with pytest.raises(ValueError):
            BlocksConfig(**fields)


def test_blocks_children_fit_the_metastore_group(tmp_path: Path) -> None:
    spec = metastore_spec(NODES, str(tmp_path), MetastoreConfig())
    config = BlocksConfig(NODES, str(tmp_path))
    assert [c.id for c in blocks_children("n1", spec, config)] == [
        "compaction-workers", "blocks-node"]
    assert [c.id for c in blocks_children("n9", spec, config)] == ["compaction-workers"]
    with pytest.raises(ValueError):
        blocks_children("n1", spec, BlocksConfig(("n1",), str(tmp_path)))


def test_level0_rows_are_split_by_shard(cluster: Any) -> None:
    client = cluster.client()
    history = History(SEED, ALL_KEYS)
    result = client.add_level0(history.write(30))
    blocks: dict[str, BlockMeta] = {b.id: b for b in client.blocks()}
    assert set(result.added) == set(blocks)
    assert {b.shard for b in blocks.values()} == set(range(SHARDS))
    for meta in blocks.values():
        rows = blk.table_rows(blk.read_block(cluster.root, meta))
        assert {shard_for_key(r.key, SHARDS) for r in rows} == {meta.shard}
