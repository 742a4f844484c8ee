"""The blocks node process (one per metastore member): runs the compaction service on
the leader only.

It subscribes to the local metastore raft member's leadership changes. When the member
leads, it starts the compaction service (linked, so the service never outlives it);
when the member stops leading, or leads again in a new term, the old service is killed
first, so a service only ever proposes for the term it was started in. The raft member
ending ends this process too: the node's `rest_for_one` supervisor restarts both, in
order. If the service's name is still held by a dying predecessor, the start is
retried on a short timer while the member still leads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sediment import log
from sediment.actors.blocks.shell.compaction_service import compaction_service
from sediment.actors.blocks.shell.config import BlocksConfig
from sediment.actors.blocks.shell.names import METASTORE_GROUP, service_name
from sediment.actors.log.shell.names import raft_name
from sediment.runtime.errors import NameTaken
from sediment.runtime.messages import Call, Down
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process
from sediment.runtime.reasons import KILL

_logger = log.get_logger("sediment.blocks.node")

SERVICE_RETRY = 0.2  # seconds before starting the service again when its name was taken


@dataclass(frozen=True)
class _RetryStart:
    term: int


@dataclass
class _Node:
    ctx: Process
    config: BlocksConfig
    raft: Pid
    leader: tuple[str | None, int] = (None, 0)
    service: Pid | None = None
    service_term: int = 0


async def blocks_node(ctx: Process, config: BlocksConfig) -> None:
    """Process entry: follow the local metastore member's leadership until it ends."""
    me = ctx.self().node
    raft = await ctx.whereis(raft_name(METASTORE_GROUP, me))
    if raft is None:
        raise RuntimeError(f"the metastore raft member on {me} is not running")
    ctx.monitor(raft)
    node = _Node(ctx, config, raft)
    leader, term = await ctx.call(raft, ("subscribe", ctx.self()), timeout=30)
    await _leadership(node, leader, term)
    _logger.info("blocks node up", node=me, leader=leader, term=term)
    while True:
        await _handle(node, await ctx.receive())


async def _handle(node: _Node, msg: Any) -> None:
    ctx = node.ctx
    if (isinstance(msg, tuple) and len(msg) == 4 and msg[0] == "leader_changed"
            and msg[1] == METASTORE_GROUP):
        await _leadership(node, msg[2], msg[3])
    elif isinstance(msg, _RetryStart):
        if msg.term == node.leader[1]:
            await _leadership(node, *node.leader)
    elif isinstance(msg, Down) and msg.pid == node.raft:
        raise RuntimeError(f"the metastore raft member went down: {msg.reason}")
    elif isinstance(msg, Call):
        if msg.request == ("status",):
            ctx.reply(msg.from_, {"node": ctx.self().node, "leader": node.leader[0],
                                  "term": node.leader[1], "service": node.service is not None,
                                  "service_term": node.service_term})
        else:
            ctx.reply(msg.from_, ("error", ("unknown_request", repr(msg.request)[:200])))
    else:
        _logger.warning("blocks node got an unexpected message", message=repr(msg)[:200])


async def _leadership(node: _Node, leader: str | None, term: int) -> None:
    """The service runs exactly while the local member leads, for the current term."""
    ctx = node.ctx
    node.leader = (leader, term)
    leading = leader == ctx.self().node
    if node.service is not None and (not leading or node.service_term != term):
        _stop_service(node)
    if leading and node.service is None:
        try:
            node.service = await ctx.spawn(compaction_service, node.config, term, link=True,
                                           name=service_name(ctx.self().node),
                                           label=service_name(ctx.self().node))
        except NameTaken:
            ctx.send_after(SERVICE_RETRY, ctx.self(), _RetryStart(term))
            return
        node.service_term = term
        _logger.info("compaction service started", term=term)


def _stop_service(node: _Node) -> None:
    ctx = node.ctx
    assert node.service is not None
    ctx.unlink(node.service)  # its end must not take this process with it
    ctx.exit(node.service, KILL)
    _logger.info("compaction service stopped", leader=node.leader[0], term=node.leader[1])
    node.service = None


__all__ = ["blocks_node"]
