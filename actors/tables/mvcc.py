"""A partition's rows as multi-version values with write intents (Ignite's MV partition
storage), pure.

Per (table, primary key): committed versions, newest last, each with the commit time and
the table schema version the row was written under; and at most one write intent, the
uncommitted write of one RW transaction, which names the transaction's commit partition
so anyone who finds it can ask there how the transaction ended.

- A write meets another transaction's intent, or a version committed after the writer
  began: `WriteConflict` (no waiting; the writer aborts).
- A read at a timestamp sees the newest version committed at or before it. An intent
  whose transaction began at or before the read time might have committed before it:
  the read returns `IntentFound` and the caller resolves it at the commit partition,
  then reads again (`resolved_read`) for that transaction's intent only.
- `gc(lwm)`: below the low watermark only the newest version at or before it can still
  be read (reads below the watermark are refused); the older ones are garbage, and so
  is that newest one when it is a deletion.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sediment.actors.catalog.descriptors import ZonePartition
from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.actors.tables.errors import WriteConflict

RowKey = tuple[int, tuple[Any, ...]]  # (table id, primary-key values)
Row = Mapping[str, Any] | None  # None: a deletion (tombstone)


@dataclass(frozen=True, slots=True)
class RowVersion:
    commit_ts: HybridTimestamp
    schema_version: int
    row: Row
    tx_id: str


@dataclass(frozen=True, slots=True)
class WriteIntent:
    tx_id: str
    commit_partition: ZonePartition
    begin_ts: HybridTimestamp
    schema_version: int
    catalog_version: int
    row: Row


@dataclass(frozen=True, slots=True)
class IntentFound:
    """A read met an intent that may be visible: resolve it at its commit partition."""

    intent: WriteIntent


@dataclass(frozen=True)
class PartitionRows:
    """Treat both maps as immutable: every function returns new ones."""

    versions: Mapping[RowKey, tuple[RowVersion, ...]] = field(default_factory=dict)
    intents: Mapping[RowKey, WriteIntent] = field(default_factory=dict)


def _describe(key: RowKey) -> str:
    return f"t{key[0]}{list(key[1])}"


def write_intent(rows: PartitionRows, key: RowKey, intent: WriteIntent) -> PartitionRows:
    """Put (or replace) the transaction's intent on the key."""
    held = rows.intents.get(key)
    if held is not None and held.tx_id != intent.tx_id:
        raise WriteConflict(intent.tx_id, _describe(key), held.tx_id, key)
    committed = rows.versions.get(key, ())
    if committed and committed[-1].commit_ts > intent.begin_ts:
        raise WriteConflict(intent.tx_id, _describe(key), committed[-1].tx_id)
    intents = dict(rows.intents)
    intents[key] = intent
    return replace(rows, intents=intents)


def intents_of(rows: PartitionRows, tx_id: str) -> list[RowKey]:
    return [k for k, i in rows.intents.items() if i.tx_id == tx_id]


def finalize(rows: PartitionRows, tx_id: str, commit_ts: HybridTimestamp | None) -> PartitionRows:
    """The transaction ended: its intents become versions at `commit_ts`, or vanish
    (`commit_ts` None: aborted). Idempotent: a second cleanup finds no intents."""
    keys = intents_of(rows, tx_id)
    if not keys:
        return rows
    intents = dict(rows.intents)
    versions = dict(rows.versions)
    for key in keys:
        intent = intents.pop(key)
        if commit_ts is not None:
            versions[key] = (*versions.get(key, ()),
                             RowVersion(commit_ts, intent.schema_version, intent.row, tx_id))
    return PartitionRows(versions, intents)


def read_at(rows: PartitionRows, key: RowKey, ts: HybridTimestamp) -> Row | IntentFound:
    """The row as of `ts`, or the intent that must be resolved first."""
    intent = rows.intents.get(key)
    if intent is not None and intent.begin_ts <= ts:
        return IntentFound(intent)
    return committed_at(rows, key, ts)


def committed_at(rows: PartitionRows, key: RowKey, ts: HybridTimestamp) -> Row:
    for version in reversed(rows.versions.get(key, ())):
        if version.commit_ts <= ts:
            return version.row
    return None


def resolved_read(rows: PartitionRows, key: RowKey, ts: HybridTimestamp, tx_id: str,
                  intent_commit_ts: HybridTimestamp | None) -> Row | IntentFound:
    """A read at `ts` once the intent found on the key is resolved: `tx_id`'s, which
    committed at `intent_commit_ts` (None: aborted). The reader asked the commit
    partition between its first read and this one, so the key may hold another
    transaction's intent by now (the resolved one cleaned up, a new writer in): the
    commit time belongs to `tx_id` only, and the key is read as `read_at` reads it (the
    newcomer's intent found again if it may be visible)."""
    intent = rows.intents.get(key)
    if intent is None or intent.tx_id != tx_id:
        return read_at(rows, key, ts)
    if intent_commit_ts is not None and intent_commit_ts <= ts:
        return intent.row
    return committed_at(rows, key, ts)


def read_latest(rows: PartitionRows, key: RowKey, tx_id: str) -> Row:
    """A read inside an RW transaction: its own intent, else the newest committed row;
    another transaction's intent is a conflict."""
    intent = rows.intents.get(key)
    if intent is not None:
        if intent.tx_id != tx_id:
            raise WriteConflict(tx_id, _describe(key), intent.tx_id, key)
        return intent.row
    committed = rows.versions.get(key, ())
    return committed[-1].row if committed else None


def keys_of(rows: PartitionRows, table_id: int) -> Iterator[RowKey]:
    """Every key of the table with a version or an intent, in a stable order."""
    keys = {k for k in rows.versions if k[0] == table_id}
    keys |= {k for k in rows.intents if k[0] == table_id}
    return iter(sorted(keys, key=repr))


def gc(rows: PartitionRows, lwm: HybridTimestamp) -> tuple[PartitionRows, int]:
    """Drop what no read at or above `lwm` can see; returns (rows, versions removed)."""
    removed = 0
    versions: dict[RowKey, tuple[RowVersion, ...]] = {}
    for key, chain in rows.versions.items():
        below = [v for v in chain if v.commit_ts <= lwm]
        above = [v for v in chain if v.commit_ts > lwm]
        keep = below[-1:]
        if keep and keep[0].row is None:
            keep = []
        removed += len(chain) - len(keep) - len(above)
        if keep or above:
            versions[key] = (*keep, *above)
    return PartitionRows(versions, rows.intents), removed


def drop_table(rows: PartitionRows, table_id: int) -> PartitionRows:
    """A dropped table's rows (or a dropped unique index's claim rows, keyed by its id
    alike) go once the low watermark passes the drop."""
    return PartitionRows({k: v for k, v in rows.versions.items() if k[0] != table_id},
                         {k: v for k, v in rows.intents.items() if k[0] != table_id})


__all__ = [
    "IntentFound",
    "PartitionRows",
    "Row",
    "RowKey",
    "RowVersion",
    "WriteIntent",
    "committed_at",
    "drop_table",
    "finalize",
    "gc",
    "intents_of",
    "keys_of",
    "read_at",
    "read_latest",
    "resolved_read",
    "write_intent",
]
