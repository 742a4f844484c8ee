"""The rebalance driver on the simulator (docs/catalog.md §7 step 5): `alter_zone`
moves partition replicas by raft membership changes (a learner added, caught up,
promoted; a leaving replica removed and its member stopped); a node gone longer than
`scale_down_after` has its replicas moved; each rebalance is pinned to the catalog
version it was planned at, the pin in the recorder; bad input is a typed error with
nothing changed."""

from __future__ import annotations

from pathlib import Path

import pytest
from runtime_helpers import collector, eventually

from sediment.actors.catalog.errors import InvalidDdl, ZoneNotFound
from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.actors.catalog.low_watermark import LowWatermarkConfig
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Query
from sediment.actors.tables.names import partition_group
from sediment.actors.tables.partition_machine import ScanAt
from sediment.actors.tables.shell.rebalance_driver import BEFORE_RECORD
from sediment.runtime.common_calls import Status
from sediment.runtime.errors import CallError
from sediment.runtime.failpoints import FailpointHit
from sediment.scenarios.checkers.catalog_compaction import compaction_safety
from sediment.wiring.tables import TablesCluster

COLUMNS = [("k", "int", False), ("v", "int")]
LWM = LowWatermarkConfig(data_availability_ms=3_000, update_interval_ms=300, max_clock_skew_ms=10)
FAR = HybridTimestamp(1 << 62)


def voters(c: TablesCluster, group: object, nodes: tuple[str, ...]) -> set[str] | None:
    for node in nodes:
        try:
            view = c.rt.call(raft_name(partition_group(group), node), Status(),  # type: ignore[arg-type]
                             timeout=5)
        except CallError:
            continue
        if view.get("role") == "leader":
            return set(view["voters"]) | set(view["learners"])
    return None


def member_keys(c: TablesCluster, group: object, node: str, table_id: int) -> list[object]:
    rows = c.rt.call(raft_name(partition_group(group), node),  # type: ignore[arg-type]
                     Query(ScanAt(table_id, FAR)), timeout=5)
    return sorted(key for key, row in rows if row is not None)


def test_alter_zone_moves_replicas_by_membership_change(tmp_path: Path) -> None:
    with TablesCluster.start(nodes=3, backend="sim", data_dir=str(tmp_path), seed=7,
                             lwm=LWM) as c:
        c.create_zone("Z", partitions=4, replicas=1)
        c.create_table("T", "Z", COLUMNS, ["k"])
        tx = c.begin()
        for k in range(12):
            tx.insert("T", {"k": k, "v": k})
        assert tx.commit()
        before = c.assignments()
        altered = c.alter_zone("Z", 2)
        assert c.assignments() == before  # the DDL itself moves nothing
        c.wait_rebalanced("Z")
        after = c.assignments()
        table_id = c.catalog().table_named("T").id
        for group, nodes in after.items():
            assert len(nodes) == 2 and before[group] < nodes
            assert voters(c, group, tuple(nodes)) == set(nodes)  # raft agrees
            (new,) = nodes - before[group]
            (old,) = before[group]
            # the new replica caught up: it holds what the old one holds
            assert member_keys(c, group, new, table_id) == member_keys(c, group, old, table_id)
        assert sorted(r["k"] for r in c.scan("T")) == list(range(12))
        c.poll()
        pins = [p for p in c.recorder.history().pins if p.kind == "rebalance"]
        assert len(pins) == 4 and all(p.version == altered and p.end is not None
                                      for p in pins), pins
        # back to one replica: the leaving members are removed and stopped
        c.alter_zone("Z", 1)
        c.wait_rebalanced("Z")
        final = c.assignments()
        for group, nodes in final.items():
            assert len(nodes) == 1 and nodes < after[group]
            (gone,) = after[group] - nodes
            assert eventually(c.rt, lambda g=group, n=gone: c.rt.whereis(
                raft_name(partition_group(g), n)) is None, timeout=10)
        assert eventually(c.rt, lambda: all(
            sorted(c.node_status(n)["partitions"]) == sorted(  # type: ignore[index]
                str(g) for g, ns in final.items() if n in ns) for n in c.nodes), timeout=10)
        tx = c.begin()
        tx.insert("T", {"k": 100, "v": 1})
        assert tx.commit()
        assert sorted(r["k"] for r in c.scan("T")) == [*range(12), 100]
        c.poll()
        assert compaction_safety(c.recorder.history()).ok


def test_a_node_gone_longer_than_the_scale_down_timer_has_its_replicas_moved(
        tmp_path: Path) -> None:
    """Four nodes, three replicas: the partitions n4 held keep a majority without it,
    and after the timer each gets a learner on the node it lacked, promoted, and n4
    removed."""
    with TablesCluster.start(nodes=4, backend="sim", data_dir=str(tmp_path), seed=8,
                             lwm=LWM, scale_down_after=1.0) as c:
        c.create_zone("Z", partitions=4, replicas=3)
        c.create_table("T", "Z", COLUMNS, ["k"])
        tx = c.begin("n1")
        for k in range(8):
            tx.insert("T", {"k": k, "v": k})
        assert tx.commit()
        held = {g for g, n in c.assignments().items() if "n4" in n}
        assert held
        c.stop_node("n4")
        assert eventually(c.rt, lambda: all("n4" not in n and len(n) == 3
                                            for n in c.assignments().values())
                          and not c.rebalances(), timeout=60)
        for group in held:
            nodes = c.assignments()[group]
            assert voters(c, group, tuple(nodes)) == set(nodes)
        assert sorted(r["k"] for r in c.scan("T")) == list(range(8))


def test_bad_alter_zone_is_a_typed_error_and_changes_nothing(tmp_path: Path) -> None:
    with TablesCluster.start(nodes=3, backend="sim", data_dir=str(tmp_path), seed=9,
                             lwm=LWM) as c:
        c.create_zone("Z", partitions=2, replicas=2)
        before = (c.versions().latest_version, c.assignments())
        with pytest.raises(ZoneNotFound):
            c.alter_zone("nope", 2)
        with pytest.raises(InvalidDdl):
            c.alter_zone("Z", 0)
        with pytest.raises(InvalidDdl):
            c.alter_zone("Z", 4)  # more replicas than nodes
        with pytest.raises(ZoneNotFound):
            c.wait_rebalanced("nope")
        c.rt.sleep(1.0)  # the driver's looks
        assert (c.versions().latest_version, c.assignments()) == before
        assert not c.rebalances()


def test_a_new_leaders_driver_resumes_a_pending_rebalance(tmp_path: Path) -> None:
    """The metastore leader dies with rebalances held before their stable record; the
    next leader's driver runs the pending ones again from the start (every step that
    already holds counts as done) and records them."""
    with TablesCluster.start(nodes=3, backend="sim", data_dir=str(tmp_path), seed=10,
                             lwm=LWM) as c:
        c.create_zone("Z", partitions=2, replicas=2)
        c.create_table("T", "Z", COLUMNS, ["k"])
        tx = c.begin()
        for k in range(6):
            tx.insert("T", {"k": k, "v": k})
        assert tx.commit()
        sink = c.rt.spawn(collector, node="ctl")
        c.rt.arm_failpoint_everywhere(BEFORE_RECORD, "pause", notify=sink, tag="held")
        c.alter_zone("Z", 3)
        assert eventually(c.rt, lambda: any(isinstance(m, FailpointHit)
                                            for m in c.rt.call(sink, "get")), timeout=30)
        leader = c.leader()
        assert leader is not None and c.rebalances()
        c.kill_node(leader)
        c.rt.release_failpoint_everywhere(BEFORE_RECORD)
        c.wait_rebalanced("Z", timeout=60)
        for group, nodes in c.assignments().items():
            assert len(nodes) == 3
            assert eventually(c.rt, lambda g=group, n=nodes: voters(c, g, tuple(n)) == set(n),
                              timeout=30)
        assert sorted(r["k"] for r in c.scan("T", node=next(
            n for n in c.nodes if n != leader))) == list(range(6))
