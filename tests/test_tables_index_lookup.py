"""Index maintenance by writes after the backfill and the index lookup
(`actors/tables/index_entries.py`, `IndexLookup`, `TablesCluster.lookup`): the core by
table, the partition machine (commits add entries, a collection prunes them, a reopen
keeps them), and on sim a lookup that sees rows written after the build, at every
timestamp (MVCC), with typed errors for bad lookups; the checks still pass."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sediment.actors.catalog.descriptors import ZonePartition
from sediment.actors.catalog.errors import IndexNotFound, InvalidCommand
from sediment.actors.catalog.hlc import hts
from sediment.actors.catalog.low_watermark import LowWatermarkConfig
from sediment.actors.log.raft.types import Entry
from sediment.actors.tables import index_entries as ie
from sediment.actors.tables import partition
from sediment.actors.tables.errors import IndexNotAvailable
from sediment.actors.tables.mvcc import PartitionRows, RowVersion, WriteIntent
from sediment.actors.tables.partition_machine import FlushCmd, IndexLookup, PartitionMachine
from sediment.actors.tables.shell.node_protocol import RoGet
from sediment.scenarios.checkers.catalog_compaction import atomic_visibility, compaction_safety
from sediment.wiring.tables import TablesCluster

G = ZonePartition(0, 1)
T = 7  # table id
COLS = ("v",)


def version(ms: int, v: int | None, k: int = 1) -> RowVersion:
    return RowVersion(hts(ms), 1, None if v is None else {"k": k, "v": v}, "tx")


def rows(**chains: tuple[RowVersion, ...]) -> PartitionRows:
    return PartitionRows({(T, (int(k[1:]),)): c for k, c in chains.items()})


# ---- the core -----------------------------------------------------------------------


@pytest.mark.parametrize("chains, ts, entries", [
    ({}, 10, set()),
    ({"k1": (version(5, 1),)}, 10, set()),  # at or before ts: the backfill's
    ({"k1": (version(5, 1), version(15, 2))}, 10, {((2,), (1,))}),  # after ts
    ({"k1": (version(15, 2), version(20, None))}, 10, {((2,), (1,))}),  # a delete: none
    ({"k1": (version(15, 2), version(25, 3))}, 10, {((2,), (1,)), ((3,), (1,))}),
])
def test_start_keeps_every_version_after_the_backfill(chains: dict[str, tuple[RowVersion, ...]],
                                                      ts: int, entries: set[ie.Entry]) -> None:
    assert ie.start(rows(**chains), T, COLS, hts(ts)).entries == entries


def test_commits_add_entries_and_a_collection_prunes_them() -> None:
    idx = ie.MaintainedIndex(T, COLS)
    idx = ie.on_commit(idx, [((T, (1,)), {"k": 1, "v": 2}), ((8, (1,)), {"k": 1, "v": 9}),
                             ((T, (2,)), None)])
    assert idx.entries == {((2,), (1,))}  # another table's row and a delete add nothing
    idx = ie.on_commit(idx, [((T, (1,)), {"k": 1, "v": 3})])
    assert idx.entries == {((2,), (1,)), ((3,), (1,))}  # the old entry stays (MVCC)
    assert ie.prune(idx, rows(k1=(version(30, 3),))).entries == {((3,), (1,))}


@pytest.mark.parametrize("values, keys", [
    ((2,), [(1,), (4,)]),  # backfill k4, maintained k1
    ((3,), [(5,)]),  # an intent's row
    ((9,), []),
])
def test_candidates_are_backfill_maintained_and_intent_keys(
        values: tuple[int, ...], keys: list[tuple[int, ...]]) -> None:
    intent = WriteIntent("t", G, hts(1), 1, 1, {"k": 5, "v": 3})
    r = PartitionRows({}, {(T, (5,)): intent, (8, (6,)): intent})
    idx = ie.MaintainedIndex(T, COLS, frozenset({((2,), (1,))}))
    assert ie.candidates([((2,), (4,)), ((1,), (3,))], idx, r, T, COLS, values) == keys


# ---- the partition machine ----------------------------------------------------------


def e(i: int, command: object) -> Entry:
    return Entry(i, 1, 0.0, command)


def write(tx: str, key: int, v: int) -> partition.WriteIntentCmd:
    return partition.WriteIntentCmd(tx, T, (key,), {"k": key, "v": v}, 1, 1, hts(10), G)


def test_the_partition_maintains_an_index_through_commits_and_a_reopen(
        tmp_path: Path) -> None:
    gdir = str(tmp_path / "p")
    m = PartitionMachine(gdir, G)
    m.apply(e(1, write("a", 1, 1)))
    m.apply(e(2, partition.CleanupCmd("a", hts(20), 1)))
    m.apply(e(3, partition.BuildIndexCmd(9, T, COLS, hts(30), 1)))
    m.apply(e(4, write("b", 2, 1)))
    m.apply(e(5, partition.CleanupCmd("b", hts(40), 1)))  # committed after the backfill
    m.apply(e(6, write("c", 3, 1)))
    m.apply(e(7, partition.CleanupCmd("c", None, 1)))  # aborted: no entry
    lookup = IndexLookup(9, T, COLS, (1,))
    assert m.query(lookup) == [(1,), (2,)]
    m.apply(e(8, FlushCmd()))
    again = PartitionMachine(gdir, G)
    assert again.query(lookup) == [(1,), (2,)]
    assert again.status()["maintained"] == {9: 1}


# ---- on sim -------------------------------------------------------------------------

LWM = LowWatermarkConfig(data_availability_ms=30_000, update_interval_ms=300,
                         max_clock_skew_ms=10)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[TablesCluster]:
    with TablesCluster.start(nodes=3, backend="sim", data_dir=str(tmp_path), seed=7,
                             lwm=LWM) as c:
        c.create_zone("Z", partitions=4, replicas=2)
        c.create_table("T", "Z", [("k", "int", False), ("v", "int")], ["k"])
        yield c


def upsert(c: TablesCluster, node: str, *rows: tuple[int, int | None]) -> None:
    tx = c.begin(node)
    for k, v in rows:
        if v is None:
            tx.delete("T", (k,))
        else:
            tx.insert("T", {"k": k, "v": v})
    assert tx.commit()


def keys(found: list[dict[str, int]]) -> list[int]:
    return sorted(r["k"] for r in found)


def test_a_lookup_sees_writes_after_the_backfill_at_every_timestamp(
        cluster: TablesCluster) -> None:
    c = cluster
    upsert(c, "n1", *((k, k % 3) for k in range(6)))  # v=2: k 2, 5
    c.create_index("T_v", "T", ["v"])
    c.wait_index_available("T_v")
    before = c.read("n1", RoGet("T", (0,), None))[1]  # a read's timestamp
    assert keys(c.lookup("T_v", [2])) == [2, 5]
    upsert(c, "n2", (1, 2), (10, 2), (2, None))  # k1 1 -> 2, k10 new, k2 deleted
    upsert(c, "n3", (5, 0))  # k5 2 -> 0
    for node in c.nodes:
        assert keys(c.lookup("T_v", [2], node=node)) == [1, 10]
        assert keys(c.lookup("T_v", [0], node=node)) == [0, 3, 5]
        assert keys(c.lookup("T_v", [2], ts=before, node=node)) == [2, 5]  # MVCC
    assert c.lookup("T_v", [7]) == []
    history = c.recorder.history()
    assert compaction_safety(history).ok and atomic_visibility(history).ok


def test_bad_lookups_are_typed_errors(cluster: TablesCluster) -> None:
    c = cluster
    old = c.begin("n1")  # holds the index at REGISTERED
    old.insert("T", {"k": 1, "v": 1})
    c.create_index("T_v", "T", ["v"])
    with pytest.raises(IndexNotAvailable):
        c.lookup("T_v", [1])
    with pytest.raises(IndexNotFound):
        c.lookup("nope", [1])
    assert old.commit()
    c.wait_index_available("T_v")
    with pytest.raises(InvalidCommand):
        c.lookup("T_v", [1, 2])  # one column, two values
    assert keys(c.lookup("T_v", [1])) == [1]
