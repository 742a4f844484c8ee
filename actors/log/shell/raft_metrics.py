"""A raft member's metrics, read off the core's state after each step.

The raft server calls `stepped(state, machine)` once per core step (one line in its
loop): the term, commit and applied indexes, the apply lag and leadership become gauges,
and the changes between two steps become counters (campaigns, elections won, leader
changes). A hosted machine that compacts (the KV's value-only pass) counts its rows in
`rows_compacted`, reported here as they grow. A step that changed none of these costs
one tuple comparison.
"""

from __future__ import annotations

from typing import Protocol

from sediment import metrics
from sediment.actors.log.raft.state import RaftState
from sediment.metrics import Counter, Gauge

MEMBER = ("group", "node")
TERM = Gauge("raft_term", "the member's current term", MEMBER)
COMMIT = Gauge("raft_commit_index", "the highest log index the member knows committed", MEMBER)
APPLIED = Gauge("raft_applied_index", "the highest log index its state machine applied",
                MEMBER)
APPLY_LAG = Gauge("raft_apply_lag", "committed entries its state machine has not applied yet",
                  MEMBER)
IS_LEADER = Gauge("raft_is_leader", "1 while the member leads its group, else 0", MEMBER)
CAMPAIGNS = Counter("raft_campaigns", "elections the member started: kind pre_vote (a "
                    "pre-vote round) or vote (a real one, a new term)", (*MEMBER, "kind"))
ELECTIONS_WON = Counter("raft_elections_won", "times the member became leader", MEMBER)
LEADER_CHANGES = Counter("raft_leader_changes",
                         "times the leader the member knows changed (to none too)", MEMBER)
ROWS_COMPACTED = Counter("compaction_rows", "rows whose values the state machine's "
                         "compaction removed (the KV's value-only pass)", MEMBER)


class _Machine(Protocol):
    applied: int


class _Member:
    """One member's series (bound once) and what its last step showed."""

    __slots__ = ("tags", "term", "commit", "applied", "is_leader", "lag", "rows",
                 "last", "stale")

    def __init__(self, group: str, node: str) -> None:
        self.tags = {"group": group, "node": node}
        self.term = TERM.bind(self.tags)
        self.commit = COMMIT.bind(self.tags)
        self.applied = APPLIED.bind(self.tags)
        self.is_leader = IS_LEADER.bind(self.tags)
        self.lag = APPLY_LAG.bind(self.tags)
        self.rows = ROWS_COMPACTED.bind(self.tags)
        # (term, commit, applied, role, leader, rows) at the last step; None: none yet
        self.last: tuple[int, int, int, str, str | None, int] | None = None
        self.stale = False  # a reset cleared the gauges: set them all again


_members: dict[tuple[str, str], _Member] = {}


def stepped(state: RaftState, machine: _Machine) -> None:
    """Record what this step changed (called by the raft server after each step)."""
    member = _members.get((state.config.group, state.me))
    if member is None:
        member = _members[(state.config.group, state.me)] = _Member(state.config.group,
                                                                    state.me)
    seen = (state.term, state.commit, machine.applied, state.role, state.leader,
            getattr(machine, "rows_compacted", 0))
    last = member.last
    if seen == last and not member.stale:
        return
    member.last = seen
    term, commit, applied, role, leader, rows = seen
    fresh = last is None or member.stale
    member.stale = False
    if fresh or last is None or last[0] != term:
        member.term.set(term)
    if fresh or last is None or last[1] != commit or last[2] != applied:
        member.commit.set(commit)
        member.applied.set(applied)
        member.lag.set(max(0, commit - applied))
    if fresh or last is None or last[3] != role:
        member.is_leader.set(1 if role == "leader" else 0)
    if last is None:
        last = (-1, 0, 0, "follower", leader, 0)
    if role != last[3] or term != last[0]:
        _transition(member.tags, last[3], last[0], role, term)
    if last[4] != leader:
        LEADER_CHANGES.inc(1, member.tags)
    if rows != last[5]:  # a reopened machine counts from 0 again
        member.rows.inc(rows - last[5] if rows > last[5] else rows)


def _transition(tags: dict[str, str], old_role: str, old_term: int, role: str,
                term: int) -> None:
    if role == "pre_candidate" and old_role != "pre_candidate":
        CAMPAIGNS.inc(1, {**tags, "kind": "pre_vote"})
    elif role == "candidate" and (old_role != "candidate" or old_term != term):
        CAMPAIGNS.inc(1, {**tags, "kind": "vote"})
    if role == "leader" and (old_role != "leader" or old_term != term):
        ELECTIONS_WON.inc(1, tags)


def _all_stale() -> None:
    """After metrics.reset(): set every gauge again at the next step (the transitions
    already seen are not counted twice)."""
    for member in _members.values():
        member.stale = True


metrics.on_reset(_all_stale)

__all__ = ["stepped"]
