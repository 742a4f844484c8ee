"""The table node's writes to tables with unique indexes: the shell of
`unique_check.py`.

Such a write is two steps, so the node never waits on raft: a task reads the row's
current value inside the transaction (`ReadLatest` by ReadIndex at the row's partition
leader; another transaction's intent there is resolved if it can be and the read tried
once more, `intent_resolver.py`, else a `WriteConflict`), and on its answer
the node sends the row's intent and the claims and releases it needs, all in parallel
(`unique_check.write_with_claims`). The client is answered once every one of them was
acknowledged, with the first error (`NodeTx.acks_due`, `node_txs.on_task`): a refused
claim (`UniqueConstraintViolation`) fails the write, and the transaction can only abort,
so none of its writes, claims included, ever becomes visible.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

from sediment.actors.catalog.descriptors import Catalog
from sediment.actors.catalog.errors import CatalogError
from sediment.actors.log.shell.protocol import ReadIndex
from sediment.actors.tables import transactions as txn
from sediment.actors.tables.errors import PartitionUnavailable, WriteConflict
from sediment.actors.tables.mvcc import RowKey
from sediment.actors.tables.names import partition_group
from sediment.actors.tables.partition import WriteIntentCmd
from sediment.actors.tables.partition_machine import ReadLatest
from sediment.actors.tables.shell import intent_resolver, node_txs
from sediment.actors.tables.shell.group_task import TaskDone, spawn_task
from sediment.actors.tables.shell.node_protocol import Failed
from sediment.actors.tables.shell.node_state import (
    NodeState,
    NodeTx,
    catalog_version,
    known_assignments,
)
from sediment.actors.tables.shell.node_tasks import UniqueRead
from sediment.actors.tables.unique_check import unique_indexes, write_with_claims
from sediment.runtime.messages import CallRef


async def write(s: NodeState, client: CallRef, tx_id: Any, table: Any, row: Any,
                delete: bool) -> Any:
    """The table node's `Write`/`Delete` (tx, table, row or key): a table without a
    unique index in the transaction's catalog version takes `node_txs.write`."""
    tx = s.txs.get(tx_id) if isinstance(tx_id, str) else None
    if tx is None or tx.waiting is not None:
        return await node_txs.write(s, client, tx_id, table, row, delete)  # its errors
    cat = await catalog_version(s, tx.core.catalog_version)
    t = cat.table_named(table) if isinstance(table, str) else None
    if t is None or not unique_indexes(cat, t):
        return await node_txs.write(s, client, tx_id, table, row, delete, cat)
    await _start(s, tx, cat, table, row, delete, client)
    return None


async def _start(s: NodeState, tx: NodeTx, cat: Catalog, table: str, row: Any,
                 delete: bool, client: CallRef) -> None:
    """Read the row's current value first. A bad write raises here, nothing sent."""
    _, effects = write_with_claims(tx.core, cat, table, row, delete, None)  # validates
    write = effects[0]
    assert isinstance(write, txn.SendWrite) and isinstance(write.command, WriteIntentCmd)
    await known_assignments(s, (write.group,))
    nodes = tuple(sorted(s.assignments.get(write.group, ())))
    tx.waiting = client
    tag = s.next_tag(UniqueRead(tx.core.id, table, row, delete, write.group, 0))
    if not nodes:
        s.ctx.send(s.ctx.self(), TaskDone(tag, False, (), f"{write.group} has no assignment"))
        return
    read = ReadIndex(ReadLatest((write.command.table_id, write.command.key), tx.core.id))
    await spawn_task(s.ctx, partition_group(write.group), nodes, (read,), tag)


async def on_read(s: NodeState, what: UniqueRead, done: TaskDone) -> None:
    """The row's current value came back: send the write and its claims."""
    tx_id, table, row, delete, group = what.tx_id, what.table, what.row, what.delete, what.group
    attempt = what.attempt
    tx = s.txs.get(tx_id)
    if tx is None or tx.waiting is None:
        return
    result = done.results[0] if done.ok and done.results else None
    error: CatalogError | None = None
    if not done.ok:
        error = PartitionUnavailable(f"read before the write of {tx_id}: {done.error}")
    elif isinstance(result, CatalogError):
        error = result
        if attempt == 0 and isinstance(result, WriteConflict) and result.intent_key:
            # another transaction's intent on the row: resolved, then read again
            key = cast(RowKey, result.intent_key)
            await intent_resolver.resolve_and_retry(
                s, group, key, (ReadIndex(ReadLatest(key, tx_id)),),
                UniqueRead(tx_id, table, row, delete, group, 1), result)
            return
    if error is None:
        try:
            cat = await catalog_version(s, tx.core.catalog_version)
            core, effects = write_with_claims(tx.core, cat, table, row, delete, result)
        except CatalogError as err:
            error = err
    if error is not None:  # a failed write: the transaction can only abort
        tx.core = replace(tx.core, failure=tx.core.failure or error)
        s.ctx.reply(tx.waiting, Failed(error))
        tx.waiting = None
        return
    tx.core = core
    tx.acks_due = sum(isinstance(e, txn.SendWrite) for e in effects)
    await node_txs.run_effects(s, tx, effects)


__all__ = ["on_read", "write"]
