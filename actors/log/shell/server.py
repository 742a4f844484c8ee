"""The raft server process: one member of one raft group, a thin shell over the core.

It turns mailbox messages into core events (peer messages, proposals, WAL acks, its
tick timer) and executes the core's effects in order: the hard state to its meta file
(fsync, before anything that depends on it), log entries to the node's WAL process,
messages to the peers' raft servers (found by registered name), committed entries to
the state machine, outcomes to proposers, leadership changes to subscribers (the
election listener API).

Every `snapshot_every` applied entries it asks its log worker to write a snapshot (the
machine's bytes and live indexes: for the KV, each key's latest put); the worker runs a
minor compaction after it and reports; the server applies the result to its segment
refs, and only then asks the worker to delete files. It owns the segment refs; the
segment writer reports new segments to it.

A leader tells the core about a new snapshot (which drops the entries it covers from
memory) once every follower has matched it, or once it is more than `max_retained`
entries ahead of the slowest one. A follower that far behind gets the snapshot
installed (Ra's phases): the live entries it lacks first, as sparse WAL writes, then the
snapshot's chunks, staged until the core activates them.

Configuration changes (`Change(op, node)`: add_learner, promote, remove; answered
`Done(index, None)` once committed or `Refused(reason)`) are raft entries the
machine never sees (it applies a no-op there); each snapshot records the configuration
at its index, so a restart knows it. `shell/members.py` runs a whole rebalance.

Failpoints where a leader reaches a moment fault scenarios aim at (armed as breakpoints,
they hold the moment open until the fault lands): `raft.leader.before_apply.<Command>`
(a committed entry of that command type, say `Compact`, not yet applied on the leader),
`raft.leader.before_background` (the machine's deferred work, the KV's value-only
compaction pass, pending and not yet started or finished on the leader), and
`install.leader.before_last_chunk` (`install.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sediment import log
from sediment.actors.log import kv_machine
from sediment.actors.log.raft import core, membership
from sediment.actors.log.raft import protocol as rp
from sediment.actors.log.raft import types as rt
from sediment.actors.log.raft.state import RaftState, last_index
from sediment.actors.log.raft.types import HardState, SnapshotMeta
from sediment.actors.log.shell import batching, install, raft_metrics
from sediment.actors.log.shell import protocol as sp
from sediment.actors.log.shell.applying import (
    BACKGROUND_MAX_WAIT,
    LazyNotice,
    SnapshotFailed,
    apply_entries,
    notify_appliers,
    set_eager,
)
from sediment.actors.log.shell.codec import from_stored, to_stored
from sediment.actors.log.shell.conf_meta import from_meta
from sediment.actors.log.shell.group_spec import GroupSpec as GroupSpec  # re-exported
from sediment.actors.log.shell.hosted import HostedMachine, KeyIndex, ra_kv
from sediment.actors.log.shell.log_worker import (
    CompactionDone,
    DeleteSegments,
    MajorCompaction,
    SnapshotWritten,
)
from sediment.actors.log.shell.meta import MetaStore
from sediment.actors.log.shell.names import segwriter_name, wal_name, worker_name
from sediment.actors.log.shell.peers import Peers
from sediment.actors.log.shell.reads import local_entry
from sediment.actors.log.shell.recovery import recover
from sediment.actors.log.shell.segment_writer import (
    CompactionApplied,
    SegmentsFlushed,
    SnapshotStateChanged,
)
from sediment.actors.log.shell.waiters import Waiters
from sediment.actors.log.shell.wal_server import WalRead, WalRejected, WalWriteReq, WalWritten
from sediment.actors.log.storage import snapshot
from sediment.actors.log.storage.segrefs import SegRefs
from sediment.actors.log.storage.snapshot import SnapshotState
from sediment.runtime.common_calls import Status, UnknownRequest
from sediment.runtime.core_driver import CoreDriver
from sediment.runtime.errors import FailpointError, ReceiveTimeout
from sediment.runtime.messages import Call, Down
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.log.raft")
RAFT_MESSAGES = (rt.AppendEntries, rt.AppendReply, rt.RequestVote, rt.VoteReply,
                 rt.InstallSnapshot, rt.InstallSnapshotReply)


@dataclass(frozen=True)
class _Tick:
    due: float


@dataclass
class _Shell:
    ctx: Process
    spec: GroupSpec
    meta: MetaStore
    wal: Pid
    segwriter: Pid
    worker: Pid
    refs: SegRefs
    snap_state: SnapshotState
    machine: HostedMachine = field(default_factory=lambda: ra_kv(""))
    snapshotting: bool = False
    trim_to: tuple[int, int] = (0, 0)  # the latest snapshot (index, term) not yet trimmed
    staging: install.Staging = field(default_factory=install.Staging)
    peers: Peers = field(default_factory=lambda: Peers(""))
    waiters: Waiters = field(default_factory=Waiters)
    listeners: list[Pid] = field(default_factory=list)
    appliers: list[Pid] = field(default_factory=list)  # told AppliedNews
    batches: int = 0  # ProposeBatch events stepped (proposals / batches: the batching)
    proposals: int = 0
    # group commit: the last log index of each proposal batch not yet committed, and
    # since when new proposals are held back because OPEN_BATCHES of them are open
    open_batches: list[int] = field(default_factory=list)
    held_since: float | None = None
    eager: set[Pid] = field(default_factory=set)  # appliers told after every applied batch
    lazy_due: bool = False  # a notice for the others is scheduled
    busy: bool = False  # the machine has background work left
    piece_due: float = 0.0  # its next piece runs by then, however busy the mailbox is
    leader: tuple[str | None, int] = (None, 0)
    tick_due: float | None = None


async def raft_server(ctx: Process, spec: GroupSpec) -> None:
    """Process entry: restore (meta file, latest snapshot, segments, the WAL's memtable),
    then serve forever."""
    node = ctx.self().node
    group, gdir = spec.group, spec.group_dir(node)
    wal = await _needed(ctx, wal_name(node))
    segwriter = await _needed(ctx, segwriter_name(node))
    worker = await _needed(ctx, worker_name(group, node))
    rec = await recover(ctx, group, gdir, spec.segment_max_entries, wal, segwriter)
    info, tail, memtable = rec.info, rec.tail, rec.memtable
    snap_meta = (SnapshotMeta(info.index, info.term, from_meta(info.meta))
                 if info is not None else None)
    state = core.init(spec.raft_config(), node, rec.hard, tail, snap_meta,
                      seed=sum(node.encode()) + len(tail))
    shell = _Shell(ctx, spec, rec.meta, wal, segwriter, worker, rec.refs, rec.snap_state,
                   machine=spec.machine(gdir), busy=True, peers=Peers(group))
    set_clock = getattr(shell.machine, "set_clock", None)
    if set_clock is not None:  # a machine that records when things happened (replay pins)
        set_clock(ctx.now)
    if info is not None:
        await install.land_if_missing(shell, info, memtable, tail)
        if shell.machine.applied < info.index:
            held = {s.index: from_stored(s) for s in memtable}
            shell.machine.restore(snapshot.read_data(info), info.index, lambda i: held.get(i) or
                                  local_entry(state, shell.refs, gdir, i))
    _logger.info("raft server up", group=group, term=rec.hard.term, snapshot=rec.first - 1,
                 log=len(tail), segments=len(rec.refs))
    driver = _raft_driver(shell, state)

    async def to_events(msg: Any) -> list[rp.Event]:
        event = _event(shell, driver.state, msg)
        return [] if event is None else [event]

    try:
        driver.post(rp.Tick(ctx.now()))
        await driver.serve(to_events, receive=lambda: _next_message(shell, driver.state))
    finally:
        shell.machine.close()


async def _needed(ctx: Process, name: str) -> Pid:
    pid = await ctx.whereis(name)
    if pid is None:
        raise RuntimeError(f"{name} is not running")
    return pid


RaftDriver = CoreDriver[RaftState, rp.Event, rp.Effect]


def _raft_driver(shell: _Shell, state: RaftState) -> RaftDriver:
    """The core on the driver. After each step the shell records a leader's new proposal
    batch (group commit), updates the metrics, tells the core about a snapshot nobody
    needs the entries of any more (`_trim_event`) and sets its tick timer."""

    def step(s: RaftState, event: rp.Event) -> tuple[RaftState, list[rp.Effect]]:
        s, effects = core.step(s, event)
        if isinstance(event, rp.ProposeBatch) and s.role == "leader":
            shell.open_batches.append(last_index(s))
        return s, effects

    def after_step(effects: list[rp.Effect]) -> None:
        now = driver.state
        raft_metrics.stepped(now, shell.machine)
        trim = _trim_event(shell, now)
        if trim is not None:
            driver.post(trim)
        _schedule_tick(shell, now)

    driver: RaftDriver = CoreDriver(shell.ctx, step, state)
    driver.on(rp.PersistHardState, lambda effect: _persist(shell, effect))
    driver.on(rp.AppendToLog, lambda effect: _append(shell, effect))
    driver.ignore(rp.TruncateLog)  # the WAL drops the conflicting suffix on overwrite
    driver.on(rp.Send, lambda effect: _send(shell, effect.to, effect.msg))
    driver.on(rp.Apply, lambda effect: apply_entries(shell, driver.state, effect.entries))
    driver.on(rp.Reply, lambda effect: _reply(shell, effect))
    driver.on(rp.LeaderChanged, lambda effect: _leader_changed(shell, effect))
    driver.on(rp.SendSnapshot, lambda effect: _send_snapshot(shell, driver.state, effect))
    driver.on(rp.WriteSparse, lambda effect: install.write_sparse(shell, effect))
    driver.on(rp.StoreSnapshotChunk, lambda effect: install.store_chunk(shell, effect))
    driver.on(rp.RestoreMachine, lambda effect: install.restore(shell, driver.state, effect))
    driver.after_step(after_step)
    return driver


LEADER_BEFORE_BACKGROUND = "raft.leader.before_background"


async def _next_message(shell: _Shell, state: RaftState) -> Any:
    """The next message; while it waits, the machine's background work runs one bounded
    piece at a time, each after a short pause that lets messages in first, and under a
    steady load (a mailbox never quiet for BACKGROUND_PAUSE) at least one piece every
    BACKGROUND_MAX_WAIT, as etcd runs its compaction batches with a short sleep between
    them: a busy leader otherwise never finished a value-only pass. Failpoint
    `machine.before_background` (action raise) fails a piece before it starts, as a
    transient I/O error would: the work stays pending and is tried again, so a fault
    scenario can hold a compaction's physical pass open for as long as it is armed.
    On the leader, `raft.leader.before_background` comes first, while work is pending."""
    ctx = shell.ctx
    while shell.busy:
        left = shell.piece_due - ctx.now()
        if left > 0:
            try:
                return await batching.receive(shell, state, min(BACKGROUND_PAUSE, left))
            except ReceiveTimeout:
                pass
        shell.piece_due = ctx.now() + BACKGROUND_MAX_WAIT
        if state.role == "leader" and shell.machine.has_background():
            await ctx.failpoint(LEADER_BEFORE_BACKGROUND)
        try:
            ctx.failpoint_sync("machine.before_background")
        except FailpointError:
            continue
        shell.busy = shell.machine.background()
    return await batching.receive(shell, state, None)


def _trim_event(shell: _Shell, state: RaftState) -> rp.Event | None:
    """Tell the core about the latest snapshot once no follower still needs what it covers."""
    index, term = shell.trim_to
    if index <= state.snap_index:
        return None
    if state.role == "leader" and state.progress:
        slowest = min(p.match for p in state.progress.values())
        if slowest < index and index - slowest <= shell.spec.max_retained:
            return None
    return rp.SnapshotTaken(index, term)


def _event(shell: _Shell, state: RaftState, msg: Any) -> rp.Event | None:
    ctx = shell.ctx
    now = ctx.now()
    if isinstance(msg, RAFT_MESSAGES):
        return rp.Receive(msg, now)
    if isinstance(msg, WalWritten):
        return rp.Persisted(msg.index, msg.term) if msg.tag is None else None
    if isinstance(msg, _Tick):
        if shell.tick_due == msg.due:
            shell.tick_due = None
        return rp.Tick(now)
    if isinstance(msg, WalRejected):
        _logger.error("WAL rejected a write (gap)", group=msg.group, resend_from=msg.from_index)
        return None
    if isinstance(msg, Down):
        shell.peers.down(msg.ref)
        for subscribers in (shell.listeners, shell.appliers):
            if msg.pid in subscribers:
                subscribers.remove(msg.pid)
        shell.eager.discard(msg.pid)
        return None
    if isinstance(msg, Call):
        return _on_call(shell, state, msg)
    if isinstance(msg, LazyNotice):
        shell.lazy_due = False
        notify_appliers(shell, [p for p in shell.appliers if p not in shell.eager])
        return None
    if isinstance(msg, sp.AppliedMode):
        set_eager(shell, msg.pid, msg.eager)
        return None
    if isinstance(msg, SegmentsFlushed):
        shell.refs, dropped = shell.refs.update(msg.refs)
        if dropped:  # overwritten whole: nothing references them any more
            ctx.send(shell.worker, DeleteSegments(tuple(r.file for r in dropped)))
        return None
    if isinstance(msg, SnapshotFailed):
        raise RuntimeError(f"snapshot failed: {msg.reason}")
    if isinstance(msg, SnapshotWritten):
        shell.snapshotting = False
        shell.snap_state = msg.state
        for pid in (shell.wal, shell.segwriter):
            ctx.send(pid, SnapshotStateChanged(shell.spec.group, msg.state))
        _compacted(shell, msg.result)
        shell.trim_to = (msg.index, msg.term)
        return None
    if isinstance(msg, CompactionDone):
        _compacted(shell, msg.result)
        for waiter in shell.waiters.compactions:
            ctx.reply(waiter, sp.LogCompacted(msg.result.type, len(msg.result.linked)))
        shell.waiters.compactions.clear()
        return None
    _logger.warning("raft server got an unexpected message", message=repr(msg)[:200])
    return None


def _on_call(shell: _Shell, state: RaftState, call: Call) -> rp.Event | None:
    request = call.request
    ctx = shell.ctx
    if isinstance(request, sp.Propose):
        if request.command is None or isinstance(request.command, rt.ConfChange):
            # None is the leader's no-op; only a Change may propose a ConfChange
            ctx.reply(call.from_, sp.Failed("bad_proposal"))
            return None
        # every proposal already waiting goes in the same batch: one log write, one
        # AppendEntries per follower for all of them
        more = ctx.receive_all(batching.is_propose, batching.MAX_BATCH - 1)
        items = ((request.command, call.from_), *((m.request.command, m.from_) for m in more))
        shell.batches += 1
        shell.proposals += len(items)
        return rp.ProposeBatch(items, ctx.now())
    if isinstance(request, sp.ReadIndex):  # a linearizable read, no log entry
        more = ctx.receive_all(batching.is_read, batching.MAX_BATCH - 1)
        refs = ((call.from_, request.query), *((m.from_, m.request.query) for m in more))
        return rp.ReadIndex(refs, ctx.now())
    if isinstance(request, sp.Change):  # add_learner, promote or remove
        return rp.ProposeChange(request.op, request.node, call.from_, ctx.now())
    if isinstance(request, sp.Query):
        ctx.reply(call.from_, shell.machine.query(request.request))
    elif isinstance(request, Status):
        ctx.reply(call.from_, _status(shell, state))
    elif isinstance(request, sp.ReadEntry):
        ctx.reply(call.from_, _read(state, request.index))
    elif isinstance(request, sp.Subscribe):
        _subscribe(shell, shell.listeners, request.pid)
        ctx.reply(call.from_, sp.LeaderChanged(shell.spec.group, *shell.leader))
    elif isinstance(request, sp.WatchApplied):
        _subscribe(shell, shell.appliers, request.pid)
        set_eager(shell, request.pid, request.eager)
        ctx.reply(call.from_, sp.AppliedIndex(shell.machine.applied))
    elif isinstance(request, sp.GetKey):
        _get(shell, state, call, request.key)
    elif isinstance(request, sp.CompactLog):
        shell.waiters.compactions.append(call.from_)
        ctx.send(shell.worker, MajorCompaction(tuple(shell.refs), shell.snap_state, ctx.self()))
    else:
        ctx.reply(call.from_, UnknownRequest.of(request))
    return None


def _subscribe(shell: _Shell, subscribers: list[Pid], pid: Pid) -> None:
    """Once per pid, dropped when it ends (Down)."""
    if pid not in subscribers:
        subscribers.append(pid)
        shell.ctx.monitor(pid)


def _status(shell: _Shell, state: RaftState) -> dict[str, Any]:
    return {"group": shell.spec.group, "node": state.me, "role": state.role,
            "term": state.term, "leader": shell.leader[0], "commit": state.commit,
            "applied": state.applied, "last_index": state.snap_index + len(state.entries),
            **shell.machine.status(), "snapshot_index": state.snap_index,
            "live_indexes": len(shell.snap_state.live_indexes),
            "segments": [(r.file, r.first, r.last) for r in shell.refs],
            "installs": shell.staging.installed, "batches": shell.batches,
            "proposals": shell.proposals, **_membership_status(state)}


def _membership_status(state: RaftState) -> dict[str, Any]:
    """The configuration this member uses and, on the leader, each member's progress and
    whether each learner caught up (a rebalance promotes it then)."""
    conf = membership.latest(state)
    out: dict[str, Any] = {"voters": conf.voters, "learners": conf.learners}
    if state.role == "leader":
        out["match"] = {p: pr.match for p, pr in state.progress.items()}
        out["caught_up"] = tuple(p for p in conf.learners if membership.caught_up(state, p))
    return out


def _get(shell: _Shell, state: RaftState, call: Call, key: str) -> None:
    """A local read of a key's value: its latest put's entry, wherever the log keeps it
    (memory, the WAL's memtable, or a segment)."""
    found = shell.machine.query(KeyIndex(key))
    index = found if isinstance(found, int) else None
    ctx = shell.ctx
    if index is None:
        ctx.reply(call.from_, sp.Found(None))
        return
    entry = local_entry(state, shell.refs, shell.spec.group_dir(state.me), index)
    if entry is not None:
        ctx.reply(call.from_, sp.Found(kv_machine.put_value(entry.command)))
        return
    ctx.send(shell.wal, WalRead(shell.spec.group, index, call.from_))


def _compacted(shell: _Shell, result: Any) -> None:
    """Refs first, deletes after: the server never references a deleted file."""
    if result.is_empty:
        return
    shell.refs = result.apply_to(shell.refs)
    shell.ctx.send(shell.segwriter, CompactionApplied(shell.spec.group, result))
    if result.unreferenced:
        shell.ctx.send(shell.worker, DeleteSegments(tuple(result.unreferenced)))


def _read(state: RaftState, index: int) -> sp.Found | sp.Failed:
    """The command at `index` if this member still holds it in memory."""
    pos = index - state.snap_index - 1
    if 0 <= pos < len(state.entries):
        return sp.Found(state.entries[pos].command)
    return sp.Failed("not_in_memory")


def _persist(shell: _Shell, effect: rp.PersistHardState) -> None:
    shell.meta.save(HardState(effect.term, effect.voted_for), fp=shell.ctx.failpoint_sync)


def _append(shell: _Shell, effect: rp.AppendToLog) -> None:
    ctx = shell.ctx
    ctx.send(shell.wal, WalWriteReq(shell.spec.group,
                                    tuple(to_stored(e) for e in effect.entries), ctx.self()))


def _leader_changed(shell: _Shell, effect: rp.LeaderChanged) -> None:
    shell.leader = (effect.leader, effect.term)
    for pid in shell.listeners:
        shell.ctx.send(pid, sp.LeaderChanged(shell.spec.group, effect.leader, effect.term))


async def _send_snapshot(shell: _Shell, state: RaftState,
                         effect: rp.SendSnapshot) -> rp.Event | None:
    """One install step to the follower; SnapshotSendFailed for the core when the
    snapshot it asked for is gone."""
    msg = await install.snapshot_message(shell, state, effect)
    if isinstance(msg, rp.SnapshotSendFailed):
        return msg
    await _send(shell, effect.to, msg)
    return None


BACKGROUND_PAUSE = 0.01  # seconds of quiet before each piece of a machine's background work


async def _send(shell: _Shell, node: str, msg: Any) -> None:
    await shell.peers.send(shell.ctx, node, msg)


def _reply(shell: _Shell, effect: rp.Reply) -> None:
    result = effect.result
    ref: Any = effect.ref  # a proposer's CallRef, or (a reader's CallRef, its query)
    if isinstance(ref, tuple):  # a read: (the caller, its query)
        ref, query = ref
        if isinstance(result, rp.ReadReady):  # served at the machine's applied index (>= it)
            shell.ctx.reply(ref, sp.Done(shell.machine.applied, shell.machine.query(query)))
            return
    if isinstance(result, rp.Committed):
        applied, value = shell.waiters.committed(result.index, ref)
        if applied:
            shell.ctx.reply(ref, sp.Done(result.index, value))
    elif isinstance(result, rp.NotLeader):
        shell.ctx.reply(ref, sp.NotLeader(result.leader_hint))
    elif isinstance(result, rp.Refused):
        shell.ctx.reply(ref, sp.Refused(result.reason))
    else:
        shell.ctx.reply(ref, sp.Failed(type(result).__name__, getattr(result, "index", None)))


def _schedule_tick(shell: _Shell, state: RaftState) -> None:
    due = core.wakeup_at(state)
    if shell.tick_due is not None and shell.tick_due <= due:
        return
    shell.tick_due = due
    ctx = shell.ctx
    ctx.send_at(due, ctx.self(), _Tick(due))
