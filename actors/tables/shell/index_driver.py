"""The index build driver (docs/catalog.md §7 step 5): a process beside the metastore
leader (`while_leading` runs it for each term its node leads) that feeds the pure
`index_build.step` core of every index not yet AVAILABLE and executes its effects.

Every `interval` it reads the local metastore replica (the catalog and the assignments):

- an index REGISTERED or BUILDING that it does not drive yet gets a build (a BUILDING
  one, left by a previous leader's driver, resumes at its backfill);
- a new catalog version goes to every build (`CatalogChanged`: it sees the status the
  last DDL gave, a dropped index cancels its build);
- `AskTxsFinished`: every node of the topology (the nodes whose table node runs) is
  asked `TxsFinished(created version)` until each said yes;
- `ProposeDdl` (`StartBuildingIndex`, `MakeIndexAvailable`) runs as DDL through the
  local table node, which stamps it with its clock and answers after activation; a
  proposal that failed (a leader change) is made again at the next look while the
  catalog still shows the old status;
- `Backfill` proposes `BuildIndexCmd` to the partition's raft group in a task process
  (`group_task.py`): the partition computes the entries of every row committed at or
  before the building version's activation; its answer is `PartitionBuilt`. A failed
  backfill is proposed again at the next look.

A failpoint `BEFORE_AVAILABLE` holds a build at BUILDING (the scenarios' index build
racing compaction). `Status()` answers, per index name, its stage, the catalog
version it pins (the one that registered it) and when `MakeIndexAvailable` was first
proposed (the pin can only end after that: the recorder's pin end), for the recorder
and `catalog status`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import Any

from sediment import log
from sediment.actors.catalog import catalog_log
from sediment.actors.catalog.catalog_log import CatalogLog
from sediment.actors.catalog.ddl import MakeIndexAvailable, StartBuildingIndex
from sediment.actors.catalog.descriptors import IndexStatus, ZonePartition
from sediment.actors.catalog.metastore_machine import ViewQuery
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Propose, Query
from sediment.actors.tables import index_build as ib
from sediment.actors.tables.names import META_GROUP, partition_group, table_node_name
from sediment.actors.tables.partition import BuildIndexCmd, IndexBuilt
from sediment.actors.tables.shell import named_pids, unique_build
from sediment.actors.tables.shell.group_task import TaskDone, spawn_task
from sediment.actors.tables.shell.node_protocol import (
    Ddl,
    DdlActive,
    TxsFinished,
    TxsFinishedAnswer,
)
from sediment.runtime.common_calls import Status, UnknownRequest
from sediment.runtime.core_driver import CoreDriver
from sediment.runtime.errors import CallError
from sediment.runtime.messages import Call
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.tables.index_driver")
BuildDriver = CoreDriver[ib.IndexBuild, ib.Event, ib.Effect]
KEEP = 64  # finished builds kept for `status`
BEFORE_AVAILABLE = "index_driver.before_available"  # failpoint: a build held while BUILDING


@dataclass(frozen=True)
class IndexDriverConfig:
    nodes: tuple[str, ...]
    interval: float = 0.2  # seconds between looks at the catalog
    ddl_timeout: float = 30.0


@dataclass(frozen=True, slots=True)
class _Tick:
    pass


class _Driver:
    def __init__(self, ctx: Process, config: IndexDriverConfig, term: int) -> None:
        self.ctx = ctx
        self.config = config
        self.term = term
        self.me = ctx.self().node
        self.drivers: dict[int, BuildDriver] = {}  # one core per index being built
        self.names: dict[int, str] = {}
        self.available_proposed_at: dict[int, float] = {}
        self.started_at: dict[int, float] = {}
        self.in_flight: dict[tuple[int, ZonePartition], int] = {}  # backfill -> task tag
        self.tags: dict[int, tuple[int, ZonePartition, int]] = {}
        self.tag_seq = 0
        self.finished: deque[dict[str, Any]] = deque(maxlen=KEEP)
        self.seen_version = -1
        self.log: CatalogLog | None = None
        self.assignments: dict[ZonePartition, frozenset[str]] = {}
        self.topology: tuple[str, ...] = ()
        self.unique = unique_build.UniqueBuilds()  # a unique index's existing rows claimed

    @property
    def builds(self) -> dict[int, ib.IndexBuild]:
        """Each build's state (a new dict: the drivers own them)."""
        return {index_id: d.state for index_id, d in self.drivers.items()}

    def _driver(self, index_id: int, build: ib.IndexBuild) -> BuildDriver:
        """A build's core on the driver; the effects' outcomes are its next events."""
        d: BuildDriver = CoreDriver(self.ctx, lambda b, e: ib.step(b, e, self.topology), build)
        d.on(ib.AskTxsFinished, self._ask_txs_finished)
        d.on(ib.ProposeDdl, lambda e: self._propose(index_id, e.command))
        d.on(ib.Backfill, self._backfill)
        self.drivers[index_id] = d
        return d

    async def tick(self) -> None:
        try:
            self.log, self.assignments = await named_pids.call(self.ctx,
                raft_name(META_GROUP, self.me), Query(ViewQuery()), timeout=10)
        except CallError:
            return
        assert self.log is not None
        latest = self.log.latest
        self.topology = tuple([n for n in self.config.nodes
                               if await self.ctx.whereis(table_node_name(n)) is not None])
        before = dict(self.builds)
        for index in sorted(latest.indexes.values(), key=lambda i: i.id):
            if index.id in self.builds or index.status not in (IndexStatus.REGISTERED,
                                                                IndexStatus.BUILDING):
                continue
            await self._begin(index.id)
        if latest.version != self.seen_version:
            self.seen_version = latest.version
            for index_id in list(self.builds):
                await self.step(index_id, ib.CatalogChanged(latest))
        for index_id, b in list(self.builds.items()):
            if before.get(index_id) is b:  # nothing moved it at this look
                await self._retry(index_id, b)
        self._forget_finished()

    async def _begin(self, index_id: int) -> None:
        assert self.log is not None
        latest = self.log.latest
        index = latest.index(index_id)
        assert index is not None
        self.names[index_id] = index.name
        self.started_at[index_id] = self.ctx.now()
        if index.status is IndexStatus.REGISTERED:
            b, effects = ib.start(index, latest, self.topology)
            self._driver(index_id, b)
            _logger.info("index build started", index=index.name, node=self.me)
            await self.execute(index_id, effects)
        else:  # BUILDING: a previous driver started it; backfill again from here
            b, _ = ib.start(replace(index, status=IndexStatus.REGISTERED), latest, ())
            self._driver(index_id, replace(b, stage=ib.Stage.STARTING))
            await self.step(index_id, ib.CatalogChanged(latest))

    async def _retry(self, index_id: int, b: ib.IndexBuild) -> None:
        """What a lost answer left undone: ask the nodes again, propose again,
        backfill again."""
        assert self.log is not None
        index = self.log.latest.index(index_id)
        if b.stage is ib.Stage.WAITING_TXS:
            await self.execute(index_id, [ib.AskTxsFinished(frozenset(self.topology)
                                                            - b.nodes_finished,
                                                            b.created_version)])
        elif b.stage is ib.Stage.STARTING and index is not None and (
                index.status is IndexStatus.REGISTERED):
            await self.execute(index_id, [ib.ProposeDdl(StartBuildingIndex(index_id))])
        elif b.stage is ib.Stage.BACKFILLING and b.building_version is not None:
            await self.execute(index_id, [ib.Backfill(g, index_id, b.building_version)
                                          for g in sorted(b.partitions - b.built,
                                                          key=lambda g: g.partition)])
        elif b.stage is ib.Stage.FINISHING and index is not None and (
                index.status is IndexStatus.BUILDING):
            await self.execute(index_id, [ib.ProposeDdl(MakeIndexAvailable(index_id))])

    async def step(self, index_id: int, event: ib.Event) -> None:
        d = self.drivers.get(index_id)
        if d is not None:
            await d.run(event)

    async def execute(self, index_id: int, effects: list[ib.Effect]) -> None:
        """Effects no step gave (the build's start, a retry): run, then their outcomes."""
        d = self.drivers[index_id]
        await d.execute(effects)
        await d.drain()

    async def _ask_txs_finished(self, e: ib.AskTxsFinished) -> list[ib.Event]:
        finished: list[ib.Event] = []
        for node in sorted(e.nodes):
            try:
                reply = await named_pids.call(self.ctx, table_node_name(node),
                                            TxsFinished(e.version), timeout=5)
            except CallError:
                continue
            if reply == TxsFinishedAnswer(True):
                finished.append(ib.TxsFinished(node, True))
        return finished

    async def _propose(self, index_id: int,
                       command: StartBuildingIndex | MakeIndexAvailable) -> None:
        if isinstance(command, MakeIndexAvailable):
            await self.ctx.failpoint(BEFORE_AVAILABLE)
            self.available_proposed_at.setdefault(index_id, self.ctx.now())
        elif self.log is None or not await unique_build.ready_to_build(
                self.ctx, self.me, self.log, index_id, self.unique, self.config.ddl_timeout):
            return  # the next look seeds again (or the index was dropped: duplicates)
        try:
            reply = await named_pids.call(self.ctx, table_node_name(self.me), Ddl((command,)),
                                        timeout=self.config.ddl_timeout)
        except CallError as err:
            reply = ("down", str(err)[:100])
        # the next look proposes again if the status did not move
        if not isinstance(reply, DdlActive):
            _logger.info("index status change not applied", index=self.names.get(index_id),
                         command=type(command).__name__, reply=repr(reply)[:200])

    async def _backfill(self, e: ib.Backfill) -> None:
        assert self.log is not None
        if (e.index_id, e.group) in self.in_flight:
            return
        nodes = tuple(sorted(self.assignments.get(e.group, ())))
        index = self.log.latest.index(e.index_id)
        if not nodes or index is None:
            return
        building = catalog_log.catalog(self.log, e.catalog_version)
        command = BuildIndexCmd(e.index_id, index.table_id, index.columns,
                                building.activation, e.catalog_version)
        self.tag_seq += 1
        self.in_flight[(e.index_id, e.group)] = self.tag_seq
        self.tags[self.tag_seq] = (e.index_id, e.group, e.catalog_version)
        await spawn_task(self.ctx, partition_group(e.group), nodes,
                         (Propose(command),), self.tag_seq)

    async def backfilled(self, done: TaskDone) -> None:
        what = self.tags.pop(done.tag, None)
        if what is None:
            return
        index_id, group, version = what
        self.in_flight.pop((index_id, group), None)
        result = done.results[0] if done.ok and done.results else None
        if isinstance(result, IndexBuilt) and result.catalog_version == version:
            await self.step(index_id, ib.PartitionBuilt(group, version))

    def _forget_finished(self) -> None:
        for index_id, b in list(self.builds.items()):
            if b.stage in (ib.Stage.DONE, ib.Stage.CANCELLED):
                del self.drivers[index_id]
                self.finished.append(self._describe(index_id, b))

    def _describe(self, index_id: int, b: ib.IndexBuild) -> dict[str, Any]:
        return {"index_id": index_id, "name": self.names.get(index_id), "stage": b.stage.value,
                "created_version": b.created_version, "building_version": b.building_version,
                "partitions": len(b.partitions), "built": len(b.built),
                "waiting_nodes": sorted(set(self.topology) - b.nodes_finished)
                if b.stage is ib.Stage.WAITING_TXS else [],
                "started_at": self.started_at.get(index_id),
                "available_proposed_at": self.available_proposed_at.get(index_id)}

    def status(self) -> dict[str, Any]:
        return {"node": self.me, "term": self.term,
                "pinned_version": ib.pinned_version(self.builds),
                "builds": [self._describe(i, b) for i, b in sorted(self.builds.items())],
                "finished": list(self.finished), "unique_failed": list(self.unique.failed)}


async def index_driver(ctx: Process, config: IndexDriverConfig, term: int) -> None:
    """Process entry (a `while_leading` child of the metastore group)."""
    d = _Driver(ctx, config, term)
    ctx.send(ctx.self(), _Tick())
    _logger.info("index build driver up", node=d.me, term=term)
    while True:
        msg = await ctx.receive()
        if isinstance(msg, _Tick):
            await d.tick()
            ctx.send_after(config.interval, ctx.self(), _Tick())
        elif isinstance(msg, TaskDone):
            await d.backfilled(msg)
        elif isinstance(msg, Call):
            if isinstance(msg.request, Status):
                ctx.reply(msg.from_, d.status())
            else:
                ctx.reply(msg.from_, UnknownRequest.of(msg.request))
        else:
            _logger.warning("index driver got an unexpected message", message=repr(msg)[:200])


__all__ = ["BEFORE_AVAILABLE", "IndexDriverConfig", "index_driver"]
