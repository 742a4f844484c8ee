"""What the runner (and its fault driver) tells a run's helper processes.

The recorder's messages are `recorder_protocol.py`; these are the others':

- the trigger waiter (`trigger_waiter.py`) answers the calls `HoldMoment`, `PollTier`
  and `FindLeader` (a `Moment`, or the leader's node / None) and ends on `Stop()`;
- the monitor (`observers.monitor`) ends on `Stop()`, the log tail (`observers.log_tail`)
  on `StopTail(upto)` once every entry up to `upto` was reported;
- a watcher client (`watch_client.py`) ends on `FinishWatch(head)` once a progress
  notification at or above `head` arrived (or its polls ran out).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Stop:
    """End the process (the trigger waiter, the monitor)."""


@dataclass(frozen=True, slots=True)
class StopTail:
    """End the log tail once every entry up to `upto` was reported."""

    upto: int


@dataclass(frozen=True, slots=True)
class FinishWatch:
    """The run is over: end the watch once it saw progress at or above `head`."""

    head: int


@dataclass(frozen=True, slots=True)
class HoldMoment:
    """Wait for the first `FailpointHit` tagged `tag` (the breakpoint was armed everywhere
    with the waiter as `notify`), or a miss at `deadline`."""

    tag: str
    deadline: float


@dataclass(frozen=True, slots=True)
class PollTier:
    """Poll the block tier until `trigger` holds (on node `on`, if given) or `deadline`,
    every `interval` seconds (`tier.wait_for_tier`)."""

    nodes: tuple[str, ...]
    trigger: str
    deadline: float
    interval: float
    on: str | None = None


@dataclass(frozen=True, slots=True)
class FindLeader:
    """The KV leader's node, or None if none leads within `within` seconds."""

    nodes: tuple[str, ...]
    within: float


WaiterRequest = HoldMoment | PollTier | FindLeader

__all__ = ["FindLeader", "FinishWatch", "HoldMoment", "PollTier", "Stop", "StopTail",
           "WaiterRequest"]
