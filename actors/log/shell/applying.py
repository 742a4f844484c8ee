"""Applying committed entries in the raft server: one machine transaction per batch,
proposers answered as their entries apply, subscribers told (eagerly or lazily), and a
snapshot handed to the log worker every `snapshot_every` entries (encoded in a thread
when the machine can: `HostedMachine.begin_snapshot`). Split from `server.py`, which
owns the shell these functions act on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sediment.actors.log.raft import membership
from sediment.actors.log.raft import types as rt
from sediment.actors.log.raft.state import RaftState
from sediment.actors.log.raft.types import Entry
from sediment.actors.log.shell import protocol as sp
from sediment.actors.log.shell.conf_meta import to_meta
from sediment.actors.log.shell.log_worker import TakeSnapshot
from sediment.runtime.offload import submit_blocking
from sediment.runtime.pid import Pid

if TYPE_CHECKING:
    from sediment.actors.log.shell.server import _Shell

LEADER_BEFORE_APPLY = "raft.leader.before_apply"
BACKGROUND_MAX_WAIT = 0.1  # seconds at most between a machine's background pieces under load


_APPLY_POINTS: dict[type, str] = {}


def before_apply_point(command_type: type) -> str:
    """The failpoint a leader reaches before it applies an entry of `command_type` (made
    once per type: the leader asks for it at every entry it applies)."""
    point = _APPLY_POINTS.get(command_type)
    if point is None:
        point = _APPLY_POINTS[command_type] = f"{LEADER_BEFORE_APPLY}.{command_type.__name__}"
    return point


async def apply_entries(shell: _Shell, state: RaftState, entries: tuple[Entry, ...]) -> None:
    """Apply committed entries in one transaction of the machine (when it offers one),
    then answer their proposers: a batch of puts costs one commit. A leader's
    before-apply failpoint that fires commits and answers what came before it first and
    acts outside any transaction: a pause or a kill there must not leave one open."""
    machine = shell.machine
    lo = machine.applied + 1
    batch = getattr(machine, "batch", None)
    ctx = shell.ctx
    i, fired = 0, False
    while i < len(entries):
        answers: list[tuple[Any, Any]] = []
        due: Sequence[Any] = ()
        point = ""
        with batch() if batch is not None else contextlib.nullcontext():
            for entry in entries[i:]:
                # a machine on disk may be ahead of the log's snapshot: never apply twice
                fresh = entry.index > machine.applied
                if fresh and state.role == "leader" and not fired:
                    point = before_apply_point(type(entry.command))
                    due = ctx.failpoint_due(point)
                    if due:
                        break
                fired = False
                if isinstance(entry.command, rt.ConfChange):  # the raft core's: a no-op
                    entry = replace(entry, command=None)
                result = machine.apply(entry) if fresh else None
                waiter = shell.waiters.applied(entry.index, result)
                if waiter is not None:
                    answers.append((waiter, sp.Done(entry.index, result)))
                i += 1
        for waiter, answer in answers:
            ctx.reply(waiter, answer)
        if due:
            await ctx.failpoint_act(point, due)
            fired = True  # entry i's failpoint has acted: apply it now
    if entries and lo <= machine.applied and shell.appliers:
        if shell.eager:
            notify_appliers(shell, shell.appliers)
        elif not shell.lazy_due:
            shell.lazy_due = True
            shell.ctx.send_after(LAZY_NOTICE, shell.ctx.self(), LazyNotice())
    if entries and not shell.busy:  # an entry may have left background work (compaction)
        shell.busy, shell.piece_due = True, shell.ctx.now() + BACKGROUND_MAX_WAIT
    shell.waiters.bound()
    _maybe_snapshot(shell, state, entries[-1] if entries else None)


LAZY_NOTICE = 0.1  # seconds: how stale a subscriber that is not eager may be


@dataclass(frozen=True)
class LazyNotice:
    """Time to tell the subscribers that are not eager what was applied meanwhile."""


def set_eager(shell: _Shell, pid: Pid, eager: bool) -> None:
    """An eager subscriber (a KV node with watchers) hears of every applied batch; the
    others at most every LAZY_NOTICE (a KV node without watchers only follows the head
    for its compaction floor: a notice per put would be messages nobody needs)."""
    if eager:
        shell.eager.add(pid)
    else:
        shell.eager.discard(pid)


def notify_appliers(shell: _Shell, pids: list[Pid]) -> None:
    """What was applied since the last notice goes with the news, read once for every
    subscriber (the KV node would otherwise ask for it: a round trip per batch)."""
    if not pids:
        return
    machine = shell.machine
    notice = getattr(machine, "applied_notice", None)
    changes = notice() if notice is not None else None
    for pid in pids:
        shell.ctx.send(pid, sp.AppliedNews(shell.spec.group, machine.applied, changes))


def _maybe_snapshot(shell: _Shell, state: RaftState, last: Entry | None) -> None:
    """Every `snapshot_every` applied entries, one snapshot at a time."""
    if last is None or shell.snapshotting:
        return
    if last.index - state.snap_index < shell.spec.snapshot_every:
        return
    if shell.machine.applied != last.index:  # a machine on disk ahead of the log: later
        return
    shell.snapshotting = True
    conf = membership.at(state, last.index)  # recorded with it: a restart starts from it
    begin = getattr(shell.machine, "begin_snapshot", None)
    job = begin() if begin is not None else shell.machine.snapshot
    refs = tuple(shell.refs)  # as they are at the state the snapshot holds

    def taken(result: tuple[bytes, list[int]] | None, error: BaseException | None) -> None:
        if error is not None or result is None:  # the disk: crash, as a loop's error would
            shell.ctx.send(shell.ctx.self(), SnapshotFailed(repr(error)))
            return
        data, live = result
        shell.ctx.send(shell.worker, TakeSnapshot(
            last.index, last.term, data, tuple(live), refs, shell.ctx.self(), to_meta(conf)))

    submit_blocking(job, taken)  # in a thread on Ray; now, in order, on the simulator


@dataclass(frozen=True)
class SnapshotFailed:
    """Encoding a snapshot in a thread failed: the server crashes with the reason."""

    reason: str


__all__ = ["BACKGROUND_MAX_WAIT", "LAZY_NOTICE", "LEADER_BEFORE_APPLY", "LazyNotice",
           "SnapshotFailed", "apply_entries", "before_apply_point", "notify_appliers",
           "set_eager"]
