"""The watcher session's shell against its node's contract, on both backends.

The node and the session are two processes: the node's news of applied revisions and a
client's create reach the session from different senders, so no order between them
holds (on Ray they cross hosts). The node stands in here as a small process, so the
session can be put exactly where a real node leaves it in that race.
"""

from __future__ import annotations

from typing import Any

from sediment.actors.kv import admission as adm
from sediment.actors.kv import watch_protocol as wp
from sediment.actors.kv.shell import session_protocol as sp
from sediment.actors.kv.shell.node_protocol import Admit
from sediment.actors.kv.shell.watcher import watcher
from sediment.runtime.messages import Call
from sediment.runtime.process import Process

SESSION_COMMITTED = 35  # what the session has heard of
NODE_COMMITTED = 36  # what the node has applied: its news of 36 is still on the way


async def _node_ahead(ctx: Process) -> None:
    """A node that has applied NODE_COMMITTED and admits "from now" watches after it."""
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call) and isinstance(msg.request, Admit):
            start = msg.request.start or NODE_COMMITTED + 1
            ctx.reply(msg.from_, adm.Admitted(start))


async def _create_from_now(ctx: Process) -> Any:
    node = await ctx.spawn(_node_ahead)
    session = await ctx.spawn(watcher, node, node, SESSION_COMMITTED, 0, 100, 600.0)
    created = await ctx.call(session, wp.CreateWatch(b"k", None, 0), timeout=30)
    ctx.send(session, sp.Close())
    return created


def test_a_watch_from_now_says_the_revision_it_starts_after(rt: Any) -> None:
    """A "from now" watch created while the session is behind its node starts after the
    node's head; its Created header must say that revision, not the session's older one
    (found on Ray over gRPC: the header said 35, the first event was 37, and the client
    had never been told of 36)."""
    created = rt.run(_create_from_now)
    assert isinstance(created, wp.Created), created
    assert created.start_revision == NODE_COMMITTED + 1
    assert created.revision == NODE_COMMITTED
