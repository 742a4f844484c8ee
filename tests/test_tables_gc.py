"""Garbage collection below the low watermark on the simulator: when a node's low
watermark moves it proposes `GcCmd` to the partitions it leads, so row versions no read
at or above the watermark can see go, and so do the rows of a dropped table; what reads
at or above the watermark see is unchanged. The partitions also learn how far the
catalog was compacted (rule 4)."""

from __future__ import annotations

from pathlib import Path

from runtime_helpers import eventually

from sediment.actors.catalog.low_watermark import LowWatermarkConfig
from sediment.actors.tables.cluster import TablesCluster
from sediment.actors.tables.names import partition_group

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
