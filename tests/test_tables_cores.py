"""The smaller cores: minimum tx time (publish only after a flush), the node's active
transactions, rebalance steps and index builds, as tables."""

from __future__ import annotations

import pytest

from sediment.actors.catalog import catalog_log, ddl
from sediment.actors.catalog.descriptors import Catalog, Column, IndexStatus, ZonePartition
from sediment.actors.catalog.hlc import hts
from sediment.actors.tables import (
    active_txs,
    index_build,
    min_tx_time,
    mvcc,
    partition,
    partitioning,
)
from sediment.actors.tables import rebalance as rb
from sediment.actors.tables.index_build import Stage
from sediment.actors.tables.min_tx_time import MinTimeCollector, MinTxTimeState
from sediment.actors.tables.mvcc import PartitionRows, WriteIntent

G = ZonePartition(0, 0)
G2 = ZonePartition(0, 1)


# ---- minimum tx time --------------------------------------------------------------------


def test_min_tx_time_is_published_only_after_a_flush() -> None:
    s = partition.initial(G)
    c = min_tx_time.add_partition(MinTimeCollector(), G)
    s, _ = partition.apply(s, 1, partition.UpdateMinActiveTxTimeCmd(hts(50)))
    assert s.min_tx == MinTxTimeState(hts(50), None, 1)
    # A crash now would lose it: nothing published, the node's time stays undefined.
    assert c.times[G] is None
    s, published = partition.flush(s)
    assert published == hts(50)
    c = min_tx_time.record(c, G, published)
    assert c.times[G] == hts(50)
    s, published = partition.flush(s)
    assert published is None  # nothing new


@pytest.mark.parametrize(
    ("state", "index", "ts", "after"),
    [
        (MinTxTimeState(), 3, hts(9), MinTxTimeState(hts(9), None, 3)),
        (MinTxTimeState(hts(9), hts(9), 3), 3, hts(20), MinTxTimeState(hts(9), hts(9), 3)),
        (MinTxTimeState(hts(9), hts(9), 3), 2, hts(20), MinTxTimeState(hts(9), hts(9), 3)),
        (MinTxTimeState(hts(9), hts(9), 3), 4, hts(5), MinTxTimeState(hts(5), hts(9), 4)),
    ],
    ids=["first", "replayed", "older index", "stored as sent"],
)
def test_min_tx_time_apply(state: MinTxTimeState, index: int, ts: object,
                           after: MinTxTimeState) -> None:
    assert min_tx_time.apply_update(state, index, ts) == after  # type: ignore[arg-type]


def test_collector_only_grows_and_only_for_local_partitions() -> None:
    c = min_tx_time.add_partition(MinTimeCollector(), G)
    c = min_tx_time.record(c, G, hts(10))
    c = min_tx_time.record(c, G, hts(5))
    assert c.times[G] == hts(10)
    assert min_tx_time.record(c, G2, hts(1)) == c  # not held here
    c = min_tx_time.add_partition(c, G)  # restarted: undefined until it publishes again
    assert c.times[G] is None
    assert min_tx_time.remove_partition(c, G).times == {}


# ---- active transactions ----------------------------------------------------------------


def test_active_txs() -> None:
    a = active_txs.begin(active_txs.ActiveTxs(), "a", hts(10), 2)
    a = active_txs.begin(a, "b", hts(20), 3)
    assert active_txs.min_version(a) == 2 and active_txs.min_begin(a) == hts(10)
    assert active_txs.finished_before(a, 2) and not active_txs.finished_before(a, 3)
    assert active_txs.minimum_required_time(a, hts(99), lambda v: hts(v * 100)) == hts(200)
    a = active_txs.end(active_txs.end(a, "a"), "a")
    assert active_txs.finished_before(a, 3)
    with pytest.raises(ValueError):
        active_txs.begin(a, "b", hts(30), 3)


# ---- rebalance ----------------------------------------------------------------------------


def zone_catalog(replicas: int = 2) -> Catalog:
    log, _ = catalog_log.execute(catalog_log.initial(),
                                 (ddl.CreateZone("Z", partitions=2, replicas=replicas),),
                                 hts(100), 0)
    return log.latest


def test_rebalance_steps_in_order() -> None:
    cat = zone_catalog()
    r, effects = rb.start(G, frozenset({"a", "b"}), frozenset({"b", "c"}), cat)
    assert effects == [rb.AddLearner(G, "c")] and r.step is rb.Step.ADDING
    assert rb.min_required_time([r]) == cat.activation
    # Out-of-step events are ignored.
    assert rb.step(r, rb.Promoted()) == (r, [])
    assert rb.step(r, rb.LearnerAdded("zz")) == (r, [])
    r, effects = rb.step(r, rb.LearnerAdded("c"))
    assert effects == [rb.AwaitCatchUp(G, "c")] and r.step is rb.Step.CATCHING_UP
    r, effects = rb.step(r, rb.LearnerCaughtUp("c"))
    assert effects == [rb.PromoteLearners(G, frozenset({"c"}))]
    r, effects = rb.step(r, rb.Promoted())
    assert effects == [rb.RemoveReplica(G, "a")] and r.step is rb.Step.REMOVING
    r, effects = rb.step(r, rb.ReplicaRemoved("a"))
    assert effects == [rb.RecordStable(G, frozenset({"b", "c"}), cat.version)]
    assert r.step is rb.Step.DONE and rb.min_required_time([r]) is None
    assert rb.step(r, rb.Failed("late")) == (r, [])


def test_rebalance_shrink_only_and_failure() -> None:
    cat = zone_catalog()
    r, effects = rb.start(G, frozenset({"a", "b", "c"}), frozenset({"a"}), cat)
    assert r.step is rb.Step.REMOVING and effects == [rb.RemoveReplica(G, "b")]
    r, effects = rb.step(r, rb.ReplicaRemoved("b"))
    assert effects == [rb.RemoveReplica(G, "c")]
    r2, _ = rb.step(r, rb.Failed("node c gone"))
    assert r2.step is rb.Step.CANCELLED and not r2.active and r2.reason == "node c gone"
    with pytest.raises(ValueError):
        rb.start(G, frozenset({"a"}), frozenset(), cat)


def test_rebalance_plan_on_replica_change_and_node_leaving() -> None:
    cat = zone_catalog(replicas=2)
    nodes = ["n1", "n2", "n3"]
    stable = partitioning.assign(cat.zone_named("Z"), nodes)  # type: ignore[arg-type]
    assert rb.plan(cat, stable, nodes) == {}
    gone = rb.plan(cat, stable, ["n1", "n2"])
    assert all("n3" not in t for t in gone.values())
    assert set(gone) == {g for g, held in stable.items() if "n3" in held}
    wider = rb.plan(zone_catalog(replicas=3), stable, nodes)
    assert all(t == frozenset(nodes) for t in wider.values()) and set(wider) == {G, G2}


# ---- index build --------------------------------------------------------------------------


def test_index_build_lifecycle() -> None:
    k, v = Column("k", "int", False), Column("v", "str")
    log, _ = catalog_log.execute(catalog_log.initial(), (
        ddl.CreateZone("Z", partitions=2, replicas=1), ddl.CreateTable("T", "Z", (k, v), ("k",))),
        hts(100), 0)
    log, cat = catalog_log.execute(log, (ddl.CreateIndex("I", "T", ("v",)),), hts(200), 0)
    index = cat.index_named("I")
    assert index is not None
    b, effects = index_build.start(index, cat, ["n1", "n2"])
    assert effects == [index_build.AskTxsFinished(frozenset({"n1", "n2"}), cat.version)]
    assert index_build.pinned_version({index.id: b}) == cat.version
    nodes = ["n1", "n2"]
    b, effects = index_build.step(b, index_build.TxsFinished("n1", True), nodes)
    assert effects == []
    b, effects = index_build.step(b, index_build.TxsFinished("n2", False), nodes)
    assert effects == [] and b.stage is Stage.WAITING_TXS
    b, effects = index_build.step(b, index_build.TxsFinished("n2", True), nodes)
    assert effects == [index_build.ProposeDdl(ddl.StartBuildingIndex(index.id))]
    log, cat = catalog_log.execute(log, (ddl.StartBuildingIndex(index.id),), hts(300), 0)
    b, effects = index_build.step(b, index_build.CatalogChanged(cat))
    assert b.stage is Stage.BACKFILLING and b.building_version == cat.version
    assert effects == [index_build.Backfill(G, index.id, cat.version),
                       index_build.Backfill(G2, index.id, cat.version)]
    b, effects = index_build.step(b, index_build.PartitionBuilt(G, cat.version - 1))
    assert b.built == frozenset()  # built at another version: not counted
    b, _ = index_build.step(b, index_build.PartitionBuilt(G, cat.version))
    b, effects = index_build.step(b, index_build.PartitionBuilt(G2, cat.version))
    assert effects == [index_build.ProposeDdl(ddl.MakeIndexAvailable(index.id))]
    log, cat = catalog_log.execute(log, (ddl.MakeIndexAvailable(index.id),), hts(400), 0)
    assert cat.index(index.id).status is IndexStatus.AVAILABLE  # type: ignore[union-attr]
    b, _ = index_build.step(b, index_build.CatalogChanged(cat))
    assert b.stage is Stage.DONE and index_build.pinned_version({index.id: b}) is None


def test_index_build_cancelled_by_drop() -> None:
    k = Column("k", "int", False)
    log, _ = catalog_log.execute(catalog_log.initial(), (
        ddl.CreateZone("Z", 1, 1), ddl.CreateTable("T", "Z", (k,), ("k",)),
        ddl.CreateIndex("I", "T", ("k",))), hts(100), 0)
    index = log.latest.index_named("I")
    assert index is not None
    b, _ = index_build.start(index, log.latest, ["n1"])
    log, cat = catalog_log.execute(log, (ddl.DropTable("T"),), hts(200), 0)
    b, _ = index_build.step(b, index_build.CatalogChanged(cat))
    assert b.stage is Stage.CANCELLED


def test_backfill_entries() -> None:
    rows = PartitionRows()
    for k, v, commit in ((1, "b", 10), (2, "a", 20), (3, None, 30)):
        rows = mvcc.write_intent(rows, (5, (k,)), WriteIntent(f"t{k}", G, hts(1), 1, 1,
                                                                  {"k": k, "v": v}))
        rows = mvcc.finalize(rows, f"t{k}", hts(commit))
    assert index_build.index_entries(rows, 5, ("v",), hts(20)) == [(("a",), (2,)), (("b",), (1,))]
