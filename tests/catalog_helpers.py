"""A pure driver for the catalog compaction coordinator: nodes as plain values, the
coordinator core's effects executed in order (FIFO), the catalog log as the metastore's
catalog machine would hold it. No processes, no clock: the test says what time it is."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from sediment.actors.catalog import catalog_log, ddl, machine
from sediment.actors.catalog import compaction_coordinator as cc
from sediment.actors.catalog import compaction_participant as participant
from sediment.actors.catalog.catalog_log import CatalogLog
from sediment.actors.catalog.compaction_rules import CompactionView
from sediment.actors.catalog.descriptors import Catalog, Column, ZonePartition
from sediment.actors.catalog.hlc import HybridTimestamp, hts

K1 = Column("key1", "int", nullable=False)
K2 = Column("key2", "int", nullable=False)
VAL = Column("val", "int")
NODES = ("node1", "node2", "node3")
DEFAULT_PARTITIONS = 25  # Ignite's CatalogUtils.DEFAULT_PARTITION_COUNT


@dataclass
class Node:
    name: str
    lwm: HybridTimestamp | None = None
    partition_times: dict[ZonePartition, HybridTimestamp | None] = field(default_factory=dict)
    rebalance_min: HybridTimestamp | None = None
    active_tx_min: HybridTimestamp = hts(0)
    fail: str = ""  # answer the request with this failure
    silent: bool = False  # never answer (the coordinator's timer must end the iteration)
    held: bool = False  # answer only when released (to interleave other events)


@dataclass
class Driver:
    log: CatalogLog
    nodes: dict[str, Node]
    topology: frozenset[str]
    local: str = "node1"
    assignments: dict[ZonePartition, frozenset[str]] | None = None
    now: HybridTimestamp = hts(10**9)
    view_error: str = ""
    state: cc.CoordinatorState = field(init=False)
    requested: list[str] = field(default_factory=list)
    propagated: list[HybridTimestamp] = field(default_factory=list)
    proposed: list[int] = field(default_factory=list)
    ended: list[cc.IterationEnded] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    timers: list[cc.SetTimer] = field(default_factory=list)
    _held: list[tuple[str, int]] = field(default_factory=list)
    _queue: deque[cc.Event] = field(default_factory=deque)

    def __post_init__(self) -> None:
        self.state = cc.init(cc.CoordinatorConfig(self.local))
        self.state, _ = cc.step(self.state, cc.TopologyChanged(self.topology))

    # ---- driving ----------------------------------------------------------------------

    def send(self, *events: cc.Event) -> None:
        self._queue.extend(events)
        while self._queue:
            self.state, effects = cc.step(self.state, self._queue.popleft(), now_ms=0)
            for effect in effects:
                self._execute(effect)

    def coordinator(self, node: str | None) -> None:
        self.send(cc.CoordinatorChanged(node, 0))

    def lwm_changed(self, lwm: HybridTimestamp | None = None) -> None:
        self.send(cc.LowWatermarkChanged(lwm or self.now, 0))

    def release(self) -> None:
        held, self._held = self._held, []
        for name, iteration in held:
            self._answer(name, iteration)
        self.send()

    def fire_timers(self) -> None:
        timers, self.timers = self.timers, []
        self.send(*(cc.TimerFired(t.iteration, t.phase) for t in timers))

    # ---- effects ----------------------------------------------------------------------

    def _execute(self, effect: cc.Effect) -> None:
        if isinstance(effect, cc.CollectLocalMinTimes):
            self._answer(self.local, effect.iteration)
        elif isinstance(effect, cc.RequestMinTimes):
            self.requested.append(effect.node)
            node = self.nodes.get(effect.node)
            if node is not None and node.held:
                self._held.append((effect.node, effect.iteration))
            else:
                self._answer(effect.node, effect.iteration)
        elif isinstance(effect, cc.SetTimer):
            self.timers.append(effect)
        elif isinstance(effect, cc.PropagateTxTime):
            self.propagated.append(effect.ts)
        elif isinstance(effect, cc.RequestView):
            if self.view_error:
                self._queue.append(cc.ViewFailed(effect.iteration, self.view_error))
            else:
                view = CompactionView(self.log, self.now, self.current_assignments())
                self._queue.append(cc.ViewReady(effect.iteration, view))
        elif isinstance(effect, cc.ProposeCompaction):
            self.proposed.append(effect.version)
            self.log, result = machine.apply_command(self.log,
                                                     machine.CompactCatalog(effect.version))
            if isinstance(result, machine.SnapshotSaved):
                self._queue.append(cc.CompactionResult(effect.iteration, result.saved))
            else:
                self._queue.append(cc.CompactionResult(effect.iteration, False, repr(result)))
        elif isinstance(effect, cc.Skipped):
            self.skipped.append(effect.running)
        else:
            self.ended.append(effect)

    def _answer(self, name: str, iteration: int) -> None:
        node = self.nodes.get(name)
        if node is None or node.silent:
            return
        if node.fail:
            self._queue.append(cc.MinTimesFailed(iteration, name, node.fail))
            return
        local = participant.local_min_time(node.lwm, node.partition_times, node.rebalance_min)
        reply = participant.reply(iteration, name, local, node.active_tx_min)
        self._queue.append(cc.MinTimesReceived(reply))

    # ---- helpers ----------------------------------------------------------------------

    def current_assignments(self) -> dict[ZonePartition, frozenset[str]]:
        if self.assignments is not None:
            return self.assignments
        latest = self.log.latest
        return {g: frozenset(NODES) for g in latest.partitions()}

    @property
    def earliest(self) -> int:
        return self.log.earliest_version

    @property
    def outcome(self) -> str:
        return self.ended[-1].outcome


def execute(log: CatalogLog, *commands: ddl.DdlCommand, ts: int | None = None) -> CatalogLog:
    """One DDL batch as a version, stamped 1 s after the latest activation."""
    stamp = hts(ts) if ts is not None else log.latest.activation.add_physical(1000)
    log, _ = catalog_log.execute(log, commands, stamp, 0)
    return log


_dummies = iter(range(10**6))


def ok(log: CatalogLog) -> CatalogLog:
    """Ignite's TestCommand.ok(): a version that changes nothing of interest."""
    return execute(log, ddl.CreateZone(f"dummy{next(_dummies)}", partitions=1, replicas=1))


def create_table(log: CatalogLog, name: str, zone: str = "Z",
                 partitions: int = DEFAULT_PARTITIONS) -> CatalogLog:
    commands: list[ddl.DdlCommand] = []
    if log.latest.zone_named(zone) is None:
        commands.append(ddl.CreateZone(zone, partitions=partitions, replicas=3))
    commands.append(ddl.CreateTable(name, zone, (K1, K2, VAL), ("key1", "key2")))
    return execute(log, *commands)


def nodes_at(times: dict[str, HybridTimestamp], catalog: Catalog, lwm: HybridTimestamp,
             names: Iterable[str] = NODES) -> dict[str, Node]:
    """Nodes whose partitions (every partition of `catalog`) all published `times[n]`."""
    out = {}
    for name in names:
        groups = {g: times[name] for g in catalog.partitions()}
        out[name] = Node(name, lwm=lwm, partition_times=groups, active_tx_min=times[name])
    return out
