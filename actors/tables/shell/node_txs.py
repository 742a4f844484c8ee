"""The table node's read-write transactions: the shell of `transactions.py`.

The node runs the coordinator core of every RW transaction begun on it and executes
its effects: `SendWrite`, `SendFinish` and `SendCleanup` become raft proposals to the
partition groups (each in a task process, `group_task.py`, so the node never waits on
raft), and their answers come back as core events. A client's write is answered once
its intent is applied (one write of a transaction in flight at a time: per-partition
order needs nothing more, docs rule 2); a commit once the commit partition recorded the
outcome. The node forgets a transaction (`active_txs.end`, which unpins its catalog
version) only when the outcome is known and every cleanup applied (rule 3). A write
refused on another transaction's intent is tried again once that intent is resolved,
unless its holder is alive and pending (`intent_resolver.py`). A write
that no partition member took in time fails the transaction (`PartitionUnavailable`);
a finish or cleanup that did not get through is retried, a bounded number of times.
"""

from __future__ import annotations

from typing import Any

from sediment import log
from sediment.actors.catalog.descriptors import Catalog
from sediment.actors.catalog.errors import CatalogError
from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.actors.log.shell.protocol import Propose
from sediment.actors.tables import active_txs, partition
from sediment.actors.tables import transactions as txn
from sediment.actors.tables.errors import PartitionUnavailable, TxNotActive, UnknownTransaction
from sediment.actors.tables.mvcc import RowKey
from sediment.actors.tables.names import partition_group
from sediment.actors.tables.shell import intent_resolver
from sediment.actors.tables.shell.group_task import TaskDone, spawn_task
from sediment.actors.tables.shell.node_protocol import Began, Ended, Failed, Written
from sediment.actors.tables.shell.node_state import (
    NodeState,
    NodeTx,
    catalog_at,
    catalog_version,
    known_assignments,
)
from sediment.actors.tables.shell.node_tasks import TxMessage
from sediment.actors.tables.tx_state import FinishOutcome
from sediment.actors.tables.unique_claims import UniqueClaimCmd, claim_key
from sediment.runtime.messages import CallRef

_logger = log.get_logger("sediment.tables.txs")
RETRIES = 20  # finish and cleanup proposals tried again this often
RECENT = 256  # ended transactions kept for status


async def begin(s: NodeState) -> Any:
    ts = s.now()
    cat = await catalog_at(s, ts)
    s.tx_seq += 1
    tx_id = f"{s.me}:{s.incarnation}:{s.tx_seq}"
    s.active = active_txs.begin(s.active, tx_id, ts, cat.version)
    s.txs[tx_id] = NodeTx(txn.begin(tx_id, s.me, ts, cat), s.ctx.now())
    return Began(tx_id, ts, cat.version)


def _tx(s: NodeState, tx_id: Any) -> NodeTx:
    tx = s.txs.get(tx_id) if isinstance(tx_id, str) else None
    if tx is None:
        raise UnknownTransaction(str(tx_id))
    return tx


async def write(s: NodeState, client: CallRef, tx_id: Any, table: Any, row: Any,
                delete: bool, cat: Catalog | None = None) -> Any:
    """Send the intent; the client is answered when it applied. None: answered later.
    `cat`: the transaction's catalog version, when the caller has it already."""
    tx = _tx(s, tx_id)
    if tx.waiting is not None:
        return Failed(TxNotActive(tx.core.id, "busy with another request"))
    if cat is None:
        cat = await catalog_version(s, tx.core.catalog_version)
    if delete:
        tx.core, effects = txn.delete(tx.core, cat, table, key=row)
    else:
        tx.core, effects = txn.write(tx.core, cat, table, row)
    tx.waiting = client
    await run_effects(s, tx, effects)
    return None


async def commit(s: NodeState, client: CallRef, tx_id: Any, rollback: bool) -> Any:
    tx = _tx(s, tx_id)
    if tx.waiting is not None:
        return Failed(TxNotActive(tx.core.id, "busy with another request"))
    if rollback:
        tx.core, effects = txn.rollback(tx.core)
    else:
        ts = s.now()
        tx.core, effects = txn.commit(tx.core, ts, await catalog_at(s, ts))
    tx.waiting = client
    await run_effects(s, tx, effects)
    return None


async def run_effects(s: NodeState, tx: NodeTx, effects: list[txn.Effect]) -> None:
    for e in effects:
        if isinstance(e, txn.TxEnded):
            tx.outcome = "committed" if e.committed else "aborted"
            tx.failure = e.failure
            _answer(s, tx, Ended(e.committed, e.commit_ts, e.failure))
            s.ended.append({"tx": tx.core.id, "outcome": tx.outcome,
                            "commit_ts": e.commit_ts, "at": s.ctx.now()})
            del s.ended[:-RECENT]
            _maybe_forget(s, tx)
        elif isinstance(e, txn.SendWrite | txn.SendFinish | txn.SendCleanup):
            tx.cleanups += isinstance(e, txn.SendCleanup)
            await _send(s, tx.core.id, e, 0)


async def _send(s: NodeState, tx_id: str, e: txn.Effect, attempt: int) -> None:
    assert isinstance(e, txn.SendWrite | txn.SendFinish | txn.SendCleanup)
    await known_assignments(s, (e.group,))
    nodes = tuple(sorted(s.assignments.get(e.group, ())))
    tag = s.next_tag(TxMessage(tx_id, e, attempt))
    if not nodes:
        s.ctx.send(s.ctx.self(), TaskDone(tag, False, (), f"{e.group} has no assignment"))
        return
    await spawn_task(s.ctx, partition_group(e.group), nodes, (Propose(e.command),), tag)


async def on_task(s: NodeState, what: TxMessage, done: TaskDone) -> None:
    tx_id, e, attempt = what.tx_id, what.effect, what.attempt
    tx = s.txs.get(tx_id)
    if tx is None:
        return
    result = done.results[0] if done.ok else None
    if isinstance(e, txn.SendWrite):
        error: CatalogError | None = None
        if not done.ok:
            error = PartitionUnavailable(f"write of {tx_id} to {e.group}: {done.error}")
        elif isinstance(result, partition.Failed):
            error = result.error
            if attempt == 0 and intent_resolver.met_intent(error):
                # its holder may be decided or dead: resolved, then the write tried again
                await intent_resolver.resolve_and_retry(
                    s, e.group, _key_of(e.command), (Propose(e.command),),
                    TxMessage(tx_id, e, 1), result)
                return
        tx.core, effects = txn.on_write_result(tx.core, error)
        if tx.core.phase is txn.Phase.ACTIVE:  # answered once the request's writes all were
            tx.ack_error = tx.ack_error or error
            tx.acks_due = max(0, tx.acks_due - 1)
            if tx.acks_due == 0:
                _answer(s, tx, Written() if tx.ack_error is None else Failed(tx.ack_error))
                tx.ack_error = None
        await run_effects(s, tx, effects)
        return
    if not done.ok:
        if attempt < RETRIES:
            await _send(s, tx_id, e, attempt + 1)
        else:
            _logger.warning("gave up on a transaction message", tx=tx_id, effect=repr(e)[:120])
        return
    if isinstance(e, txn.SendFinish):
        if isinstance(result, FinishOutcome):
            tx.core, effects = txn.on_finish_result(tx.core, result)
            await run_effects(s, tx, effects)
        return
    tx.cleanups -= 1
    _maybe_forget(s, tx)


def _key_of(command: partition.WriteIntentCmd | UniqueClaimCmd) -> RowKey:
    if isinstance(command, UniqueClaimCmd):
        return claim_key(command.index_id, command.values)
    return (command.table_id, command.key)


def _answer(s: NodeState, tx: NodeTx, reply: Written | Ended | Failed) -> None:
    if tx.waiting is not None:
        s.ctx.reply(tx.waiting, reply)
        tx.waiting = None


def _maybe_forget(s: NodeState, tx: NodeTx) -> None:
    """Rule 3: only once the outcome is known and every cleanup applied."""
    if tx.outcome != "unknown" and tx.cleanups <= 0:
        s.active = active_txs.end(s.active, tx.core.id)
        s.txs.pop(tx.core.id, None)


def tx_alive(s: NodeState, tx_id: Any) -> bool:
    """Whether this node still runs the transaction (it may still finish it)."""
    tx = s.txs.get(tx_id) if isinstance(tx_id, str) else None
    return tx is not None and tx.outcome == "unknown"


def oldest(s: NodeState) -> tuple[str, HybridTimestamp, int] | None:
    live = [(t.core.begin_ts, t.core.id, t.core.catalog_version) for t in s.txs.values()]
    if not live:
        return None
    ts, tx_id, version = min(live)
    return tx_id, ts, version


__all__ = ["begin", "commit", "oldest", "on_task", "run_effects", "tx_alive", "write"]
