"""The KV's committed history as the block tier's flusher reads it.

The block tier does not name the KV (`tests/test_wiring_layers.py`): this module, in
the wiring layer, fills the tier's `HistorySource` port with the local "kv" raft
member's `HistoryRows(lo, max_rows)` query (its machine holds only committed, applied
entries).
"""

from __future__ import annotations

from sediment.actors.blocks.shell.history_source import HistoryBatch, HistorySource
from sediment.actors.kv.history import FlushRows
from sediment.actors.kv.names import KV_GROUP
from sediment.actors.kv.queries import HistoryRows
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Query
from sediment.runtime.process import Process


async def read_kv_history(ctx: Process, lo: int, max_rows: int, timeout: float) -> object:
    """The local KV member's rows from `lo` on as a `HistoryBatch`, else its answer."""
    reply = await ctx.call(raft_name(KV_GROUP, ctx.self().node),
                           Query(HistoryRows(lo, max_rows)), timeout=timeout)
    if isinstance(reply, FlushRows):
        return HistoryBatch(reply.rows, reply.through, reply.more)
    return reply


KV_HISTORY = HistorySource(KV_GROUP, read_kv_history)

__all__ = ["KV_HISTORY", "read_kv_history"]
