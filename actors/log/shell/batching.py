"""How a raft server batches: which calls join a batch, and the group commit that holds
new proposals while earlier batches commit (one log write and one AppendEntries per
follower for many proposals)."""

from __future__ import annotations

from typing import Any, Protocol

from sediment.actors.log.raft.state import RaftState
from sediment.actors.log.shell.protocol import Propose, ReadIndex
from sediment.runtime.errors import ReceiveTimeout
from sediment.runtime.messages import Call
from sediment.runtime.process import Process


class _Shell(Protocol):
    """What the group commit reads and moves of its raft server: the last log index of
    each open proposal batch, and since when new proposals are held back."""

    ctx: Process
    open_batches: list[int]
    held_since: float | None

MAX_BATCH = 512  # proposals (or reads) stepped as one batch


def is_propose(msg: Any) -> bool:
    return (isinstance(msg, Call) and isinstance(msg.request, Propose)
            and msg.request.command is not None)


def is_read(msg: Any) -> bool:
    return isinstance(msg, Call) and isinstance(msg.request, ReadIndex)


OPEN_BATCHES = 1  # proposal batches a leader keeps between its append and their commit
# (1, not 2: fewer, larger batches cost less CPU per put; docs/log.md, group commit)
BATCH_HOLD = 0.02  # seconds at most that new proposals wait for an open batch to commit


def _not_propose(msg: Any) -> bool:
    return not is_propose(msg)


def hold_left(shell: _Shell, state: RaftState) -> float | None:
    """Group commit: while OPEN_BATCHES proposal batches are appended and not committed,
    new proposals wait in the mailbox and then go as one batch (one log write, one
    AppendEntries per follower) instead of one batch each: under many clients the batch
    grows with the load, with one client nothing waits. Seconds the hold has left, None
    when proposals may be taken. A hold never outlasts BATCH_HOLD (a batch that cannot
    commit, no quorum, does not stall what follows any longer than that)."""
    opened = shell.open_batches
    if state.role != "leader":
        opened.clear()
    while opened and opened[0] <= state.commit:
        opened.pop(0)
    if len(opened) < OPEN_BATCHES:
        shell.held_since = None
        return None
    now = shell.ctx.now()
    if shell.held_since is None:
        shell.held_since = now
    left = shell.held_since + BATCH_HOLD - now
    if left <= 0:
        opened.pop(0)
        shell.held_since = None
        return None
    return left


async def receive(shell: _Shell, state: RaftState, timeout: float | None) -> Any:
    """The next message (ReceiveTimeout after `timeout`), proposals held back while the
    group commit says so."""
    ctx = shell.ctx
    deadline = None if timeout is None else ctx.now() + timeout
    while True:
        hold = hold_left(shell, state)
        left = None if deadline is None else max(0.0, deadline - ctx.now())
        if hold is None:
            return await ctx.receive(timeout=left)
        try:
            return await ctx.receive(_not_propose, timeout=hold if left is None
                                     else min(hold, left))
        except ReceiveTimeout:
            if deadline is not None and ctx.now() >= deadline:
                raise
