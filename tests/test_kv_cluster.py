"""The KV cluster end to end, on both backends: etcd operations through the raft log,
watches with replay, and watch-aware compaction cycles run by the leader's coordinator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import eventually

from sediment.actors.kv import watch_protocol as wp
from sediment.actors.kv.errors import ErrCompacted, ErrEmptyKey, KvError
from sediment.actors.kv.names import KV_GROUP, kv_node_name
from sediment.actors.kv.shell import session_protocol as sp
from sediment.actors.kv.shell.node import BEFORE_WATCHER_SPAWN
from sediment.actors.kv.shell.node_protocol import OpenWatcher
from sediment.actors.kv.shell.watch_session import WatchCanceled
from sediment.actors.kv.types import Compare, Put
from sediment.actors.log.shell.names import raft_name
from sediment.runtime.common_calls import Status
from sediment.runtime.messages import Call
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process
from sediment.wiring.cluster import Cluster


def start(rt: Any, tmp_path: Path, **kw: Any) -> Cluster:
    return Cluster.start(runtime=rt, data_dir=str(tmp_path / "kv"), **kw)


def delivered(responses: list[Any]) -> list[tuple[int, str, bytes, bytes]]:
    return [(e.kv.mod_revision, e.kind, e.kv.key, e.kv.value)
            for r in responses if isinstance(r, wp.Deliver) for e in r.events]


def drain(watch: Any, until: int, timeout: float = 60.0) -> list[Any]:
    """Poll until a response at or past revision `until` arrived."""
    rt = watch.session.rt
    ok = eventually(rt, lambda: (watch.poll(0.2) is not None and any(
        rev >= until for rev, *_ in delivered(watch.responses))), timeout=timeout)
    assert ok, watch.responses
    return watch.responses


def test_operations_follow_etcd_semantics(rt: Any, tmp_path: Path) -> None:
    cluster = start(rt, tmp_path)
    kv = cluster.client()
    r1 = kv.put(b"a", b"1")
    r2 = kv.put(b"a", b"2", prev_kv=True)
    assert r2.revision > r1.revision and r2.prev_kv is not None and r2.prev_kv.value == b"1"
    got = kv.get(b"a")
    assert got is not None and got.value == b"2" and got.version == 2
    old = kv.get(b"a", revision=r1.revision)
    assert old is not None and old.value == b"1"
    kv.put(b"b", b"x")
    assert kv.range(b"a", b"c").count == 2
    txn = kv.txn([Compare(b"a", "value", "=", b"2")], [Put(b"c", b"t")], [Put(b"c", b"f")])
    assert txn.succeeded and kv.get(b"c").value == b"t"  # type: ignore[union-attr]
    deleted = kv.delete(b"b", prev_kv=True)
    assert deleted.deleted == 1 and kv.get(b"b") is None
    kv.compact(r2.revision)
    with pytest.raises(ErrCompacted):
        kv.get(b"a", revision=r1.revision)
    with pytest.raises(ErrEmptyKey):
        kv.put(b"", b"v")
    # every member applied the same history
    assert eventually(rt, lambda: len({
        (v["head"], v["compact_revision"]) for v in
        (cluster.node(n).raft_status() for n in cluster.nodes) if v is not None}) == 1)
    serial = [kv.range(b"a", b"d", serializable=True, node=n).kvs for n in cluster.nodes]
    assert serial[0] == serial[1] == serial[2]


def test_watch_replays_history_then_streams_live(rt: Any, tmp_path: Path) -> None:
    cluster = start(rt, tmp_path)
    kv = cluster.client()
    first = kv.put(b"k/1", b"a").revision
    kv.put(b"other", b"x")
    kv.put(b"k/2", b"b")
    watch = kv.watch(b"k/", b"k0", start_revision=first, prev_kv=True, node="n2")
    last = kv.put(b"k/1", b"c").revision
    got = delivered(drain(watch, last))
    assert [(k, v) for _, _, k, v in got] == [(b"k/1", b"a"), (b"k/2", b"b"), (b"k/1", b"c")]
    assert [rev for rev, *_ in got] == sorted(rev for rev, *_ in got)
    watch.session.close()


def test_compaction_cycle_waits_for_a_slow_watch(rt: Any, tmp_path: Path) -> None:
    """A watch whose client does not read holds the cluster's compaction below what it
    has not delivered yet; once it has read everything, compaction moves past it."""
    cluster = start(rt, tmp_path, compaction_interval=2.0, watcher_max_pending=4)
    kv = cluster.client()
    written = [kv.put(b"w", str(i).encode()).revision for i in range(14)]

    def compacted(pick: Any = min) -> int:
        views = [cluster.node(n).status() for n in cluster.nodes]
        return int(pick(v["compact_revision"] for v in views if v is not None))

    session = kv.session("n3")
    slow = None
    for _ in range(10):  # a cycle may run (nothing holds it) until the watch is admitted
        # a replay of 3 events or more is more than the session fetches for an unread
        # client (half of its 4 pending): the watch stays behind
        behind = [r for r in written if r > compacted(max)]
        if len(behind) < 3:
            written += [kv.put(b"w", b"more").revision for _ in range(3)]
            continue
        start_rev = behind[0]
        try:
            slow = session.watch(b"w", start_revision=start_rev)  # replays; not read yet
            break
        except WatchCanceled:
            continue
    assert slow is not None
    for i in range(5):
        head = kv.put(b"other", str(i).encode()).revision
    rt.sleep(5.0)  # two cycles or more
    n3 = cluster.node("n3").status()
    assert n3 is not None and n3["watches"] == 1 and n3["min_revision"] < head
    assert 0 < compacted() < n3["min_revision"], (compacted(), n3)
    drain(slow, written[-1])  # the client reads: the watch catches up ...
    assert eventually(rt, lambda: compacted() >= head - 1, timeout=60)  # ... compaction moves
    revs = [rev for rev, *_ in delivered(slow.responses)]
    assert revs == [r for r in written if r >= start_rev]


async def _open_twice_and_watch(ctx: Process, node_name: str) -> tuple[Any, Any]:
    """A client whose first open's reply was lost retries with the same token."""
    first = await ctx.call(node_name, OpenWatcher(ctx.self(), 7), timeout=30)
    again = await ctx.call(node_name, OpenWatcher(ctx.self(), 7), timeout=30)
    created = await ctx.call(first, wp.CreateWatch(b"k", None, 0), timeout=30)
    assert isinstance(created, wp.Created), created
    return first, again


def test_sessions_end_with_their_owner_or_a_close_message(rt: Any, tmp_path: Path) -> None:
    """An open retried under the same token gets the same session; a session ends (and
    its watches stop holding compaction back) when the client process that owns it ends,
    or on a plain `Close()` from a client that can no longer call it."""
    cluster = start(rt, tmp_path)

    def watches() -> int:
        return int((cluster.node("n1").status() or {}).get("watches", -1))

    first, again = rt.run(_open_twice_and_watch, kv_node_name("n1"))
    assert first == again
    assert eventually(rt, lambda: not rt.is_alive(first) and watches() == 0)
    session = cluster.client().session("n1")
    session.watch(b"k")
    assert watches() == 1
    rt.send(session.pid, sp.Close())
    assert eventually(rt, lambda: not rt.is_alive(session.pid) and watches() == 0)


async def _opener(ctx: Process, node_name: str) -> None:
    """Open a session (a slow start, here), then give its pid to whoever calls."""
    session = await ctx.call(node_name, OpenWatcher(), timeout=120)
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call):
            ctx.reply(msg.from_, session)


def test_a_node_keeps_answering_while_a_watcher_session_starts(rt: Any, tmp_path: Path) -> None:
    """A session's start can take seconds (on Ray a worker process may boot for it): the
    node goes on answering meanwhile, so its coordinator and clients are not held up, and
    the session learns what was applied while it started."""
    cluster = start(rt, tmp_path)
    kv = cluster.client()
    kv.put(b"a", b"0")
    node = rt.whereis(kv_node_name("n1"))
    rt.arm_failpoint(node, BEFORE_WATCHER_SPAWN, "pause")
    opener = rt.spawn(_opener, kv_node_name("n1"))
    rt.sleep(0.5)
    assert cluster.node("n1").status() is not None  # answered with the start held
    revision = kv.put(b"a", b"1").revision

    def node_status(key: str) -> int:
        return int((cluster.node("n1").status() or {}).get(key, 0))

    assert eventually(rt, lambda: node_status("committed") >= revision)
    # the session counts revisions (the KV head), not raft indexes
    written = int((cluster.node("n1").raft_status() or {}).get("head", 0))
    rt.release_failpoint(node, BEFORE_WATCHER_SPAWN)
    session = rt.call(opener, ("session",), timeout=60)
    assert isinstance(session, Pid), session
    assert eventually(rt, lambda: rt.call(session, sp.Positions(), timeout=10).committed
                      >= written)


def test_a_failing_background_pass_keeps_the_compaction_pending_until_it_succeeds(
        rt: Any, tmp_path: Path) -> None:
    """Failpoint machine.before_background (raise) fails the leader's physical pass like
    a transient I/O error: the compaction stays scheduled (compact revision above the
    finished one) and reads below it are refused, until the pass may run again."""
    cluster = start(rt, tmp_path)
    kv = cluster.client()
    assert eventually(rt, lambda: cluster.leader() is not None)
    leader = cluster.leader()
    assert leader is not None
    raft = rt.whereis(raft_name(KV_GROUP, leader))
    written = [kv.put(b"p", str(i).encode()).revision for i in range(6)]
    rt.arm_failpoint(raft, "machine.before_background", "raise", count=None)
    kv.compact(written[-2])
    rt.sleep(1.0)
    status = cluster.node(leader).raft_status()
    assert status is not None
    assert status["compact_revision"] == written[-2] > status["finished_compact_revision"]
    with pytest.raises(ErrCompacted):
        kv.get(b"p", revision=written[0])
    rt.release_failpoint(raft, "machine.before_background")
    assert eventually(rt, lambda: (cluster.node(leader).raft_status() or {}).get(
        "finished_compact_revision") == written[-2])
    assert kv.get(b"p").value == b"5"  # type: ignore[union-attr]


async def _flood(ctx: Process, dest: Pid, every: float) -> None:
    """Keeps `dest`'s mailbox from ever being quiet for `every` seconds."""
    while True:
        await ctx.call(dest, Status(), timeout=5)
        await ctx.sleep(every)


def test_a_leader_whose_mailbox_is_never_quiet_still_finishes_a_compaction(
        tmp_path: Path) -> None:
    """The value-only pass runs in pieces while the raft server waits for messages; a
    leader that always has one waiting (a steady load) must still run a piece now and
    then, as etcd sleeps briefly between its compaction batches (it used to wait for a
    quiet mailbox that never came, and the pass never finished)."""
    from sediment.actors.log.shell.server import BACKGROUND_PAUSE
    from sediment.runtime import api

    rt = api.start("sim", seed=11, nodes=("n1", "n2", "n3"))
    try:
        cluster = start(rt, tmp_path)
        kv = cluster.client()
        assert eventually(rt, lambda: cluster.leader() is not None)
        leader = cluster.leader()
        assert leader is not None
        written = [kv.put(b"p", str(i).encode()).revision for i in range(6)]
        raft = rt.whereis(raft_name(KV_GROUP, leader))
        rt.spawn(_flood, raft, BACKGROUND_PAUSE / 5, node=leader)
        rt.sleep(0.5)
        kv.compact(written[-2])
        assert eventually(rt, lambda: (cluster.node(leader).raft_status() or {}).get(
            "finished_compact_revision") == written[-2], timeout=3.0)
    finally:
        rt.shutdown()


def test_a_watch_below_the_compaction_is_refused(rt: Any, tmp_path: Path) -> None:
    cluster = start(rt, tmp_path)
    kv = cluster.client()
    r1 = kv.put(b"a", b"1").revision
    r2 = kv.put(b"a", b"2").revision
    kv.compact(r2)
    assert eventually(rt, lambda: all((cluster.node(n).status() or {}).get(
        "compact_revision") == r2 for n in cluster.nodes))
    with pytest.raises(WatchCanceled) as info:
        kv.watch(b"a", start_revision=r1)
    assert info.value.canceled.compact_revision == r2
    with pytest.raises(KvError):
        kv.watch(b"", start_revision=0)


def test_leader_killed_mid_cycle_and_the_watch_completes(rt: Any, tmp_path: Path) -> None:
    """Compaction cycles run every 0.3 s; the leader's raft member is killed while writes
    and cycles go on (its node restarts it, the coordinator moves to the new leader). The
    client follows the new leader and a watch on another node sees every write, once, in
    order; no compaction passed it."""
    cluster = start(rt, tmp_path, compaction_interval=0.3)
    kv = cluster.client()
    leader = cluster.wait_ready()
    other = next(n for n in cluster.nodes if n != leader)
    watch = kv.watch(b"x", node=other)
    written = [kv.put(b"x", str(i).encode()).revision for i in range(5)]
    cluster.node(leader).kill_process("raft:kv")  # the leader (and its coordinator) die
    written += [kv.put(b"x", str(i).encode()).revision for i in range(5, 10)]
    drain(watch, written[-1], timeout=90)
    assert [rev for rev, *_ in delivered(watch.responses)] == written
    assert eventually(rt, lambda: cluster.leader() not in (None,), timeout=60)
