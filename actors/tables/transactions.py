"""A read-write transaction as its coordinator runs it, as a pure step core.

The coordinator is the node the client began the transaction on. `begin` fixes the
begin time (the node's hybrid clock) and the catalog version active then; writes are
validated against that version (a table it does not have is `TableNotFound`, nothing
sent) and go as write intents to the partition of each row's key. The first partition
written is the commit partition. Commit and abort are two-phase:

1. every write acknowledged (a write that failed, e.g. a `WriteConflict`, turns a
   commit into an abort: all or nothing);
2. `SendFinish` to the commit partition, which records the outcome once
   (`tx_state.finish`); if a table written was dropped meanwhile, the commit becomes an
   abort (`TableDropped`);
3. on the recorded outcome, `SendCleanup` to every enlisted partition (intents become
   versions at the commit time, or vanish) and `TxEnded`.

A transaction that wrote to one partition only (its commit partition) records the
outcome and cleans its intents up in one entry there (`FinishTxCmd.cleanup`), so there
is no cleanup to send: one raft entry less, and its intents are gone when the client
hears the outcome. This is not Ignite's one-phase commit (the write and the commit in
one entry): a commit stamped before its writes are in place would break the safe time
of read-only reads (docs/catalog.md §9 "Finish and cleanup in one entry").

If the coordinator dies anywhere in this, its intents stay until someone finds them and
asks the commit partition (`tx_state.resolve`): the record there decides for everyone.
Effects are executed by the shell in order; results come back as events.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeAlias

from sediment.actors.catalog.descriptors import Catalog, Table, ZonePartition
from sediment.actors.catalog.errors import CatalogError, TableNotFound
from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.actors.tables import partitioning
from sediment.actors.tables.errors import InvalidRow, TableDropped, TxNotActive
from sediment.actors.tables.partition import CleanupCmd, FinishTxCmd, WriteIntentCmd
from sediment.actors.tables.partitioning import InvalidKey
from sediment.actors.tables.tx_state import FinishOutcome, TxStatus
from sediment.actors.tables.unique_claims import UniqueClaimCmd

PYTHON_TYPES: Mapping[str, tuple[type, ...]] = {
    "int": (int,), "str": (str,), "float": (float, int), "bytes": (bytes,), "bool": (bool,)}


class Phase(enum.Enum):
    ACTIVE = "active"
    COMMITTING = "committing"  # waiting for write acks, then for the commit partition
    ABORTING = "aborting"
    COMMITTED = "committed"
    ABORTED = "aborted"


@dataclass(frozen=True)
class RwTx:
    id: str
    node: str
    begin_ts: HybridTimestamp
    catalog_version: int
    phase: Phase = Phase.ACTIVE
    enlisted: tuple[ZonePartition, ...] = ()  # in enlistment order; [0] commits
    tables: Mapping[int, str] = field(default_factory=dict)  # written: id -> name
    unacked: int = 0
    finish_sent: bool = False
    commit_ts: HybridTimestamp | None = None
    failure: CatalogError | None = None

    @property
    def commit_partition(self) -> ZonePartition | None:
        return self.enlisted[0] if self.enlisted else None


# ---- effects ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendWrite:
    group: ZonePartition
    command: WriteIntentCmd | UniqueClaimCmd  # a row, or a unique index's claim


@dataclass(frozen=True, slots=True)
class SendFinish:
    group: ZonePartition
    command: FinishTxCmd


@dataclass(frozen=True, slots=True)
class SendCleanup:
    group: ZonePartition
    command: CleanupCmd


@dataclass(frozen=True, slots=True)
class TxEnded:
    tx_id: str
    committed: bool
    commit_ts: HybridTimestamp | None
    failure: CatalogError | None


Effect: TypeAlias = SendWrite | SendFinish | SendCleanup | TxEnded

# ---- steps --------------------------------------------------------------------------


def begin(tx_id: str, node: str, begin_ts: HybridTimestamp, catalog: Catalog) -> RwTx:
    """`catalog`: the version active at `begin_ts` on this node."""
    return RwTx(tx_id, node, begin_ts, catalog.version)


def write(tx: RwTx, catalog: Catalog, table_name: str,
          row: Mapping[str, Any]) -> tuple[RwTx, list[Effect]]:
    """Upsert `row` (all primary-key columns given). `catalog` is the tx's version."""
    table = _writable(tx, catalog, table_name)
    clean = validate_row(table, row)
    return _send(tx, catalog, table, partitioning.key_of(table, clean), clean)


def delete(tx: RwTx, catalog: Catalog, table_name: str,
           key: tuple[Any, ...]) -> tuple[RwTx, list[Effect]]:
    table = _writable(tx, catalog, table_name)
    if not isinstance(key, tuple) or len(key) != len(table.primary_key):
        raise InvalidRow(f"{table.name} has a {len(table.primary_key)}-column primary key")
    return _send(tx, catalog, table, key, None)


def on_write_result(tx: RwTx, error: CatalogError | None) -> tuple[RwTx, list[Effect]]:
    """A write was applied (error None) or refused / timed out."""
    if tx.unacked <= 0:
        return tx, []
    tx = replace(tx, unacked=tx.unacked - 1,
                 failure=tx.failure if tx.failure is not None or error is None else error)
    return _maybe_finish(tx)


def commit(tx: RwTx, commit_ts: HybridTimestamp, catalog_now: Catalog) -> tuple[RwTx, list[Effect]]:
    """The client commits. `catalog_now`: the version active at `commit_ts`."""
    _active(tx)
    if commit_ts <= tx.begin_ts:
        raise ValueError(f"commit {commit_ts} not after begin {tx.begin_ts}")
    dropped = next((name for tid, name in tx.tables.items() if catalog_now.table(tid) is None),
                   None)
    if dropped is not None and tx.failure is None:
        tx = replace(tx, failure=TableDropped(tx.id, dropped))
    phase = Phase.ABORTING if tx.failure is not None else Phase.COMMITTING
    return _maybe_finish(replace(tx, phase=phase, commit_ts=commit_ts))


def rollback(tx: RwTx) -> tuple[RwTx, list[Effect]]:
    _active(tx)
    return _maybe_finish(replace(tx, phase=Phase.ABORTING))


def on_finish_result(tx: RwTx, outcome: FinishOutcome) -> tuple[RwTx, list[Effect]]:
    """The commit partition's recorded outcome (perhaps not what was asked: a recovery
    may have aborted the transaction first)."""
    if tx.phase not in (Phase.COMMITTING, Phase.ABORTING) or not tx.finish_sent:
        return tx, []
    committed = outcome.record.status is TxStatus.COMMITTED
    commit_ts = outcome.record.commit_ts if committed else None
    failure = tx.failure
    if tx.phase is Phase.COMMITTING and not committed and failure is None:
        failure = TxNotActive(tx.id, "aborted by recovery")
    return _ended(replace(tx, failure=failure), committed, commit_ts)


# ---- helpers ------------------------------------------------------------------------


def _active(tx: RwTx) -> None:
    if tx.phase is not Phase.ACTIVE:
        raise TxNotActive(tx.id, tx.phase.value)


def _writable(tx: RwTx, catalog: Catalog, table_name: str) -> Table:
    _active(tx)
    if catalog.version != tx.catalog_version:
        raise ValueError(f"catalog {catalog.version} is not the tx's {tx.catalog_version}")
    table = catalog.table_named(table_name)
    if table is None:
        raise TableNotFound(str(table_name))
    return table


def validate_row(table: Table, row: Mapping[str, Any]) -> dict[str, Any]:
    """A row of `table`: known columns only, types right, NOT NULL columns present."""
    if not isinstance(row, Mapping):
        raise InvalidRow(f"a row is a mapping of column to value: {row!r}")
    unknown = sorted(set(row) - {c.name for c in table.columns})
    if unknown:
        raise InvalidRow(f"{table.name} has no column(s) {unknown}")
    for col in table.columns:
        value = row.get(col.name)
        if value is None:
            if not col.nullable:
                raise InvalidRow(f"{table.name}.{col.name} is NOT NULL")
            continue
        types = PYTHON_TYPES[col.type]
        if not isinstance(value, types) or (col.type != "bool" and isinstance(value, bool)):
            raise InvalidRow(f"{table.name}.{col.name} is {col.type}: {value!r}")
    return dict(row)


def _send(tx: RwTx, catalog: Catalog, table: Table, key: tuple[Any, ...],
          row: dict[str, Any] | None) -> tuple[RwTx, list[Effect]]:
    try:
        group = partitioning.group_of(catalog, table, key)
    except InvalidKey as err:
        raise InvalidRow(str(err)) from None
    enlisted = tx.enlisted if group in tx.enlisted else (*tx.enlisted, group)
    commit_partition = enlisted[0]
    command = WriteIntentCmd(tx.id, table.id, key, row, table.schema_version, tx.catalog_version,
                             tx.begin_ts, commit_partition)
    tx = replace(tx, enlisted=enlisted, unacked=tx.unacked + 1,
                 tables={**tx.tables, table.id: table.name})
    return tx, [SendWrite(group, command)]


def _maybe_finish(tx: RwTx) -> tuple[RwTx, list[Effect]]:
    if tx.phase not in (Phase.COMMITTING, Phase.ABORTING) or tx.unacked or tx.finish_sent:
        return tx, []
    if tx.failure is not None and tx.phase is Phase.COMMITTING:
        tx = replace(tx, phase=Phase.ABORTING)
    if tx.commit_partition is None:  # wrote nothing: nothing to record or clean
        return _ended(tx, tx.phase is Phase.COMMITTING, tx.commit_ts)
    commit = tx.phase is Phase.COMMITTING
    command = FinishTxCmd(tx.id, commit, tx.commit_ts if commit else None,
                          frozenset(tx.enlisted), tx.catalog_version, one_partition(tx))
    return replace(tx, finish_sent=True), [SendFinish(tx.commit_partition, command)]


def one_partition(tx: RwTx) -> bool:
    """Whether the finish cleans up too: the commit partition is the only one written."""
    return len(tx.enlisted) == 1


def _ended(tx: RwTx, committed: bool,
           commit_ts: HybridTimestamp | None) -> tuple[RwTx, list[Effect]]:
    cleaned = tx.finish_sent and one_partition(tx)  # by the finish entry itself
    effects: list[Effect] = [SendCleanup(g, CleanupCmd(tx.id, commit_ts, tx.catalog_version))
                             for g in tx.enlisted if not cleaned]
    effects.append(TxEnded(tx.id, committed, commit_ts, tx.failure))
    phase = Phase.COMMITTED if committed else Phase.ABORTED
    return replace(tx, phase=phase, commit_ts=commit_ts), effects


__all__ = [
    "Effect",
    "Phase",
    "RwTx",
    "SendCleanup",
    "SendFinish",
    "SendWrite",
    "TxEnded",
    "begin",
    "commit",
    "delete",
    "one_partition",
    "on_finish_result",
    "on_write_result",
    "rollback",
    "validate_row",
    "write",
]
