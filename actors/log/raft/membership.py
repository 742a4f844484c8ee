"""Configuration changes: learners and single-server voter changes (raft thesis §4.1,
in etcd-io/raft's style).

A member's configuration is the latest one in its log, committed or not: a change
takes effect when its entry is appended (the leader at once, a follower when it
stores the entry) and is undone if that entry is truncated. Below the in-memory log it
is the snapshot's (`snap_conf`), below that the bootstrap one (`RaftConfig.peers`).
Every change adds, promotes or removes ONE server, so any majority of the old voters
and any majority of the new overlap; a leader starts a change only when the previous
one is committed and it has committed an entry of its own term (the fix Ongaro posted
to raft-dev in 2015: otherwise two leaders of different terms may each commit a change
from the same base, and their majorities need not overlap).

Voters count for commit, elections, check-quorum and ReadIndex; learners only receive
the log and snapshots. A member campaigns only while it is a voter in the configuration
at its commit index or in a later one of its log (`may_campaign`): a learner never, a
removed member not once it knows the removal committed. Until then it still may (thesis
§4.2.2, figure 4.6): a leader that appended its own removal and then lost its followers
holds the longest log, and the remaining voters cannot elect anyone without it; it wins,
counting only the voters of its latest configuration, commits the removal and steps
down. Any member answers a vote request: a learner may already be a voter in the
candidate's newer configuration, and its vote counts only if the candidate's
configuration says so (etcd-io/etcd#10998). A leader keeps replicating to a member it
removed until the removal commits, so the member usually learns it; a leader that
removed itself manages the group until the change commits, not counting itself, then
steps down.
"""

from __future__ import annotations

from collections.abc import Iterable

from sediment.actors.log.raft.protocol import Refused
from sediment.actors.log.raft.state import (
    Out,
    Progress,
    RaftProtocolError,
    RaftState,
    become_follower,
    last_index,
    term_at,
)
from sediment.actors.log.raft.types import (
    CHANGE_OPS,
    ConfChange,
    Entry,
    Membership,
    NodeId,
)

# ---- reading the configuration ----------------------------------------------------------


def latest(s: RaftState) -> Membership:
    """The configuration this member uses now: the latest in its log."""
    return s.confs[-1][1] if s.confs else s.snap_conf


def latest_index(s: RaftState) -> int:
    """The index of the entry that set the latest configuration; 0 when it comes from the
    snapshot or the bootstrap (both committed)."""
    return s.confs[-1][0] if s.confs else 0


def at(s: RaftState, index: int) -> Membership:
    """The configuration in effect at `index` (>= the snapshot's): what a snapshot taken
    there records."""
    if index < s.snap_index:
        raise RaftProtocolError(f"{s.me}: configuration at {index} is below the snapshot "
                                f"{s.snap_index}")
    found = s.snap_conf
    for i, conf in s.confs:
        if i > index:
            break
        found = conf
    return found


def is_voter(s: RaftState, node: NodeId | None = None) -> bool:
    return (s.me if node is None else node) in latest(s).voters


def may_campaign(s: RaftState) -> bool:
    """A voter in our latest configuration, or in the one at our commit index or any
    between: a change that removed us may not be committed, and we may hold the log the
    remaining voters need."""
    if s.me in latest(s).voters:
        return True
    if latest_index(s) <= s.commit:
        return False
    return s.me in at(s, s.commit).voters or any(
        s.me in conf.voters for i, conf in s.confs if i > s.commit)


def changes_in(entries: Iterable[Entry]) -> tuple[tuple[int, Membership], ...]:
    """The configuration entries among `entries`, as (index, configuration after)."""
    return tuple((e.index, e.command.membership) for e in entries
                 if isinstance(e.command, ConfChange))


def caught_up(s: RaftState, node: NodeId) -> bool:
    """The leader's view: `node` streams the log (replicate state) and is at most one full
    pipeline (max_inflight x max_append_entries) behind the commit index, so promoting it
    does not stall commits while it catches up (etcd's server refuses such promotions
    the same way, with a ratio)."""
    pr = s.progress.get(node)
    if s.role != "leader" or pr is None or pr.state != "replicate":
        return False
    window = s.config.max_inflight * s.config.max_append_entries
    return pr.match + window >= s.commit


# ---- changing it ------------------------------------------------------------------------


def appended(s: RaftState, entries: tuple[Entry, ...]) -> None:
    """Entries joined the log: a configuration entry among them takes effect now."""
    found = changes_in(entries)
    if not found:
        return
    before = latest(s)
    s.confs = (*s.confs, *found)
    if s.role == "leader":  # keep replicating to removed members until the removal commits
        after = set(latest(s).members)
        gone = tuple(p for p in before.members if p not in after and p != s.me)
        s.leaving = (*s.leaving, *(p for p in gone if p not in s.leaving))
    _refresh(s)


def truncated(s: RaftState, index: int) -> None:
    """Entries from `index` on were dropped: so are the configurations they set."""
    if s.confs and s.confs[-1][0] >= index:
        s.confs = tuple(c for c in s.confs if c[0] < index)
        _refresh(s)


def compacted(s: RaftState, index: int) -> None:
    """A snapshot at `index` replaces the log up to it (call before dropping entries)."""
    s.snap_conf = at(s, index)
    s.confs = tuple(c for c in s.confs if c[0] > index)


def installed(s: RaftState, index: int, membership: Membership | None, keep: bool) -> None:
    """A leader's snapshot at `index` was activated. Keeping the log after it, our log
    already says the configuration at `index`; discarding it, the snapshot's counts
    (None: the leader did not send one, its group never changed configuration)."""
    if keep:
        if membership is not None and membership != at(s, index):
            raise RaftProtocolError(f"{s.me}: snapshot {index} says {membership} but our "
                                    f"log says {at(s, index)}")
        compacted(s, index)
        return
    s.snap_conf = membership if membership is not None else latest(s)
    s.confs = ()
    _refresh(s)


def _refresh(s: RaftState) -> None:
    """`others` (and a leader's progress) follow the latest configuration."""
    members = latest(s).members
    s.leaving = tuple(p for p in s.leaving if p not in members and p != s.me)
    s.others = tuple(p for p in members if p != s.me) + s.leaving
    if s.role == "leader":
        for p in s.others:
            if p not in s.progress:
                s.progress[p] = Progress(next=max(1, last_index(s)))
        for p in [p for p in s.progress if p not in s.others]:
            del s.progress[p]


def refusal(s: RaftState, op: str, node: NodeId) -> Refused | None:
    """Why the leader must not append this change now (None: it may)."""
    if op not in CHANGE_OPS:
        return Refused("unknown_op")
    if latest_index(s) > s.commit:
        return Refused("change_pending")
    if term_at(s, s.commit) != s.term:
        return Refused("leader_not_ready")
    conf = latest(s)
    if op == "add_learner" and node in conf.members:
        return Refused("already_member")
    if op == "promote" and node not in conf.learners:
        return Refused("not_a_learner")
    if op == "promote" and not caught_up(s, node):
        return Refused("not_caught_up")
    if op == "remove" and node not in conf.members:
        return Refused("not_a_member")
    if op == "remove" and conf.voters == (node,):
        return Refused("last_voter")
    return None


def changed(conf: Membership, op: str, node: NodeId) -> Membership:
    """The configuration after a change that `refusal` allowed."""
    if op == "add_learner":
        return Membership(conf.voters, (*conf.learners, node))
    learners = tuple(p for p in conf.learners if p != node)
    if op == "promote":
        return Membership((*conf.voters, node), learners)
    return Membership(tuple(p for p in conf.voters if p != node), learners)


def after_step(s: RaftState, out: Out) -> None:
    """At the end of every step: once the latest configuration is committed, a leader
    stops replicating to the members it removed and, if it removed itself, steps down;
    a (pre-)candidate that may no longer campaign gives up."""
    if s.role == "leader":
        if latest_index(s) > s.commit:
            return
        if s.leaving:
            s.leaving = ()
            _refresh(s)
        if not is_voter(s):
            become_follower(s, s.term, None, s.now)
    elif s.role != "follower" and not may_campaign(s):
        become_follower(s, s.term, None, s.now)


__all__ = [
    "after_step",
    "appended",
    "at",
    "caught_up",
    "changed",
    "changes_in",
    "compacted",
    "installed",
    "is_voter",
    "latest",
    "latest_index",
    "may_campaign",
    "refusal",
    "truncated",
]
