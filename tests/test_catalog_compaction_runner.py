"""Ignite's CatalogCompactionRunnerSelfTest, case by case, against the pure coordinator
core (`compaction_coordinator`), its rules and the node side (`compaction_participant`),
driven by `catalog_helpers.Driver`. Test names are Ignite's, so the mapping is plain;
docs/catalog.md lists the cases that do not apply. A few of Ignite's integration tests
(ItCatalogCompactionTest) follow as pure analogues."""

from __future__ import annotations

from catalog_helpers import (
    DEFAULT_PARTITIONS,
    NODES,
    Driver,
    Node,
    create_table,
    execute,
    nodes_at,
    ok,
)

from sediment.actors.catalog import catalog_log, ddl
from sediment.actors.catalog import compaction_coordinator as cc
from sediment.actors.catalog import compaction_participant as participant
from sediment.actors.catalog import compaction_rules as rules
from sediment.actors.catalog.catalog_log import CatalogLog
from sediment.actors.catalog.compaction_messages import NOT_AVAILABLE
from sediment.actors.catalog.descriptors import Column, ZonePartition
from sediment.actors.catalog.hlc import HybridTimestamp, hts
from sediment.actors.tables import active_txs

NOW = hts(10**9)


def three_versions() -> tuple[CatalogLog, list[int]]:
    """Ignite's setup: a table, then three more versions catalog1..3."""
    log = ok(create_table(catalog_log.initial(), "TEST"))
    versions = []
    for _ in range(3):
        log = ok(log)
        versions.append(log.latest_version)
    return log, versions


def driver_at(log: CatalogLog, times: dict[str, int], topology: tuple[str, ...] = NODES,
              **kw: object) -> Driver:
    stamps = {n: catalog_log.catalog(log, v).activation for n, v in times.items()}
    nodes = nodes_at(stamps, log.latest, NOW, names=stamps)
    return Driver(log, nodes, frozenset(topology), **kw)  # type: ignore[arg-type]


def test_routineSucceedOnCoordinator() -> None:
    log, (v1, v2, v3) = three_versions()
    d = driver_at(log, {"node3": v1, "node2": v2, "node1": v3})
    d.coordinator("node1")  # no low watermark yet: nothing starts
    assert d.ended == [] and d.requested == []
    d.lwm_changed(NOW)
    assert d.outcome == "compacted"
    assert d.earliest == v1 - 1
    assert sorted(d.requested) == ["node2", "node3"]  # never itself
    # Nothing changes when the catalog is already compacted for that time.
    d.lwm_changed(NOW.tick())
    assert d.outcome == "nothing_to_compact" and d.earliest == v1 - 1
    # Nothing changes when the version before the earliest does not exist.
    earliest = catalog_log.catalog(d.log, d.earliest).version
    d2 = driver_at(d.log, dict.fromkeys(NODES, earliest))
    d2.coordinator("node1")
    d2.lwm_changed(NOW)
    assert d2.outcome == "nothing_to_compact" and d2.earliest == v1 - 1


def test_mustTriggerWhenRequiredPartitionsAreSomeSubSetOfAvailablePartitions() -> None:
    log, (v1, v2, v3) = three_versions()
    d = driver_at(log, {"node3": v1, "node2": v2, "node1": v3})
    zone = log.latest.zone_named("Z")
    assert zone is not None
    for p in range(DEFAULT_PARTITIONS + 1, DEFAULT_PARTITIONS + 11):  # extra partitions
        d.nodes["node2"].partition_times[ZonePartition(zone.id, p)] = NOW
    d.coordinator("node1")
    d.lwm_changed(NOW)
    assert d.outcome == "compacted" and d.earliest == v1 - 1


def test_mustTriggerWhenAvailablePartitionsHaveMoreTablesThenRequired() -> None:
    log, (v1, v2, v3) = three_versions()
    d = driver_at(log, {"node3": v1, "node2": v2, "node1": v3})
    for p in (3, 17, 99):  # a zone the catalog does not know
        d.nodes["node2"].partition_times[ZonePartition(10_000_000, p)] = NOW
    d.coordinator("node1")
    d.lwm_changed(NOW)
    assert d.outcome == "compacted" and d.earliest == v1 - 1


def test_mustTriggerWheLogicalTopologyHasMoreNodesThenRequired() -> None:
    log, (v1, v2, v3) = three_versions()
    d = driver_at(log, {"node3": v1, "node2": v2, "node1": v3, "node4": v3},
                  topology=(*NODES, "node4"))
    d.coordinator("node1")
    d.lwm_changed(NOW)
    assert d.outcome == "compacted" and d.earliest == v1 - 1
    assert sorted(d.requested) == ["node2", "node3", "node4"]


def test_mustNotStartOnNonCoordinator() -> None:
    log = ok(catalog_log.initial())
    d = driver_at(log, dict.fromkeys(NODES, log.latest_version))
    d.coordinator("node3")
    d.lwm_changed(NOW)
    assert d.state.iteration is None and d.ended == [] and d.requested == []
    # Changing the coordinator to this node starts an iteration.
    d.coordinator("node1")
    assert d.ended and d.requested


def test_mustNotProduceErrorsWhenHistoryIsMissing() -> None:
    log = ok(ok(catalog_log.initial()))
    log, _ = catalog_log.save_snapshot(log, 1)
    before = log.snapshot.activation.value - 1
    nodes = nodes_at(dict.fromkeys(NODES, HybridTimestamp(before)), log.latest, NOW)
    d = Driver(log, nodes, frozenset(NODES))
    d.coordinator("node1")
    d.lwm_changed(NOW)
    assert d.outcome == "nothing_to_compact" and d.earliest == 1 and d.proposed == []


def test_mustNotTriggerCompactionWhenLowWaterMarkIsNotAvailable() -> None:
    log, _ = three_versions()
    d = driver_at(log, dict.fromkeys(NODES, log.latest_version))
    for name in ("node2", "node3"):
        d.nodes[name].lwm = None  # the other nodes have no low watermark yet
    d.coordinator("node1")
    d.lwm_changed(NOW)
    assert d.outcome == "nothing_to_compact" and d.earliest == 0
    # The minimum tx time is still propagated to the replicas.
    assert sorted(d.requested) == ["node2", "node3"] and len(d.propagated) == 1


def test_mustNotTriggerCompactionWhenIndexBuildingIsTakingPlace() -> None:
    log = create_table(catalog_log.initial(), "T1")
    log = execute(log, ddl.CreateIndex("T1_VAL_IDX", "T1", ("val",)))
    index = log.latest.index_named("T1_VAL_IDX")
    assert index is not None
    v1 = log.latest_version
    d = driver_at(log, dict.fromkeys(NODES, v1))
    d.coordinator("node1")

    def advance() -> None:
        latest = d.log.latest
        for node in d.nodes.values():
            node.partition_times = {g: latest.activation for g in latest.partitions()}

    # First compaction: the version before the index was created.
    d.lwm_changed(NOW)
    assert d.outcome == "compacted"
    first = d.earliest
    assert first == v1 - 1
    # Start building; the nodes still report the REGISTERED version: same target.
    d.log = execute(d.log, ddl.StartBuildingIndex(index.id))
    d.lwm_changed(NOW.tick())
    assert d.earliest == first
    # The nodes observe BUILDING: the target version has the index REGISTERED: abort.
    advance()
    d.lwm_changed(NOW.tick().tick())
    assert d.outcome == "index_building" and d.earliest == first
    # Available, then a dummy version: compaction goes ahead.
    d.log = ok(execute(d.log, ddl.MakeIndexAvailable(index.id)))
    advance()
    d.lwm_changed(NOW.add_physical(1))
    assert d.outcome == "compacted" and d.earliest == d.log.latest_version - 1


def test_mustNotTriggerCompactionWhenLocalTimeIsNotAvailable() -> None:
    log, _ = three_versions()
    d = driver_at(log, dict.fromkeys(NODES, log.latest_version))
    zone = log.latest.zone_named("Z")
    assert zone is not None
    d.nodes["node1"].partition_times[ZonePartition(zone.id, 0)] = None  # not published yet
    assert participant.local_min_time(NOW, d.nodes["node1"].partition_times,
                                      None).time == NOT_AVAILABLE
    d.coordinator("node1")
    d.lwm_changed(NOW)
    assert d.outcome == "nothing_to_compact" and d.earliest == 0
    assert sorted(d.requested) == ["node2", "node3"] and len(d.propagated) == 1


def _missing(partitions: list[int]) -> None:
    log = ok(ok(create_table(catalog_log.initial(), "TEST")))
    v1 = log.latest_version
    d = driver_at(log, dict.fromkeys(NODES, v1))
    zone = log.latest.zone_named("Z")
    assert zone is not None
    saved = dict(d.nodes["node2"].partition_times)
    for p in partitions:
        del d.nodes["node2"].partition_times[ZonePartition(zone.id, p)]
    d.coordinator("node1")
    d.lwm_changed(NOW)
    assert d.outcome == "partitions_missing" and d.earliest == 0 and d.proposed == []
    assert sorted(d.requested) == ["node2", "node3"]
    # All partitions available again: compaction takes place.
    d.nodes["node2"].partition_times = saved
    d.lwm_changed(NOW.tick())
    assert d.outcome == "compacted" and d.earliest == v1 - 1


def test_mustNotStartWhenSomePartitionsOnAreMissingAfterValidation() -> None:
    _missing([7])


def test_mustNotStartWhenPartitionsOfEntireTableAreMissing() -> None:
    _missing(list(range(DEFAULT_PARTITIONS)))


def test_mustNotPerformWhenAssignmentNodeIsMissing() -> None:
    log = ok(create_table(create_table(create_table(ok(catalog_log.initial()), "test1"),
                                       "test2"), "test3"))
    v = log.latest_version
    # node3 holds partitions (assignments) but is not in the logical topology.
    d = driver_at(log, dict.fromkeys(("node1", "node2"), v), topology=("node1", "node2"))
    d.coordinator("node1")
    d.lwm_changed(NOW)
    assert d.outcome == "nodes_missing" and d.earliest == 0
    # The topology grows while the iteration waits for answers: the iteration keeps the
    # topology it started with, so node3's minimum is unknown and it still aborts.
    d2 = driver_at(log, dict.fromkeys(NODES, v), topology=("node1", "node2"))
    d2.nodes["node2"].held = True
    d2.coordinator("node1")
    d2.lwm_changed(NOW)
    d2.send(cc.TopologyChanged(frozenset(NODES)))
    d2.release()
    assert d2.outcome == "nodes_missing" and d2.earliest == 0 and "node3" not in d2.requested
    # Everyone in the topology: compaction.
    d3 = driver_at(log, dict.fromkeys(NODES, v))
    d3.coordinator("node1")
    d3.lwm_changed(NOW)
    assert d3.outcome == "compacted" and d3.earliest == v - 1


def test_messageTimeoutDoesNotProduceAdditionalExceptions() -> None:
    log, _ = three_versions()
    d = driver_at(log, dict.fromkeys(NODES, log.latest_version))
    d.nodes["node2"].fail = "Expected exception"
    d.coordinator("node1")
    d.lwm_changed(NOW)
    assert [(e.outcome, e.detail) for e in d.ended] == [("failed", "node2: Expected exception")]
    assert d.propagated == [] and d.proposed == [] and d.state.iteration is None
    # A node that never answers: the answer timeout (Ignite's 10 s) ends the iteration.
    d2 = driver_at(log, dict.fromkeys(NODES, log.latest_version))
    d2.nodes["node3"].silent = True
    d2.coordinator("node1")
    d2.lwm_changed(NOW)
    assert d2.ended == [] and d2.timers[0].at_ms == 10_000
    d2.fire_timers()
    assert d2.outcome == "timeout" and "node3" in d2.ended[-1].detail
    assert d2.state.iteration is None and d2.earliest == 0


def test_compactionAbortedIfAssignmentsNotAvailableForTable() -> None:
    log = ok(create_table(ok(catalog_log.initial()), "test"))
    d = driver_at(log, dict.fromkeys(NODES, log.latest_version))
    d.view_error = "ArithmeticException"  # the placement driver's lookup failed
    d.coordinator("node1")
    d.lwm_changed(NOW)
    assert d.outcome == "failed" and d.earliest == 0
    d.view_error = ""
    d.assignments = {}  # no assignment for a live table's partitions
    d.lwm_changed(NOW.tick())
    assert d.outcome == "assignments_unavailable" and d.earliest == 0


def test_shouldNotStartIfAlreadyInProgress() -> None:
    log = ok(catalog_log.initial())
    d = driver_at(log, dict.fromkeys(NODES, log.latest_version))
    d.nodes["node2"].held = True
    d.coordinator("node1")
    d.lwm_changed(NOW)
    running = d.state.iteration
    assert running is not None and running.phase == "collecting"
    d.lwm_changed(NOW.tick())
    d.coordinator("node1")
    assert d.skipped == [running.id, running.id] and d.state.iteration == running
    d.release()
    assert d.state.iteration is None and [e.iteration for e in d.ended] == [running.id]


def _three_zone_catalog() -> CatalogLog:
    log = ok(catalog_log.initial())
    for i in (1, 2, 3):
        log = create_table(log, f"test{i}", zone=f"Z{i}")
    return ok(log)


def test_minTxTimePropagation() -> None:
    log = _three_zone_catalog()
    primary = {g: NODES[g.partition % 3] for g in log.latest.partitions()
               if log.latest.zone(g.zone_id).partitions == DEFAULT_PARTITIONS}  # type: ignore[union-attr]
    versions = [log.latest]
    counts = {n: len(participant.replicas_to_update(versions, n, primary)) for n in NODES}
    assert counts == {"node1": 3 * 9, "node2": 3 * 8, "node3": 3 * 8}


def test_minTxTimePropagationAppliesPartiallyIfPrimaryNotSelected() -> None:
    log = _three_zone_catalog()
    primary: dict[ZonePartition, str | None] = {
        g: (None if g.partition == 5 else "node1") for g in log.latest.partitions()
        if log.latest.zone(g.zone_id).partitions == DEFAULT_PARTITIONS}  # type: ignore[union-attr]
    got = participant.replicas_to_update([log.latest], "node1", primary)
    assert len(got) == 3 * (DEFAULT_PARTITIONS - 1)
    assert all(g.partition != 5 for g in got)


def test_minTxTimePropagation_covers_every_version_between_the_time_and_now() -> None:
    """Ignite's collectZonesWithPartitionsBetween: a zone dropped after the tx time still
    gets the time (its partitions may still be replayed)."""
    log = create_table(ok(catalog_log.initial()), "A", zone="Z1")
    old = log.latest
    log = execute(log, ddl.CreateZone("Z2", partitions=2, replicas=1))
    log = execute(log, ddl.DropTable("A"), ddl.DropZone("Z1"))
    primary = dict.fromkeys([*old.partitions(), *log.latest.partitions()], "node1")
    between = [catalog_log.catalog(log, v) for v in range(old.version, log.latest_version + 1)]
    got = participant.replicas_to_update(between, "node1", primary)
    assert {g.zone_id for g in got} == {z.id for z in old.zones.values()} | {
        z.id for z in log.latest.zones.values()}


def test_txMinimumRequiredTime() -> None:
    log = catalog_log.initial()
    txs = active_txs.ActiveTxs()
    begun: list[tuple[str, int]] = []
    init_version = log.latest_version
    clock = 0
    for c in range(5):
        log = ok(log)
        for i in range(100):
            clock += 1
            ts = log.latest.activation.add_physical(clock)
            version = catalog_log.active_version(log, ts)
            txs = active_txs.begin(txs, f"tx{c}.{i}", ts, version)
            begun.append((f"tx{c}.{i}", version))

    def activation(v: int) -> object:
        return catalog_log.catalog(log, v).activation

    expected = init_version
    for n, (tx_id, _) in enumerate(begun):
        if n % 100 == 0:
            expected += 1
        assert active_txs.minimum_required_time(txs, NOW, activation) == activation(expected)  # type: ignore[arg-type]
        txs = active_txs.end(txs, tx_id)
    # No active transactions: the current time.
    assert active_txs.minimum_required_time(txs, NOW, activation) == NOW  # type: ignore[arg-type]


def test_rebalancePreventsCompaction() -> None:
    log = ok(create_table(catalog_log.initial(), "T1"))
    assert (log.earliest_version, log.latest_version) == (0, 2)
    d = driver_at(log, dict.fromkeys(NODES, log.latest_version))
    for node in d.nodes.values():
        node.partition_times = {g: NOW for g in log.latest.partitions()}
        node.rebalance_min = hts(0, 1)  # a rebalance pinned to the very first version
    d.coordinator("node1")
    d.lwm_changed(NOW)
    assert d.outcome == "nothing_to_compact" and d.earliest == 0
    for node in d.nodes.values():
        node.rebalance_min = NOW  # the rebalance does not hold anything back
    d.lwm_changed(NOW.tick())
    assert d.outcome == "compacted" and d.earliest == d.log.latest_version - 1


def test_timeToReplicasPropagationExceptionSuppressedWhenCompactionFailed() -> None:
    """Analogue: a compaction that cannot proceed still propagates the tx time, and a
    refused snapshot command ends the iteration as failed (one outcome, no more)."""
    log, (v1, _, _) = three_versions()
    d = driver_at(log, dict.fromkeys(NODES, v1))
    d.assignments = {}
    d.coordinator("node1")
    d.lwm_changed(NOW)
    assert d.outcome == "assignments_unavailable" and len(d.propagated) == 1
    assert len(d.ended) == 1


# ---- Ignite's integration tests, as pure analogues ----------------------------------


def test_testGlobalMinimumTxRequiredTime() -> None:
    """ItCatalogCompactionTest: the coordinator's tx minimum is the activation of the
    oldest catalog version an active RW transaction runs under, across nodes; with no
    active transaction, the minimum of the nodes' current times."""
    log = ok(catalog_log.initial())
    c1 = log.latest
    log = create_table(log, "a")
    c2 = log.latest
    log = execute(log, ddl.AddColumn("a", Column("b", "int")))
    c3 = log.latest

    def run(tx_mins: dict[str, object]) -> object:
        nodes = {n: Node(n, lwm=NOW, active_tx_min=t) for n, t in tx_mins.items()}  # type: ignore[arg-type]
        d = Driver(log, nodes, frozenset(NODES))
        d.coordinator("node1")
        d.lwm_changed(NOW)
        return d.propagated[-1]

    assert run({"node1": c1.activation, "node2": c2.activation, "node3": c3.activation}) \
        == c1.activation
    assert run({"node1": NOW, "node2": c2.activation, "node3": c3.activation}) == c2.activation
    assert run({"node1": NOW, "node2": NOW.tick(), "node3": NOW.add_physical(5)}) == NOW


def test_testCompactionRun() -> None:
    """ItCatalogCompactionTest: each change is followed by a compaction to the version
    before the latest, also after a table is dropped."""
    log = create_table(catalog_log.initial(), "a")
    log = execute(log, ddl.AddColumn("a", Column("b", "int")))
    for change in (None, ddl.AddColumn("a", Column("c", "int")), ddl.DropTable("a")):
        if change is not None:
            log = execute(log, change)
        d = driver_at(log, dict.fromkeys(NODES, log.latest_version))
        d.coordinator("node1")
        d.lwm_changed(NOW)
        assert d.earliest == log.latest_version - 1
        log = d.log


def test_droppedZoneCompacted() -> None:
    """ItCatalogCompactionTest / IGNITE-25867: a zone dropped with its only table has no
    assignments any more. Compacting to a version that still has both must skip the
    dropped table (its drop is at or below the low watermark), not fail on the missing
    assignments forever."""
    log = ok(catalog_log.initial())
    log = create_table(log, "table1", zone="zone1", partitions=10)
    with_table = log.latest_version
    log = execute(log, ddl.DropTable("table1"))
    table_dropped = log.latest.activation
    log = execute(log, ddl.DropZone("zone1"))
    log = ok(log)
    latest = log.latest
    nodes = nodes_at(dict.fromkeys(NODES, latest.activation), latest, table_dropped)
    d = Driver(log, nodes, frozenset(NODES),
               assignments={g: frozenset(NODES) for g in latest.partitions()})
    assert all(g.zone_id != 1 for g in d.assignments or {})  # zone1 has none
    d.coordinator("node1")
    d.send(cc.LowWatermarkChanged(table_dropped, 0))
    assert d.outcome == "compacted" and d.earliest == with_table
    # Later, with the low watermark past everything, up to the version before the latest.
    for node in d.nodes.values():
        node.lwm = NOW
    d.lwm_changed(NOW)
    assert d.outcome == "compacted" and d.earliest == latest.version - 1


def test_dropped_table_still_in_use_at_the_low_watermark_aborts() -> None:
    """validatePartitions' deleted-table rule: a table gone from the current catalog that
    existed at the coordinator's low watermark may still be read: abort."""
    log = create_table(ok(catalog_log.initial()), "t", zone="z", partitions=2)
    with_table = log.latest
    log = ok(execute(log, ddl.DropTable("t")))
    view = rules.CompactionView(log, NOW, {})
    reported = dict.fromkeys(NODES, frozenset(log.latest.partitions()))
    min_required = catalog_log.catalog(log, with_table.version + 1).activation
    decision = rules.decide(view, min_required, with_table.activation, reported, frozenset(NODES))
    assert decision == rules.Abort("dropped_table_in_use",
                                   f"table #{with_table.table_named('t').id} dropped above "  # type: ignore[union-attr]
                                   f"the low watermark {with_table.activation}")
    later = rules.decide(view, min_required, min_required, reported, frozenset(NODES))
    assert later == rules.Compact(with_table.version)
