"""A seeded, pure simulation of the whole catalog-compaction design: nodes with hybrid
clocks, DDL through the catalog log, transactions across partitions (the coordinator
core, the partition machine logic, intents resolved at the commit partition, coordinator
crashes), read-only reads, low watermarks, index builds, rebalances, and the compaction
coordinator with its participants. Messages sit in a pool delivered in random order; no
processes, no clock, no I/O: a seed replays exactly. It records a `CatalogHistory` for
the checkers.

The low watermark is the cluster's one value, as the table nodes keep it
(`catalog/cluster_lwm.py`, `tables/shell/node_compaction.py`): on each node's update interval
the node whose metastore member leads proposes `AdvanceLowWatermark` (a pool message:
applied to the metastore's committed value only if it moves it forward, answered late
or lost with a crash), every node reads the committed value and adopts it into its own
`low_watermark` core, and a restarted node starts from max(its stored value, the
committed one). `unsafe="own_lwm"` makes each node tick its own instead, as before.

What the shells will have to do is done here by hand, and the rules they must keep are
the ones marked RULE below (docs/catalog.md repeats them).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from sediment.actors.catalog import catalog_log, cluster_lwm, ddl, hlc
from sediment.actors.catalog import compaction_coordinator as cc
from sediment.actors.catalog import compaction_participant as participant
from sediment.actors.catalog import low_watermark as lw
from sediment.actors.catalog.catalog_log import CatalogLog
from sediment.actors.catalog.compaction_rules import CompactionView
from sediment.actors.catalog.descriptors import Catalog, Column, ZonePartition
from sediment.actors.catalog.errors import CatalogError
from sediment.actors.catalog.hlc import ClockState, HybridTimestamp
from sediment.actors.tables import (
    active_txs,
    index_build,
    min_tx_time,
    mvcc,
    partition,
    partitioning,
    tx_state,
)
from sediment.actors.tables import rebalance as rb
from sediment.actors.tables import transactions as txn
from sediment.actors.tables.mvcc import IntentFound
from sediment.actors.tables.recorded_history import (
    CatalogCompacted,
    CatalogHistory,
    Pin,
    ReadRecord,
    TxRecord,
    VersionActivated,
    replay_pins,
)

NODES = ("n1", "n2", "n3")
LWM = lw.LowWatermarkConfig(data_availability_ms=3_000, update_interval_ms=400,
                            max_clock_skew_ms=20)
K = Column("k", "int", nullable=False)


@dataclass
class Node:
    name: str
    skew: int
    up: bool = True
    incarnation: int = 0
    clock: ClockState = field(default_factory=ClockState)
    txs: active_txs.ActiveTxs = field(default_factory=active_txs.ActiveTxs)
    collector: min_tx_time.MinTimeCollector = field(default_factory=min_tx_time.MinTimeCollector)
    lwm: lw.LowWatermarkState = field(default_factory=lambda: lw.init(LWM))
    stored_lwm: HybridTimestamp | None = None
    clwm: cluster_lwm.ClusterLwmState = field(default_factory=lambda: cluster_lwm.init(LWM))
    coord: cc.CoordinatorState = field(init=False)
    next_tick: int = 0

    def __post_init__(self) -> None:
        self.coord = cc.init(cc.CoordinatorConfig(self.name, answer_timeout_ms=2_000))


@dataclass
class Tx:
    core: txn.RwTx
    incarnation: int
    start: float
    writes: dict[tuple[int, tuple[Any, ...]], dict[str, Any] | None] = field(default_factory=dict)
    cleanups: int = 0
    ended: bool = False
    end: float | None = None
    outcome: str = "unknown"
    commit_ts: HybridTimestamp | None = None


class World:
    def __init__(self, seed: int, unsafe: str = "") -> None:
        self.rng = random.Random(seed)
        self.unsafe = unsafe
        self.now_ms = 1_000
        self.step_no = 0
        self.log: CatalogLog = catalog_log.initial()
        self.nodes = {n: Node(n, self.rng.randint(-30, 30)) for n in NODES}
        self.parts: dict[ZonePartition, partition.PartitionState] = {}
        self.assignments: dict[ZonePartition, frozenset[str]] = {}
        self.leader = "n1"
        self.committed_lwm: HybridTimestamp | None = None  # the metastore's (cluster_lwm)
        self.lwm_committed: list[HybridTimestamp] = []  # each value it took, in order
        # (node, the value it announced, the committed value then)
        self.lwm_seen: list[tuple[str, HybridTimestamp, HybridTimestamp | None]] = []
        self.txs: dict[str, Tx] = {}
        self.pool: list[tuple[Any, ...]] = []
        self.builds: dict[int, tuple[index_build.IndexBuild, float, str]] = {}
        self.rebalances: dict[ZonePartition, tuple[rb.Rebalance, float]] = {}
        self.versions: list[VersionActivated] = [VersionActivated(0, hlc.MIN)]
        self.compactions: list[CatalogCompacted] = []
        self.pins: list[Pin] = []
        self.reads: list[ReadRecord] = []
        self.replay: list[tuple[float, str, Any, int]] = []
        self.outcomes: list[str] = []
        self.tx_seq = 0
        for node in self.nodes.values():
            self._coord(node, cc.TopologyChanged(frozenset(NODES)))
            self._coord(node, cc.CoordinatorChanged(self.leader, self.now_ms))
            self._lwm(node, lw.Start(self.now_ms, None, hlc.MIN))
        self.ddl(ddl.CreateZone("Z", partitions=4, replicas=2))
        self.ddl(ddl.CreateTable("T0", "Z", (K, Column("v", "int")), ("k",)))

    # ---- time -------------------------------------------------------------------------

    @property
    def at(self) -> float:
        return float(self.step_no)

    def hnow(self, node: Node) -> HybridTimestamp:
        node.clock, ts = hlc.now(node.clock, self.now_ms + node.skew)
        return ts

    def up(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.up]

    # ---- catalog ----------------------------------------------------------------------

    def ddl(self, *commands: ddl.DdlCommand) -> Catalog | None:
        leader = self.nodes[self.leader]
        try:
            self.log, cat = catalog_log.execute(self.log, commands, self.hnow(leader), 50)
        except CatalogError:
            return None
        self.versions.append(VersionActivated(cat.version, cat.activation))
        for zone in cat.zones.values():
            placed = partitioning.assign(zone, NODES)
            for group, nodes in placed.items():
                if group not in self.parts:
                    self.parts[group] = partition.initial(group)
                    self.assignments[group] = nodes
                    for name in nodes:
                        n = self.nodes[name]
                        n.collector = min_tx_time.add_partition(n.collector, group)
        for index_id, (b, _, _) in list(self.builds.items()):
            self._build(index_id, index_build.step(b, index_build.CatalogChanged(cat)))
        return cat

    def primary(self, group: ZonePartition) -> str | None:
        return next((n for n in sorted(self.assignments.get(group, ())) if self.nodes[n].up),
                    None)

    # ---- partitions ---------------------------------------------------------------------

    def apply(self, group: ZonePartition, command: Any, version: int | None) -> Any:
        # RULE: a command written under a compacted catalog version is refused (the
        # version's schema is gone; only a dead coordinator's late message can carry it).
        if version is not None and version < self.log.earliest_version:
            return partition.Failed(CatalogError(f"version {version} compacted"))
        s = self.parts[group]
        self.parts[group], result = partition.apply(s, s.applied + 1, command)
        if version is not None and not isinstance(result, partition.Failed):
            self.replay.append((self.at, str(group), "apply", version))
        return result

    def flush(self, group: ZonePartition) -> None:
        self.parts[group], published = partition.flush(self.parts[group])
        self.replay.append((self.at, str(group), "flush", 0))
        if published is not None:
            for name in self.assignments[group]:
                n = self.nodes[name]
                if n.up:
                    n.collector = min_tx_time.record(n.collector, group, published)

    # ---- transactions -------------------------------------------------------------------

    def begin(self, node: Node) -> None:
        self.tx_seq += 1
        ts = self.hnow(node)
        cat = catalog_log.catalog_at(self.log, ts)
        tx_id = f"tx{self.tx_seq}"
        node.txs = active_txs.begin(node.txs, tx_id, ts, cat.version)
        self.txs[tx_id] = Tx(txn.begin(tx_id, node.name, ts, cat), node.incarnation, self.at)

    def live(self, tx: Tx) -> bool:
        node = self.nodes[tx.core.node]
        return node.up and node.incarnation == tx.incarnation and not tx.ended

    def tx_write(self, tx: Tx) -> None:
        cat = catalog_log.catalog(self.log, tx.core.catalog_version)
        tables = sorted(cat.tables.values(), key=lambda t: t.id)
        if not tables:
            return
        table = self.rng.choice(tables)
        key = (self.rng.randint(0, 5),)
        row = None if self.rng.random() < 0.1 else {"k": key[0]}
        if row is not None and table.column("v") is not None:
            row["v"] = self.rng.randint(0, 99)
        try:
            if row is None:
                tx.core, effects = txn.delete(tx.core, cat, table.name, key)
            else:
                tx.core, effects = txn.write(tx.core, cat, table.name, row)
        except CatalogError:
            return
        tx.writes[(table.id, key)] = row
        self.effects(tx, effects)

    def effects(self, tx: Tx, effects: list[txn.Effect]) -> None:
        for e in effects:
            if isinstance(e, txn.TxEnded):
                tx.outcome = "committed" if e.committed else "aborted"
                tx.commit_ts = e.commit_ts
                self.outcomes.append(tx.outcome)
                self.end_if_clean(tx)
            else:
                tx.cleanups += isinstance(e, txn.SendCleanup)
                self.pool.append(("tx", tx.core.id, e))

    def end_if_clean(self, tx: Tx) -> None:
        # RULE: the node forgets an RW transaction only after all its cleanups applied.
        if tx.outcome != "unknown" and tx.cleanups == 0 and not tx.ended:
            tx.ended, tx.end = True, self.at
            node = self.nodes[tx.core.node]
            if node.incarnation == tx.incarnation:
                node.txs = active_txs.end(node.txs, tx.core.id)

    def deliver_tx(self, tx_id: str, e: txn.Effect) -> None:
        tx = self.txs[tx_id]
        alive = self.live(tx) or (tx.outcome != "unknown" and self.nodes[tx.core.node].up
                                  and self.nodes[tx.core.node].incarnation == tx.incarnation)
        if isinstance(e, txn.SendWrite):
            r = self.apply(e.group, e.command, e.command.catalog_version)
            if alive:
                error = r.error if isinstance(r, partition.Failed) else None
                tx.core, effects = txn.on_write_result(tx.core, error)
                self.effects(tx, effects)
        elif isinstance(e, txn.SendFinish):
            r = self.apply(e.group, e.command, e.command.catalog_version)
            if alive and isinstance(r, tx_state.FinishOutcome):
                tx.core, effects = txn.on_finish_result(tx.core, r)
                self.effects(tx, effects)
        elif isinstance(e, txn.SendCleanup):
            self.apply(e.group, e.command, e.command.catalog_version)
            tx.cleanups -= 1
            if alive:
                self.end_if_clean(tx)

    # ---- read-only reads ----------------------------------------------------------------

    def ro_read(self, node: Node) -> None:
        # RULE (safe time): a read at ts waits until no live transaction can still write
        # at or below ts: here ts is chosen below every live transaction's begin time.
        upper = min([hlc.current(n.clock, self.now_ms + n.skew) for n in self.up()]
                    + [t.core.begin_ts for t in self.txs.values() if self.live(t)]).value - 1
        floor = max([n.lwm.lwm.value for n in self.nodes.values() if n.lwm.lwm] + [0])
        lower = max(floor, self.log.snapshot.activation.value)
        if lower > upper:
            return
        ts = HybridTimestamp(self.rng.randint(lower, upper))
        cat = catalog_log.catalog_at(self.log, ts)
        tables = sorted(cat.tables.values(), key=lambda t: t.id)
        if not tables:
            return
        table = self.rng.choice(tables)
        key = (self.rng.randint(0, 5),)
        group = partitioning.group_of(cat, table, key)
        got = mvcc.read_at(self.parts[group].rows, (table.id, key), ts)
        if isinstance(got, IntentFound):
            intent = got.intent
            holder = self.txs[intent.tx_id]
            record = self.parts[intent.commit_partition].txs.get(intent.tx_id)
            resolution = tx_state.resolve(record, self.live(holder))
            if resolution is tx_state.Resolution.WAIT:
                return
            if resolution is tx_state.Resolution.RECOVER:
                record = self.apply(intent.commit_partition,
                                    partition.RecoverTxCmd(intent.tx_id), None)
            assert isinstance(record, tx_state.TxRecord)
            value = mvcc.resolved_read(self.parts[group].rows, (table.id, key), ts,
                                       intent.tx_id, record.commit_ts)
            if not self.live(holder):  # the finder cleans up a dead coordinator's intent
                self.apply(group, partition.CleanupCmd(intent.tx_id, record.commit_ts,
                                                       self.log.latest_version),
                           self.log.latest_version)
        else:
            value = got
        self.reads.append(ReadRecord(ts, (table.id, key), value, self.at))

    # ---- low watermark and compaction ---------------------------------------------------

    def _lwm(self, node: Node, event: lw.Event) -> None:
        node.lwm, effects = lw.step(node.lwm, event)
        for e in effects:
            if isinstance(e, lw.Persist):
                node.stored_lwm = e.lwm
            elif isinstance(e, lw.Changed):
                # what the node announced, beside the cluster's value then
                self.lwm_seen.append((node.name, e.lwm, self.committed_lwm))
                self._coord(node, cc.LowWatermarkChanged(e.lwm, self.now_ms))
            elif isinstance(e, lw.SetTimer):
                node.next_tick = e.at_physical_ms

    def lwm_tick(self, node: Node) -> None:
        """The node's update interval. RULE: the low watermark is the cluster's value,
        proposed by the metastore leader's node and adopted by every node from its
        replica (cluster_lwm.py); the node's own core only waits above its read locks."""
        if self.unsafe == "own_lwm":  # the old way: each node's clock sets its own
            self._lwm(node, lw.Tick(self.hnow(node), self.now_ms))
            return
        self._clwm(node, cluster_lwm.Tick(self.hnow(node), self.now_ms,
                                          node.name == self.leader))

    def _clwm(self, node: Node, event: cluster_lwm.Event) -> None:
        node.clwm, effects = cluster_lwm.step(node.clwm, event)
        for e in effects:
            if isinstance(e, cluster_lwm.ReadCommitted):  # the local replica's value
                self._clwm(node, cluster_lwm.Committed(self.committed_lwm))
            elif isinstance(e, cluster_lwm.ProposeLwm):  # through the metastore group
                self.pool.append(("lwm", node.name, node.incarnation, e.lwm))
            elif isinstance(e, cluster_lwm.Adopt):
                self._lwm(node, lw.Propose(e.lwm))
            elif isinstance(e, cluster_lwm.SetTimer):
                node.next_tick = e.at_physical_ms

    def deliver_lwm(self, name: str, incarnation: int, proposed: HybridTimestamp) -> None:
        """`AdvanceLowWatermark` applied by the metastore (only forward), answered to the
        proposer if it still runs (else the answer is lost: its next tick retries)."""
        if self.committed_lwm is None or proposed > self.committed_lwm:
            self.committed_lwm = proposed
            self.lwm_committed.append(proposed)
        node = self.nodes[name]
        if node.up and node.incarnation == incarnation:
            self._clwm(node, cluster_lwm.ProposalDone(self.committed_lwm))

    def _coord(self, node: Node, event: cc.Event) -> None:
        node.coord, effects = cc.step(node.coord, event, self.now_ms)
        for e in effects:
            if isinstance(e, cc.CollectLocalMinTimes):
                self.pool.append(("reply", node.name, node.incarnation, node.name, e.iteration))
            elif isinstance(e, cc.RequestMinTimes):
                self.pool.append(("reply", node.name, node.incarnation, e.node, e.iteration))
            elif isinstance(e, cc.SetTimer):
                self.pool.append(("timer", node.name, node.incarnation,
                                  cc.TimerFired(e.iteration, e.phase)))
            elif isinstance(e, cc.PropagateTxTime):
                self.pool.extend(("propagate", n, e.ts) for n in sorted(e.nodes))
            elif isinstance(e, cc.RequestView):
                view = CompactionView(self.log, self.hnow(node), dict(self.assignments))
                self.pool.append(("coord", node.name, node.incarnation,
                                  cc.ViewReady(e.iteration, view)))
            elif isinstance(e, cc.ProposeCompaction):
                self.log, saved = catalog_log.save_snapshot(self.log, e.version)
                if saved:
                    self.compactions.append(CatalogCompacted(e.version, self.at))
                self.pool.append(("coord", node.name, node.incarnation,
                                  cc.CompactionResult(e.iteration, saved)))
            elif isinstance(e, cc.IterationEnded):
                self.outcomes.append(e.outcome)

    def reply(self, coordinator: str, incarnation: int, name: str, iteration: int) -> None:
        node = self.nodes[name]
        if not node.up:
            return
        times = dict(node.collector.times)
        rebalance = rb.min_required_time(r for r, _ in self.rebalances.values())
        if self.unsafe == "no_partition_times":  # a broken node: only its low watermark
            times, rebalance = dict.fromkeys(times, node.lwm.lwm), None
        local = participant.local_min_time(node.lwm.lwm, times, rebalance)
        tx_min = active_txs.minimum_required_time(
            node.txs, self.hnow(node), lambda v: catalog_log.catalog(self.log, v).activation)
        msg = participant.reply(iteration, name, local, tx_min)
        self.pool.append(("coord", coordinator, incarnation, cc.MinTimesReceived(msg)))

    def propagate(self, name: str, ts: HybridTimestamp) -> None:
        node = self.nodes[name]
        if not node.up:
            return
        now = self.hnow(node)
        first = catalog_log.catalog_at(self.log, max(ts, self.log.snapshot.activation)).version
        last = catalog_log.active_version(self.log, now)
        versions = [catalog_log.catalog(self.log, v) for v in range(first, last + 1)]
        primary = {g: self.primary(g) for g in self.parts}
        for group in participant.replicas_to_update(versions, name, primary):
            if group in self.parts:
                self.pool.append(("min_tx", group, ts))

    # ---- index builds and rebalances ----------------------------------------------------

    def _build(self, index_id: int, result: tuple[index_build.IndexBuild,
                                                  list[index_build.Effect]]) -> None:
        b, effects = result
        _, start, name = self.builds[index_id]
        self.builds[index_id] = (b, start, name)
        if b.stage in (index_build.Stage.DONE, index_build.Stage.CANCELLED):
            self.pins.append(Pin("index_build", name, b.created_version, start, self.at))
            del self.builds[index_id]
        for e in effects:
            self.pool.append(("build", index_id, e))

    def deliver_build(self, index_id: int, e: index_build.Effect) -> None:
        if index_id not in self.builds:
            return
        b = self.builds[index_id][0]
        names = [n.name for n in self.up()]
        if isinstance(e, index_build.AskTxsFinished):
            for n in self.up():
                done = active_txs.finished_before(n.txs, e.version)
                self._build(index_id, index_build.step(b, index_build.TxsFinished(n.name, done),
                                                       names))
                if index_id not in self.builds:
                    return
                b = self.builds[index_id][0]
            if b.stage is index_build.Stage.WAITING_TXS:
                self.pool.append(("build", index_id, e))  # ask again later
        elif isinstance(e, index_build.ProposeDdl):
            self.ddl(e.command)
        elif isinstance(e, index_build.Backfill):
            self._build(index_id, index_build.step(
                b, index_build.PartitionBuilt(e.group, e.catalog_version)))

    def rebalance_event(self, group: ZonePartition) -> None:
        r, start = self.rebalances[group]
        event: rb.Event
        if r.step is rb.Step.ADDING:
            event = rb.LearnerAdded(sorted(r.learners - r.added)[0])
        elif r.step is rb.Step.CATCHING_UP:
            event = rb.LearnerCaughtUp(sorted(r.learners - r.caught_up)[0])
        elif r.step is rb.Step.PROMOTING:
            event = rb.Promoted()
        else:
            event = rb.ReplicaRemoved(sorted(r.leaving - r.removed)[0])
        r, _ = rb.step(r, event)
        self.rebalances[group] = (r, start)
        if not r.active:
            del self.rebalances[group]
            self.pins.append(Pin("rebalance", str(group), r.catalog_version, start, self.at))
            for name in r.target - r.stable:
                n = self.nodes[name]
                n.collector = min_tx_time.add_partition(n.collector, group)
            for name in r.stable - r.target:
                n = self.nodes[name]
                n.collector = min_tx_time.remove_partition(n.collector, group)
            self.assignments[group] = r.target

    # ---- faults -------------------------------------------------------------------------

    def crash(self, node: Node) -> None:
        node.up = False
        node.incarnation += 1
        for tx in self.txs.values():
            if tx.core.node == node.name and not tx.ended and tx.end is None:
                tx.end = self.at  # abandoned: recovery decides its outcome
        if node.name == self.leader:
            self.elect()
        for n in self.up():
            self._coord(n, cc.TopologyChanged(frozenset(m.name for m in self.up())))

    def restart(self, node: Node) -> None:
        node.up = True
        node.txs = active_txs.ActiveTxs()
        node.coord = cc.init(node.coord.config)
        node.lwm = lw.init(LWM)
        node.clwm = cluster_lwm.init(LWM)
        collector = min_tx_time.MinTimeCollector()
        for group, holders in self.assignments.items():
            if node.name in holders:
                collector = min_tx_time.add_partition(collector, group)
                durable = self.parts[group].min_tx.durable
                if durable is not None:
                    collector = min_tx_time.record(collector, group, durable)
        node.collector = collector
        topology = frozenset(m.name for m in self.up())
        for n in self.up():
            self._coord(n, cc.TopologyChanged(topology))
        self._coord(node, cc.CoordinatorChanged(self.leader, self.now_ms))
        # a restarted node starts from max(its file, the committed value) (table_node.py)
        stored = node.stored_lwm
        if self.unsafe != "own_lwm" and self.committed_lwm is not None:
            stored = max(stored or hlc.MIN, self.committed_lwm)
        self._lwm(node, lw.Start(self.now_ms, stored, self.log.snapshot.activation))
        if self.unsafe != "own_lwm":
            self._clwm(node, cluster_lwm.Committed(self.committed_lwm))

    def elect(self) -> None:
        candidates = [n.name for n in self.up()]
        if not candidates:
            return
        self.leader = self.rng.choice(candidates)
        for n in self.up():
            self._coord(n, cc.CoordinatorChanged(self.leader, self.now_ms))

    # ---- the run ------------------------------------------------------------------------

    def deliver(self, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "tx":
            self.deliver_tx(msg[1], msg[2])
        elif kind == "reply":
            _, coordinator, incarnation, name, iteration = msg
            if self.nodes[coordinator].incarnation == incarnation:
                self.reply(coordinator, incarnation, name, iteration)
        elif kind in ("coord", "timer"):
            node = self.nodes[msg[1]]
            if node.up and node.incarnation == msg[2]:
                self._coord(node, msg[3])
        elif kind == "propagate":
            self.propagate(msg[1], msg[2])
        elif kind == "min_tx":
            self.apply(msg[1], partition.UpdateMinActiveTxTimeCmd(msg[2]), None)
        elif kind == "build":
            self.deliver_build(msg[1], msg[2])
        elif kind == "lwm":
            self.deliver_lwm(msg[1], msg[2], msg[3])

    def pick_message(self) -> tuple[Any, ...] | None:
        if not self.pool:
            return None
        i = self.rng.randrange(len(self.pool))
        if self.pool[i][0] == "timer" and self.rng.random() > 0.05:
            others = [j for j, m in enumerate(self.pool) if m[0] != "timer"]
            if others:
                i = self.rng.choice(others)
        # Per-channel FIFO, as the runtime guarantees per sender-receiver pair: a
        # transaction's messages to one partition arrive in the order they were sent.
        channel = self._channel(self.pool[i])
        if channel is not None:
            i = next(j for j, m in enumerate(self.pool) if self._channel(m) == channel)
        return self.pool.pop(i)

    @staticmethod
    def _channel(msg: tuple[Any, ...]) -> tuple[Any, ...] | None:
        if msg[0] == "tx":
            return ("tx", msg[1], msg[2].group)
        if msg[0] == "min_tx":
            return ("min_tx", msg[1])
        return None

    def step(self) -> None:
        self.step_no += 1
        r = self.rng.random()
        live = [t for t in self.txs.values() if self.live(t) and t.core.phase is txn.Phase.ACTIVE]
        ups = self.up()
        if r < 0.35:
            msg = self.pick_message()
            if msg is not None:
                self.deliver(msg)
        elif r < 0.45:
            self.now_ms += self.rng.randint(10, 150)
            for n in ups:
                if self.now_ms >= n.next_tick:
                    self.lwm_tick(n)
        elif r < 0.50:
            if len(live) < 5:
                self.begin(self.rng.choice(ups))
        elif r < 0.62:
            if live:
                self.tx_write(self.rng.choice(live))
        elif r < 0.68:
            if live:
                tx = self.rng.choice(live)
                if self.rng.random() < 0.8:
                    node = self.nodes[tx.core.node]
                    ts = self.hnow(node)
                    tx.core, effects = txn.commit(tx.core, ts, catalog_log.catalog_at(self.log, ts))
                else:
                    tx.core, effects = txn.rollback(tx.core)
                self.effects(tx, effects)
        elif r < 0.75:
            self.flush(self.rng.choice(sorted(self.parts, key=str)))
        elif r < 0.84:
            self.ro_read(self.rng.choice(ups))
        elif r < 0.89:
            self.random_ddl()
        elif r < 0.93:
            if self.rebalances:
                self.rebalance_event(self.rng.choice(sorted(self.rebalances, key=str)))
        elif r < 0.945:
            if len(ups) > 2 or (len(ups) == 2 and self.rng.random() < 0.3):
                self.crash(self.rng.choice(ups))
        elif r < 0.97:
            down = [n for n in self.nodes.values() if not n.up]
            if down:
                self.restart(self.rng.choice(down))
        elif r < 0.98:
            self.elect()
        else:
            floor = min((n.lwm.lwm for n in self.nodes.values() if n.lwm.lwm), default=None)
            if floor is not None:
                group = self.rng.choice(sorted(self.parts, key=str))
                self.apply(group, partition.GcCmd(floor), None)

    def random_ddl(self) -> None:
        cat = self.log.latest
        tables = sorted(cat.tables.values(), key=lambda t: t.id)
        r = self.rng.random()
        if r < 0.3 and tables:
            t = self.rng.choice(tables)
            self.ddl(ddl.AddColumn(t.name, Column(f"c{self.step_no}", "int")))
        elif r < 0.5:
            self.ddl(ddl.CreateTable(f"T{self.step_no}", "Z", (K, Column("v", "int")), ("k",)))
        elif r < 0.6 and len(tables) > 1:
            self.ddl(ddl.DropTable(self.rng.choice(tables[1:]).name))
        elif r < 0.7 and tables and len(self.builds) < 1:
            t = self.rng.choice(tables)
            name = f"I{self.step_no}"
            new = self.ddl(ddl.CreateIndex(name, t.name, ("k",)))
            if new is not None:
                index = new.index_named(name)
                assert index is not None
                b, effects = index_build.start(index, new, [n.name for n in self.up()])
                self.builds[index.id] = (b, self.at, name)
                self._build(index.id, (b, effects))
        else:
            new = self.ddl(ddl.AlterZone("Z", self.rng.randint(1, 3)))
            if new is None:
                return
            targets = rb.plan(new, self.assignments, NODES)
            for group, target in sorted(targets.items(), key=lambda x: str(x[0])):
                if group in self.rebalances:
                    continue
                r2, _ = rb.start(group, self.assignments[group], target, new)
                self.rebalances[group] = (r2, self.at)

    def run(self, steps: int) -> CatalogHistory:
        for _ in range(steps):
            self.step()
        return self.finish()

    def finish(self) -> CatalogHistory:
        """Deliver everything still in flight, then settle every transaction the way a
        reader would: by its commit partition's record (recovering the unfinished)."""
        for n in self.nodes.values():
            if not n.up:
                self.restart(n)
        for _ in range(100_000):
            msg = self.pick_message()
            if msg is None:
                break
            self.deliver(msg)
        records: list[TxRecord] = []
        for tx in self.txs.values():
            outcome, commit_ts = tx.outcome, tx.commit_ts
            cp = tx.core.commit_partition
            if outcome == "unknown":
                if cp is None:
                    outcome = "aborted"
                else:
                    record = self.apply(cp, partition.RecoverTxCmd(tx.core.id), None)
                    assert isinstance(record, tx_state.TxRecord)
                    outcome = record.status.value
                    commit_ts = record.commit_ts
            records.append(TxRecord(tx.core.id, tx.core.begin_ts, tx.start, tx.end,
                                    outcome, commit_ts, dict(tx.writes)))  # type: ignore[arg-type]
        pins = list(self.pins)
        pins += [Pin("index_build", name, b.created_version, start, None)
                 for b, start, name in self.builds.values()]
        pins += [Pin("rebalance", str(g), r.catalog_version, start, None)
                 for g, (r, start) in self.rebalances.items()]
        pins += replay_pins(self.replay)
        return CatalogHistory(tuple(self.versions), tuple(self.compactions), tuple(pins),
                              tuple(records), tuple(self.reads))
