"""Catalog compaction scenarios on the simulator, each over many seeds (the default
few; `SEDIMENT_CATALOG_SEEDS=200` for the full sweep), checked by the history checker:

- the coordinator (the metastore leader) killed mid-iteration, with its compaction
  committed and not yet applied on it, and a new leader's coordinator taking over
  (Ignite's ItCatalogCompactionCoordinatorChoosingTest);
- a long transaction holding compaction back at the version it began under, then
  released by its commit;
- a node holding partitions missing from the topology (compaction aborts
  `nodes_missing` until it is back);
- a node stopped, the catalog compacted past the low watermark it stored, the node
  restarted (Ignite's ItNodeRecoveryAfterCatalogTruncatedAboveStoredLwmTest);
- a dropped zone compacted (IGNITE-25867);
- an index build racing compaction: while its backfill is held, the coordinator aborts
  `index_building` and the catalog keeps the version that registered it; once it is
  AVAILABLE compaction passes that version;
- a rebalance in progress: while a partition's replicas move (held before its stable
  record), every node folds its pin into its local minimum and the catalog keeps the
  version it was planned at; once it ends compaction passes it.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from runtime_helpers import collector, eventually
from tables_helpers import Workload, assert_checks_pass, seeds, setup

from sediment.actors.catalog import ddl
from sediment.actors.catalog.errors import TableNotFound
from sediment.actors.catalog.low_watermark import LowWatermarkConfig
from sediment.actors.catalog.machine import CompactCatalog
from sediment.actors.log.shell.applying import before_apply_point
from sediment.actors.log.shell.names import raft_name
from sediment.actors.tables.shell.index_driver import BEFORE_AVAILABLE
from sediment.actors.tables.shell.node_state import load_lwm
from sediment.actors.tables.shell.rebalance_driver import BEFORE_RECORD
from sediment.runtime.failpoints import FailpointHit
from sediment.wiring.tables import TablesCluster

LWM = LowWatermarkConfig(data_availability_ms=1_500, update_interval_ms=300,
                         max_clock_skew_ms=10)


@pytest.mark.parametrize("seed", seeds(4))
def test_coordinator_killed_mid_iteration(seed: int, tmp_path: Path) -> None:
    with TablesCluster.start(nodes=3, backend="sim", data_dir=str(tmp_path), seed=seed,
                             lwm=LWM) as c:
        setup(c)
        w = Workload(c, random.Random(seed))
        w.run(10)
        w.finish()  # no open transaction pins the versions below
        for i in range(3):  # versions for the watermark to pass
            c.add_column("T", (f"early{i}", "int"))
        sink = c.rt.spawn(collector, node="ctl")
        point = before_apply_point(CompactCatalog)
        c.rt.arm_failpoint_everywhere(point, "pause", notify=sink, tag="kill")

        def hits() -> list[FailpointHit]:
            return [m for m in c.rt.call(sink, "get") if isinstance(m, FailpointHit)]

        for _ in range(300):  # no client requests: one could wait on the held leader
            if hits():
                break
            c.rt.sleep(0.05)
        assert hits(), "no compaction reached the leader"
        leader = hits()[0].pid.node
        before = c.coordinator_status()
        assert before is not None and before["node"] == leader
        assert before["iteration"] is not None  # mid-iteration: waiting for the answer
        assert c.raft_status(leader) is None  # held at the failpoint: it answers nothing
        c.kill_node(leader)
        c.rt.release_failpoint_everywhere(point)
        # a new leader's coordinator takes over and compacts further
        assert eventually(c.rt, lambda: (s := c.coordinator_status()) is not None
                          and s["term"] > before["term"], timeout=30)
        earliest = c.versions().earliest_version
        w.run(30)
        w.finish()
        for _ in range(3):
            c.add_column("T", (f"late{_}", "int"))
        assert eventually(c.rt, lambda: c.versions().earliest_version > earliest, timeout=30)
        assert eventually(c.rt, lambda: all(c.node_status(n) is not None for n in c.nodes),
                          timeout=30)
        outcomes = c.coordinator_status()["outcomes"]  # type: ignore[index]
        assert any(o["outcome"] == "compacted" for o in outcomes)
        assert_checks_pass(c)


@pytest.mark.parametrize("seed", seeds(4))
def test_a_long_transaction_holds_compaction_back_until_it_ends(seed: int,
                                                                 tmp_path: Path) -> None:
    with TablesCluster.start(nodes=3, backend="sim", data_dir=str(tmp_path), seed=seed,
                             lwm=LWM) as c:
        setup(c)
        rng = random.Random(seed)
        w = Workload(c, rng)
        w.run(5)
        long_tx = c.begin(rng.choice(c.nodes))
        long_tx.insert("T", {"k": 100, "v": 1})
        pinned = long_tx.catalog_version
        for i in range(5):
            c.add_column("T", (f"after{i}", "int"))
            w.run(5)
        # well past the watermark's reach: without the transaction all but the latest
        # version would go
        c.rt.sleep(4 * LWM.data_availability_ms / 1000)
        w.finish()
        c.poll()
        status = c.catalog_status()
        assert status["earliest_version"] <= pinned, status
        assert status["latest_version"] >= pinned + 5
        ended = status["coordinator"]["outcomes"]
        assert ended, "no compaction iteration ran"
        # its node shows it (or an older one whose cleanups are still applying) as the
        # oldest transaction it holds compaction back with
        held = status["nodes"][long_tx.node]["oldest_tx"]
        assert held is not None and held[1] <= long_tx.begin_ts, status["nodes"]
        # the compaction went as far as the transaction allows
        if pinned > 1:
            assert eventually(c.rt, lambda: c.versions().earliest_version == pinned - 1,
                              timeout=10)
        assert long_tx.commit()
        latest = c.versions().latest_version
        assert eventually(c.rt, lambda: c.versions().earliest_version >= latest - 1, timeout=30)
        assert c.get("T", (100,))["v"] == 1  # type: ignore[index]
        assert_checks_pass(c)


@pytest.mark.parametrize("seed", seeds(2))
def test_a_node_missing_from_the_topology_holds_compaction(seed: int, tmp_path: Path) -> None:
    with TablesCluster.start(nodes=3, backend="sim", data_dir=str(tmp_path), seed=seed,
                             lwm=LWM) as c:
        # three replicas: the partitions keep a majority (and publish their minimum tx
        # times) without the missing node, so only the topology check holds compaction
        c.create_zone("Z", partitions=4, replicas=3)
        c.create_table("T", "Z", [("k", "int", False), ("v", "int")], ["k"])
        w = Workload(c, random.Random(seed))
        w.run(10)
        w.finish()
        missing = random.Random(seed).choice(c.nodes)
        c.stop_node(missing)
        earliest = c.versions().earliest_version
        for i in range(4):
            c.add_column("T", (f"while_down{i}", "int"))
        c.rt.sleep(3 * LWM.data_availability_ms / 1000)
        assert c.versions().earliest_version <= earliest + 1
        outcomes = [o["outcome"] for o in c.coordinator_status()["outcomes"]]  # type: ignore[index]
        assert "nodes_missing" in outcomes
        c.restart_node(missing)
        latest = c.versions().latest_version
        assert eventually(c.rt, lambda: c.versions().earliest_version >= latest - 1, timeout=30)
        assert_checks_pass(c)


@pytest.mark.parametrize("seed", seeds(2))
def test_a_node_restarts_after_the_catalog_was_compacted_past_its_watermark(
        seed: int, tmp_path: Path) -> None:
    """Ignite's ItNodeRecoveryAfterCatalogTruncatedAboveStoredLwmTest: a node holding no
    partition is stopped, the catalog is compacted past the low watermark it stored,
    and on restart it raises its watermark to the earliest activation and serves."""
    with TablesCluster.start(nodes=3, backend="sim", data_dir=str(tmp_path), seed=seed,
                             lwm=LWM) as c:
        c.create_zone("Z", partitions=1, replicas=2)
        c.create_table("T", "Z", [("k", "int", False), ("v", "int")], ["k"])
        c.rt.sleep(LWM.data_availability_ms / 1000)
        idle = next(n for n in c.nodes if not c.node_status(n)["partitions"])  # type: ignore[index]
        c.stop_node(idle)
        stored = load_lwm(str(tmp_path / idle / "low_watermark.json"))
        assert stored is not None
        for i in range(4):
            tx = c.begin(next(n for n in c.nodes if n != idle))
            tx.insert("T", {"k": i, "v": i})
            assert tx.commit()
            c.add_column("T", (f"c{i}", "int"))
        latest = c.versions().latest_version
        assert eventually(c.rt, lambda: c.versions().earliest_version >= latest - 1, timeout=30)
        earliest_activation = c.versions().earliest_activation
        assert stored < earliest_activation  # compacted past what the node stored
        c.restart_node(idle)
        assert eventually(c.rt, lambda: c.node_status(idle) is not None, timeout=30)
        lwm = c.node_status(idle)["lwm"]  # type: ignore[index]
        assert lwm is not None and lwm >= earliest_activation
        assert [r["k"] for r in c.scan("T", node=idle)] == [0, 1, 2, 3]
        assert_checks_pass(c)


@pytest.mark.parametrize("seed", seeds(2))
def test_a_dropped_zone_is_compacted(seed: int, tmp_path: Path) -> None:
    """IGNITE-25867: a zone dropped with its table does not hold compaction back."""
    with TablesCluster.start(nodes=3, backend="sim", data_dir=str(tmp_path), seed=seed,
                             lwm=LWM) as c:
        setup(c)
        c.create_zone("Y", partitions=2, replicas=2)
        c.create_table("U", "Y", [("k", "int", False)], ["k"])
        tx = c.begin()
        tx.insert("U", {"k": 1})
        tx.insert("T", {"k": 1, "v": 1})
        assert tx.commit()
        y = c.catalog().zone_named("Y").id
        members = [raft_name(f"part-{y}-{p}", n) for p in range(2) for n in c.nodes]
        assert any(c.rt.whereis(m) is not None for m in members)
        dropped = c.ddl(ddl.DropTable("U"), ddl.DropZone("Y"))[0]
        # the dropped zone's partition members are stopped on every node
        assert eventually(c.rt, lambda: all(c.rt.whereis(m) is None for m in members),
                          timeout=10)
        c.add_column("T", ("after", "int"))
        c.add_column("T", ("after2", "int"))  # compaction keeps the version before latest
        assert eventually(c.rt, lambda: c.versions().earliest_version > dropped, timeout=30)
        with pytest.raises(TableNotFound):
            c.get("U", (1,))
        assert c.get("T", (1,)) == {"k": 1, "v": 1}
        assert all(not any(g.startswith("z1") for g in s["published"])
                   for s in (c.node_status(n) for n in c.nodes) if s)
        assert_checks_pass(c)


@pytest.mark.parametrize("seed", seeds(2))
def test_an_index_build_racing_compaction(seed: int, tmp_path: Path) -> None:
    with TablesCluster.start(nodes=3, backend="sim", data_dir=str(tmp_path), seed=seed,
                             lwm=LWM) as c:
        setup(c)
        w = Workload(c, random.Random(seed))
        w.run(15)
        w.finish()
        sink = c.rt.spawn(collector, node="ctl")
        point = BEFORE_AVAILABLE  # the driver holds the build at BUILDING
        c.rt.arm_failpoint_everywhere(point, "pause", notify=sink, tag="building")
        created = c.create_index("T_v", "T", ["v"])
        assert eventually(c.rt, lambda: any(isinstance(m, FailpointHit)
                                            for m in c.rt.call(sink, "get")), timeout=30)
        assert c.index("T_v").status.value == "building"
        for i in range(3):  # versions for the watermark to pass while it builds
            c.add_column("T", (f"during{i}", "int"))
            w.run(5)
        w.finish()
        c.rt.sleep(3 * LWM.data_availability_ms / 1000)
        c.poll()
        assert c.versions().earliest_version <= created
        outcomes = [o["outcome"] for o in c.coordinator_status()["outcomes"]]  # type: ignore[index]
        assert "index_building" in outcomes, outcomes
        assert c.index("T_v").status.value == "building"
        c.rt.release_failpoint_everywhere(point)
        c.wait_index_available("T_v")
        w.run(10)
        w.finish()
        c.add_column("T", ("after", "int"))
        c.add_column("T", ("after2", "int"))
        assert eventually(c.rt, lambda: c.versions().earliest_version > created, timeout=30)
        assert_checks_pass(c)


@pytest.mark.parametrize("seed", seeds(2))
def test_a_rebalance_in_progress_holds_compaction(seed: int, tmp_path: Path) -> None:
    with TablesCluster.start(nodes=3, backend="sim", data_dir=str(tmp_path), seed=seed,
                             lwm=LWM) as c:
        setup(c)  # two replicas
        w = Workload(c, random.Random(seed))
        w.run(15)
        w.finish()
        sink = c.rt.spawn(collector, node="ctl")
        c.rt.arm_failpoint_everywhere(BEFORE_RECORD, "pause", notify=sink, tag="moving")
        planned = c.alter_zone("Z", 3)
        assert eventually(c.rt, lambda: any(isinstance(m, FailpointHit)
                                            for m in c.rt.call(sink, "get")), timeout=30)
        assert c.rebalances()  # pending in the metastore
        for i in range(3):  # versions for the watermark to pass while it moves
            c.add_column("T", (f"during{i}", "int"))
            w.run(5)
        w.finish()
        c.rt.sleep(3 * LWM.data_availability_ms / 1000)
        c.poll()
        assert c.versions().earliest_version < planned
        assert c.coordinator_status()["outcomes"]  # type: ignore[index]
        c.rt.release_failpoint_everywhere(BEFORE_RECORD)
        c.wait_rebalanced("Z")
        assert all(len(n) == 3 for n in c.assignments().values())
        w.run(10)
        w.finish()
        c.add_column("T", ("after", "int"))
        c.add_column("T", ("after2", "int"))
        assert eventually(c.rt, lambda: c.versions().earliest_version > planned, timeout=30)
        pins = [p for p in c.recorder.history().pins if p.kind == "rebalance"]
        assert pins and all(p.version == planned for p in pins)
        assert_checks_pass(c)
