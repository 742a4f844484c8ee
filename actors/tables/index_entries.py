"""A secondary index kept up by writes after its backfill, and its lookup, in one
partition (pure).

The backfill (`index_build.index_entries`, `BuildIndexCmd`) holds each row as of the
building version's activation `ts`. From the backfill on, the partition keeps the
index's maintained entries: one `(indexed values, primary key)` per committed row
version after `ts` - those already committed when the backfill applies, and each one a
commit's cleanup finalizes later (`CleanupCmd`). Entries are only added, as in Ignite's
indexes: an update leaves the key's old entry behind, so a lookup treats every entry
as a candidate and re-reads the row at its timestamp (MVCC: the row it finds decides).
A low-watermark collection prunes the entries no remaining version carries.

So at any read timestamp at or above the index's availability (after the backfill's
`ts`) each live row has an entry: its version then was either the one the backfill saw
or one committed after `ts`. Keys with an intent on the table whose row has the values
are candidates too (the read resolves the intent, as any read-only read does).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.actors.tables.mvcc import PartitionRows, Row, RowKey

Entry = tuple[tuple[Any, ...], tuple[Any, ...]]  # (indexed values, primary key)


@dataclass(frozen=True)
class MaintainedIndex:
    table_id: int
    columns: tuple[str, ...]
    entries: frozenset[Entry] = field(default_factory=frozenset)


def values_of(row: Mapping[str, Any], columns: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(row.get(c) for c in columns)


def start(rows: PartitionRows, table_id: int, columns: tuple[str, ...],
          ts: HybridTimestamp, old: MaintainedIndex | None = None) -> MaintainedIndex:
    """At the backfill: an entry for every version of the table committed after `ts`
    (kept with what an earlier backfill of the same index maintained)."""
    found = set(old.entries) if old is not None else set()
    for key, chain in rows.versions.items():
        if key[0] != table_id:
            continue
        found |= {(values_of(v.row, columns), key[1]) for v in chain
                  if v.commit_ts > ts and v.row is not None}
    return MaintainedIndex(table_id, columns, frozenset(found))


def on_commit(idx: MaintainedIndex, written: Iterable[tuple[RowKey, Row]]) -> MaintainedIndex:
    """A committed transaction's versions in this partition: add their entries."""
    new = {(values_of(row, idx.columns), key[1]) for key, row in written
           if key[0] == idx.table_id and row is not None}
    if new <= idx.entries:
        return idx
    return MaintainedIndex(idx.table_id, idx.columns, idx.entries | new)


def prune(idx: MaintainedIndex, rows: PartitionRows) -> MaintainedIndex:
    """After a collection: keep the entries some remaining version still carries."""
    carried = {(values_of(v.row, idx.columns), key[1])
               for key, chain in rows.versions.items() if key[0] == idx.table_id
               for v in chain if v.row is not None}
    kept = idx.entries & carried
    return idx if kept == idx.entries else MaintainedIndex(idx.table_id, idx.columns, kept)


def candidates(backfill: Iterable[Entry], idx: MaintainedIndex | None, rows: PartitionRows,
               table_id: int, columns: tuple[str, ...],
               values: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """Primary keys whose row may have `values` (to be re-read at the lookup's ts)."""
    keys = {pk for vals, pk in backfill if vals == values}
    if idx is not None:
        keys |= {pk for vals, pk in idx.entries if vals == values}
    keys |= {key[1] for key, intent in rows.intents.items()
             if key[0] == table_id and intent.row is not None
             and values_of(intent.row, columns) == values}
    return sorted(keys, key=repr)


__all__ = ["Entry", "MaintainedIndex", "candidates", "on_commit", "prune", "start",
           "values_of"]
