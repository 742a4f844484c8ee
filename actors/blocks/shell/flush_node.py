"""The flush follower (one per KV node): runs the level-0 flusher while the local KV
member leads, as the KV node runs its compaction coordinator.

It subscribes to the local KV raft member's leadership changes. When the member leads,
it starts the flusher (linked, registered as `flusher_name(node)`); when the member
stops leading, or leads again in a new term, the old flusher is killed first, so at
most one flusher per node and one per term runs (two on two nodes for a moment are
harmless: the metastore refuses a flush that overlaps what is flushed). The raft member
ending ends this process too; the node's supervisor restarts both, in order. If the
name is still held by a dying predecessor, the start is retried on a short timer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sediment import log
from sediment.actors.blocks.shell.flusher import FlusherConfig, flusher
from sediment.actors.blocks.shell.names import flusher_name
from sediment.actors.kv.names import KV_GROUP
from sediment.actors.log.shell.names import raft_name
from sediment.runtime.errors import NameTaken
from sediment.runtime.messages import Call, Down
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process
from sediment.runtime.reasons import KILL

_logger = log.get_logger("sediment.blocks.flush_node")

START_RETRY = 0.2  # seconds before starting the flusher again when its name was taken


@dataclass(frozen=True)
class _RetryStart:
    term: int


@dataclass
class _Node:
    ctx: Process
    config: FlusherConfig
    raft: Pid
    leader: tuple[str | None, int] = (None, 0)
    flusher: Pid | None = None
    flusher_term: int = 0


async def flush_node(ctx: Process, config: FlusherConfig) -> None:
    """Process entry: follow the local KV member's leadership until it ends."""
    me = ctx.self().node
    raft = await ctx.whereis(raft_name(KV_GROUP, me))
    if raft is None:
        raise RuntimeError(f"the kv raft member on {me} is not running")
    ctx.monitor(raft)
    node = _Node(ctx, config, raft)
    leader, term = await ctx.call(raft, ("subscribe", ctx.self()), timeout=30)
    await _leadership(node, leader, term)
    while True:
        await _handle(node, await ctx.receive())


async def _handle(node: _Node, msg: Any) -> None:
    ctx = node.ctx
    if (isinstance(msg, tuple) and len(msg) == 4 and msg[0] == "leader_changed"
            and msg[1] == KV_GROUP):
        await _leadership(node, msg[2], msg[3])
    elif isinstance(msg, _RetryStart):
        if msg.term == node.leader[1]:
            await _leadership(node, *node.leader)
    elif isinstance(msg, Down) and msg.pid == node.raft:
        raise RuntimeError(f"the kv raft member went down: {msg.reason}")
    elif isinstance(msg, Call):
        if msg.request == ("status",):
            ctx.reply(msg.from_, {"node": ctx.self().node, "leader": node.leader[0],
                                  "term": node.leader[1], "flusher": node.flusher,
                                  "flusher_term": node.flusher_term})
        else:
            ctx.reply(msg.from_, ("error", ("unknown_request", repr(msg.request)[:200])))
    else:
        _logger.warning("flush node got an unexpected message", message=repr(msg)[:200])


async def _leadership(node: _Node, leader: str | None, term: int) -> None:
    """The flusher runs exactly while the local member leads, for the current term."""
    ctx = node.ctx
    node.leader = (leader, term)
    leading = leader == ctx.self().node
    if node.flusher is not None and (not leading or node.flusher_term != term):
        ctx.unlink(node.flusher)  # its end must not take this process with it
        ctx.exit(node.flusher, KILL)
        node.flusher = None
        _logger.info("flusher stopped", leader=leader, term=term)
    if leading and node.flusher is None:
        name = flusher_name(ctx.self().node)
        try:
            node.flusher = await ctx.spawn(flusher, node.config, term, link=True, name=name,
                                           label=name)
        except NameTaken:
            ctx.send_after(START_RETRY, ctx.self(), _RetryStart(term))
            return
        node.flusher_term = term
        _logger.info("flusher started", term=term)


__all__ = ["flush_node"]
