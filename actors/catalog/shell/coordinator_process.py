"""The catalog compaction coordinator as a process (docs/catalog.md §7 step 4): runs
beside the metastore leader (`while_leading` starts it for each term its node leads,
and kills it when the node stops leading), feeds `compaction_coordinator.step` and
executes its effects.

- On start it is the coordinator (`CoordinatorChanged(me)`, Ignite's trigger on a
  coordinator change); it subscribes to its node's low watermark (`LowWatermarkChanged`
  on every change) and follows the logical topology: the nodes whose table node runs,
  watched by monitors and looked up again every `topology_interval`.
- `CollectLocalMinTimes` / `RequestMinTimes` send a `MinTimesRequest` to the node's
  table node, which answers with a message; a node that is not running fails the
  iteration at once (`MinTimesFailed`).
- `SetTimer` is a message to itself at the deadline (`TimerFired`): answers that never
  come end the iteration as `timeout` (Ignite: 10 s).
- `PropagateTxTime` sends `PrepareUpdateTxBeginTime` to every node of the iteration.
- `RequestView` reads the local metastore replica (the catalog log and the assignments).
- `ProposeCompaction` proposes `CompactCatalog(v)` in a task process; its answer is
  `CompactionResult`. The command is conditional, so a proposal whose answer was lost
  (the leader killed) is harmless.
- `IterationEnded` goes to the log and into the last `KEEP` outcomes, which
  `Status()` returns (with when each compaction was proposed, for the recorder).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from sediment import log
from sediment.actors.catalog import compaction_coordinator as cc
from sediment.actors.catalog.compaction_messages import (
    MinTimesReply,
    MinTimesRequest,
    PrepareUpdateTxBeginTime,
)
from sediment.actors.catalog.compaction_rules import CompactionView
from sediment.actors.catalog.hlc import HybridTimestamp, hts
from sediment.actors.catalog.machine import CompactCatalog, SnapshotSaved
from sediment.actors.catalog.metastore_machine import ViewQuery
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Propose, Query
from sediment.actors.tables.names import META_GROUP, table_node_name
from sediment.actors.tables.shell import named_pids
from sediment.actors.tables.shell.group_task import TaskDone, spawn_task
from sediment.actors.tables.shell.node_protocol import LwmChanged, LwmNow, MinTimesAsk, SubscribeLwm
from sediment.runtime.common_calls import Status, UnknownRequest
from sediment.runtime.core_driver import CoreDriver
from sediment.runtime.errors import CallError
from sediment.runtime.messages import Call, Down
from sediment.runtime.pid import Pid, Ref
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.catalog.coordinator")
KEEP = 64
CatalogDriver = CoreDriver[cc.CoordinatorState, cc.Event, cc.Effect]


@dataclass(frozen=True)
class CoordinatorProcessConfig:
    nodes: tuple[str, ...]
    answer_timeout_ms: int = cc.ANSWER_TIMEOUT_MS
    topology_interval: float = 0.5
    # node -> ms added to its table node's physical clock (TableNodeConfig's): the view's
    # "now" is on the same clock as the watermark and the catalog's activations
    clock_offsets_ms: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class _Probe:
    pass


class _Coordinator:
    def __init__(self, ctx: Process, config: CoordinatorProcessConfig, term: int) -> None:
        self.ctx = ctx
        self.config = config
        self.term = term
        self.me = ctx.self().node
        self.driver: CatalogDriver = CoreDriver(
            ctx, lambda s, e: cc.step(s, e, self.now_ms()),
            cc.init(cc.CoordinatorConfig(self.me, config.answer_timeout_ms)))
        self.driver.on(cc.CollectLocalMinTimes, self.ask_min_times)
        self.driver.on(cc.RequestMinTimes, self.ask_min_times)
        self.driver.on(cc.SetTimer, lambda e: self.driver.arm_at(
            e.at_ms / 1000, cc.TimerFired(e.iteration, e.phase)))
        self.driver.on(cc.PropagateTxTime, self.propagate)
        self.driver.on(cc.RequestView, self.read_view)
        self.driver.on(cc.ProposeCompaction, self.propose)
        self.driver.on(cc.IterationEnded, self.ended)
        self.driver.ignore(cc.Skipped)
        self.members: dict[str, Pid] = {}
        self.monitors: dict[Ref, str] = {}
        self.outcomes: deque[dict[str, Any]] = deque(maxlen=KEEP)
        self.proposed_at: dict[int, float] = {}
        self.lwm: HybridTimestamp | None = None

    def now_ms(self) -> int:
        return int(self.ctx.now() * 1000)

    async def step(self, event: cc.Event) -> None:
        """Step the core, then the follow-ups its effects gave, first in first out."""
        await self.driver.run(event)

    async def ask_min_times(self, e: cc.CollectLocalMinTimes | cc.RequestMinTimes,
                            ) -> cc.Event | None:
        ctx = self.ctx
        node = self.me if isinstance(e, cc.CollectLocalMinTimes) else e.node
        pid = self.members.get(node) or await ctx.whereis(table_node_name(node))
        if pid is None:
            return cc.MinTimesFailed(e.iteration, node, "not running")
        ctx.send(pid, MinTimesAsk(MinTimesRequest(e.iteration, self.me), ctx.self()))
        return None

    def propagate(self, e: cc.PropagateTxTime) -> None:
        for node in sorted(e.nodes):
            pid = self.members.get(node)
            if pid is not None:
                self.ctx.send(pid, PrepareUpdateTxBeginTime(e.ts))

    async def read_view(self, e: cc.RequestView) -> cc.Event:
        try:
            log_, assignments = await named_pids.call(self.ctx, raft_name(META_GROUP, self.me),
                                                    Query(ViewQuery()), timeout=10)
        except CallError as err:
            return cc.ViewFailed(e.iteration, f"metastore unreadable: {err}")
        offset = dict(self.config.clock_offsets_ms).get(self.me, 0)
        return cc.ViewReady(e.iteration, CompactionView(log_, hts(self.now_ms() + offset),
                                                        assignments))

    async def propose(self, e: cc.ProposeCompaction) -> None:
        self.proposed_at[e.iteration] = self.ctx.now()
        await spawn_task(self.ctx, META_GROUP, self.config.nodes,
                         (Propose(CompactCatalog(e.version)),), e.iteration)

    def ended(self, e: cc.IterationEnded) -> None:
        record = {"iteration": e.iteration, "term": self.term, "outcome": e.outcome,
                  "detail": e.detail, "version": e.version, "at": self.ctx.now(),
                  "proposed_at": self.proposed_at.pop(e.iteration, None)}
        self.outcomes.append(record)
        _logger.info("compaction iteration ended", **{k: v for k, v in record.items()
                                                       if v is not None})

    async def probe(self) -> None:
        """The logical topology: every node whose table node runs."""
        for node in self.config.nodes:
            if node in self.members:
                continue
            pid = await self.ctx.whereis(table_node_name(node))
            if pid is not None:
                self.members[node] = pid
                self.monitors[self.ctx.monitor(pid)] = node
                if node == self.me:  # our node's low watermark, again after its restart
                    reply = await self.ctx.call(pid, SubscribeLwm(self.ctx.self()), timeout=10)
                    if isinstance(reply, LwmNow) and isinstance(reply.lwm, HybridTimestamp):
                        self.lwm = reply.lwm
        await self.step(cc.TopologyChanged(frozenset(self.members)))

    def status(self) -> dict[str, Any]:
        state = self.driver.state
        it = state.iteration
        return {"node": self.me, "term": self.term, "lwm": state.lwm,
                "topology": sorted(state.topology),
                "iteration": None if it is None else {"id": it.id, "phase": it.phase,
                                                      "waiting": sorted(it.topology -
                                                                        set(it.replies))},
                "outcomes": list(self.outcomes)}


async def coordinator_process(ctx: Process, config: CoordinatorProcessConfig, term: int) -> None:
    """Process entry (a `while_leading` child of the metastore group)."""
    c = _Coordinator(ctx, config, term)
    await c.probe()
    await c.step(cc.CoordinatorChanged(c.me, c.now_ms()))
    if c.lwm is not None:
        await c.step(cc.LowWatermarkChanged(c.lwm, c.now_ms()))
    ctx.send_after(config.topology_interval, ctx.self(), _Probe())
    _logger.info("compaction coordinator up", node=c.me, term=term)
    await c.driver.serve(lambda msg: _events(c, msg))


async def _events(c: _Coordinator, msg: Any) -> list[cc.Event]:
    """The core's events of one message (none for a call, a probe runs its own step)."""
    ctx = c.ctx
    if isinstance(msg, LwmChanged):
        return [cc.LowWatermarkChanged(msg.lwm, c.now_ms())]
    if isinstance(msg, MinTimesReply):
        return [cc.MinTimesReceived(msg)]
    if isinstance(msg, cc.TimerFired):
        return [msg]
    if isinstance(msg, TaskDone):
        result = msg.results[0] if msg.ok else None
        if isinstance(result, SnapshotSaved):
            return [cc.CompactionResult(msg.tag, result.saved)]
        return [cc.CompactionResult(msg.tag, False, msg.error or repr(result))]
    if isinstance(msg, _Probe):
        await c.probe()
        ctx.send_after(c.config.topology_interval, ctx.self(), _Probe())
    elif isinstance(msg, Down):
        node = c.monitors.pop(msg.ref, None)
        if node is not None:
            c.members.pop(node, None)
            return [cc.TopologyChanged(frozenset(c.members))]
    elif isinstance(msg, Call):
        if isinstance(msg.request, Status):
            ctx.reply(msg.from_, c.status())
        else:
            ctx.reply(msg.from_, UnknownRequest.of(msg.request))
    else:
        _logger.warning("coordinator got an unexpected message", message=repr(msg)[:200])
    return []


__all__ = ["CoordinatorProcessConfig", "coordinator_process"]
