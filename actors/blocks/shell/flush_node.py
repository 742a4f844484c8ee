"""The flush follower (one per KV node): runs the level-0 flusher while the local member
of the history's group (the KV's, `FlusherConfig.history.group`) leads, as the KV node
runs its compaction coordinator (`while_leading`).

At most one flusher per node and one per term runs; two on two nodes for a moment are
harmless: the metastore refuses a flush that overlaps what is flushed.
"""

from __future__ import annotations

from sediment.actors.blocks.shell.flusher import FlusherConfig, flusher
from sediment.actors.blocks.shell.names import flusher_name
from sediment.actors.log.shell.while_leading import LeaderChild, while_leading
from sediment.runtime.process import Process


async def flush_node(ctx: Process, config: FlusherConfig) -> None:
    """Process entry: the flusher while the local member of the history's group leads."""
    name = flusher_name(ctx.self().node)
    await while_leading(ctx, LeaderChild(config.history.group, "flusher", name, flusher, config))


__all__ = ["flush_node"]
