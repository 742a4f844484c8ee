"""The block tier's answer to the KV compaction coordinator's hold: how far it may compact.

The hot store may drop only values the blocks already hold, so each compaction cycle
asks for the metastore's flushed-through revision. The KV package does not know the
metastore: the wiring layer (`sediment/wiring/`) hands `flushed_through` to the KV
nodes as their `KvNodeConfig.flush_hold`, and the coordinator calls it once per cycle.

It asks the metastore members' applied state, this node's first: any member's
flushed-through revision is at most the committed one (it only moves forward), so a
lagging member holds the compaction lower, never higher.
"""

from __future__ import annotations

from sediment import log
from sediment.actors.blocks.metastore import FlushCursor, FlushCursorQuery
from sediment.actors.blocks.shell.names import METASTORE_GROUP
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Query
from sediment.runtime.errors import CallError
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.kv.coordinator")


async def flushed_through(ctx: Process, nodes: tuple[str, ...], timeout: float) -> int | None:
    """The flushed-through revision of the first metastore member that answers, all
    within `timeout`; None if none does (the coordinator's cycle then aborts)."""
    me = ctx.self().node
    deadline = ctx.now() + timeout
    for node in sorted(nodes, key=lambda n: n != me):
        left = deadline - ctx.now()
        if left <= 0:
            break
        try:
            reply = await ctx.call(raft_name(METASTORE_GROUP, node), Query(FlushCursorQuery()),
                                   timeout=left)
        except CallError:
            continue
        if isinstance(reply, FlushCursor):
            return reply.through
    _logger.warning("no metastore member gave the flushed-through revision")
    return None


__all__ = ["flushed_through"]
