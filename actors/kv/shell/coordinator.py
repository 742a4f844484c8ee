"""The compaction coordinator process: the shell around `coordinator_core` on the leader.

The node process starts it (linked) when its raft member becomes leader and stops it
when leadership goes. It talks to every node's KV node process by message: requests
carry the coordinator's pid, replies come back as messages, and each phase is bounded by
the core's timers (`send_after`). The Compact proposal is a call to the local raft
member, bounded by the core's propose timeout: nothing else can happen in that phase.
Failpoint `coordinator.before_propose` sits between the confirmed notices and the
proposal: paused there, the notice phase lasts as long as a fault scenario needs to hit
it (on Ray the phase is otherwise a few milliseconds).

With a block tier the hold (QueryHold) is asked of a `FlushHold` the node was given
(`KvNodeConfig.flush_hold`): the KV does not know who answers it. The wiring layer
(`sediment/wiring/`) passes the block tier's `flushed_through` (in
`actors/blocks/shell/flush_hold.py`, which reads the metastore). No answer within the min
timeout: no HoldReply, and the cycle aborts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sediment import log
from sediment.actors.kv import coordinator_core as cc
from sediment.actors.kv import metrics as kv_metrics
from sediment.actors.kv.admission import CycleId
from sediment.actors.kv.names import KV_GROUP, kv_node_name
from sediment.actors.kv.shell.node_protocol import (
    MinAnswer,
    MinRequest,
    Notice,
    NoticeAnswer,
    Rollback,
)
from sediment.actors.kv.types import Compact
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Done, Propose
from sediment.runtime.core_driver import CoreDriver
from sediment.runtime.errors import CallError, CallTimeout
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.kv.coordinator")

BEFORE_PROPOSE = "coordinator.before_propose"

# The hold's source: (the coordinator's process, the KV's nodes, a timeout) -> the
# revision the KV may compact up to at most, or None when it got no answer in time.
FlushHold = Callable[[Process, tuple[str, ...], float], Awaitable[int | None]]


@dataclass(frozen=True)
class _Timer:
    cycle: CycleId | None
    phase: str


CoordinatorDriver = CoreDriver[cc.CoordinatorState, cc.Event, cc.Effect]


async def coordinator(ctx: Process, nodes: tuple[str, ...], term: int, compaction_revision: int,
                      config: cc.CoordinatorConfig, hold: FlushHold | None = None) -> None:
    """Process entry: run cycles until killed (leadership lost). `hold`: asked once a
    cycle when `config.hold` is set."""
    driver: CoordinatorDriver = CoreDriver(ctx, cc.step, cc.init(config, compaction_revision))
    driver.on(cc.SendMinRequest, lambda effect: _to_node(
        ctx, effect.node, MinRequest(effect.cycle, ctx.self())))
    driver.on(cc.SendNotice, lambda effect: _to_node(
        ctx, effect.node, Notice(effect.cycle, effect.revision, effect.attempt, ctx.self())))
    driver.on(cc.SendRollback, lambda effect: _to_node(
        ctx, effect.node, Rollback(effect.cycle, effect.revision)))
    driver.on(cc.SetTimer, lambda effect: driver.arm_at(
        effect.deadline, _Timer(effect.cycle, effect.phase)))
    driver.on(cc.ProposeCompact, lambda effect: _propose(ctx, effect, config.propose_timeout))
    driver.on(cc.QueryHold, lambda effect: _hold(ctx, effect, hold, nodes, config.min_timeout))
    driver.on(cc.CycleEnded, lambda effect: _cycle_ended(ctx, effect))

    async def to_events(msg: Any) -> list[cc.Event]:
        event = _event(ctx, msg)
        return [] if event is None else [event]

    driver.post(cc.Start(ctx.now(), term, nodes, compaction_revision))
    _logger.info("compaction coordinator up", term=term, nodes=nodes,
                 compaction_revision=compaction_revision)
    await driver.serve(to_events)


def _event(ctx: Process, msg: Any) -> cc.Event | None:
    now = ctx.now()
    if isinstance(msg, _Timer):
        if msg.cycle is None:
            return cc.Tick(now)
        return cc.Timeout(msg.cycle, msg.phase, now)  # type: ignore[arg-type]
    if isinstance(msg, MinAnswer):
        return cc.MinReply(msg.node, msg.cycle, msg.revision, now)
    if isinstance(msg, NoticeAnswer):
        return cc.NoticeReply(msg.node, msg.cycle, msg.revision, msg.attempt, msg.confirmed,
                              now)
    _logger.warning("coordinator got an unexpected message", message=repr(msg)[:200])
    return None


def _cycle_ended(ctx: Process, effect: cc.CycleEnded) -> None:
    kv_metrics.cycle_ended(ctx.self().node, effect)
    _logger.info("compaction cycle ended", cycle=(effect.cycle.term, effect.cycle.seq),
                 outcome=effect.outcome, revision=effect.revision, failed=effect.nodes,
                 mins=dict(effect.mins),
                 seconds=round(effect.duration, 3))


async def _to_node(ctx: Process, node: str, msg: Any) -> None:
    """A node that is down loses the message; the phase's timer covers it."""
    pid = await ctx.whereis(kv_node_name(node))
    if pid is not None:
        ctx.send(pid, msg)


async def _hold(ctx: Process, effect: cc.QueryHold, hold: FlushHold | None,
                nodes: tuple[str, ...], timeout: float) -> cc.Event | None:
    """The hold's revision as a HoldReply; None if it gave none (the min phase's timer
    then ends the cycle)."""
    through = None if hold is None else await hold(ctx, nodes, timeout)
    return None if through is None else cc.HoldReply(effect.cycle, through, ctx.now())


async def _propose(ctx: Process, effect: cc.ProposeCompact, timeout: float) -> cc.Event:
    await ctx.failpoint(BEFORE_PROPOSE)
    raft = await ctx.whereis(raft_name(KV_GROUP, ctx.self().node))
    try:
        if raft is None:
            raise CallError("the local raft member is down")
        reply = await ctx.call(raft, Propose(Compact(effect.revision)), timeout=timeout)
    except CallTimeout:
        return cc.Timeout(effect.cycle, "propose", ctx.now())
    except CallError as exc:
        _logger.warning("compact proposal failed", error=str(exc))
        return cc.ProposeResult(effect.cycle, effect.revision, False, ctx.now())
    ok = isinstance(reply, Done) and not isinstance(reply.result, Exception)
    if not ok:
        _logger.warning("compact proposal refused", reply=repr(reply)[:200])
    return cc.ProposeResult(effect.cycle, effect.revision, ok, ctx.now())


__all__ = ["BEFORE_PROPOSE", "FlushHold", "MinRequest", "Notice", "Rollback", "coordinator"]
