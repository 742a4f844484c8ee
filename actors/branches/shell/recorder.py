"""History events across processes: the compactor's branch updates recorded into a
collector process, so a checker sees them beside the Python API's own events.

`ProcessRecorder` sends each event to a pid; `collector` keeps them (and whatever else
is sent to it, such as a scenario client's counts) and answers `TakeEvents()` with
`CollectedEvents`. A collector is a test and scenario tool: nothing in the
tier depends on one running (a recorder whose collector is gone loses events, never
blocks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sediment.actors.branches.history import Event
from sediment.runtime.common_calls import UnknownRequest
from sediment.runtime.messages import Call
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

MAX_EVENTS = 1_000_000


@dataclass(frozen=True)
class TakeEvents:
    """A call: what the collector kept so far (it keeps them)."""


@dataclass(frozen=True)
class CollectedEvents:
    """Everything sent to the collector, in arrival order, and how many were dropped."""

    events: list[Any]
    dropped: int


class ProcessRecorder:
    def __init__(self, ctx: Process, collector: Pid) -> None:
        self.ctx = ctx
        self.collector = collector

    def record(self, event: Event) -> None:
        self.ctx.send(self.collector, event)


async def collector(ctx: Process) -> None:
    """Keep every event sent here (up to MAX_EVENTS, then drop and count)."""
    events: list[Any] = []
    dropped = 0
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call):
            match msg.request:
                case TakeEvents():
                    ctx.reply(msg.from_, CollectedEvents(list(events), dropped))
                case other:
                    ctx.reply(msg.from_, UnknownRequest.of(other))
        elif len(events) < MAX_EVENTS:
            events.append(msg)
        else:
            dropped += 1


__all__ = ["MAX_EVENTS", "CollectedEvents", "ProcessRecorder", "TakeEvents", "collector"]
