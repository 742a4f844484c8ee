"""Unique indexes enforced by claim rows, the transaction's side (pure): which claims
and releases a write needs, and enlisting them in the transaction.

A write of row `pk` (an upsert or a delete) in a table with unique indexes first reads
the row's current value inside the transaction (the shell, `unique_writes.py`), then
for each unique index of the transaction's catalog version (any status: a REGISTERED
or BUILDING index is enforced from its registration, so its build only has to claim
the rows written before it, `unique_build.py`):

- the old values, if the row had them and the write changes them, are released;
- the new values, if the row keeps or gets them, are claimed (again, when unchanged:
  the intent serializes this writer with any other writer of those values).

Each claim or release is one more write of the transaction (`SendWrite` of a
`UniqueClaimCmd` to the claim's partition, `unique_claims.py`): counted in the
writes to acknowledge before the commit, enlisted for the finish and the cleanup, so it
commits or aborts with the row. A refused claim fails the write like a write conflict,
and the transaction can only abort.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from sediment.actors.catalog.descriptors import Catalog, Index, Table
from sediment.actors.tables import transactions as txn
from sediment.actors.tables.errors import InvalidRow, TxNotActive
from sediment.actors.tables.partition import WriteIntentCmd
from sediment.actors.tables.partitioning import InvalidKey
from sediment.actors.tables.unique_claims import UniqueClaimCmd, claim_group


@dataclass(frozen=True, slots=True)
class Claim:
    index_id: int
    index_name: str
    values: tuple[Any, ...]
    pk: tuple[Any, ...]
    release: bool


def unique_indexes(catalog: Catalog, table: Table) -> list[Index]:
    """The table's unique indexes that need claims in this catalog version, in id order.
    One whose columns include the whole primary key (the table's primary-key index, made
    with the table) is unique by the key already: the case Ignite 3 limits unique
    indexes to, its colocation columns being a subset of the key."""
    key = set(table.primary_key)
    return sorted((i for i in catalog.indexes_of(table.id)
                   if i.unique and not key <= set(i.columns)), key=lambda i: i.id)


def claimed_values(row: Mapping[str, Any] | None,
                   columns: tuple[str, ...]) -> tuple[Any, ...] | None:
    """The values a row claims in an index on `columns` (None: no row, or a NULL)."""
    if row is None:
        return None
    values = tuple(row.get(c) for c in columns)
    return None if any(v is None for v in values) else values


def claims_for(indexes: Iterable[Index], pk: tuple[Any, ...],
               old: Mapping[str, Any] | None,
               new: Mapping[str, Any] | None) -> list[Claim]:
    """The releases (first) and claims a write of `pk` from `old` to `new` needs."""
    releases: list[Claim] = []
    claims: list[Claim] = []
    for index in (i for i in indexes if i.unique):
        before = claimed_values(old, index.columns)
        after = claimed_values(new, index.columns)
        if before is not None and before != after:
            releases.append(Claim(index.id, index.name, before, pk, True))
        if after is not None:
            claims.append(Claim(index.id, index.name, after, pk, False))
    return [*releases, *claims]


def enlist(tx: txn.RwTx, catalog: Catalog, table: Table,
           claim: Claim) -> tuple[txn.RwTx, list[txn.Effect]]:
    """One claim or release as a write of the transaction (its partition enlisted)."""
    if tx.phase is not txn.Phase.ACTIVE:
        raise TxNotActive(tx.id, tx.phase.value)
    try:
        group = claim_group(catalog, table, claim.index_id, claim.values)
    except InvalidKey as err:
        raise InvalidRow(str(err)) from None
    enlisted = tx.enlisted if group in tx.enlisted else (*tx.enlisted, group)
    command = UniqueClaimCmd(tx.id, claim.index_id, claim.index_name, claim.values, claim.pk,
                             claim.release, tx.begin_ts, enlisted[0], tx.catalog_version)
    tx = replace(tx, enlisted=enlisted, unacked=tx.unacked + 1)
    return tx, [txn.SendWrite(group, command)]


def write_with_claims(tx: txn.RwTx, catalog: Catalog, table_name: str, row: Any,
                      delete: bool, old: Mapping[str, Any] | None
                      ) -> tuple[txn.RwTx, list[txn.Effect]]:
    """The write (`transactions.write`/`delete`) and its claims, `old` being the row's
    value the transaction read. Raises what the write raises, nothing sent."""
    if delete:
        tx, effects = txn.delete(tx, catalog, table_name, key=row)
        new: Mapping[str, Any] | None = None
    else:
        tx, effects = txn.write(tx, catalog, table_name, row)
        new = row
    write = effects[0]
    assert isinstance(write, txn.SendWrite) and isinstance(write.command, WriteIntentCmd)
    table = catalog.table(write.command.table_id)
    assert table is not None
    for claim in claims_for(unique_indexes(catalog, table), write.command.key, old, new):
        tx, more = enlist(tx, catalog, table, claim)
        effects += more
    return tx, effects


__all__ = ["Claim", "claimed_values", "claims_for", "enlist", "unique_indexes",
           "write_with_claims"]
