"""Reading the KV machine of this node's raft member: one place for the query shapes.

The machine lives inside the raft server process (it applies the log); node and watcher
processes read it with `Query(request)` calls, which the raft server answers between
log steps.
"""

from __future__ import annotations

from typing import Any

from sediment.actors.kv.errors import KvError
from sediment.actors.kv.queries import AppliedSince, CompactRevisions, Head, WatchHistory
from sediment.actors.kv.types import AppliedBatch, Event
from sediment.actors.log.shell.protocol import Query
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

READ_TIMEOUT = 30.0
ALL_FROM = b"\0"  # the smallest key; with range_end ALL_FROM: every key


async def watch_history(ctx: Process, raft: Pid, lo: int, hi: int, key: bytes = ALL_FROM,
                        range_end: bytes | None = ALL_FROM, prev_kv: bool = True) -> Any:
    """The changes of [key, range_end) in revisions [lo, hi] for a watch's replay: a list
    of Event, or the typed error the machine returned (ErrCompacted when lo is at or below
    the compact revision: a watch needs revisions above it)."""
    return await ctx.call(raft, Query(WatchHistory(lo, hi, key, range_end, prev_kv)),
                          timeout=READ_TIMEOUT)


async def compaction(ctx: Process, raft: Pid) -> tuple[int, int]:
    """(compact revision, finished compact revision) of the local machine."""
    low, finished = await ctx.call(raft, Query(CompactRevisions()), timeout=READ_TIMEOUT)
    return int(low), int(finished)


async def head(ctx: Process, raft: Pid) -> int:
    """The local machine's head revision (the last written one)."""
    return int(await ctx.call(raft, Query(Head()), timeout=READ_TIMEOUT))


async def applied_batch(ctx: Process, raft: Pid, lo: int, hi: int | None) -> AppliedBatch:
    """The changes of revisions [lo, hi] (hi None: up to head; None when a compaction
    reached lo), the compact revision and the head, read in one query after an applied
    batch."""
    reply = await ctx.call(raft, Query(AppliedSince(lo, hi)), timeout=READ_TIMEOUT)
    if not isinstance(reply, AppliedBatch):
        raise KvError(f"applied_batch({lo}, {hi}) failed: {reply!r}"[:200])
    return reply


def as_events(value: Any) -> tuple[Event, ...] | None:
    return tuple(value) if isinstance(value, list | tuple) else None


__all__ = ["ALL_FROM", "applied_batch", "as_events", "compaction", "head", "watch_history"]
