"""The index build driver on the simulator (docs/catalog.md §7 step 5): an index created
through the API is REGISTERED, then BUILDING at a later catalog version, backfilled in
every partition at that version's activation, then AVAILABLE; an RW transaction that
began before the index holds the build at REGISTERED until it ends; bad input is a
typed error with nothing changed; the recorder turns a build into a pin the checker
enforces."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_helpers import collector, eventually

from sediment.actors.catalog.descriptors import IndexStatus
from sediment.actors.catalog.errors import IndexExists, IndexNotFound, TableNotFound
from sediment.actors.catalog.hlc import hts
from sediment.actors.catalog.low_watermark import LowWatermarkConfig
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Query
from sediment.actors.tables.names import partition_group
from sediment.actors.tables.partition_machine import IndexQuery
from sediment.actors.tables.recorder import Recorder
from sediment.actors.tables.shell.index_driver import BEFORE_AVAILABLE
from sediment.runtime.errors import CallError
from sediment.runtime.failpoints import FailpointHit
from sediment.scenarios.checkers.catalog_compaction import compaction_safety
from sediment.wiring.tables import TablesCluster

COLUMNS = [("k", "int", False), ("v", "int")]
LWM = LowWatermarkConfig(data_availability_ms=3_000, update_interval_ms=300, max_clock_skew_ms=10)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[TablesCluster]:
    with TablesCluster.start(nodes=3, backend="sim", data_dir=str(tmp_path), seed=5,
                             lwm=LWM) as c:
        c.create_zone("Z", partitions=4, replicas=2)
        c.create_table("T", "Z", COLUMNS, ["k"])
        yield c


def backfills(c: TablesCluster, index_id: int) -> dict[str, tuple[int, tuple[object, ...]]]:
    """Each partition's backfill of the index, from one member that has it."""
    out: dict[str, tuple[int, tuple[object, ...]]] = {}
    for group in c.catalog().partitions():
        for node in c.nodes:
            try:
                found = c.rt.call(raft_name(partition_group(group), node),
                                  Query(IndexQuery(index_id)), timeout=5)
            except CallError:
                continue
            if found is not None:
                out[str(group)] = found
                break
    return out


def test_an_index_is_registered_backfilled_at_its_building_version_then_available(
        cluster: TablesCluster) -> None:
    c = cluster
    tx = c.begin()
    for k in range(10):
        tx.insert("T", {"k": k, "v": k % 3})
    assert tx.commit()
    created = c.create_index("T_v", "T", ["v"])
    assert c.index("T_v").created_version == created
    available = c.wait_index_available("T_v")
    index = c.index("T_v")
    assert index.status is IndexStatus.AVAILABLE and available > created
    found = backfills(c, index.id)
    assert len(found) == 4, found  # every partition backfilled
    versions = {v for v, _ in found.values()}
    assert len(versions) == 1 and created < versions.pop() < available  # at BUILDING
    entries = sorted((e for _, es in found.values() for e in es), key=repr)
    assert entries == sorted((((k % 3,), (k,)) for k in range(10)), key=repr)
    c.poll()
    assert compaction_safety(c.recorder.history()).ok
    pins = [p for p in c.recorder.history().pins if p.kind == "index_build"]
    assert len(pins) == 1 and pins[0].version == created and pins[0].end is not None


def test_an_older_transaction_holds_the_build_at_registered_until_it_ends(
        cluster: TablesCluster) -> None:
    c = cluster
    old = c.begin("n2")
    old.insert("T", {"k": 1, "v": 1})
    c.create_index("T_v", "T", ["v"])
    c.rt.sleep(2.0)  # many looks of the driver
    assert c.index("T_v").status is IndexStatus.REGISTERED
    status = c.index_driver_status()
    assert status is not None
    build = status["builds"][0]
    assert build["stage"] == "waiting_txs" and "n2" in build["waiting_nodes"], build
    assert old.commit()
    c.wait_index_available("T_v")
    index = c.index("T_v")
    entries = [e for _, es in backfills(c, index.id).values() for e in es]
    assert entries == [((1,), (1,))]  # the row the old transaction committed first


def test_bad_index_ddl_is_a_typed_error_and_changes_nothing(cluster: TablesCluster) -> None:
    c = cluster
    c.create_index("T_v", "T", ["v"])
    before = c.versions().latest_version
    with pytest.raises(TableNotFound):
        c.create_index("X_v", "X", ["v"])
    with pytest.raises(IndexExists):
        c.create_index("T_v", "T", ["k"])
    with pytest.raises(IndexNotFound):
        c.drop_index("nope")
    with pytest.raises(IndexNotFound):
        c.index("nope")
    assert c.versions().latest_version == before
    assert "X_v" not in c.recorder.index_pins and "nope" not in c.recorder.index_pins
    c.wait_index_available("T_v")


def test_a_dropped_index_cancels_its_build(cluster: TablesCluster) -> None:
    c = cluster
    old = c.begin("n1")  # holds the build at REGISTERED
    old.insert("T", {"k": 1, "v": 1})
    c.create_index("T_v", "T", ["v"])
    assert eventually(c.rt, lambda: bool((c.index_driver_status() or {}).get("builds")),
                      timeout=10)
    c.drop_index("T_v")
    assert eventually(c.rt, lambda: any(
        b["stage"] == "cancelled" for b in (c.index_driver_status() or {}).get("finished", ())),
        timeout=10)
    assert old.commit()


def test_the_recorder_pins_an_index_build_until_available_was_proposed() -> None:
    r = Recorder()
    r.version(1, hts(10))
    r.version(2, hts(20))
    r.version(3, hts(30))
    r.index_registered("I", 2, at=1.0)
    r.compactions[3] = 2.0  # compacted past the index's version while it was building
    assert not compaction_safety(r.history()).ok
    r.poll_indexes({"builds": [], "finished": [{"name": "I", "available_proposed_at": 1.5}]})
    assert compaction_safety(r.history()).ok  # the build had ended by then


def test_a_new_leaders_driver_resumes_a_building_index(cluster: TablesCluster) -> None:
    """The metastore leader dies while its driver holds a build at BUILDING; the next
    leader's driver backfills again and makes it AVAILABLE."""
    c = cluster
    tx = c.begin()
    tx.insert("T", {"k": 1, "v": 7})
    assert tx.commit()
    sink = c.rt.spawn(collector, node="ctl")
    c.rt.arm_failpoint_everywhere(BEFORE_AVAILABLE, "pause", notify=sink, tag="held")
    c.create_index("T_v", "T", ["v"])
    assert eventually(c.rt, lambda: any(isinstance(m, FailpointHit)
                                        for m in c.rt.call(sink, "get")), timeout=30)
    leader = c.leader()
    assert leader is not None and c.index("T_v").status is IndexStatus.BUILDING
    term = c.raft_status(leader)["term"]  # type: ignore[index]
    c.kill_node(leader)
    c.rt.release_failpoint_everywhere(BEFORE_AVAILABLE)
    c.wait_index_available("T_v", timeout=60)
    status = c.index_driver_status()
    assert status is not None and status["term"] > term  # a later term's driver did it
    entries = [e for _, es in backfills(c, c.index("T_v").id).values() for e in es]
    assert entries == [((7,), (1,))]
