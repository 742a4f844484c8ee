"""Garbage collection below the low watermark on the simulator: when a node's low
watermark moves it proposes `GcCmd` to the partitions it leads, so row versions no read
at or above the watermark can see go, and so do the rows of a dropped table; what reads
at or above the watermark see is unchanged, and the claim rows and entries of a dropped
unique index (alone or with its table) go too. The partitions also learn how far the
catalog was compacted (rule 4)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from runtime_helpers import eventually

from sediment.actors.catalog.descriptors import ZonePartition
from sediment.actors.catalog.hlc import hts
from sediment.actors.catalog.low_watermark import LowWatermarkConfig
from sediment.actors.tables import partition
from sediment.actors.tables import unique_claims as ucl
from sediment.actors.tables.errors import UniqueConstraintViolation
from sediment.actors.tables.index_entries import MaintainedIndex
from sediment.actors.tables.mvcc import PartitionRows, RowVersion, WriteIntent
from sediment.actors.tables.names import partition_group
from sediment.wiring.tables import TablesCluster

LWM = LowWatermarkConfig(data_availability_ms=3_000, update_interval_ms=300, max_clock_skew_ms=10)


def partition_status(c: TablesCluster) -> dict[str, object]:
    (group,) = c.assignments()  # one partition
    for node in c.nodes:
        status = c.raft_status(node, partition_group(group))
        if status is not None and status.get("role") == "leader":
            return status
    raise AssertionError("no partition leader")


def test_old_versions_and_dropped_tables_go_below_the_low_watermark(tmp_path: Path) -> None:
    with TablesCluster.start(nodes=3, backend="sim", data_dir=str(tmp_path), seed=11,
                             lwm=LWM) as c:
        c.create_zone("Z", partitions=1, replicas=2)
        c.create_table("T", "Z", [("k", "int", False), ("v", "int")], ["k"])
        c.create_table("U", "Z", [("k", "int", False)], ["k"])
        for v in range(5):
            tx = c.begin()
            tx.insert("T", {"k": 1, "v": v})
            tx.insert("U", {"k": v})
            assert tx.commit()
            c.rt.sleep(0.2)  # its cleanups apply (a write meeting its intent would conflict)
        t_id, u_id = c.catalog().table_named("T").id, c.catalog().table_named("U").id
        status = partition_status(c)
        assert status["row_versions"] == 10 and status["tables"] == [t_id, u_id]
        c.drop_table("U")
        assert eventually(c.rt, lambda: partition_status(c)["row_versions"] == 1, timeout=30)
        assert partition_status(c)["tables"] == [t_id]
        assert c.get("T", (1,)) == {"k": 1, "v": 4}
        # rule 4: the partition learned how far the catalog was compacted
        assert eventually(c.rt, lambda: partition_status(c)["catalog_floor"]
                          == c.versions().earliest_version > 0, timeout=30)


# ---- claim rows of dropped unique indexes ---------------------------------------------


def test_gc_drops_a_dropped_indexs_claims_and_entries() -> None:
    """By table: `GcCmd.dropped_indexes` takes the index's claim rows (committed and
    pending), its backfill and its maintained entries; another index's stay."""
    g = ZonePartition(0, 0)
    gone, kept, table = 7, 8, 3
    claim_of = {gone: ucl.claim_key(gone, ("a",)), kept: ucl.claim_key(kept, ("a",))}
    versions = {claim_of[gone]: (RowVersion(hts(5), 0, {"pk": (1,)}, "t1"),),
                claim_of[kept]: (RowVersion(hts(5), 0, {"pk": (1,)}, "t1"),),
                (table, (1,)): (RowVersion(hts(5), 0, {"k": 1, "e": "a"}, "t1"),)}
    intents = {ucl.claim_key(gone, ("b",)): WriteIntent("t2", g, hts(6), 0, 1, {"pk": (2,)})}
    entries = frozenset({(("a",), (1,))})
    state = replace(partition.initial(g), rows=PartitionRows(versions, intents),
                    indexes={gone: (1, tuple(entries)), kept: (1, tuple(entries))},
                    maintained={i: MaintainedIndex(table, ("e",), entries) for i in (gone, kept)})
    after, result = partition.apply(state, 1, partition.GcCmd(hts(10), frozenset(),
                                                              frozenset({gone})))
    assert isinstance(result, partition.Collected)
    assert set(after.rows.versions) == {claim_of[kept], (table, (1,))}
    assert not after.rows.intents
    assert set(after.indexes) == set(after.maintained) == {kept}
    unchanged, _ = partition.apply(state, 1, partition.GcCmd(hts(10)))
    assert unchanged.rows == state.rows and unchanged.indexes == state.indexes


def test_a_dropped_unique_indexs_claims_go_below_the_low_watermark(tmp_path: Path) -> None:
    with TablesCluster.start(nodes=3, backend="sim", data_dir=str(tmp_path), seed=13,
                             lwm=LWM) as c:
        c.create_zone("Z", partitions=1, replicas=2)
        c.create_table("T", "Z", [("k", "int", False), ("e", "str")], ["k"])
        c.create_table("U", "Z", [("k", "int", False), ("e", "str")], ["k"])
        for table in ("T", "U"):
            c.create_index(f"{table}_e", table, ["e"], unique=True)
            c.wait_index_available(f"{table}_e")
        tx = c.begin()
        for k, e in ((1, "a"), (2, "b")):
            tx.insert("T", {"k": k, "e": e})
            tx.insert("U", {"k": k, "e": e})
        assert tx.commit()
        t_e, u_e = c.index("T_e").id, c.index("U_e").id
        u_id = c.catalog().table_named("U").id
        assert {t_e, u_e} <= set(partition_status(c)["tables"])  # their claim rows
        c.drop_index("T_e")
        c.drop_table("U")  # its index goes with it
        assert eventually(c.rt, lambda: not {t_e, u_e, u_id} & set(
            partition_status(c)["tables"]), timeout=30)
        status = partition_status(c)
        assert not {t_e, u_e} & (set(status["indexes"]) | set(status["maintained"]))
        # the same names and values again: new indexes, no old claim in the way
        c.create_table("U", "Z", [("k", "int", False), ("e", "str")], ["k"])
        for table in ("T", "U"):
            c.create_index(f"{table}_e", table, ["e"], unique=True)
            c.wait_index_available(f"{table}_e")
        tx = c.begin()
        tx.insert("T", {"k": 3, "e": "c"})
        for k, e in ((1, "a"), (2, "b")):
            tx.insert("U", {"k": k, "e": e})
        assert tx.commit()
        tx = c.begin()
        with pytest.raises(UniqueConstraintViolation):  # the new index holds row 1's "a"
            tx.insert("T", {"k": 4, "e": "a"})
        tx.rollback()
        assert {r["k"]: r["e"] for r in c.scan("T")} == {1: "a", 2: "b", 3: "c"}
