"""A follower of one raft group's leadership that runs a child process exactly while the
local member leads: the compaction service beside the metastore leader, the flusher
beside the KV leader.

It subscribes to the local member's leadership changes. When the member leads, it starts
the child (linked, registered under its name) for that term; when the member stops
leading, or leads again in a new term, the old child is killed first, so a child only
ever acts for the term it was started in and at most one runs per node. The raft member
ending ends this process too: the node's `rest_for_one` supervisor restarts both, in
order. If the child's name is still held by a dying predecessor, the start is retried on
a short timer while the member still leads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sediment import log
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import LeaderChanged, Subscribe
from sediment.runtime.common_calls import Status, UnknownRequest
from sediment.runtime.errors import NameTaken
from sediment.runtime.kernel import ProcessFn
from sediment.runtime.messages import Call, Down
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process
from sediment.runtime.reasons import KILL

_logger = log.get_logger("sediment.log.while_leading")

START_RETRY = 0.2  # seconds before starting the child again when its name was taken


@dataclass(frozen=True)
class LeaderChild:
    """What to run while `group`'s local member leads: `fn(ctx, config, term)`,
    registered as `name`; `role` names it in logs and in the status reply."""

    group: str
    role: str
    name: str
    fn: ProcessFn
    config: Any


@dataclass(frozen=True)
class _RetryStart:
    term: int


@dataclass
class _Follower:
    ctx: Process
    spec: LeaderChild
    raft: Pid
    leader: tuple[str | None, int] = (None, 0)
    child: Pid | None = None
    child_term: int = 0


async def while_leading(ctx: Process, spec: LeaderChild) -> None:
    """Process entry: follow the local member's leadership until it ends."""
    me = ctx.self().node
    raft = await ctx.whereis(raft_name(spec.group, me))
    if raft is None:
        raise RuntimeError(f"the {spec.group} raft member on {me} is not running")
    ctx.monitor(raft)
    f = _Follower(ctx, spec, raft)
    now = await ctx.call(raft, Subscribe(ctx.self()), timeout=30)
    leader, term = now.leader, now.term
    await _leadership(f, leader, term)
    _logger.info("leader follower up", group=spec.group, role=spec.role, leader=leader,
                 term=term)
    while True:
        await _handle(f, await ctx.receive())


async def _handle(f: _Follower, msg: Any) -> None:
    ctx, spec = f.ctx, f.spec
    if isinstance(msg, LeaderChanged) and msg.group == spec.group:
        await _leadership(f, msg.leader, msg.term)
    elif isinstance(msg, _RetryStart):
        if msg.term == f.leader[1]:
            await _leadership(f, *f.leader)
    elif isinstance(msg, Down) and msg.pid == f.raft:
        raise RuntimeError(f"the {spec.group} raft member went down: {msg.reason}")
    elif isinstance(msg, Call):
        if isinstance(msg.request, Status):
            ctx.reply(msg.from_, {"node": ctx.self().node, "leader": f.leader[0],
                                  "term": f.leader[1], spec.role: f.child,
                                  f"{spec.role}_term": f.child_term})
        else:
            ctx.reply(msg.from_, UnknownRequest.of(msg.request))
    else:
        _logger.warning("leader follower got an unexpected message", role=spec.role,
                        message=repr(msg)[:200])


async def _leadership(f: _Follower, leader: str | None, term: int) -> None:
    """The child runs exactly while the local member leads, for the current term."""
    ctx, spec = f.ctx, f.spec
    f.leader = (leader, term)
    leading = leader == ctx.self().node
    if f.child is not None and (not leading or f.child_term != term):
        ctx.unlink(f.child)  # its end must not take this process with it
        ctx.exit(f.child, KILL)
        f.child = None
        _logger.info("stopped", role=spec.role, leader=leader, term=term)
    if leading and f.child is None:
        try:
            f.child = await ctx.spawn(spec.fn, spec.config, term, link=True, name=spec.name,
                                      label=spec.name)
        except NameTaken:
            ctx.send_after(START_RETRY, ctx.self(), _RetryStart(term))
            return
        f.child_term = term
        _logger.info("started", role=spec.role, term=term)


__all__ = ["LeaderChild", "while_leading"]
