"""The process a run's `when` faults wait in, started once with the run.

A fault with `when: {trigger: ...}` waits until its protocol moment holds (or its
deadline). Each wait used to be a process of its own; on Ray every process is a new
actor, and a new actor took longer to start on a loaded machine than most protocol
phases last, so faults missed their moments. This one process serves every wait, one at
a time (all a run's nemesis asks for), and answers a `Moment` (the requests are in
`run_protocol.py`):

- `HoldMoment(tag, deadline)`: the moment's breakpoint (`holds.py`) was armed everywhere
  with this process as `notify` and `tag`; wait for the first `FailpointHit` of that
  tag. The process that reached it stays paused there until the runner releases it.
- `PollTier(...)`: poll the block tier for a moment that is a lasting state, not a step
  in code (`tier.wait_for_tier`: `flush_behind`), or the Spark bridge for a running
  merge (`branch_tier.wait_for_spark_merge`: `spark_merge_running`).
- `FindLeader(nodes, within)` -> the KV leader, or None if none leads within `within`
  seconds: what a fault's `leader` or `follower` target means when no wait just saw it
  (right after the leader was killed, the next one, not a node drawn at random that may
  be the restarting one). The members are asked at once with a short timeout; asked
  one by one from the driver, a member busy recovering held a fault back for seconds.
- `Stop()` ends it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sediment.runtime.common_calls import UnknownRequest
from sediment.runtime.errors import ReceiveTimeout
from sediment.runtime.failpoints import FailpointHit
from sediment.runtime.messages import Call
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process
from sediment.scenarios import observers, tier
from sediment.scenarios.run_protocol import FindLeader, HoldMoment, PollTier, Stop


@dataclass(frozen=True)
class Moment:
    """How a wait ended: `hit` (the moment was seen or held) at time `t`, what was seen,
    the KV leader then if the wait knows it, and the process held at the breakpoint."""

    hit: bool
    t: float
    seen: str
    leader: str | None = None
    held: Pid | None = None


async def trigger_waiter(ctx: Process) -> None:
    """Process entry: see the module doc."""
    while True:
        msg = await ctx.receive(lambda m: not isinstance(m, FailpointHit))
        if isinstance(msg, Stop):
            return
        if not isinstance(msg, Call):
            continue
        match msg.request:
            case PollTier(_, "spark_merge_running", deadline, interval, _):
                from sediment.scenarios.branch_tier import wait_for_spark_merge

                hit, t, seen = await wait_for_spark_merge(ctx, deadline, interval)
                ctx.reply(msg.from_, Moment(hit, t, seen))
            case PollTier(nodes, trigger, deadline, interval, on):
                hit, t, seen, leader = await tier.wait_for_tier(ctx, nodes, trigger, deadline,
                                                                interval, on)
                ctx.reply(msg.from_, Moment(hit, t, seen, leader))
            case HoldMoment(tag, deadline):
                ctx.reply(msg.from_, await _held(ctx, tag, deadline))
            case FindLeader(nodes, within):
                ctx.reply(msg.from_, await _leader(ctx, nodes, within))
            case other:
                ctx.reply(msg.from_, UnknownRequest.of(other))


async def _held(ctx: Process, tag: str, deadline: float) -> Moment:
    """The first hit of the breakpoint armed with `tag`, or a miss at `deadline`. Hits
    of earlier armings (other tags) are dropped on the way."""
    while True:
        try:
            hit = await ctx.receive(lambda m: isinstance(m, FailpointHit),
                                    timeout=max(0.0, deadline - ctx.now()))
        except ReceiveTimeout:
            return Moment(False, ctx.now(), "nothing reached the breakpoint")
        if hit.tag == tag:
            return Moment(True, hit.t, f"{hit.pid} held at {hit.point} on {hit.pid.node}",
                          hit.pid.node, hit.pid)


LEADER_POLL = 0.1  # seconds between rounds while no member leads


async def _leader(ctx: Process, nodes: tuple[str, ...], within: float) -> str | None:
    deadline = ctx.now() + within
    while True:
        leader = (await observers.view(ctx, nodes, kv=False)).leader()
        if leader is not None or ctx.now() + LEADER_POLL > deadline:
            return leader.node if leader is not None else None
        await ctx.sleep(LEADER_POLL)


def waiting(answer: Any) -> Moment:
    """The wait's answer, checked (an error reply is a bug of the caller)."""
    if not isinstance(answer, Moment):
        raise RuntimeError(f"the trigger waiter answered {answer!r:.200}")
    return answer


__all__ = ["FindLeader", "HoldMoment", "Moment", "PollTier", "Stop", "trigger_waiter",
           "waiting"]
