"""A scenario run with the KV's block tier: the tier it starts, the tier's processes as
fault targets, the tier's protocol moments, and the run's own tier processes.

- `block_tier(spec, settings)`: the `BlockTier` of `cluster.blocks`; the metastore group
  gets the KV group's raft timing and WAL size (they share each node's WAL, whose size
  is the largest any group asks for).
- `resolve(...)`: a tier role to (pid, node, supervisor child id), when the fault fires:
  `flusher` (beside the KV leader; child: its flush node, which keeps it down),
  `flush_node`, `compaction_worker` (one holding a job's lease if any does, else any),
  `compaction_service` (on the metastore leader; child: its blocks node),
  `metastore_leader` / `metastore` (the group's raft member), `blocks_node`.
- `wait_for_tier`: polls until a tier moment is under way: `job_leased` (a compaction
  worker holds a job; on the fault target's node when it names one, so that a fault on
  one node's worker waits for that worker to hold one), `flush_behind` (the KV leader's
  committed history is ahead of the flush cursor and its compaction has caught up with
  the cursor: the hold is what keeps it there).
- `tier_monitor`: hold samples (each KV member's applied compact revision, then the
  committed flush cursor read through the metastore's log) until asked for them.
- `history_compactor`: every `every` seconds, the blocks' compaction revision moves up to
  the flush cursor minus `keep` (merges from then on drop history below it).

Every wait is bounded (call timeouts, attempts); the processes run on the runner's own
node, which no fault touches.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sediment.actors.blocks.meta import FlushPolicy
from sediment.actors.blocks.metastore import (
    FlushCursor,
    FlushCursorQuery,
    ReadFlushCursor,
    SetCompactionRevision,
)
from sediment.actors.blocks.planner import LevelConfig, PlannerConfig
from sediment.actors.blocks.scheduler import SchedulerConfig
from sediment.actors.blocks.shell.cluster import NODE_CHILD, RAFT_CHILD
from sediment.actors.blocks.shell.executor import PyarrowExecutor
from sediment.actors.blocks.shell.names import (
    METASTORE_GROUP,
    flusher_name,
    service_name,
    worker_pool_name,
)
from sediment.actors.blocks.shell.tier import FLUSH_NODE_CHILD, BlockTier
from sediment.actors.blocks.worker import WorkerConfig
from sediment.actors.kv.names import KV_GROUP
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Done, NotLeader, Propose, Query
from sediment.runtime.common_calls import Status
from sediment.runtime.errors import CallError, ReceiveTimeout, RuntimeErrorBase
from sediment.runtime.messages import Call
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process
from sediment.scenarios.checkers.tier_state import HoldSample
from sediment.scenarios.processes import wait_for_go
from sediment.scenarios.schema import Settings
from sediment.scenarios.schema_blocks import BlocksSpec, HistoryCompaction
from sediment.supervision import requests

CALL_TIMEOUT = 1.0  # seconds for one status or query while polling
PROPOSE_TIMEOUT = 3.0  # seconds for one metastore proposal
CHILD_OF_TIER_ROLE = {"flush_node": FLUSH_NODE_CHILD, "metastore": RAFT_CHILD,
                      "metastore_leader": RAFT_CHILD, "blocks_node": NODE_CHILD}
GROUP_SETTINGS = ("election_timeout", "heartbeat_interval", "wal_max_size")


def block_tier(spec: BlocksSpec, settings: Settings) -> BlockTier:
    group = {k: v for k, v in settings.to_kwargs().items() if k in GROUP_SETTINGS}
    return BlockTier(
        shards=spec.shards,
        flush=FlushPolicy(spec.flush.max_rows, spec.flush.max_bytes, spec.flush.max_age),
        workers_per_node=spec.workers_per_node,
        planner=PlannerConfig(levels=tuple(LevelConfig(lv.max_blocks, lv.max_age)
                                           for lv in spec.levels),
                              cleanup_delay=spec.cleanup_delay),
        scheduler=SchedulerConfig(lease_duration=spec.lease_duration,
                                  max_failures=spec.max_failures),
        worker=WorkerConfig(capacity=spec.capacity, poll_interval=spec.poll_interval),
        executor=PyarrowExecutor(),
        read_batch=spec.read_batch,
        flush_tick=spec.flush_tick,
        tuning={"cleanup_interval": spec.cleanup_interval},
        group_options=group,
    )


# ---- fault targets (driver side) ----------------------------------------------------------

Children = Callable[[str], dict[str, Pid | None]]


def resolve(cluster: Any, rng: random.Random, role: str, node: str | None,
            children: Children) -> tuple[Pid | None, str, str | None]:
    """(pid, node, supervisor child id or None) of a tier role's process, now."""
    rt, nodes = cluster.rt, tuple(cluster.nodes)
    if role == "flusher":
        where = cluster.leader() or rng.choice(nodes)
        return rt.whereis(flusher_name(where)), where, FLUSH_NODE_CHILD
    if role == "compaction_worker":
        return _worker(cluster, rng, node)
    if role in ("compaction_service", "metastore_leader"):
        where = _metastore_leader(cluster) or rng.choice(nodes)
        if role == "compaction_service":
            return rt.whereis(service_name(where)), where, NODE_CHILD
    else:
        where = node or rng.choice(nodes)
    child = CHILD_OF_TIER_ROLE[role]
    return children(where).get(child), where, child


def _metastore_leader(cluster: Any) -> str | None:
    leader = cluster.blocks.leader() if cluster.blocks is not None else None
    return leader if isinstance(leader, str) else None


def _worker(cluster: Any, rng: random.Random,
            node: str | None) -> tuple[Pid | None, str, str | None]:
    """A worker holding a job's lease if one does (on `node` if given), else any."""
    if cluster.blocks is None:
        return None, node or "?", None
    nodes = [node] if node is not None else list(cluster.nodes)
    workers = sorted((p for n in nodes for p in cluster.blocks.node(n).workers()), key=str)
    holding = [p for p in workers
               if (cluster.blocks.worker_status(p) or {}).get("jobs")]
    pool = holding or workers
    if not pool:
        return None, node or "?", None
    pid = rng.choice(pool)
    return pid, pid.node, None


# ---- talking to the tier from a process ---------------------------------------------------


async def _call(ctx: Process, dest: str | Pid, request: Any,
                timeout: float = CALL_TIMEOUT) -> Any:
    try:
        return await ctx.call(dest, request, timeout=timeout)
    except CallError:
        return None


async def metastore_propose(ctx: Process, nodes: tuple[str, ...], command: Any) -> Any:
    """The metastore machine's result of `command`, proposed through whichever member
    leads (following hints, a bounded number of tries); None if none took it. Only for
    commands that may be proposed twice (reads, forward-only settings)."""
    hint: str | None = None
    for attempt in range(2 * len(nodes)):
        node = hint or nodes[attempt % len(nodes)]
        hint = None
        reply = await _call(ctx, raft_name(METASTORE_GROUP, node), Propose(command),
                            PROPOSE_TIMEOUT)
        if isinstance(reply, Done):
            return reply.result
        if isinstance(reply, NotLeader):
            hint = reply.hint if reply.hint in nodes and reply.hint != node else None
    return None


async def applied_cursor(ctx: Process, nodes: tuple[str, ...]) -> int:
    """The highest flush cursor a metastore member has applied (0: none answered)."""
    best = 0
    for n in nodes:
        answer = await _call(ctx, raft_name(METASTORE_GROUP, n), Query(FlushCursorQuery()))
        if isinstance(answer, FlushCursor):
            best = max(best, answer.through)
    return best


async def kv_statuses(ctx: Process, nodes: tuple[str, ...]) -> list[dict[str, Any]]:
    out = []
    for n in nodes:
        status = await _call(ctx, raft_name(KV_GROUP, n), Status())
        if isinstance(status, dict):
            out.append(status)
    return out


async def workers_holding(ctx: Process, nodes: tuple[str, ...]) -> list[str]:
    """'pid: job' for every compaction worker that holds a job now."""
    out = []
    for n in nodes:
        children = await _call(ctx, worker_pool_name(n), requests.WhichChildren())
        for child in children if isinstance(children, list) else []:
            pid = child[1] if isinstance(child, tuple) and len(child) > 1 else None
            if not isinstance(pid, Pid):
                continue
            status = await _call(ctx, pid, Status())
            jobs = status.get("jobs") if isinstance(status, dict) else None
            if jobs:
                out += [f"{pid}: {name}" for name in sorted(jobs)]
    return out


# ---- protocol moments ---------------------------------------------------------------------


async def tier_moment(ctx: Process, nodes: tuple[str, ...], trigger: str,
                      on: str | None = None) -> tuple[bool, str]:
    """Whether the tier moment `trigger` is under way now (`on`: at that node's
    workers only, for job_leased), and what was seen."""
    if trigger == "job_leased":
        holding = await workers_holding(ctx, nodes if on is None else (on,))
        return bool(holding), "; ".join(holding) or "no worker holds a job"
    statuses = await kv_statuses(ctx, nodes)
    leaders = [s for s in statuses if s.get("role") == "leader"]
    cursor = await applied_cursor(ctx, nodes)
    if not leaders:
        return False, f"no KV leader; flush cursor {cursor}"
    lead = max(leaders, key=lambda s: int(s.get("term", 0)))
    head, compact = int(lead.get("head", 0)), int(lead.get("compact_revision", 0))
    seen = f"KV head {head}, compacted through {compact}, flush cursor {cursor}"
    return cursor > 0 and head > cursor + 1 and compact >= cursor, seen


async def wait_for_tier(ctx: Process, nodes: tuple[str, ...], trigger: str, deadline: float,
                        interval: float, on: str | None = None,
                        ) -> tuple[bool, float, str, str | None]:
    """Process entry: poll until `trigger` holds or `deadline`; (hit, time, what was seen,
    None: the KV leader is not looked at here)."""
    while True:
        hit, seen = await tier_moment(ctx, nodes, trigger, on)
        if hit or ctx.now() + interval >= deadline:
            return hit, ctx.now(), seen, None
        await ctx.sleep(interval)


# ---- the run's tier processes -------------------------------------------------------------


@dataclass(frozen=True)
class MonitorConfig:
    nodes: tuple[str, ...]
    interval: float


async def tier_monitor(ctx: Process, cfg: MonitorConfig) -> None:
    """Process entry: a hold sample every `interval` (runtime clock times) until a
    call, which gets them all; then it ends."""
    samples: list[HoldSample] = []
    while True:
        statuses = await kv_statuses(ctx, cfg.nodes)
        compact = max((int(s.get("compact_revision", 0)) for s in statuses), default=0)
        t = ctx.now()
        cursor = await metastore_propose(ctx, cfg.nodes, ReadFlushCursor())
        if statuses and isinstance(cursor, FlushCursor):
            samples.append(HoldSample(t, compact, cursor.through))
        try:
            msg = await ctx.receive(lambda m: isinstance(m, Call), timeout=cfg.interval)
        except ReceiveTimeout:
            continue
        ctx.reply(msg.from_, tuple(samples))
        return


@dataclass(frozen=True)
class CompactorConfig:
    nodes: tuple[str, ...]
    compaction: HistoryCompaction


async def history_compactor(ctx: Process, cfg: CompactorConfig) -> None:
    """Process entry: the blocks' compaction revision up to cursor - keep, every `every`
    seconds from the driver's `Go` until the traffic's end (spawned with the traffic, so
    that its start does not eat into the run's clock)."""
    go = await wait_for_go(ctx)
    last = 0
    while ctx.now() + cfg.compaction.every < go.end_t:
        await ctx.sleep(cfg.compaction.every)
        target = await applied_cursor(ctx, cfg.nodes) - cfg.compaction.keep
        if target > last:
            result = await metastore_propose(ctx, cfg.nodes, SetCompactionRevision(target))
            if isinstance(result, int):
                last = result


def stop_monitor(rt: Any, pid: Pid, t0: float, timeout: float) -> tuple[HoldSample, ...]:
    """The monitor's samples (driver side), their times shifted to the run's."""
    try:
        samples = rt.call(pid, ("samples",), timeout=timeout)
    except RuntimeErrorBase:
        return ()
    return tuple(HoldSample(max(0.0, s.t - t0), s.kv_compact, s.cursor)
                 for s in samples if isinstance(s, HoldSample))


__all__ = [
    "CompactorConfig", "MonitorConfig", "block_tier", "history_compactor",
    "metastore_propose", "resolve", "stop_monitor", "tier_moment", "tier_monitor",
    "wait_for_tier",
]
