"""The blocks node process (one per metastore member): runs the compaction service on
the leader only (`while_leading`), so a service only ever proposes for the term it was
started in.
"""

from __future__ import annotations

from sediment.actors.blocks.shell.compaction_service import compaction_service
from sediment.actors.blocks.shell.config import BlocksConfig
from sediment.actors.blocks.shell.names import METASTORE_GROUP, service_name
from sediment.actors.log.shell.while_leading import LeaderChild, while_leading
from sediment.runtime.process import Process


async def blocks_node(ctx: Process, config: BlocksConfig) -> None:
    """Process entry: the compaction service while the local metastore member leads."""
    name = service_name(ctx.self().node)
    await while_leading(ctx, LeaderChild(METASTORE_GROUP, "service", name,
                                         compaction_service, config))


__all__ = ["blocks_node"]
