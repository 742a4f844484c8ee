"""The KV node process (one per node): Netsy's Node peer API and the hub of its watchers.

It owns the node's admission state (`admission.py`): every watch is admitted here, in
one step with the floor check, so a compaction notice and a new watch can never race.
It follows the local raft member: applied notifications become `Committed` fan-out to
this node's watcher processes (the changes read once per applied batch), an applied
Compact becomes the persisted compaction revision and a `NewFloor` for the watchers.
When the local member gains leadership it starts the compaction coordinator (linked);
when it loses it, the coordinator is stopped.

Its messages are in `node_protocol.py`. Peer API (from the coordinator): MinRequest ->
MinAnswer, Notice -> NoticeAnswer, Rollback. A confirmed notice is a promise the node
keeps on disk before it answers (`promised_floor.py`), and restores at start. Calls:
Admit(key, start), Status(), OpenWatcher() -> the pid of a new watcher process on this
node for one session. OpenWatcher(owner, token) ties the session to a client process (it
ends when the owner does, as a stream ends with its connection) and makes the open
idempotent: a retry with the same token after a lost reply gets the same session, so a
slow reply never leaves a second session behind. Sessions run in the node's own named host
`KV_HOST` (on Ray one actor holds the node and its sessions: a gRPC watch stream opens a
session, and a session in an actor of its own cost a worker process's boot, ~1 s of CPU,
per stream; a client retrying its streams under load then spawned tens of them). The
spawn runs beside the loop: a node never stops answering its coordinator while a session
starts; the new session is told what it missed meanwhile.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import Any

from sediment import log
from sediment.actors.kv import admission as adm
from sediment.actors.kv import coordinator_core as cc
from sediment.actors.kv import metrics as kv_metrics
from sediment.actors.kv import promised_floor
from sediment.actors.kv.errors import ErrCompacted
from sediment.actors.kv.names import KV_GROUP, KV_HOST, coordinator_name
from sediment.actors.kv.shell import reads
from sediment.actors.kv.shell.coordinator import FlushHold, coordinator
from sediment.actors.kv.shell.node_protocol import (
    Admit,
    MinAnswer,
    MinRequest,
    NewFloor,
    NewRevisions,
    NodeError,
    Notice,
    NoticeAnswer,
    OpenWatcher,
    Rollback,
    WatchEnded,
    WatchPositions,
)
from sediment.actors.kv.types import AppliedBatch
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import (
    AppliedMode,
    AppliedNews,
    LeaderChanged,
    Subscribe,
    WatchApplied,
)
from sediment.runtime.common_calls import Status, UnknownRequest
from sediment.runtime.messages import Call, CallRef, Down
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.kv.node")

BEFORE_WATCHER_SPAWN = "kv_node.before_watcher_spawn"  # failpoint: a session start is slow


@dataclass(frozen=True)
class KvNodeConfig:
    """What a node needs to know about the cluster and its compaction cadence."""

    nodes: tuple[str, ...]
    compaction_interval: float = 60.0
    min_timeout: float = 5.0
    notice_timeout: float = 5.0
    propose_timeout: float = 30.0
    watcher_max_pending: int = 1024
    progress_interval: float = 600.0
    data_dir: str = ""  # each node keeps its promised floor in <data_dir>/<node>; "": not kept
    # a block tier: compaction stays at or below its flushed history, which this asks
    # (the wiring layer passes the tier's `flushed_through`); None: no tier, no hold
    flush_hold: FlushHold | None = None

    def coordinator_config(self) -> cc.CoordinatorConfig:
        return cc.CoordinatorConfig(self.compaction_interval, self.min_timeout,
                                    self.notice_timeout, self.propose_timeout,
                                    hold=self.flush_hold is not None)


@dataclass(frozen=True)
class _Spawned:
    """A watcher session's spawn ended (`pid` None: it failed with `error`), started when
    the node had applied `applied` and seen compaction `compact_revision`."""

    key: Any
    pid: Pid | None
    applied: int
    compact_revision: int
    error: str = ""


@dataclass
class _Node:
    ctx: Process
    config: KvNodeConfig
    raft: Pid
    state: adm.AdmissionState
    compact_revision: int = 0
    applied: int = 0  # the revision the watchers have been told about (etcd's numbering)
    index: int = 0  # the raft index of the last applied notice (revisions are not indexes)
    watchers: dict[Pid, None] = field(default_factory=dict)  # insertion order: replayable
    opened: dict[tuple[Pid, Any], Pid] = field(default_factory=dict)  # (owner, token) -> session
    # sessions being spawned: (owner, token) or a ref of its own -> the calls awaiting it
    opening: dict[Any, list[CallRef]] = field(default_factory=dict)
    spawns: set[asyncio.Task[None]] = field(default_factory=set)
    coordinator: Pid | None = None
    leader: tuple[str | None, int] = (None, 0)
    promise_file: str | None = None
    promised: int = 0  # the floor last written to promise_file
    eager: bool = False  # the raft member tells every applied batch (while watchers exist)


async def kv_node(ctx: Process, config: KvNodeConfig) -> None:
    """Process entry: find the local raft member, restore admission from what the machine
    persisted, follow leadership and applied revisions, serve the peer API."""
    me = ctx.self().node
    raft = await ctx.whereis(raft_name(KV_GROUP, me))
    if raft is None:
        raise RuntimeError(f"the kv raft member on {me} is not running")
    ctx.monitor(raft)
    compact_rev, _finished = await reads.compaction(ctx, raft)
    # no watchers yet: the member tells what it applied at most every LAZY_NOTICE
    index = (await ctx.call(raft, WatchApplied(ctx.self(), False), timeout=30)).index
    applied = await reads.head(ctx, raft)  # read after subscribing: no revision is missed
    state, _ = adm.restore(compact_rev, applied)
    promise_file = (promised_floor.path(os.path.join(config.data_dir, me))
                    if config.data_dir else None)
    promised = promised_floor.read(promise_file) if promise_file else 0
    # what this node promised before it went down may already be compacting
    state, _ = adm.leader_initial(state, promised)
    node = _Node(ctx, config, raft, state, compact_rev, applied, index,
                 promise_file=promise_file, promised=promised)
    leader = await ctx.call(raft, Subscribe(ctx.self()), timeout=30)
    await _leadership(node, leader.leader, leader.term)
    _logger.info("kv node up", node=me, committed=applied, compact_revision=compact_rev,
                 promised_floor=promised)
    while True:
        await _handle(node, await ctx.receive())
        kv_metrics.node_state(me, node.state, node.compact_revision, len(node.watchers))


async def _handle(node: _Node, msg: Any) -> None:
    ctx = node.ctx
    if isinstance(msg, AppliedNews):
        await _applied(node, msg.index, *(msg.changes or ()))
    elif isinstance(msg, LeaderChanged):
        await _leadership(node, msg.leader, msg.term)
    elif isinstance(msg, MinRequest):
        ctx.send(msg.reply_to, MinAnswer(ctx.self().node, msg.cycle,
                                         adm.min_revision(node.state)))
    elif isinstance(msg, Notice):
        node.state, verdict = adm.notice(node.state, msg.cycle, msg.revision)
        ok = isinstance(verdict, adm.Confirmed)
        if ok:
            _keep_promise(node)  # on disk before the confirmation leaves
        else:
            _logger.info("compaction notice refused", revision=msg.revision,
                         blocking=getattr(verdict, "watch", None))
        ctx.send(msg.reply_to, NoticeAnswer(ctx.self().node, msg.cycle, msg.revision,
                                            msg.attempt, ok))
    elif isinstance(msg, Rollback):
        node.state = adm.rollback(node.state, msg.cycle, msg.revision)
        _keep_promise(node)
    elif isinstance(msg, WatchPositions):
        _progress(node, msg.session, msg.positions)
    elif isinstance(msg, WatchEnded):
        node.state = adm.cancel_watch(node.state, (str(msg.session), msg.watch_id))
    elif isinstance(msg, Call):
        await _on_call(node, msg)
    elif isinstance(msg, _Spawned):
        _spawned(node, msg)
    elif isinstance(msg, Down):
        await _down(node, msg.pid, msg.reason)
    else:
        _logger.warning("kv node got an unexpected message", message=repr(msg)[:200])


async def _on_call(node: _Node, call: Call) -> None:
    ctx, req = node.ctx, call.request
    if isinstance(req, Admit):
        try:
            node.state, verdict = adm.create_watch(node.state, req.key, req.start)
        except ValueError as exc:
            ctx.reply(call.from_, NodeError(str(exc)))
            return
        ctx.reply(call.from_, verdict)
    elif isinstance(req, OpenWatcher):
        await _watching(node, True)
        _open_watcher(node, call, req)
    elif isinstance(req, Status):
        ctx.reply(call.from_, {
            "node": ctx.self().node, "committed": node.state.committed,
            "floor": adm.floor(node.state), "min_revision": adm.min_revision(node.state),
            "compact_revision": node.compact_revision, "watches": len(node.state.watches),
            "watchers": len(node.watchers), "coordinator": node.coordinator is not None,
            "leader": node.leader[0]})
    else:
        ctx.reply(call.from_, UnknownRequest.of(req))


async def _applied(node: _Node, index: int, sent_from: int | None = None,
                   sent: AppliedBatch | None = None) -> None:
    """Fan the changes since the last fanned-out revision out to the watchers; an
    advanced compaction revision raises the floor. The raft server tells raft indexes;
    the watchers count revisions. The raft member sends the changes with the news (read
    once, in one step, from the first revision it had not sent); when they do not start
    where this node stopped (it started meanwhile), one machine query reads every
    revision above the last one fanned out, up to the machine's head."""
    ctx = node.ctx
    if index <= node.index:
        return
    node.index = index
    if sent is not None and sent_from == node.applied + 1:
        batch = sent
    else:
        batch = await reads.applied_batch(ctx, node.raft, node.applied + 1, None)
    _fan_out(node, batch)


async def _watching(node: _Node, on: bool) -> None:
    """Watchers need every applied batch at once (their latency); without any, the head
    may lag by the member's lazy interval (the compaction floor only gets safer). On the
    way to eager, catch up first, so a session starts from the head of now."""
    if on == node.eager:
        return
    node.eager = on
    node.ctx.send(node.raft, AppliedMode(node.ctx.self(), on))
    if on:
        _fan_out(node, await reads.applied_batch(node.ctx, node.raft, node.applied + 1, None))


def _fan_out(node: _Node, batch: AppliedBatch) -> None:
    """Tell the watchers what the batch holds; an advanced compaction raises the floor."""
    ctx = node.ctx
    # admission counts written revisions: a compaction may not go past the head
    node.state = adm.advance(node.state, batch.head)
    if batch.head > node.applied:
        node.applied = batch.head
        for pid in node.watchers:  # None: the watcher catches up
            ctx.send(pid, NewRevisions(batch.head, batch.events))
    compact_rev = batch.compact_revision
    if compact_rev > node.compact_revision:
        node.compact_revision = compact_rev
        node.state, effects = adm.compact_committed(node.state, compact_rev)
        for effect in effects:
            if isinstance(effect, adm.CancelWatch):
                _logger.warning("a watch was below an applied compaction",
                                watch=effect.watch, revision=effect.compact_revision)
        for pid in node.watchers:
            ctx.send(pid, NewFloor(compact_rev))


async def _leadership(node: _Node, leader: str | None, term: int) -> None:
    """Start the coordinator when this node leads, stop it otherwise."""
    ctx = node.ctx
    node.leader = (leader, term)
    leading = leader == ctx.self().node
    if leading and node.coordinator is None:
        node.coordinator = await ctx.spawn(
            coordinator, node.config.nodes, term, node.compact_revision,
            node.config.coordinator_config(), node.config.flush_hold, link=True,
            name=coordinator_name(ctx.self().node))
        _logger.info("compaction coordinator started", term=term)
    elif not leading and node.coordinator is not None:
        ctx.unlink(node.coordinator)  # its end must not take this process with it
        ctx.exit(node.coordinator, "kill")
        node.coordinator = None
        _logger.info("compaction coordinator stopped", leader=leader, term=term)


def _keep_promise(node: _Node) -> None:
    """Persist the admission floor when it changed: a confirmed notice must survive a
    crash of this node (see promised_floor.py); a rollback lowers it again."""
    floor = adm.floor(node.state)
    if node.promise_file is not None and floor != node.promised:
        promised_floor.write(node.promise_file, floor)
        node.promised = floor


def _open_watcher(node: _Node, call: Call, req: OpenWatcher) -> None:
    """OpenWatcher() or OpenWatcher(owner, token): the session already opened under
    (owner, token) if it still runs, else a new one, answered when it has started."""
    ctx = node.ctx
    key: Any
    owner: object = req.owner  # off the wire: checked, whatever its annotation says
    if owner is not None:
        if not isinstance(owner, Pid):
            ctx.reply(call.from_, NodeError("OpenWatcher takes no owner or an owner pid"))
            return
        key = (req.owner, req.token)
        if key in node.opened:
            ctx.reply(call.from_, node.opened[key])
            return
        if key in node.opening:  # a retry while the first open is starting
            node.opening[key].append(call.from_)
            return
    else:
        key = ctx.make_ref()
    node.opening[key] = [call.from_]
    task = asyncio.get_running_loop().create_task(_spawn_session(node, key, req.owner))
    node.spawns.add(task)
    task.add_done_callback(node.spawns.discard)


async def _spawn_session(node: _Node, key: Any, owner: Pid | None) -> None:
    """Beside the node's loop: start a session from what the node has applied now; the
    loop registers it (`_spawned`)."""
    from sediment.actors.kv.shell.watcher import watcher

    ctx = node.ctx
    # what the session starts from (the failpoint stands for a slow spawn: part of it)
    applied, compact_rev, floor = node.applied, node.compact_revision, adm.floor(node.state)
    try:
        await ctx.failpoint(BEFORE_WATCHER_SPAWN)
        pid = await ctx.spawn(watcher, ctx.self(), node.raft, applied, floor,
                              node.config.watcher_max_pending,
                              node.config.progress_interval, owner, host=KV_HOST)
    except Exception as exc:  # noqa: BLE001 - the callers get the error, the node goes on
        if ctx.alive:
            ctx.send(ctx.self(), _Spawned(key, None, applied, compact_rev, repr(exc)[:200]))
        return
    ctx.send(ctx.self(), _Spawned(key, pid, applied, compact_rev))


def _spawned(node: _Node, done: _Spawned) -> None:
    """Register a started session, tell it what was applied while it started, answer
    everyone who asked for it."""
    ctx = node.ctx
    waiting = node.opening.pop(done.key, [])
    if done.pid is None:
        _logger.warning("a watcher session did not start", error=done.error)
        for caller in waiting:
            ctx.reply(caller, NodeError(f"the watcher session did not start: {done.error}"))
        return
    pid = done.pid
    node.watchers[pid] = None
    if isinstance(done.key, tuple):
        node.opened[done.key] = pid
    ctx.monitor(pid)
    if node.applied > done.applied:
        ctx.send(pid, NewRevisions(node.applied, None))  # None: it reads what it missed
    if node.compact_revision > done.compact_revision:
        ctx.send(pid, NewFloor(node.compact_revision))
    for caller in waiting:
        ctx.reply(caller, pid)


def _progress(node: _Node, watcher: Pid, positions: dict[int, int]) -> None:
    for wid, next_rev in positions.items():
        node.state = adm.progress_watch(node.state, (str(watcher), wid), next_rev)


async def _down(node: _Node, pid: Pid, reason: Any) -> None:
    """The raft member ending ends this process (the supervisor restarts both, in order);
    a watcher ending drops its watches."""
    if pid == node.raft:
        raise RuntimeError(f"the kv raft member went down: {reason}")
    if pid in node.watchers:
        del node.watchers[pid]
        for key in [k for k, session in node.opened.items() if session == pid]:
            del node.opened[key]
        owner = str(pid)
        for watch in [k for k in node.state.watches if k[0] == owner]:
            node.state = adm.cancel_watch(node.state, watch)
        if not node.watchers and not node.opening:
            await _watching(node, False)


__all__ = ["ErrCompacted", "KvNodeConfig", "kv_node"]
