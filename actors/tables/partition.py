"""The logic of one partition's raft state machine (the SQLite-backed machine in the
per-node raft host is a later shell; it will delegate here): rows with intents, the
records of the transactions this partition is the commit partition of, the minimum
active-transaction time, and what replaying its log would need from the catalog.

`apply(state, index, command) -> (state, result)`; `flush(state) -> (state, published)`
is the storage checkpoint: after it the applied state is durable, the raft log below it
will never be replayed, and a stored minimum tx time may be published.

Every data command carries the catalog version it was written under (Ignite's
`requiredCatalogVersion`): replaying an entry after a crash needs that version. The
lowest such version among entries applied since the last flush is the partition's
`replay_floor`: catalog compaction must not remove it (seed 002, restriction 2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeAlias

from sediment.actors.catalog.descriptors import ZonePartition
from sediment.actors.catalog.errors import CatalogError, CatalogVersionCompacted, InvalidCommand
from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.actors.tables import (
    index_build,
    index_entries,
    min_tx_time,
    mvcc,
    tx_state,
    unique_claims,
)
from sediment.actors.tables.mvcc import PartitionRows, Row, WriteIntent
from sediment.actors.tables.tx_state import FinishOutcome, TxRecord

# ---- commands -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WriteIntentCmd:
    tx_id: str
    table_id: int
    key: tuple[Any, ...]
    row: Row
    schema_version: int
    catalog_version: int
    begin_ts: HybridTimestamp
    commit_partition: ZonePartition


@dataclass(frozen=True, slots=True)
class FinishTxCmd:
    """At the commit partition: record the coordinator's decision. `cleanup` (the
    commit partition is the only one the transaction wrote to): in the same entry, its
    intents here become versions or vanish as the record says (no `CleanupCmd`)."""

    tx_id: str
    commit: bool
    commit_ts: HybridTimestamp | None
    enlisted: frozenset[ZonePartition]
    catalog_version: int
    cleanup: bool = False


@dataclass(frozen=True, slots=True)
class CleanupCmd:
    """At every enlisted partition: turn the transaction's intents into versions or
    drop them."""

    tx_id: str
    commit_ts: HybridTimestamp | None
    catalog_version: int


@dataclass(frozen=True, slots=True)
class RecoverTxCmd:
    """At the commit partition, by whoever found an intent of a dead coordinator."""

    tx_id: str


@dataclass(frozen=True, slots=True)
class UpdateMinActiveTxTimeCmd:
    ts: HybridTimestamp


@dataclass(frozen=True, slots=True)
class GcCmd:
    """Garbage-collect below the low watermark; `dropped_tables`: tables dropped at or
    before it, whose rows all go; `dropped_indexes`: indexes dropped at or before it
    (with their table or alone), whose claim rows (`unique_claims.py`), backfill and
    maintained entries all go."""

    lwm: HybridTimestamp
    dropped_tables: frozenset[int] = frozenset()
    dropped_indexes: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class BuildIndexCmd:
    """Backfill a secondary index at its building catalog version: the entries of every
    row committed at or before `ts` (that version's activation), proposed by the index
    build driver (`index_driver.py`)."""

    index_id: int
    table_id: int
    columns: tuple[str, ...]
    ts: HybridTimestamp
    catalog_version: int


@dataclass(frozen=True, slots=True)
class CatalogCompactedCmd:
    """The catalog was compacted to `earliest_version`: from this entry on, the
    partition refuses commands written under an older version (rule 4). A log entry, so
    every replica refuses the same commands."""

    earliest_version: int


PartitionCommand: TypeAlias = (WriteIntentCmd | FinishTxCmd | CleanupCmd | RecoverTxCmd
                               | UpdateMinActiveTxTimeCmd | GcCmd | BuildIndexCmd
                               | CatalogCompactedCmd | unique_claims.UniqueClaimCmd)


@dataclass(frozen=True, slots=True)
class Ok:
    pass


@dataclass(frozen=True, slots=True)
class Failed:
    error: CatalogError


@dataclass(frozen=True, slots=True)
class Collected:
    removed: int


@dataclass(frozen=True, slots=True)
class IndexBuilt:
    index_id: int
    catalog_version: int
    entries: int


PartitionResult: TypeAlias = Ok | Failed | FinishOutcome | TxRecord | Collected | IndexBuilt

IndexEntries = tuple[tuple[tuple[Any, ...], tuple[Any, ...]], ...]

# ---- state --------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionState:
    group: ZonePartition
    rows: PartitionRows = field(default_factory=PartitionRows)
    txs: Mapping[str, TxRecord] = field(default_factory=dict)
    min_tx: min_tx_time.MinTxTimeState = field(default_factory=min_tx_time.MinTxTimeState)
    applied: int = 0
    flushed: int = 0  # entries at or below it are durable and never replayed
    unflushed_floor: int | None = None  # lowest catalog version applied since the flush
    catalog_floor: int = 0  # commands under an older catalog version are refused
    # index id -> (building catalog version, its backfilled entries)
    indexes: Mapping[int, tuple[int, IndexEntries]] = field(default_factory=dict)
    # index id -> its entries kept up by commits since the backfill (`index_entries.py`)
    maintained: Mapping[int, index_entries.MaintainedIndex] = field(default_factory=dict)


def initial(group: ZonePartition) -> PartitionState:
    return PartitionState(group)


def replay_floor(state: PartitionState) -> int | None:
    """The lowest catalog version a replay of the unflushed log would need."""
    return state.unflushed_floor


def apply(state: PartitionState, index: int,
          command: object) -> tuple[PartitionState, PartitionResult]:
    """Apply the raft entry at `index`. A rejected command changes nothing but the
    applied index."""
    if index <= state.applied:
        raise ValueError(f"entry {index} applied twice (applied {state.applied})")
    base = replace(state, applied=index)
    try:
        return _apply(base, index, command)
    except CatalogError as err:
        return base, Failed(err)


def _apply(s: PartitionState, index: int, cmd: object) -> tuple[PartitionState, PartitionResult]:
    version = getattr(cmd, "catalog_version", None)
    if isinstance(version, int) and version < s.catalog_floor:
        raise CatalogVersionCompacted(f"version {version}", s.catalog_floor)
    if isinstance(cmd, CatalogCompactedCmd):
        return replace(s, catalog_floor=max(s.catalog_floor, cmd.earliest_version)), Ok()
    if isinstance(cmd, WriteIntentCmd):
        intent = WriteIntent(cmd.tx_id, cmd.commit_partition, cmd.begin_ts, cmd.schema_version,
                             cmd.catalog_version, cmd.row)
        rows = mvcc.write_intent(s.rows, (cmd.table_id, cmd.key), intent)
        return _versioned(replace(s, rows=rows), cmd.catalog_version), Ok()
    if isinstance(cmd, unique_claims.UniqueClaimCmd):  # a unique index's claim row
        rows = unique_claims.apply_claim(s.rows, cmd)
        return _versioned(replace(s, rows=rows), cmd.catalog_version), Ok()
    if isinstance(cmd, FinishTxCmd):
        record, outcome = tx_state.finish(s.txs.get(cmd.tx_id), cmd.commit, cmd.commit_ts,
                                          cmd.enlisted)
        s = replace(s, txs={**s.txs, cmd.tx_id: record})
        if cmd.cleanup:  # as the record says, whatever was asked (a recovery may have won)
            s = _finalize(s, cmd.tx_id, record.commit_ts)
        return _versioned(s, cmd.catalog_version), outcome
    if isinstance(cmd, CleanupCmd):
        return _versioned(_finalize(s, cmd.tx_id, cmd.commit_ts), cmd.catalog_version), Ok()
    if isinstance(cmd, RecoverTxCmd):
        record = tx_state.recover(s.txs.get(cmd.tx_id))
        return replace(s, txs={**s.txs, cmd.tx_id: record}), record
    if isinstance(cmd, UpdateMinActiveTxTimeCmd):
        return replace(s, min_tx=min_tx_time.apply_update(s.min_tx, index, cmd.ts)), Ok()
    if isinstance(cmd, GcCmd):
        rows = s.rows
        for owner in sorted(cmd.dropped_tables | cmd.dropped_indexes):
            rows = mvcc.drop_table(rows, owner)  # a table's rows, an index's claim rows
        rows, removed = mvcc.gc(rows, cmd.lwm)
        maintained = {i: index_entries.prune(m, rows) for i, m in s.maintained.items()
                      if m.table_id not in cmd.dropped_tables and i not in cmd.dropped_indexes}
        indexes = {i: e for i, e in s.indexes.items() if i not in cmd.dropped_indexes}
        return replace(s, rows=rows, maintained=maintained, indexes=indexes), Collected(removed)
    if isinstance(cmd, BuildIndexCmd):
        entries = tuple(index_build.index_entries(s.rows, cmd.table_id, cmd.columns, cmd.ts))
        indexes = {**s.indexes, cmd.index_id: (cmd.catalog_version, entries)}
        kept = index_entries.start(s.rows, cmd.table_id, cmd.columns, cmd.ts,
                                   s.maintained.get(cmd.index_id))
        maintained = {**s.maintained, cmd.index_id: kept}
        return (_versioned(replace(s, indexes=indexes, maintained=maintained),
                           cmd.catalog_version),
                IndexBuilt(cmd.index_id, cmd.catalog_version, len(entries)))
    raise InvalidCommand(type(cmd).__name__)


def _finalize(s: PartitionState, tx_id: str,
              commit_ts: HybridTimestamp | None) -> PartitionState:
    """The transaction's intents here become versions at `commit_ts` (their index
    entries maintained), or vanish (None: aborted)."""
    written = [(k, s.rows.intents[k].row) for k in mvcc.intents_of(s.rows, tx_id)]
    rows = mvcc.finalize(s.rows, tx_id, commit_ts)
    maintained = s.maintained
    if commit_ts is not None and written and maintained:
        maintained = {i: index_entries.on_commit(m, written) for i, m in maintained.items()}
    return replace(s, rows=rows, maintained=maintained)


def _versioned(s: PartitionState, catalog_version: int) -> PartitionState:
    floor = s.unflushed_floor
    return replace(s, unflushed_floor=catalog_version if floor is None else min(floor,
                                                                               catalog_version))


def flush(state: PartitionState) -> tuple[PartitionState, HybridTimestamp | None]:
    """A storage checkpoint of everything applied. Returns the minimum tx time to
    publish to the node's collector now, if a new one became durable."""
    min_tx, publish = min_tx_time.on_flush(state.min_tx)
    return replace(state, min_tx=min_tx, flushed=state.applied,
                   unflushed_floor=None), publish


__all__ = [
    "BuildIndexCmd",
    "CatalogCompactedCmd",
    "CleanupCmd",
    "Collected",
    "Failed",
    "FinishTxCmd",
    "GcCmd",
    "IndexBuilt",
    "IndexEntries",
    "Ok",
    "PartitionCommand",
    "PartitionResult",
    "PartitionState",
    "RecoverTxCmd",
    "UpdateMinActiveTxTimeCmd",
    "WriteIntentCmd",
    "apply",
    "flush",
    "initial",
    "replay_floor",
]
