"""One zone partition's raft state machine on disk: SQLite under the member's group
directory, the logic delegated to the pure `partition.py`.

The applied state lives in memory between flushes. A flush (`partition.flush`) writes
all of it in one SQLite transaction, together with the applied index: after it, the
raft server never feeds the machine an entry at or below that index again, so the log
below it is never replayed (this is the partition's storage checkpoint, and what lets a
stored minimum tx time be published: `tables/min_tx_time.py`). A flush happens when the
raft server takes a snapshot (every `snapshot_every` entries) and when a `FlushCmd`
entry applies (the node proposes one after each minimum tx time update, so the value
is published without waiting for traffic). A restart opens the last flush and the raft
log replays what followed it.

Tables (declared in `actors/schemas/partition_file.py`): `meta` (applied index, flushed
index, the minimum tx time state), `versions` (committed row versions with commit time
and the schema version they were written under), `intents` (write intents), `txs` (the
records of transactions this partition is the commit partition of). Keys and rows are
pickled: local storage, read back by this module only.

Queries (the raft server's `Query(q)` or `ReadIndex(q)`): `ReadAt(key, ts)`,
`ReadLatest(key, tx_id)`, `ScanAt(table_id, ts)`, `ScanLatest(table_id, tx_id)`,
`ReadResolved(key, ts, tx_id, intent_commit_ts)`, `TxQuery(tx_id)`, `MinTxQuery()`,
`IndexQuery(index_id)`, `IndexLookup(index_id, table_id, columns, values)` (the
candidate keys of an index lookup), `ReplayEventsQuery(since)`.

With the raft server's clock (`set_clock`), the machine records when its replay floor
was set or lowered (an entry written under an older catalog version applied since the
last flush) and when a flush cleared it; the recorder turns that into replay pins.
"""

from __future__ import annotations

import os
import pickle
import sqlite3
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sediment.actors.catalog.descriptors import ZonePartition
from sediment.actors.catalog.errors import CatalogError
from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.actors.log.raft.types import Entry
from sediment.actors.log.shell.hosted import HostedMachine
from sediment.actors.schemas import PARTITION_FILE, migrate
from sediment.actors.tables import index_entries, index_range, mvcc, partition
from sediment.actors.tables.index_range import IndexRangeLookup
from sediment.actors.tables.min_tx_time import MinTxTimeState
from sediment.actors.tables.mvcc import PartitionRows, RowKey, RowVersion, WriteIntent
from sediment.actors.tables.partition import PartitionState
from sediment.actors.tables.tx_state import TxRecord, TxStatus
from sediment.runtime.common_calls import UnknownRequest

EVENTS = 4096  # replay-floor events kept for the recorder


@dataclass(frozen=True, slots=True)
class FlushCmd:
    """Checkpoint the partition's storage at this entry."""


@dataclass(frozen=True, slots=True)
class ReadAt:
    key: RowKey
    ts: HybridTimestamp


@dataclass(frozen=True, slots=True)
class ReadLatest:
    key: RowKey
    tx_id: str


@dataclass(frozen=True, slots=True)
class ScanAt:
    table_id: int
    ts: HybridTimestamp


@dataclass(frozen=True, slots=True)
class ScanLatest:
    """Inside an RW transaction: every key's row, its own intents included."""

    table_id: int
    tx_id: str


@dataclass(frozen=True, slots=True)
class ReadResolved:
    """A read at `ts` once the key's intent is resolved (`mvcc.resolved_read`)."""

    key: RowKey
    ts: HybridTimestamp
    tx_id: str  # whose intent was resolved
    intent_commit_ts: HybridTimestamp | None


@dataclass(frozen=True, slots=True)
class TxQuery:
    tx_id: str


@dataclass(frozen=True, slots=True)
class MinTxQuery:
    pass


@dataclass(frozen=True, slots=True)
class ReplayEventsQuery:
    """The replay-floor record after `since`: (incarnation, [(seq, at, "apply", catalog
    version) or (seq, at, "flush", 0)]), for the recorder's replay pins."""

    since: int


@dataclass(frozen=True, slots=True)
class IndexLookup:
    """The primary keys whose row may have `values` in the index (backfill, maintained
    entries, intents): the reader re-reads each at its timestamp."""

    index_id: int
    table_id: int
    columns: tuple[str, ...]
    values: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class IndexQuery:
    """The backfill of an index: (building version, entries) or None."""

    index_id: int


def group_of_name(group_name: str) -> ZonePartition:
    """`part-<zone>-<partition>` -> the zone partition."""
    _, zone, part = group_name.rsplit("-", 2)
    return ZonePartition(int(zone), int(part))


class PartitionMachine:
    """The hosted machine of one partition member."""

    def __init__(self, group_dir: str, group: ZonePartition) -> None:
        os.makedirs(group_dir, exist_ok=True)
        self.db = sqlite3.connect(os.path.join(group_dir, "partition.db"),
                                  check_same_thread=False)
        migrate(self.db, PARTITION_FILE)  # the tables: actors/schemas/partition_file.py
        self.state = self._load(group)
        self.applied = self.state.applied
        self.flushes = 0
        self.clock: Callable[[], float] | None = None
        self.incarnation = 0.0
        self.events: deque[tuple[int, float, str, int]] = deque(maxlen=EVENTS)
        self.event_seq = 0

    def set_clock(self, clock: Callable[[], float]) -> None:
        """The raft server's clock: the replay record is stamped with it."""
        self.clock = clock
        self.incarnation = clock()

    def _record(self, kind: str, version: int) -> None:
        if self.clock is not None:
            self.event_seq += 1
            self.events.append((self.event_seq, self.clock(), kind, version))

    # ---- HostedMachine -------------------------------------------------------------------

    def apply(self, entry: Entry) -> Any:
        if entry.command is None:  # a leader's no-op
            self.state = replace(self.state, applied=entry.index)
            self.applied = entry.index
            return None
        if isinstance(entry.command, FlushCmd):
            self.state = replace(self.state, applied=entry.index)
            self.applied = entry.index
            self.flush()
            return partition.Ok()
        before = partition.replay_floor(self.state)
        self.state, result = partition.apply(self.state, entry.index, entry.command)
        self.applied = entry.index
        floor = partition.replay_floor(self.state)
        if floor is not None and (before is None or floor < before):
            self._record("apply", floor)  # a replay from here would need this version
        return result

    def snapshot(self) -> tuple[bytes, list[int]]:
        self.flush()
        return pickle.dumps(self.state), []

    def restore(self, data: bytes, index: int,
                read_entry: Callable[[int], Entry | None]) -> None:
        state = pickle.loads(data)
        if not isinstance(state, PartitionState):
            raise ValueError("not a partition snapshot")
        self.state = replace(state, applied=index)
        self.applied = index
        # durable up to `index` now: nothing before it is replayed again, whatever this
        # member (or its earlier incarnation, before a crash) applied and had not flushed
        self._record("flush", 0)
        self.flush()

    def query(self, request: Any) -> Any:
        rows = self.state.rows
        try:
            if isinstance(request, ReadAt):
                return mvcc.read_at(rows, request.key, request.ts)
            if isinstance(request, ReadLatest):
                return mvcc.read_latest(rows, request.key, request.tx_id)
            if isinstance(request, ScanAt):
                return [(key, mvcc.read_at(rows, key, request.ts))
                        for key in mvcc.keys_of(rows, request.table_id)]
            if isinstance(request, ScanLatest):
                return [(key, mvcc.read_latest(rows, key, request.tx_id))
                        for key in mvcc.keys_of(rows, request.table_id)]
            if isinstance(request, ReadResolved):
                return mvcc.resolved_read(rows, request.key, request.ts, request.tx_id,
                                          request.intent_commit_ts)
            if isinstance(request, TxQuery):
                return self.state.txs.get(request.tx_id)
            if isinstance(request, MinTxQuery):
                return self.state.min_tx.durable
            if isinstance(request, ReplayEventsQuery):
                return self.incarnation, [e for e in self.events if e[0] > request.since]
            if isinstance(request, IndexQuery):
                return self.state.indexes.get(request.index_id)
            if isinstance(request, IndexRangeLookup):  # index_range.py
                backfill = self.state.indexes.get(request.index_id, (0, ()))[1]
                return index_range.candidates(
                    backfill, self.state.maintained.get(request.index_id), rows, request)
            if isinstance(request, IndexLookup):
                backfill = self.state.indexes.get(request.index_id, (0, ()))[1]
                return index_entries.candidates(
                    backfill, self.state.maintained.get(request.index_id), rows,
                    request.table_id, request.columns, request.values)
        except CatalogError as err:
            return err
        return UnknownRequest.of(request)

    def status(self) -> dict[str, Any]:
        s = self.state
        return {"partition": str(s.group), "flushed": s.flushed, "flushes": self.flushes,
                "replay_floor": partition.replay_floor(s),
                "min_tx_durable": s.min_tx.durable, "min_tx_stored": s.min_tx.stored,
                "keys": len(s.rows.versions), "intents": len(s.rows.intents),
                "catalog_floor": s.catalog_floor,
                "row_versions": sum(len(c) for c in s.rows.versions.values()),
                "tables": sorted({k[0] for k in s.rows.versions}),
                "tx_records": len(s.txs),
                "indexes": {i: len(e) for i, (_, e) in sorted(s.indexes.items())},
                "maintained": {i: len(m.entries) for i, m in sorted(s.maintained.items())}}

    def background(self) -> bool:
        return False

    def has_background(self) -> bool:
        return False

    def close(self) -> None:
        self.db.close()

    # ---- storage -------------------------------------------------------------------------

    def flush(self) -> HybridTimestamp | None:
        """Write the applied state in one SQLite transaction; the minimum tx time it
        makes durable (to publish), if a new one."""
        if partition.replay_floor(self.state) is not None:
            self._record("flush", 0)
        self.state, published = partition.flush(self.state)
        s = self.state
        versions = [(k[0], pickle.dumps(k[1]), seq, v.commit_ts.value, v.schema_version,
                     pickle.dumps(v.row), v.tx_id)
                    for k, chain in s.rows.versions.items() for seq, v in enumerate(chain)]
        intents = [(k[0], pickle.dumps(k[1]), i.tx_id, i.commit_partition.zone_id,
                    i.commit_partition.partition, i.begin_ts.value, i.schema_version,
                    i.catalog_version, pickle.dumps(i.row)) for k, i in s.rows.intents.items()]
        txs = [(t, r.status.value, None if r.commit_ts is None else r.commit_ts.value,
                pickle.dumps(sorted((g.zone_id, g.partition) for g in r.enlisted)))
               for t, r in s.txs.items()]
        meta = {"group": (s.group.zone_id, s.group.partition), "applied": s.applied,
                "min_tx": (_ts(s.min_tx.stored), _ts(s.min_tx.durable), s.min_tx.applied_index),
                "indexes": dict(s.indexes), "catalog_floor": s.catalog_floor,
                "maintained": dict(s.maintained)}
        with self.db:
            for table in ("versions", "intents", "txs", "meta"):
                self.db.execute(f"DELETE FROM {table}")  # noqa: S608 (fixed names)
            self.db.executemany("INSERT INTO versions VALUES (?,?,?,?,?,?,?)", versions)
            self.db.executemany("INSERT INTO intents VALUES (?,?,?,?,?,?,?,?,?)", intents)
            self.db.executemany("INSERT INTO txs VALUES (?,?,?,?)", txs)
            self.db.executemany("INSERT INTO meta VALUES (?,?)",
                                [(k, pickle.dumps(v)) for k, v in meta.items()])
        self.flushes += 1
        return published

    def _load(self, group: ZonePartition) -> PartitionState:
        meta = {k: pickle.loads(v) for k, v in self.db.execute("SELECT name, value FROM meta")}
        if "applied" not in meta:
            return partition.initial(group)
        chains: dict[RowKey, list[RowVersion]] = {}
        for table_id, key, _seq, commit_ts, schema, row, tx_id in self.db.execute(
                "SELECT * FROM versions ORDER BY table_id, key, seq"):
            chains.setdefault((table_id, pickle.loads(key)), []).append(
                RowVersion(HybridTimestamp(commit_ts), schema, pickle.loads(row), tx_id))
        intents: dict[RowKey, WriteIntent] = {}
        for table_id, key, tx_id, cz, cp, begin, schema, version, row in self.db.execute(
                "SELECT * FROM intents"):
            intents[(table_id, pickle.loads(key))] = WriteIntent(
                tx_id, ZonePartition(cz, cp), HybridTimestamp(begin), schema, version,
                pickle.loads(row))
        txs = {tx_id: TxRecord(TxStatus(status), None if ts is None else HybridTimestamp(ts),
                               frozenset(ZonePartition(z, p) for z, p in pickle.loads(enl)))
               for tx_id, status, ts, enl in self.db.execute("SELECT * FROM txs")}
        stored, durable, applied_index = meta["min_tx"]
        min_tx = MinTxTimeState(_of(stored), _of(durable), applied_index)
        rows = PartitionRows({k: tuple(v) for k, v in chains.items()}, intents)
        applied = int(meta["applied"])
        return PartitionState(group, rows, txs, min_tx, applied, applied, None,
                              meta.get("catalog_floor", 0), meta.get("indexes", {}),
                              meta.get("maintained", {}))


def _ts(ts: HybridTimestamp | None) -> int | None:
    return None if ts is None else ts.value


def _of(value: int | None) -> HybridTimestamp | None:
    return None if value is None else HybridTimestamp(value)


@dataclass(frozen=True)
class PartitionFactory:
    """Picklable machine factory for a partition group's spec."""

    group: ZonePartition

    def __call__(self, group_dir: str) -> HostedMachine:
        return PartitionMachine(group_dir, self.group)


__all__ = ["FlushCmd", "IndexLookup", "IndexQuery", "MinTxQuery", "PartitionFactory",
           "PartitionMachine", "ReadAt", "ReadLatest", "ReadResolved", "ReplayEventsQuery",
           "ScanAt", "ScanLatest", "TxQuery", "group_of_name"]
