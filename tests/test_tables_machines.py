"""The two raft machines of the tables shells, driven entry by entry: the metastore
machine (catalog plus the assignments it records when a zone is created, kept through
a snapshot), and the SQLite partition machine (everything applied survives a flush and
a reopen; nothing after the last flush does, so raft replays it; the minimum tx time is
published only once flushed; bad commands change nothing)."""

from __future__ import annotations

from pathlib import Path

from sediment.actors.catalog import ddl
from sediment.actors.catalog.descriptors import Column, ZonePartition
from sediment.actors.catalog.hlc import hts
from sediment.actors.catalog.machine import CompactCatalog, DdlApplied, ExecuteDdl, Rejected
from sediment.actors.catalog.metastore_machine import (
    AssignmentsQuery,
    CatalogMetastore,
    ViewQuery,
)
from sediment.actors.log.raft.types import Entry
from sediment.actors.tables import partition, partitioning
from sediment.actors.tables.errors import WriteConflict
from sediment.actors.tables.mvcc import IntentFound
from sediment.actors.tables.partition_machine import (
    FlushCmd,
    MinTxQuery,
    PartitionMachine,
    ReadAt,
    ReadLatest,
    ScanAt,
    TxQuery,
    group_of_name,
)
from sediment.actors.tables.tx_state import FinishOutcome, TxStatus

K = Column("k", "int", nullable=False)
NODES = ("n1", "n2", "n3")
G = ZonePartition(0, 1)


def e(i: int, command: object) -> Entry:
    return Entry(i, 1, 0.0, command)


def test_metastore_records_assignments_of_new_zones_and_keeps_them() -> None:
    m = CatalogMetastore("", NODES)
    r = m.apply(e(1, ExecuteDdl((ddl.CreateZone("Z", 4, 2),), hts(100), 10)))
    assert isinstance(r, DdlApplied)
    placed = m.query(AssignmentsQuery())
    zone = m.log.latest.zone_named("Z")
    assert zone is not None
    assert placed == partitioning.assign(zone, NODES)
    assert all(len(nodes) == 2 for nodes in placed.values())
    # changing the replicas moves nothing here (that is a rebalance's job)
    m.apply(e(2, ExecuteDdl((ddl.AlterZone("Z", 3),), hts(200), 10)))
    assert m.query(AssignmentsQuery()) == placed
    # a rejected batch changes neither the catalog nor the assignments
    bad = m.apply(e(3, ExecuteDdl((ddl.CreateZone("Z", 1, 1),), hts(300), 10)))
    assert isinstance(bad, Rejected)
    assert m.query(AssignmentsQuery()) == placed and m.log.latest_version == 2
    m.apply(e(4, ExecuteDdl((ddl.CreateTable("T", "Z", (K,), ("k",)),), hts(400), 10)))
    m.apply(e(5, CompactCatalog(2)))
    data, _ = m.snapshot()
    copy = CatalogMetastore("", NODES)
    copy.restore(data, 5, lambda i: None)
    assert copy.query(AssignmentsQuery()) == placed
    log, assignments = copy.query(ViewQuery())
    assert log.earliest_version == 2 and log.latest_version == 3 and assignments == placed
    # a dropped zone's partitions go
    m.apply(e(6, ExecuteDdl((ddl.DropTable("T"), ddl.DropZone("Z")), hts(500), 10)))
    assert m.query(AssignmentsQuery()) == {}


def write(tx: str, key: int, ts: int, version: int = 1) -> partition.WriteIntentCmd:
    return partition.WriteIntentCmd(tx, 7, (key,), {"k": key}, 1, version, hts(ts), G)


def test_partition_machine_survives_a_flush_and_forgets_what_followed(tmp_path: Path) -> None:
    gdir = str(tmp_path / "part-0-1")
    assert group_of_name("part-0-1") == G
    m = PartitionMachine(gdir, G)
    assert isinstance(m.apply(e(1, write("a", 1, 10))), partition.Ok)
    outcome = m.apply(e(2, partition.FinishTxCmd("a", True, hts(20), frozenset({G}), 1)))
    assert isinstance(outcome, FinishOutcome) and outcome.record.status is TxStatus.COMMITTED
    m.apply(e(3, partition.CleanupCmd("a", hts(20), 1)))
    m.apply(e(4, partition.UpdateMinActiveTxTimeCmd(hts(15))))
    assert m.query(MinTxQuery()) is None  # stored, not yet durable: not published
    assert m.status()["replay_floor"] == 1
    m.apply(e(5, FlushCmd()))
    assert m.query(MinTxQuery()) == hts(15)
    assert m.status()["replay_floor"] is None
    m.apply(e(6, write("b", 2, 30)))  # applied after the flush
    m.close()

    again = PartitionMachine(gdir, G)
    assert again.applied == 5  # raft feeds entries from 6 on again
    assert again.query(ReadAt((7, (1,)), hts(25))) == {"k": 1}
    assert again.query(ReadAt((7, (1,)), hts(19))) is None
    assert again.query(ReadAt((7, (2,)), hts(40))) is None  # b's intent is gone until replay
    assert again.query(TxQuery("a")) is not None
    assert again.query(MinTxQuery()) == hts(15)
    again.apply(e(6, write("b", 2, 30)))  # the replay
    found = again.query(ReadAt((7, (2,)), hts(40)))
    assert isinstance(found, IntentFound) and found.intent.tx_id == "b"
    assert again.query(ReadLatest((7, (2,)), "b")) == {"k": 2}
    assert isinstance(again.query(ReadLatest((7, (2,)), "c")), WriteConflict)
    assert [k for k, _ in again.query(ScanAt(7, hts(40)))] == [(7, (1,)), (7, (2,))]
    again.close()


def test_partition_machine_snapshot_restores_elsewhere(tmp_path: Path) -> None:
    m = PartitionMachine(str(tmp_path / "a"), G)
    m.apply(e(1, write("a", 1, 10)))
    data, live = m.snapshot()
    assert live == []
    other = PartitionMachine(str(tmp_path / "b"), G)
    other.restore(data, 1, lambda i: None)
    assert other.applied == 1
    other.close()
    reopened = PartitionMachine(str(tmp_path / "b"), G)
    assert isinstance(reopened.query(ReadAt((7, (1,)), hts(10))), IntentFound)
    # a command the core refuses: a typed Failed, nothing but the applied index changed
    r = reopened.apply(e(2, write("z", 1, 5)))
    assert isinstance(r, partition.Failed) and isinstance(r.error, WriteConflict)
    assert reopened.applied == 2
    found = reopened.query(ReadAt((7, (1,)), hts(10)))
    assert isinstance(found, IntentFound) and found.intent.tx_id == "a"
    reopened.close()
    m.close()
