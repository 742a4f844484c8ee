"""The rebalance driver (docs/catalog.md §7 step 5): a process beside the metastore leader
(`while_leading` runs it for each term its node leads) that moves partition replicas
when a zone's replica count changes (`alter_zone(replicas=)`) or a node has left the
topology for longer than `scale_down_after` (None, the default as in Ignite 3: a node
leaving moves nothing).

Every `interval` it reads the metastore replica (the catalog, the stable assignments,
the pending rebalances) and plans (`rebalance.plan`) over the nodes that count. For a
partition whose stable assignment differs from its plan, and which no rebalance moves
yet, it records the pending rebalance in the metastore (`SetPending`, pinned to the
latest catalog version: every node folds the pin into its local minimum, so catalog
compaction keeps that version until it ends), then runs it in a process of its own
(`rebalance_task`) that feeds the pure `rebalance.step` core and executes its effects:

1. `AddLearner`: start a member of the group on the new node (bootstrapped with the
   stable voters, where it is none, so it waits for the leader), then the raft change
   `add_learner`;
2. `AwaitCatchUp`: the leader reports the learner caught up;
3. `PromoteLearners`: the raft change `promote`, for each;
4. `RemoveReplica`: the raft change `remove`, one at a time;
5. `RecordStable`: the target becomes the stable assignment (`RecordStable`; the
   pending record goes); the removed node's table node then stops its member.

A change that already holds (a retry after a lost answer, a new leader's driver
resuming a pending rebalance from the start) counts as done. A failure ends the task
with `CancelPending`; the next look plans again. Everything is bounded.

`Status()` answers the running and the last finished rebalances, with when each was
planned and when its stable record was first proposed (the pin's recorded interval).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sediment import log
from sediment.actors.catalog import catalog_log
from sediment.actors.catalog.catalog_log import CatalogLog
from sediment.actors.catalog.descriptors import ZonePartition
from sediment.actors.catalog.errors import CatalogError
from sediment.actors.catalog.metastore_machine import (
    AssignmentChanged,
    CancelPending,
    Pending,
    RebalancesQuery,
    RecordStable,
    SetPending,
    ViewQuery,
)
from sediment.actors.log.shell.names import RAFT_HOST, raft_name
from sediment.actors.log.shell.protocol import Change, Done, Propose, Query, Refused
from sediment.actors.tables import rebalance as rb
from sediment.actors.tables.names import META_GROUP, partition_group, table_node_name
from sediment.actors.tables.shell import named_pids
from sediment.actors.tables.shell.group_task import request_group
from sediment.actors.tables.shell.partition_members import (
    PartitionOptions,
    partition_spec,
    start_member,
)
from sediment.runtime.common_calls import Status, UnknownRequest
from sediment.runtime.core_driver import CoreDriver
from sediment.runtime.errors import CallError
from sediment.runtime.messages import Call
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process
from sediment.supervision import requests

_logger = log.get_logger("sediment.tables.rebalance")
KEEP = 64
WAIT_OUT = ("change_pending", "leader_not_ready", "not_caught_up")
POLL = 0.05  # seconds between polls of a group
CHANGE_PATIENCE = 30.0  # seconds one raft change or catch-up may take
BEFORE_RECORD = "rebalance.before_record_stable"  # failpoint: a rebalance held in progress


@dataclass(frozen=True)
class RebalanceDriverConfig:
    nodes: tuple[str, ...]
    partitions: PartitionOptions
    interval: float = 0.3
    scale_down_after: float | None = None  # seconds a node is gone before it counts as left


@dataclass(frozen=True, slots=True)
class _Tick:
    pass


@dataclass(frozen=True, slots=True)
class _Recording:
    group: ZonePartition
    at: float


@dataclass(frozen=True, slots=True)
class _Ended:
    group: ZonePartition
    step: str
    reason: str


# ---- the task that runs one rebalance ----------------------------------------------


async def _change(ctx: Process, group: str, nodes: tuple[str, ...], op: str,
                  node: str) -> str | None:
    """One raft configuration change at the group's leader; None when it is done (or
    already held), else why not."""
    deadline = ctx.now() + CHANGE_PATIENCE
    while ctx.now() < deadline:
        for target in nodes:
            try:
                reply = await named_pids.call(ctx, raft_name(group, target), Change(op, node),
                                       timeout=5)
            except CallError:
                continue
            if isinstance(reply, Done):
                return None
            if isinstance(reply, Refused) and reply.reason not in WAIT_OUT:
                view = await _leader_view(ctx, group, nodes)
                if view is not None and _holds(view, op, node):
                    return None
                return f"{op} {node}: {reply.reason}"
        await ctx.sleep(POLL)
    return f"{op} {node}: no leader took it"


async def _leader_view(ctx: Process, group: str,
                       nodes: tuple[str, ...]) -> dict[str, Any] | None:
    for node in nodes:
        try:
            view = await named_pids.call(ctx, raft_name(group, node), Status(), timeout=5)
        except CallError:
            continue
        if view.get("role") == "leader":
            return dict(view)
    return None


def _holds(view: Mapping[str, Any], op: str, node: str) -> bool:
    voters, learners = tuple(view["voters"]), tuple(view["learners"])
    if op == "add_learner":
        return node in learners or node in voters
    if op == "promote":
        return node in voters
    return node not in voters and node not in learners


async def _execute(ctx: Process, r: rb.Rebalance, e: rb.Effect,
                   options: PartitionOptions) -> rb.Event | None:
    name = partition_group(r.group)
    everyone = tuple(sorted(r.stable | r.target))
    if isinstance(e, rb.AddLearner):
        reply = await start_member(ctx, e.node, partition_spec(r.group, r.stable, options))
        if not requests.is_running(reply):
            return rb.Failed(f"member on {e.node} did not start: {reply!r:.100}")
        why = await _change(ctx, name, everyone, "add_learner", e.node)
        return rb.Failed(why) if why else rb.LearnerAdded(e.node)
    if isinstance(e, rb.AwaitCatchUp):
        deadline = ctx.now() + CHANGE_PATIENCE
        while ctx.now() < deadline:
            view = await _leader_view(ctx, name, everyone)
            if view is not None and (e.node in view.get("caught_up", ())
                                     or e.node in view["voters"]):
                return rb.LearnerCaughtUp(e.node)
            await ctx.sleep(POLL)
        return rb.Failed(f"learner {e.node} did not catch up")
    if isinstance(e, rb.PromoteLearners):
        for node in sorted(e.nodes):
            why = await _change(ctx, name, everyone, "promote", node)
            if why:
                return rb.Failed(why)
        return rb.Promoted()
    if isinstance(e, rb.RemoveReplica):
        why = await _change(ctx, name, everyone, "remove", e.node)
        return rb.Failed(why) if why else rb.ReplicaRemoved(e.node)
    return None


async def rebalance_task(ctx: Process, r: rb.Rebalance, effects: list[rb.Effect],
                         options: PartitionOptions, meta_nodes: tuple[str, ...],
                         driver: Pid) -> None:
    """Process entry: one partition's rebalance from its first effects to its end, the
    core on the driver (each effect's outcome is its next event)."""
    task: RebalanceTask = CoreDriver(ctx, rb.step, r)

    async def record_stable(e: rb.RecordStable) -> rb.Event | None:
        await ctx.failpoint(BEFORE_RECORD)
        ctx.send(driver, _Recording(task.state.group, ctx.now()))
        ok, result = await request_group(ctx, META_GROUP, meta_nodes,
                                         Propose(RecordStable(e.group, e.nodes)))
        if not ok or not isinstance(result, AssignmentChanged):
            return rb.Failed(f"stable record not taken: {result!r:.100}")
        return None

    async def execute(e: rb.Effect) -> rb.Event | None:
        return await _execute(ctx, task.state, e, options)

    task.on(rb.RecordStable, record_stable)
    task.on(rb.AddLearner, execute)
    task.on(rb.AwaitCatchUp, execute)
    task.on(rb.PromoteLearners, execute)
    task.on(rb.RemoveReplica, execute)
    await task.execute(effects)
    await task.drain()
    r = task.state
    if r.step is not rb.Step.DONE:
        await request_group(ctx, META_GROUP, meta_nodes, Propose(CancelPending(r.group)))
    ctx.send(driver, _Ended(r.group, r.step.value, r.reason))


RebalanceTask = CoreDriver[rb.Rebalance, rb.Event, rb.Effect]


# ---- the driver -------------------------------------------------------------------


class _Driver:
    def __init__(self, ctx: Process, config: RebalanceDriverConfig, term: int) -> None:
        self.ctx = ctx
        self.config = config
        self.term = term
        self.me = ctx.self().node
        self.running: dict[ZonePartition, dict[str, Any]] = {}
        self.finished: deque[dict[str, Any]] = deque(maxlen=KEEP)
        self.gone_since: dict[str, float] = {}

    async def members(self) -> tuple[str, ...]:
        """The nodes a plan places replicas on: every node, less those gone for longer
        than `scale_down_after`."""
        now = self.ctx.now()
        out = []
        for node in self.config.nodes:
            if await self.ctx.whereis(table_node_name(node)) is not None:
                self.gone_since.pop(node, None)
            else:
                self.gone_since.setdefault(node, now)
            after = self.config.scale_down_after
            if after is None or now - self.gone_since.get(node, now) <= after:
                out.append(node)
        return tuple(out)

    async def tick(self) -> None:
        try:
            log_, stable = await named_pids.call(self.ctx, raft_name(META_GROUP, self.me),
                                               Query(ViewQuery()), timeout=10)
            pending = await named_pids.call(self.ctx, raft_name(META_GROUP, self.me),
                                          Query(RebalancesQuery()), timeout=10)
        except CallError:
            return
        nodes = await self.members()
        if not nodes:
            return
        for group, p in sorted(pending.items(), key=lambda x: str(x[0])):
            if group not in self.running and group in stable:  # a previous driver's
                await self._run(log_, group, stable[group], p)
        for group, target in sorted(rb.plan(log_.latest, stable, nodes).items(),
                                    key=lambda x: str(x[0])):
            if group in self.running or group in pending:
                continue
            latest = log_.latest
            p = Pending(target, latest.version, latest.activation)
            self.running[group] = {"group": str(group), "state": "planning",
                                   "catalog_version": latest.version,
                                   "planned_at": self.ctx.now(), "recorded_at": None}
            ok, result = await request_group(self.ctx, META_GROUP, self.config.nodes, Propose(
                SetPending(group, target, p.catalog_version, p.pin)))
            if not ok or not isinstance(result, AssignmentChanged):
                self.running.pop(group)
                continue
            await self._run(log_, group, stable[group], p)

    async def _run(self, log_: CatalogLog, group: ZonePartition, stable: frozenset[str],
                   p: Pending) -> None:
        try:
            catalog = catalog_log.catalog(log_, p.catalog_version)
        except CatalogError:  # compacted: not while it is pinned; start from the latest
            catalog = log_.latest
        r, effects = rb.start(group, stable, p.target, catalog)
        info = self.running.setdefault(group, {"group": str(group),
                                               "catalog_version": p.catalog_version,
                                               "planned_at": self.ctx.now(),
                                               "recorded_at": None})
        info.update({"state": "running", "stable": sorted(stable),
                     "target": sorted(p.target)})
        _logger.info("rebalance started", group=str(group), stable=sorted(stable),
                     target=sorted(p.target), version=p.catalog_version)
        await self.ctx.spawn(rebalance_task, r, effects, self.config.partitions,
                             self.config.nodes, self.ctx.self(), label=f"rebalance:{group}",
                             host=RAFT_HOST, link=True)  # it ends with the driver's term

    def recording(self, msg: _Recording) -> None:
        info = self.running.get(msg.group)
        if info is not None and info["recorded_at"] is None:
            info["recorded_at"] = msg.at

    def ended(self, msg: _Ended) -> None:
        info = self.running.pop(msg.group, None)
        if info is not None:
            info.update({"state": msg.step, "reason": msg.reason, "ended_at": self.ctx.now()})
            self.finished.append(info)
            _logger.info("rebalance ended", group=str(msg.group), step=msg.step,
                         reason=msg.reason)

    def status(self) -> dict[str, Any]:
        return {"node": self.me, "term": self.term,
                "running": [dict(i) for _, i in sorted(self.running.items(),
                                                       key=lambda x: str(x[0]))],
                "finished": list(self.finished)}


async def rebalance_driver(ctx: Process, config: RebalanceDriverConfig, term: int) -> None:
    """Process entry (a `while_leading` child of the metastore group)."""
    d = _Driver(ctx, config, term)
    ctx.send(ctx.self(), _Tick())
    while True:
        msg = await ctx.receive()
        if isinstance(msg, _Tick):
            await d.tick()
            ctx.send_after(config.interval, ctx.self(), _Tick())
        elif isinstance(msg, _Recording):
            d.recording(msg)
        elif isinstance(msg, _Ended):
            d.ended(msg)
        elif isinstance(msg, Call):
            if isinstance(msg.request, Status):
                ctx.reply(msg.from_, d.status())
            else:
                ctx.reply(msg.from_, UnknownRequest.of(msg.request))
        else:
            _logger.warning("rebalance driver got an unexpected message",
                            message=repr(msg)[:200])


__all__ = ["BEFORE_RECORD", "RebalanceDriverConfig", "rebalance_driver", "rebalance_task"]
