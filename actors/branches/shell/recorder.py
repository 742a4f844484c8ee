"""History events across processes: the compactor's branch updates recorded into a
collector process, so a checker sees them beside the Python API's own events.

`ProcessRecorder` sends each event to a pid; `collector` keeps them and answers
("events",) with the list. A collector is a test and scenario tool: nothing in the
tier depends on one running (a recorder whose collector is gone loses events, never
blocks).
"""

from __future__ import annotations

from sediment.actors.branches.history import Event
from sediment.runtime.common_calls import UnknownRequest
from sediment.runtime.messages import Call
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

MAX_EVENTS = 1_000_000


class ProcessRecorder:
    def __init__(self, ctx: Process, collector: Pid) -> None:
        self.ctx = ctx
        self.collector = collector

    def record(self, event: Event) -> None:
        self.ctx.send(self.collector, event)


async def collector(ctx: Process) -> None:
    """Keep every event sent here (up to MAX_EVENTS, then drop and count)."""
    events: list[Event] = []
    dropped = 0
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call):
            if msg.request == ("events",):
                ctx.reply(msg.from_, (list(events), dropped))
            else:
                ctx.reply(msg.from_, UnknownRequest.of(msg.request))
        elif len(events) < MAX_EVENTS:
            events.append(msg)
        else:
            dropped += 1


__all__ = ["MAX_EVENTS", "ProcessRecorder", "collector"]
