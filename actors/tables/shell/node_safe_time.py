"""The clock exchange behind read-only reads (docs/catalog.md rule 5): the shell of
`safe_time.py`.

Nothing is exchanged while no read-only read runs (an idle cluster pays nothing). A
read at `ts` that the node's tracker cannot serve yet carries, in its reader process,
the list of nodes to hear from; the reader calls each one's table node with
`Clock(ts)`. That table node first lets its hybrid clock observe `ts` when `ts` is
within the maximum clock skew of its own physical clock (so clocks that agree make the
read safe in one round trip, and a commit it stamps later is above `ts`), then answers
`ClockReading(node, incarnation, now)`. The reader feeds the answers into its copy of the
tracker and tells its table node (`ClockHeard`, so later reads at or below them need no
round trip). A node whose clock is further behind than the skew bound is not pushed: the
read waits until that node's own clock passes `ts` (asked again every `wait`, at most
`max_waits` times, then `SafeTimeUnavailable`). A node whose table node does not exist
(stopped, killed: `NoProc`) coordinates nothing now and leaves the read's topology; a
restarted table node first hears every peer's clock before it serves (`start_clock`).
A node that does not answer in time is asked again, never dropped.

The table nodes never call each other for this: only reader processes call, so two
nodes cannot block on each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.actors.tables import safe_time as st
from sediment.actors.tables.errors import SafeTimeUnavailable
from sediment.actors.tables.names import table_node_name
from sediment.actors.tables.shell import named_pids
from sediment.actors.tables.shell.node_protocol import Clock, ClockReading
from sediment.runtime.errors import CallError, NoProc
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

ASK_TIMEOUT = 2.0  # seconds a node has to answer one clock request


@dataclass(frozen=True, slots=True)
class ClockHeard:
    """From a reader to its table node: `node` (in `incarnation`) answered at `ts`."""

    node: str
    incarnation: float
    ts: HybridTimestamp


@dataclass(frozen=True)
class SafeRead:
    """What a reader needs to make its timestamp safe: the node's tracker when the read
    began, its clock then, and the bound of the wait."""

    tracker: st.SafeTime
    now: HybridTimestamp
    node: Pid  # the table node, told what the reader heard
    wait: float = 0.05
    max_waits: int = 200


def to_ask(tracker: st.SafeTime, now: HybridTimestamp, ts: HybridTimestamp) -> tuple[str, ...]:
    """The nodes not yet heard from at or above `ts` (the node itself when `ts` is ahead
    of its own clock)."""
    behind = []
    for node in sorted(tracker.topology):
        if node == tracker.me:
            if now < ts:
                behind.append(node)
            continue
        known = tracker.heard.get(node)
        if known is None or known[1] < ts:
            behind.append(node)
    return tuple(behind)


def answer(node: str, incarnation: float, now: HybridTimestamp) -> ClockReading:
    return ClockReading(node, incarnation, now)


def may_observe(ts: Any, physical_ms: int, max_skew_ms: int) -> bool:
    """A clock request's `ts` moves this node's clock only within the skew bound (a
    timestamp from far ahead must not drag every clock with it)."""
    return isinstance(ts, HybridTimestamp) and ts.physical <= physical_ms + max_skew_ms


async def wait_safe(ctx: Process, read: SafeRead, ts: HybridTimestamp) -> None:
    """Return once `ts` is at or below the safe time, else raise `SafeTimeUnavailable`."""
    tracker, now = read.tracker, read.now
    me = tracker.me
    for attempt in range(read.max_waits + 1):
        decision = st.read_at(tracker, now, ts)
        if isinstance(decision, st.Serve):
            return
        if attempt == read.max_waits:
            break
        if attempt:
            await ctx.sleep(read.wait)
        gone: list[str] = []
        for node in to_ask(tracker, now, ts):
            reply = await _ask(ctx, node, ts)
            if reply is None:
                gone.append(node)
                continue
            if reply is _NO_ANSWER:
                continue
            who, incarnation, at = reply.node, reply.incarnation, reply.now
            if who == me:
                now = max(now, at)
            else:
                tracker = st.heard(tracker, who, incarnation, at)
                ctx.send(read.node, ClockHeard(who, incarnation, at))
        if gone:
            tracker = st.topology_changed(tracker, tracker.topology - set(gone))
    raise SafeTimeUnavailable(ts, list(to_ask(tracker, now, ts)))


_NO_ANSWER = object()


async def _ask(ctx: Process, node: str, ts: HybridTimestamp | None) -> Any:
    """The node's answer; None if its table node does not exist; _NO_ANSWER if it did
    not answer in time."""
    try:
        reply = await named_pids.call(ctx, table_node_name(node), Clock(ts), ASK_TIMEOUT)
    except NoProc:
        return None
    except CallError:
        return _NO_ANSWER
    ok = (isinstance(reply, ClockReading) and reply.node == node
          and isinstance(reply.now, HybridTimestamp))
    return reply if ok else _NO_ANSWER


async def start_clock(ctx: Process, me: str, nodes: Sequence[str], report_to: Pid) -> None:
    """Process entry, spawned by a starting table node: hear every other node's clock
    once and send it to the node (`ClockHeard`, which also moves its clock), so a
    restarted node soon stamps no commit below a read another node already served.
    Best effort: a node down now is skipped, and the node serves meanwhile."""
    for node in nodes:
        if node == me:
            continue
        reply = await _ask(ctx, node, None)
        if isinstance(reply, ClockReading):
            ctx.send(report_to, ClockHeard(reply.node, reply.incarnation, reply.now))


__all__ = ["ASK_TIMEOUT", "ClockHeard", "SafeRead", "answer", "may_observe", "start_clock",
           "to_ask", "wait_safe"]
