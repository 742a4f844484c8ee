"""The other members of a raft group as one member's server reaches them.

A member's raft server is found by its registered name and monitored; while it is down,
messages to it are lost, as on a network. A down member is looked up again only every
PEER_LOOKUP_BACKOFF: a lookup is a round trip to the registry, and a leader doing one
per heartbeat for a dead peer fell behind its own timers on a loaded machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sediment.actors.log.shell.names import raft_name
from sediment.runtime.pid import Pid, Ref
from sediment.runtime.process import Process

PEER_LOOKUP_BACKOFF = 0.5  # seconds between name lookups of a member that is down


@dataclass
class Peers:
    """The pids of the group's other members this server has found, by node."""

    group: str
    pids: dict[str, Pid] = field(default_factory=dict)
    monitors: dict[Ref, str] = field(default_factory=dict)
    retry_at: dict[str, float] = field(default_factory=dict)  # down member: look up again at

    async def send(self, ctx: Process, node: str, msg: Any) -> None:
        """Send `msg` to `node`'s member (lost while it is down)."""
        pid = self.pids.get(node)
        if pid is None:
            if ctx.now() < self.retry_at.get(node, 0.0):
                return
            pid = await ctx.whereis(raft_name(self.group, node))
            if pid is None:
                self.retry_at[node] = ctx.now() + PEER_LOOKUP_BACKOFF
                return
            self.retry_at.pop(node, None)
            self.pids[node] = pid
            self.monitors[ctx.monitor(pid)] = node
        ctx.send(pid, msg)

    def down(self, ref: Ref) -> None:
        """A monitored member ended: look it up again next time."""
        node = self.monitors.pop(ref, None)
        if node is not None:
            self.pids.pop(node, None)


__all__ = ["PEER_LOOKUP_BACKOFF", "Peers"]
