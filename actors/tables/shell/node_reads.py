"""Reads of table rows, each in a process of its own that answers the client directly
(the table node hands it the client's call and goes on serving).

- Inside an RW transaction (`_rw`): the partition leader's newest row, the
  transaction's own intent over it. Another transaction's intent is resolved when its
  outcome is decided or its coordinator is gone (as below), and the read tried again;
  a live pending one is a `WriteConflict` (no-wait, as writes). Linearizable: a
  ReadIndex at the leader. An index lookup in the transaction reads each candidate
  key so.
- Read-only at a timestamp (`_ro`): first made safe (`node_safe_time.wait_safe`:
  every node that may coordinate transactions heard from at or above `ts`), then the
  newest version committed at or before
  `ts`. An intent that may be older is resolved first, as Ignite's write intent
  resolution does: its commit partition's record decides; with no record, the
  transaction's coordinator is asked whether it still runs it (`tx_alive`); if it
  does, the read waits and tries again (bounded); if not, the reader records the abort
  at the commit partition (`RecoverTxCmd`) and cleans the intent up (`CleanupCmd`
  under the current catalog version, docs rule 4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, cast

from sediment.actors.catalog.descriptors import ZonePartition
from sediment.actors.catalog.hlc import MAX, HybridTimestamp
from sediment.actors.log.shell.protocol import Propose, ReadIndex
from sediment.actors.tables import partition
from sediment.actors.tables.errors import PartitionUnavailable, WriteConflict
from sediment.actors.tables.index_entries import values_of
from sediment.actors.tables.index_range import IndexRangeLookup, in_index_order
from sediment.actors.tables.mvcc import IntentFound, RowKey
from sediment.actors.tables.names import partition_group, table_node_name
from sediment.actors.tables.partition_machine import (
    IndexLookup,
    ReadAt,
    ReadLatest,
    ReadResolved,
    ScanAt,
    ScanLatest,
    TxQuery,
)
from sediment.actors.tables.shell import named_pids
from sediment.actors.tables.shell.group_task import request_group
from sediment.actors.tables.shell.node_protocol import Failed, Rows, TxAlive
from sediment.actors.tables.shell.node_safe_time import SafeRead, wait_safe
from sediment.actors.tables.tx_state import Resolution, TxRecord, resolve
from sediment.runtime.errors import CallError
from sediment.runtime.messages import CallRef
from sediment.runtime.process import Process


@dataclass(frozen=True)
class ReadPlan:
    """What to read: one key (`key` set) or a whole table (every partition in
    `groups`); `tx_id` for a read inside an RW transaction, else `ts`."""

    table_id: int
    groups: tuple[ZonePartition, ...]
    assignments: Mapping[ZonePartition, frozenset[str]]
    key: tuple[Any, ...] | None = None
    ts: HybridTimestamp | None = None
    tx_id: str | None = None
    catalog_version: int = 0  # the latest, for a finder's cleanup
    wait: float = 0.05
    max_waits: int = 200
    safe: SafeRead | None = None  # a read-only read: served once its ts is safe (rule 5)
    lookup: IndexLookup | IndexRangeLookup | None = None  # a read-only index lookup


class _Unavailable(Exception):
    pass


async def reader(ctx: Process, plan: ReadPlan, client: CallRef) -> None:
    """Process entry: answer `Rows(rows, ts)` with rows [(key, row)] (a get: one pair,
    row None when absent) and the read's timestamp (None inside an RW transaction), or
    `Failed(a TableError)`."""
    try:
        if plan.safe is not None and plan.ts is not None:
            await wait_safe(ctx, plan.safe, plan.ts)
        rows: list[tuple[tuple[Any, ...], Any]] = []
        for group in plan.groups:
            if plan.lookup is not None:
                rows += await _lookup(ctx, plan, plan.lookup, group)
            elif plan.tx_id is not None:
                rows += await _rw(ctx, plan, group)
            else:
                rows += await _ro(ctx, plan, group)
        if plan.key is not None and not rows:
            rows = [(plan.key, None)]
        if isinstance(plan.lookup, IndexRangeLookup):
            rows = in_index_order(rows, plan.lookup.columns)
        ctx.reply(client, Rows(rows, plan.ts))
    except _Unavailable as err:
        ctx.reply(client, Failed(PartitionUnavailable(str(err))))
    except Exception as err:  # noqa: BLE001 (a typed error from a machine goes back)
        ctx.reply(client, Failed(err))


async def _ask(ctx: Process, plan: ReadPlan, group: ZonePartition, request: Any) -> Any:
    nodes = tuple(sorted(plan.assignments.get(group, ())))
    if not nodes:
        raise _Unavailable(f"{group} has no assignment")
    ok, result = await request_group(ctx, partition_group(group), nodes, request)
    if not ok:
        raise _Unavailable(f"no leader of {group}")
    if isinstance(result, Exception):
        raise result
    return result


RW_RESOLVES = 16  # intents an RW read resolves before it gives up with the conflict


async def _rw(ctx: Process, plan: ReadPlan, group: ZonePartition) -> list[tuple[Any, Any]]:
    """Another transaction's intent met is resolved if its outcome is decided (or its
    coordinator is gone), and the read tried again; a live pending one: `WriteConflict`."""
    for _ in range(RW_RESOLVES):
        try:
            return await _rw_once(ctx, plan, group)
        except WriteConflict as err:
            if err.intent_key is None or not await resolve_intent_on(
                    ctx, plan, group, cast(RowKey, err.intent_key)):
                raise
    return await _rw_once(ctx, plan, group)


async def _rw_once(ctx: Process, plan: ReadPlan,
                   group: ZonePartition) -> list[tuple[Any, Any]]:
    assert plan.tx_id is not None
    if plan.key is not None:
        key: RowKey = (plan.table_id, plan.key)
        row = await _ask(ctx, plan, group, ReadIndex(ReadLatest(key, plan.tx_id)))
        return [] if row is None else [(plan.key, row)]
    found = await _ask(ctx, plan, group, ReadIndex(ScanLatest(plan.table_id, plan.tx_id)))
    return [(k[1], row) for k, row in found if row is not None]


async def _ro(ctx: Process, plan: ReadPlan, group: ZonePartition) -> list[tuple[Any, Any]]:
    assert plan.ts is not None
    for _ in range(plan.max_waits):
        if plan.key is not None:
            key: RowKey = (plan.table_id, plan.key)
            got = await _ask(ctx, plan, group, ReadIndex(ReadAt(key, plan.ts)))
            found = [(key, got)]
        else:
            found = await _ask(ctx, plan, group, ReadIndex(ScanAt(plan.table_id, plan.ts)))
        out: list[tuple[Any, Any]] = []
        waiting = False
        for key, value in found:
            for _ in range(RW_RESOLVES):  # a newcomer's intent found by the re-read too
                if not isinstance(value, IntentFound):
                    break
                value = await _resolve(ctx, plan, group, key, value)
            if value is _WAIT or isinstance(value, IntentFound):
                waiting = True
                break
            if value is not None:
                out.append((key[1], value))
        if not waiting:
            return out
        await ctx.sleep(plan.wait)
    raise _Unavailable(f"an intent in {group} stayed pending")


_WAIT = object()


async def _lookup(ctx: Process, plan: ReadPlan, lookup: IndexLookup | IndexRangeLookup,
                  group: ZonePartition) -> list[tuple[Any, Any]]:
    """The partition's candidate keys, each read as a get of the same kind (read-only at
    plan.ts, intents resolved; or inside the transaction, its own intents over the
    newest rows), kept when its row has the values then. The candidates include every
    key with an intent that has them, so the transaction's own inserts and updates are
    found; an entry of an old value finds the row's new one and drops it."""
    keys = await _ask(ctx, plan, group, ReadIndex(lookup))
    read = _rw if plan.tx_id is not None else _ro
    out: list[tuple[Any, Any]] = []
    for key in keys:
        for pk, row in await read(ctx, replace(plan, key=tuple(key), lookup=None), group):
            if isinstance(lookup, IndexRangeLookup):
                keep = lookup.matches(row)
            else:
                keep = row is not None and values_of(row, lookup.columns) == lookup.values
            if keep:
                out.append((pk, row))
    return out


async def _resolve(ctx: Process, plan: ReadPlan, group: ZonePartition, key: RowKey,
                   found: IntentFound) -> Any:
    """The row at plan.ts once the intent's transaction is known (or _WAIT). The
    re-read names the transaction resolved: by then its intent may be cleaned up and
    another's put on the key, whose row is not the resolved one's (sim seed 98 of
    tables-contended-rows read a later writer's row at the first one's commit time);
    that newcomer's intent comes back as `IntentFound` when it may be visible."""
    intent = found.intent
    cp = intent.commit_partition
    assert plan.ts is not None
    record = await _ask(ctx, plan, cp, ReadIndex(TxQuery(intent.tx_id)))
    alive = record is None and await _coordinator_alive(ctx, intent.tx_id)
    resolution = resolve(record, alive)
    if resolution is Resolution.WAIT:
        return _WAIT
    if resolution is Resolution.RECOVER:
        record = await _ask(ctx, plan, cp, Propose(partition.RecoverTxCmd(intent.tx_id)))
    assert isinstance(record, TxRecord)
    if not alive:  # the finder cleans a dead coordinator's intent up
        await _ask(ctx, plan, group, Propose(partition.CleanupCmd(
            intent.tx_id, record.commit_ts, plan.catalog_version)))
    return await _ask(ctx, plan, group, ReadIndex(ReadResolved(key, plan.ts, intent.tx_id,
                                                                    record.commit_ts)))


async def resolve_intent_on(ctx: Process, plan: ReadPlan, group: ZonePartition,
                            key: RowKey) -> bool:
    """Whatever intent is on `key` (a writer met it), resolved as a read resolves one:
    a decided transaction's intent (or a dead coordinator's, recovered at its commit
    partition) cleaned up in `group`. False: the holder is alive and pending."""
    plan = replace(plan, ts=MAX)
    found = await _ask(ctx, plan, group, ReadIndex(ReadAt(key, MAX)))
    if isinstance(found, IntentFound):
        return await _resolve(ctx, plan, group, key, found) is not _WAIT
    return True


def coordinator_of(tx_id: str) -> str:
    """Transaction ids are `<node>:<incarnation>:<seq>`."""
    return tx_id.split(":", 1)[0]


async def _coordinator_alive(ctx: Process, tx_id: str) -> bool:
    try:
        return bool(await named_pids.call(ctx, table_node_name(coordinator_of(tx_id)),
                                          TxAlive(tx_id), 2.0))
    except CallError:
        return False


__all__ = ["ReadPlan", "coordinator_of", "reader", "resolve_intent_on"]
