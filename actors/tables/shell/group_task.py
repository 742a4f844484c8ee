"""A short-lived process that takes requests to one raft group for a long-lived one.

The table node and the compaction coordinator must never block on a raft round trip
(their mailboxes carry client calls, timers and the coordinator's messages), so each
proposal or linearizable read runs in a task process. It tries the members in turn,
follows leader hints (bounded: `attempts` tries within `PATIENCE` seconds), starting
at the member that last answered for the group in this host (`named_pids`: a task or a
reader otherwise asked a follower first two times in three, one hop more), and sends
back one `TaskDone(tag, ok, results)`: the results of its requests, run in order (a
later one only after the earlier one applied: the minimum tx time update before the
flush that publishes it). A request that never succeeds ends the task with ok False.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sediment.actors.log.shell.names import RAFT_HOST, raft_name
from sediment.actors.log.shell.protocol import Done, NotLeader, Propose, ReadIndex
from sediment.actors.tables.shell import named_pids
from sediment.runtime.errors import CallError
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

ATTEMPTS = 400
PATIENCE = 10.0  # seconds a request keeps trying (elections of two-member groups can
# take a few rounds of split votes)
BACKOFF = 0.05  # seconds between tries when no member leads


@dataclass(frozen=True, slots=True)
class TaskDone:
    tag: Any
    ok: bool
    results: tuple[Any, ...]
    error: str = ""


async def request_group(ctx: Process, group: str, nodes: tuple[str, ...],
                        request: Propose | ReadIndex,
                        attempts: int = ATTEMPTS) -> tuple[bool, Any]:
    """One request at whichever member leads: (True, the machine's answer) or (False,
    None) after `attempts` tries."""
    if not nodes:
        return False, None
    leaders = named_pids.of(ctx).leaders  # the host's last known leader of each group
    known = leaders.get(group)
    hint: str | None = known if known in nodes else None
    deadline = ctx.now() + PATIENCE
    for attempt in range(attempts):
        if ctx.now() > deadline:
            break
        target = hint or nodes[attempt % len(nodes)]
        hint = None
        try:
            reply = await named_pids.call(ctx, raft_name(group, target), request, 2.0)
        except CallError:
            reply = None  # down
        if isinstance(reply, Done):
            leaders[group] = target
            return True, reply.result
        leaders.pop(group, None)
        if isinstance(reply, NotLeader) and reply.hint is not None and reply.hint != target:
            hint = reply.hint
            continue
        await ctx.sleep(BACKOFF)
    return False, None


async def group_task(ctx: Process, group: str, nodes: tuple[str, ...],
                     requests: tuple[Propose | ReadIndex, ...], reply_to: Pid, tag: Any,
                     attempts: int = ATTEMPTS) -> None:
    """Process entry. `requests`: each a `Propose` or a `ReadIndex`."""
    results: list[Any] = []
    for request in requests:
        ok, result = await request_group(ctx, group, nodes, request, attempts)
        if not ok:
            ctx.send(reply_to, TaskDone(tag, False, tuple(results),
                                        f"no leader of {group} answered"))
            return
        results.append(result)
    ctx.send(reply_to, TaskDone(tag, True, tuple(results)))


async def spawn_task(ctx: Process, group: str, nodes: tuple[str, ...],
                     requests: tuple[Propose | ReadIndex, ...], tag: Any) -> None:
    await ctx.spawn(group_task, group, nodes, requests, ctx.self(), tag,
                    label=f"task:{group}", host=RAFT_HOST)


__all__ = ["TaskDone", "group_task", "request_group", "spawn_task"]
