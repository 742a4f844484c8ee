"""The process a run's `when` faults wait in, started once with the run.

A fault with `when: {trigger: ...}` waits until its protocol moment holds (or its
deadline). Each wait used to be a process of its own; on Ray every process is a new
actor, and a new actor took longer to start on a loaded machine than most protocol
phases last, so faults missed their moments. This one process serves every wait:
("wait", kind, args) -> the poll's (hit, time, what was seen, leader then), where kind "kv" polls
the KV members (`observers.wait_for`) and "tier" the block tier (`tier.wait_for_tier`).
It serves one wait at a time, which is all a run's nemesis asks for. ("stop",) ends it.

("leader", nodes, within) -> the KV leader, or None if none leads within `within`
seconds: what a fault's `leader` or `follower` target means when no wait just saw it
(right after the leader was killed, the next one, not a node drawn at random that may
be the restarting one). The members are asked at once with a short timeout; asked one
by one from the driver, a member busy recovering held a fault back for seconds.
"""

from __future__ import annotations

from typing import Any

from sediment.runtime.messages import Call
from sediment.runtime.process import Process
from sediment.scenarios import observers, tier

POLLS = {"kv": observers.wait_for, "tier": tier.wait_for_tier}


async def trigger_waiter(ctx: Process) -> None:
    """Process entry: see the module doc."""
    while True:
        msg = await ctx.receive()
        if msg == ("stop",):
            return
        if not isinstance(msg, Call):
            continue
        request = msg.request
        if (isinstance(request, tuple) and len(request) == 3 and request[0] == "wait"
                and request[1] in POLLS):
            ctx.reply(msg.from_, await POLLS[request[1]](ctx, *request[2]))
        elif isinstance(request, tuple) and len(request) == 3 and request[0] == "leader":
            ctx.reply(msg.from_, await _leader(ctx, tuple(request[1]), float(request[2])))
        else:
            ctx.reply(msg.from_, ("error", ("unknown_request", request)))


LEADER_POLL = 0.1  # seconds between rounds while no member leads


async def _leader(ctx: Process, nodes: tuple[str, ...], within: float) -> str | None:
    deadline = ctx.now() + within
    while True:
        leader = (await observers.view(ctx, nodes, kv=False)).leader()
        if leader is not None or ctx.now() + LEADER_POLL > deadline:
            return leader.node if leader is not None else None
        await ctx.sleep(LEADER_POLL)


def waiting(answer: Any) -> tuple[bool, float, str, str | None]:
    """The poll's answer, checked (an error reply is a bug of the caller)."""
    if not (isinstance(answer, tuple) and len(answer) == 4 and isinstance(answer[0], bool)
            and (answer[3] is None or isinstance(answer[3], str))):
        raise RuntimeError(f"the trigger waiter answered {answer!r:.200}")
    return answer[0], float(answer[1]), str(answer[2]), answer[3]


__all__ = ["POLLS", "trigger_waiter", "waiting"]
