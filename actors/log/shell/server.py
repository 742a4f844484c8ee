"""The raft server process: one member of one raft group, a thin shell over the core.

It turns mailbox messages into core events (peer messages, proposals, WAL acks, its
tick timer) and executes the core's effects in order: the hard state to its meta file
(fsync, before anything that depends on it), log entries to the node's WAL process,
messages to the peers' raft servers (found by registered name), committed entries to
the state machine, outcomes to proposers, leadership changes to subscribers (the
election listener API).

Not yet here: snapshots, segment files, compaction and snapshot install (the core
supports them; the shell refuses to build an install and the core then retries).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from sediment import log
from sediment.actors.log import kv_machine
from sediment.actors.log.raft import core
from sediment.actors.log.raft import protocol as rp
from sediment.actors.log.raft import types as rt
from sediment.actors.log.raft.state import RaftConfig, RaftState
from sediment.actors.log.raft.types import Entry, HardState
from sediment.actors.log.shell.codec import from_stored, to_stored
from sediment.actors.log.shell.meta import MetaStore
from sediment.actors.log.shell.names import raft_name, wal_name
from sediment.actors.log.shell.wal_server import WalRejected, WalWriteReq, WalWritten
from sediment.runtime.messages import Call, Down
from sediment.runtime.pid import Pid, Ref
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.log.raft")
RAFT_MESSAGES = (rt.AppendEntries, rt.AppendReply, rt.RequestVote, rt.VoteReply,
                 rt.InstallSnapshot, rt.InstallSnapshotReply)


@dataclass(frozen=True)
class GroupSpec:
    """One raft group: its id, the logical nodes of its members, where they keep data."""

    group: str
    nodes: tuple[str, ...]
    data_dir: str
    election_timeout: tuple[float, float] = (0.3, 0.6)
    heartbeat_interval: float = 0.1
    wal_max_size: int = 64 * 1024 * 1024

    def raft_config(self) -> RaftConfig:
        return RaftConfig(peers=self.nodes, election_timeout=self.election_timeout,
                          heartbeat_interval=self.heartbeat_interval, group=self.group)

    def node_dir(self, node: str) -> str:
        return os.path.join(self.data_dir, node)

    def group_dir(self, node: str) -> str:
        return os.path.join(self.node_dir(node), "groups", self.group)

    def wal_dir(self, node: str) -> str:
        return os.path.join(self.node_dir(node), "wal")


@dataclass(frozen=True)
class _Tick:
    due: float


@dataclass
class _Shell:
    ctx: Process
    spec: GroupSpec
    meta: MetaStore
    wal: Pid
    machine: Any = field(default_factory=kv_machine.initial)
    peers: dict[str, Pid] = field(default_factory=dict)
    peer_monitors: dict[Ref, str] = field(default_factory=dict)
    results: dict[int, Any] = field(default_factory=dict)
    waiting: dict[int, Any] = field(default_factory=dict)  # index -> proposer awaiting apply
    listeners: list[Pid] = field(default_factory=list)
    leader: tuple[str | None, int] = (None, 0)
    tick_due: float | None = None


async def raft_server(ctx: Process, spec: GroupSpec) -> None:
    """Process entry: restore from the meta file and the WAL, then serve forever."""
    node = ctx.self().node
    wal = await ctx.whereis(wal_name(node))
    if wal is None:
        raise RuntimeError(f"no WAL process on {node}")
    meta = MetaStore(spec.group_dir(node))
    hard = meta.load()
    stored = await ctx.call(wal, ("recovered", spec.group), timeout=30)
    tail = _contiguous([from_stored(s) for s in stored])
    state = core.init(spec.raft_config(), node, hard, tail, None,
                      seed=sum(node.encode()) + len(tail))
    shell = _Shell(ctx, spec, meta, wal)
    _logger.info("raft server up", group=spec.group, term=hard.term, log=len(tail))
    await _step(shell, state, rp.Tick(ctx.now()))


def _contiguous(entries: list[Entry]) -> list[Entry]:
    """The recovered log up to its first gap (later entries are refetched from the leader)."""
    out: list[Entry] = []
    for entry in entries:
        if out and entry.index != out[-1].index + 1:
            break
        if not out and entry.index != 1:
            break
        out.append(entry)
    return out


async def _step(shell: _Shell, state: RaftState, first: rp.Event) -> None:
    event: rp.Event | None = first
    ctx = shell.ctx
    while True:
        if event is not None:
            state, effects = core.step(state, event)
            for effect in effects:
                await _execute(shell, state, effect)
            _schedule_tick(shell, state)
        event = _event(shell, state, await ctx.receive())


def _event(shell: _Shell, state: RaftState, msg: Any) -> rp.Event | None:
    ctx = shell.ctx
    now = ctx.now()
    if isinstance(msg, RAFT_MESSAGES):
        return rp.Receive(msg, now)
    if isinstance(msg, WalWritten):
        return rp.Persisted(msg.index, msg.term)
    if isinstance(msg, _Tick):
        if shell.tick_due == msg.due:
            shell.tick_due = None
        return rp.Tick(now)
    if isinstance(msg, WalRejected):
        _logger.error("WAL rejected a write (gap)", group=msg.group, resend_from=msg.from_index)
        return None
    if isinstance(msg, Down):
        name = shell.peer_monitors.pop(msg.ref, None)
        if name is not None:
            shell.peers.pop(name, None)
        return None
    if isinstance(msg, Call):
        return _on_call(shell, state, msg)
    _logger.warning("raft server got an unexpected message", message=repr(msg)[:200])
    return None


def _on_call(shell: _Shell, state: RaftState, call: Call) -> rp.Event | None:
    request = call.request
    ctx = shell.ctx
    kind = request[0] if isinstance(request, tuple) and request else request
    if kind == "propose":
        return rp.Propose(request[1], call.from_, ctx.now())
    if kind == "status":
        ctx.reply(call.from_, _status(shell, state))
    elif kind == "read":
        ctx.reply(call.from_, _read(state, request[1]))
    elif kind == "subscribe":
        shell.listeners.append(request[1])
        ctx.reply(call.from_, shell.leader)
    else:
        ctx.reply(call.from_, ("error", ("unknown_request", request)))
    return None


def _status(shell: _Shell, state: RaftState) -> dict[str, Any]:
    return {"group": shell.spec.group, "node": state.me, "role": state.role,
            "term": state.term, "leader": shell.leader[0], "commit": state.commit,
            "applied": state.applied, "last_index": state.snap_index + len(state.entries),
            "keys": dict(shell.machine.keys)}


def _read(state: RaftState, index: int) -> Any:
    """The command at `index` if this member still holds it in memory."""
    pos = index - state.snap_index - 1
    if 0 <= pos < len(state.entries):
        return ("ok", state.entries[pos].command)
    return ("error", "not_in_memory")


async def _execute(shell: _Shell, state: RaftState, effect: rp.Effect) -> None:
    ctx = shell.ctx
    if isinstance(effect, rp.PersistHardState):
        shell.meta.save(HardState(effect.term, effect.voted_for), fp=ctx.failpoint_sync)
    elif isinstance(effect, rp.AppendToLog):
        ctx.send(shell.wal, WalWriteReq(shell.spec.group,
                                        tuple(to_stored(e) for e in effect.entries), ctx.self()))
    elif isinstance(effect, rp.TruncateLog):
        pass  # the WAL drops the conflicting suffix when the new entries overwrite it
    elif isinstance(effect, rp.Send):
        await _send(shell, effect.to, effect.msg)
    elif isinstance(effect, rp.Apply):
        _apply(shell, effect.entries)
    elif isinstance(effect, rp.Reply):
        _reply(shell, effect)
    elif isinstance(effect, rp.LeaderChanged):
        shell.leader = (effect.leader, effect.term)
        for pid in shell.listeners:
            ctx.send(pid, ("leader_changed", shell.spec.group, effect.leader, effect.term))
    else:
        _logger.warning("effect not supported by this shell yet", effect=type(effect).__name__)


async def _send(shell: _Shell, node: str, msg: Any) -> None:
    pid = shell.peers.get(node)
    ctx = shell.ctx
    if pid is None:
        pid = await ctx.whereis(raft_name(shell.spec.group, node))
        if pid is None:
            return  # that member is down: the message is lost, as on a network
        shell.peers[node] = pid
        shell.peer_monitors[ctx.monitor(pid)] = node
    ctx.send(pid, msg)


def _apply(shell: _Shell, entries: tuple[Entry, ...]) -> None:
    for entry in entries:
        shell.machine, result = kv_machine.apply(shell.machine, entry)
        waiter = shell.waiting.pop(entry.index, None)
        if waiter is not None:
            shell.ctx.reply(waiter, ("ok", entry.index, result))
        else:
            shell.results[entry.index] = result
    if len(shell.results) > 10_000:  # outcomes nobody asked for: keep the map bounded
        for index in sorted(shell.results)[:5_000]:
            del shell.results[index]


def _reply(shell: _Shell, effect: rp.Reply) -> None:
    result = effect.result
    ref = effect.ref
    if isinstance(result, rp.Committed):
        if result.index in shell.results:
            shell.ctx.reply(ref, ("ok", result.index, shell.results.pop(result.index)))
        else:
            shell.waiting[result.index] = ref
    elif isinstance(result, rp.NotLeader):
        shell.ctx.reply(ref, ("not_leader", result.leader_hint))
    else:
        shell.ctx.reply(ref, ("error", type(result).__name__, getattr(result, "index", None)))


def _schedule_tick(shell: _Shell, state: RaftState) -> None:
    due = core.wakeup_at(state)
    if shell.tick_due is not None and shell.tick_due <= due:
        return
    shell.tick_due = due
    ctx = shell.ctx
    ctx.send_after(max(0.0, due - ctx.now()), ctx.self(), _Tick(due))
