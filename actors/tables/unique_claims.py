"""Unique indexes enforced by claim rows, the partition's side (pure).

A row's primary key decides its partition, so two rows with the same unique-index
values usually live in different partitions and no one partition can see both. Each
unique index therefore keeps one claim row per value tuple, keyed `(index id,
values)` beside the table rows and hashed into the table's zone by those values (ids
are never reused, so an index id never collides with a table id). Its row is
`{"pk": primary key}` of the live row that holds the values, or a deletion once
released. Writers claim and release through ordinary write intents, so the claims
commit or abort with the transaction (two-phase, `transactions.py`) and the
no-wait MVCC rules serialize two writers of the same values (`mvcc.write_intent`).

Invariant (for transactions whose catalog version has the index): the newest committed
claim of `values` names the one live row that has them, or nothing. So a claim:

- meets another live row's committed claim: `UniqueConstraintViolation`;
- meets another transaction's pending claim (an intent naming another row):
  `UniqueConstraintViolation(pending=True)` - no-wait, as every conflict here; a
  pending release of those values is a plain `WriteConflict` (try again);
- meets its own transaction's claim for another row: `UniqueConstraintViolation`.

A release writes a deletion only when the current claim names the releasing row (else
it changes nothing). Rows with a None in the index's columns claim nothing (SQL's
NULLs are distinct).

This differs from Ignite on purpose: Ignite 3 accepts a unique index only when its
columns include every colocation column (`AbstractCreateIndexCommand`: "Unique index
must include all colocation columns"), so its check stays inside one partition. Here
the colocation columns are the whole primary key, which would make every unique index
trivially unique; the claim rows make uniqueness hold across partitions instead
(docs/catalog.md §9 "Unique indexes").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sediment.actors.catalog.descriptors import Catalog, Table, ZonePartition
from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.actors.tables import mvcc
from sediment.actors.tables.errors import UniqueConstraintViolation, WriteConflict
from sediment.actors.tables.mvcc import PartitionRows, Row, RowKey, WriteIntent
from sediment.actors.tables.partitioning import InvalidKey, partition_of


@dataclass(frozen=True, slots=True)
class UniqueClaimCmd:
    """Claim (or release, `release`) a unique index's `values` for the row `pk`, as a
    write intent of the transaction (a partition command)."""

    tx_id: str
    index_id: int
    index_name: str
    values: tuple[Any, ...]
    pk: tuple[Any, ...]
    release: bool
    begin_ts: HybridTimestamp
    commit_partition: ZonePartition
    catalog_version: int


def claim_key(index_id: int, values: tuple[Any, ...]) -> RowKey:
    return (index_id, values)


def claim_group(catalog: Catalog, table: Table, index_id: int,
                values: tuple[Any, ...]) -> ZonePartition:
    """The partition of the table's zone that holds the claim of `values`."""
    zone = catalog.zone(table.zone_id)
    if zone is None:
        raise InvalidKey(f"table {table.name} has no zone #{table.zone_id}")
    return ZonePartition(zone.id, partition_of((index_id, *values), zone.partitions))


def holder(row: Row) -> tuple[Any, ...] | None:
    """The primary key a claim row names (None: released)."""
    if row is None:
        return None
    pk = row.get("pk")
    return tuple(pk) if pk is not None else None


def current_claim(rows: PartitionRows, index_id: int, values: tuple[Any, ...],
                  tx_id: str) -> tuple[Row, str | None]:
    """(the claim as this transaction sees it, the other transaction whose pending
    claim is on it or None)."""
    key = claim_key(index_id, values)
    intent = rows.intents.get(key)
    if intent is not None and intent.tx_id != tx_id:
        return intent.row, intent.tx_id
    if intent is not None:
        return intent.row, None
    committed = rows.versions.get(key, ())
    return (committed[-1].row if committed else None), None


def apply_claim(rows: PartitionRows, cmd: UniqueClaimCmd) -> PartitionRows:
    """The claim or release as a write intent; a typed error changes nothing."""
    key = claim_key(cmd.index_id, cmd.values)
    current, pending = current_claim(rows, cmd.index_id, cmd.values, cmd.tx_id)
    held = holder(current)
    if pending is not None:
        if not cmd.release and held is not None and held != cmd.pk:
            raise UniqueConstraintViolation(cmd.index_name, cmd.values, cmd.pk, held,
                                            pending=True)
        raise WriteConflict(cmd.tx_id, f"{cmd.index_name}{list(cmd.values)}", pending, key)
    row: Mapping[str, Any] | None
    if cmd.release:
        if held != cmd.pk:
            return rows  # not this row's claim: nothing to release
        row = None
    else:
        if held is not None and held != cmd.pk:
            raise UniqueConstraintViolation(cmd.index_name, cmd.values, cmd.pk, held)
        row = {"pk": cmd.pk}
    intent = WriteIntent(cmd.tx_id, cmd.commit_partition, cmd.begin_ts, 0,
                         cmd.catalog_version, row)
    return mvcc.write_intent(rows, key, intent)


__all__ = ["UniqueClaimCmd", "apply_claim", "claim_group", "claim_key", "current_claim",
           "holder"]
