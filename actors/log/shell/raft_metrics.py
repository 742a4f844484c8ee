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


# (group, node) -> what the last step showed: (term, commit, applied, role, leader, rows)
_Seen = tuple[int, int, int, str, str | None, int]
_last: dict[tuple[str, str], _Seen] = {}
_stale: set[tuple[str, str]] = set()  # members whose gauges a reset cleared


def stepped(state: RaftState, machine: _Machine) -> None:
    """Record what this step changed (called by the raft server after each step)."""
    member = (state.config.group, state.me)
    rows = getattr(machine, "rows_compacted", 0)
    seen = (state.term, state.commit, machine.applied, state.role, state.leader, rows)
    last = _last.get(member)
    if seen == last and member not in _stale:
        return
    _last[member] = seen
    tags = {"group": member[0], "node": member[1]}
    term, commit, applied, role, leader, _ = seen
    if last is None or member in _stale:  # every gauge again
        _stale.discard(member)
        TERM.set(term, tags)
        _set_indexes(commit, applied, tags)
        IS_LEADER.set(1 if role == "leader" else 0, tags)
    else:
        if last[0] != term:
            TERM.set(term, tags)
        if last[1] != commit or last[2] != applied:
            _set_indexes(commit, applied, tags)
        if last[3] != role:
            IS_LEADER.set(1 if role == "leader" else 0, tags)
    old_role, old_term = (last[3], last[0]) if last is not None else ("follower", -1)
    if role == "pre_candidate" and old_role != "pre_candidate":
        CAMPAIGNS.inc(1, {**tags, "kind": "pre_vote"})
    elif role == "candidate" and (old_role != "candidate" or old_term != term):
        CAMPAIGNS.inc(1, {**tags, "kind": "vote"})
    if role == "leader" and (old_role != "leader" or old_term != term):
        ELECTIONS_WON.inc(1, tags)
    if last is not None and last[4] != leader:
        LEADER_CHANGES.inc(1, tags)
    old_rows = last[5] if last is not None else 0
    if rows != old_rows:  # a reopened machine counts from 0 again
        ROWS_COMPACTED.inc(rows - old_rows if rows > old_rows else rows, tags)


def _set_indexes(commit: int, applied: int, tags: dict[str, str]) -> None:
    COMMIT.set(commit, tags)
    APPLIED.set(applied, tags)
    APPLY_LAG.set(max(0, commit - applied), tags)


def _all_stale() -> None:
    """After metrics.reset(): set every gauge again at the next step (the transitions
    already seen are not counted twice)."""
    _stale.update(_last)


metrics.on_reset(_all_stale)

__all__ = ["stepped"]
