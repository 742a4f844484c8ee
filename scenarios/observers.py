"""The processes of a scenario run that observe the cluster from outside.

- `view`: every member's status at once (`observe.ClusterView`).
- `log_tail`: reads every committed raft entry while members still hold it in memory:
  the committed history, so the watch checks know every event and indeterminate
  operations get their place in the log.
- `monitor`: samples every member's status for the timeline (leaders, compaction).

They live on the runner's `client` node, which no fault touches.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from sediment.actors.kv.names import KV_GROUP, kv_node_name
from sediment.actors.kv.queries import Revisions
from sediment.actors.log.shell.codec import from_stored
from sediment.actors.log.shell.names import raft_name, wal_name
from sediment.actors.log.shell.protocol import Found, Query, ReadEntry
from sediment.actors.log.shell.wal_server import ReadStored
from sediment.actors.log.storage.records import Entry as StoredEntry
from sediment.runtime.common_calls import Status
from sediment.runtime.errors import CallError, ReceiveTimeout
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process
from sediment.scenarios import observe
from sediment.scenarios import recorder_protocol as rp
from sediment.scenarios.processes import Entry, Missing
from sediment.scenarios.run_protocol import Stop, StopTail

STATUS_TIMEOUT = 1.0  # seconds for one status answer while probing
TAIL_BATCH = 256  # entries per report of the log tail
TAIL_PARALLEL = 32  # entries the tail reads at once (before a snapshot drops them)


async def _gather(ctx: Process, calls: list[tuple[str, Any]]) -> list[Any]:
    async def one(name: str, request: Any) -> Any:
        try:
            return await ctx.call(name, request, timeout=STATUS_TIMEOUT)
        except CallError:
            return None
    return list(await asyncio.gather(*(one(n, r) for n, r in calls)))


async def view(ctx: Process, nodes: tuple[str, ...], kv: bool = True) -> observe.ClusterView:
    """Every member's status at once (without `kv`, only the raft servers')."""
    asked = ctx.now()  # every answer comes after this: a floor seen low was low then
    calls = [(raft_name(KV_GROUP, n), Status()) for n in nodes]
    if kv:
        calls += [(kv_node_name(n), Status()) for n in nodes]
    answers = await _gather(ctx, calls)
    members = tuple(observe.member(n, _dict(answers[i]),
                                   _dict(answers[len(nodes) + i]) if kv else None)
                    for i, n in enumerate(nodes))
    return observe.ClusterView(asked, members)


def _dict(x: Any) -> dict[str, Any] | None:
    return x if isinstance(x, dict) else None


@dataclass(frozen=True)
class TailConfig:
    nodes: tuple[str, ...]
    recorder: Pid
    interval: float


async def log_tail(ctx: Process, cfg: TailConfig) -> None:
    """Process entry: report committed entries in order until `StopTail(upto)` and every
    entry up to `upto` was reported."""
    next_index, stop_at = 1, None
    while True:
        try:
            msg = await ctx.receive(lambda m: isinstance(m, StopTail), timeout=0)
            stop_at = msg.upto
        except ReceiveTimeout:
            pass
        if stop_at is not None and next_index > stop_at:
            ctx.send(cfg.recorder, rp.Finished("tail"))
            return
        current = await view(ctx, cfg.nodes, kv=False)
        members = sorted((m for m in current.members if m.up), key=lambda m: -m.commit)
        commit = members[0].commit if members else 0
        if stop_at is not None:
            commit = min(commit, stop_at)
        batch: list[Entry] = []
        while next_index <= commit and len(batch) < TAIL_BATCH:
            hi = min(commit, next_index + TAIL_PARALLEL - 1)
            batch += await asyncio.gather(*(_read_entry(ctx, i, members)
                                            for i in range(next_index, hi + 1)))
            next_index = hi + 1
        if batch:
            ctx.send(cfg.recorder, rp.EntriesRead(tuple(batch)))
        if next_index > commit:
            await ctx.sleep(cfg.interval)


async def _read_entry(ctx: Process, index: int,
                      members: list[observe.MemberView]) -> Entry:
    for m in members:
        if m.commit < index:
            break
        try:
            reply = await ctx.call(raft_name(KV_GROUP, m.node), ReadEntry(index),
                                   timeout=STATUS_TIMEOUT)
        except CallError:
            continue
        if isinstance(reply, Found):
            return Entry(index, reply.value, ctx.now())
    for m in members:  # gone from memory after a snapshot: the WAL may still hold it
        try:
            stored = await ctx.call(wal_name(m.node), ReadStored(KV_GROUP, index),
                                    timeout=STATUS_TIMEOUT)
        except CallError:
            continue
        if isinstance(stored, StoredEntry):
            return Entry(index, from_stored(stored).command, ctx.now())
    return Entry(index, await _revision_of(ctx, index, members), ctx.now())


async def _revision_of(ctx: Process, index: int,
                       members: list[observe.MemberView]) -> Missing:
    """What a member that applied entry `index` says it wrote: its revision, or none
    (every member keeps the whole revision <-> raft index map)."""
    for m in members:
        if m.applied < index:
            continue
        try:
            reply = await ctx.call(raft_name(KV_GROUP, m.node),
                                   Query(Revisions(index, index)),
                                   timeout=STATUS_TIMEOUT)
        except CallError:
            continue
        if isinstance(reply, list):
            return Missing(reply[0][0] if reply else None, mapped=True)
    return Missing()


@dataclass(frozen=True)
class MonitorConfig:
    nodes: tuple[str, ...]
    recorder: Pid
    interval: float


async def monitor(ctx: Process, cfg: MonitorConfig) -> None:
    """Process entry: a cluster sample every `interval` until `Stop()`."""
    while True:
        ctx.send(cfg.recorder, rp.Sampled(await view(ctx, cfg.nodes)))
        try:
            await ctx.receive(lambda m: isinstance(m, Stop), timeout=cfg.interval)
            ctx.send(cfg.recorder, rp.Finished("monitor"))
            return
        except ReceiveTimeout:
            pass


__all__ = ["MonitorConfig", "Stop", "StopTail", "TailConfig", "log_tail", "monitor", "view"]
