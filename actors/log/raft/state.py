"""A raft core's configuration and state, the in-memory log and the shared transitions.

The in-memory log holds only the entries above the last snapshot (a tuple, so a step
that does not touch the log copies nothing); older live entries stay in storage, where
the shell reads them to build a snapshot install.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

from sediment.actors.log.raft.protocol import (
    Dropped,
    Effect,
    Ref,
    Reply,
    Result,
)
from sediment.actors.log.raft.types import Entry, Membership, NodeId
from sediment.runtime.errors import BadArgument, RuntimeErrorBase
from sediment.supervision.backoff import next_uniform


class InvalidRaftConfig(BadArgument):
    """A RaftConfig field is out of range."""


class RaftProtocolError(RuntimeErrorBase):
    """The shell broke the driving contract, or a safety assertion failed: never ignore."""


@dataclass(frozen=True)
class RaftConfig:
    """`peers` are the bootstrap voters and `learners` the bootstrap learners: the
    configuration at index 0, before any configuration-change entry or snapshot (a member
    that joins later is in neither and learns the configuration from the leader). Times
    are seconds."""

    peers: tuple[NodeId, ...]
    election_timeout: tuple[float, float] = (0.15, 0.30)
    heartbeat_interval: float = 0.05
    # a commit reaches followers with the next AppendEntries, or at the latest this long
    # after it advanced (an idle leader then sends a heartbeat that needs no answer)
    commit_notify_delay: float = 0.002
    max_append_entries: int = 64
    pre_vote: bool = True
    check_quorum: bool = True
    group: str = "default"
    max_inflight: int = 2  # AppendEntries in flight per follower while pipelining
    max_pending: int = 1024  # proposals awaiting their outcome
    learners: tuple[NodeId, ...] = ()

    def __post_init__(self) -> None:
        lo, hi = self.election_timeout
        if not self.peers or len(set(self.peers)) != len(self.peers):
            raise InvalidRaftConfig(f"peers must be distinct and non-empty, got {self.peers}")
        if len(set(self.learners)) != len(self.learners) or set(self.learners) & set(self.peers):
            raise InvalidRaftConfig("learners must be distinct and not peers, got "
                                    f"{self.learners}")
        if not 0 < lo < hi:
            raise InvalidRaftConfig(f"election_timeout must be 0 < min < max, got {lo, hi}")
        if not 0 < self.heartbeat_interval < lo:
            raise InvalidRaftConfig("heartbeat_interval must be positive and below the "
                                    f"election timeout, got {self.heartbeat_interval}")
        for name in ("max_append_entries", "max_inflight", "max_pending"):
            if getattr(self, name) < 1:
                raise InvalidRaftConfig(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def quorum(self) -> int:
        """The bootstrap configuration's quorum (the core uses the current one's)."""
        return len(self.peers) // 2 + 1

    @property
    def bootstrap(self) -> Membership:
        return Membership(self.peers, self.learners)


Role = Literal["follower", "pre_candidate", "candidate", "leader"]
ProgressState = Literal["probe", "replicate", "snapshot"]


@dataclass(frozen=True, slots=True)
class Progress:
    """The leader's view of one follower (etcd's tracker.Progress)."""

    next: int
    match: int = 0
    state: ProgressState = "probe"
    probe_sent: bool = False  # probe: one AppendEntries per heartbeat until it answers
    inflight: tuple[int, ...] = ()  # replicate: last index of each unacked AppendEntries
    active: bool = False  # heard from since the last quorum check
    progressed: bool = False  # match moved since the last heartbeat
    waiting: bool = False  # at the last heartbeat it still had entries to acknowledge
    snapshot: int = 0  # snapshot: the index being installed
    snapshot_term: int = 0
    snapshot_deadline: float = 0.0
    read_round: int = 0  # the highest read round it acknowledged
    commit_sent: int = 0  # the commit index the last message to it carried


@dataclass(frozen=True, slots=True)
class Install:
    """A follower's incoming snapshot, until the shell reports it stored."""

    leader: NodeId
    index: int
    term: int
    live_upto: int
    next_chunk: int = 0
    done: bool = False  # the last chunk is staged; waiting for SnapshotInstalled


@dataclass(frozen=True, slots=True)
class PendingRead:
    """A linearizable read at the leader: served once a quorum acked `round` and the
    machine applied through `index` (None until this term has a committed entry)."""

    ref: Ref
    round: int
    index: int | None


@dataclass
class RaftState:
    """Everything one member of one group knows. `step` never mutates a given state."""

    config: RaftConfig
    me: NodeId
    others: tuple[NodeId, ...]  # every member but us (leader: and `leaving`)
    rng: int
    term: int = 0
    voted_for: NodeId | None = None
    role: Role = "follower"
    leader: NodeId | None = None
    snap_index: int = 0
    snap_term: int = 0
    entries: tuple[Entry, ...] = ()  # indexes snap_index+1 .. last_index
    persisted: int = 0  # the WAL is durable up to here
    commit: int = 0
    applied: int = 0  # handed to Apply (or restored from a snapshot)
    verified: int = 0  # follower: prefix known to match this term's leader
    ack_pending: bool = False  # follower: an ack waits for Persisted
    votes: dict[NodeId, bool] = field(default_factory=dict)
    progress: dict[NodeId, Progress] = field(default_factory=dict)
    pending: dict[int, tuple[int, Ref]] = field(default_factory=dict)  # index -> (term, ref)
    install: Install | None = None
    now: float = 0.0
    election_deadline: float | None = None
    leader_contact: float = -math.inf
    heartbeat_due: float = 0.0
    quorum_due: float = 0.0
    read_round: int = 0  # leader: the latest ReadIndex round sent; follower: latest seen
    commit_notify_due: float | None = None  # leader: followers learn the commit by then
    reads: tuple[PendingRead, ...] = ()  # leader: reads waiting for their round or apply
    snap_conf: Membership = Membership(())  # the configuration at snap_index
    confs: tuple[tuple[int, Membership], ...] = ()  # configuration entries above snap_index
    leaving: tuple[NodeId, ...] = ()  # leader: removed, replicated to until the removal commits

    def copy(self) -> RaftState:
        return replace(
            self, votes=dict(self.votes), progress=dict(self.progress), pending=dict(self.pending)
        )


class Out:
    """Effects of one step in buckets; `core.step` concatenates them in contract order."""

    __slots__ = ("storage", "sends", "machine", "replies")

    def __init__(self) -> None:
        self.storage: list[Effect] = []
        self.sends: list[Effect] = []
        self.machine: list[Effect] = []
        self.replies: list[Effect] = []


# ---- the log ----------------------------------------------------------------------------


def last_index(s: RaftState) -> int:
    return s.snap_index + len(s.entries)


def last_term(s: RaftState) -> int:
    return s.entries[-1].term if s.entries else s.snap_term


def term_at(s: RaftState, index: int) -> int | None:
    """The term of the entry at `index`; None if it is compacted or beyond the log."""
    if index == s.snap_index:
        return s.snap_term
    offset = index - s.snap_index - 1
    if 0 <= offset < len(s.entries):
        return s.entries[offset].term
    return None


def entries_between(s: RaftState, lo: int, hi: int) -> tuple[Entry, ...]:
    """Entries lo..hi inclusive; lo must be above the snapshot."""
    assert lo > s.snap_index, (lo, s.snap_index)
    return s.entries[lo - s.snap_index - 1 : hi - s.snap_index]


def is_up_to_date(s: RaftState, term: int, index: int) -> bool:
    """Raft §5.4.1: a log ending at (term, index) is at least as up to date as ours."""
    return (term, index) >= (last_term(s), last_index(s))


def find_conflict_by_term(s: RaftState, index: int, term: int) -> int:
    """The largest index <= `index` whose term is <= `term` (etcd's fast log backup)."""
    index = min(index, last_index(s))
    while index > s.snap_index and (term_at(s, index) or 0) > term:
        index -= 1
    return index


# ---- shared transitions -----------------------------------------------------------------


def reset_election_timer(s: RaftState, now: float) -> None:
    """A fresh randomized election timeout in [min, max) from the seeded generator."""
    u, s.rng = next_uniform(s.rng)
    lo, hi = s.config.election_timeout
    s.election_deadline = now + lo + (hi - lo) * u


def in_lease(s: RaftState, now: float) -> bool:
    """We heard from a live leader within the minimum election timeout (or are it)."""
    if s.leader is None:
        return False
    return s.role == "leader" or now - s.leader_contact < s.config.election_timeout[0]


def become_follower(s: RaftState, term: int, leader: NodeId | None, now: float) -> None:
    if s.role == "leader" and term == s.term and leader is not None:
        raise RaftProtocolError(f"two leaders in term {term}: {s.me} and {leader}")
    if term > s.term:
        s.term, s.voted_for = term, None
        s.verified = s.commit  # only the committed prefix matches every later leader
        s.ack_pending = False
        s.install = None
    if s.leader != leader:
        s.read_round = 0  # rounds count per leader
    s.role = "follower"
    s.leader = leader
    if leader is not None:
        s.leader_contact = now
    s.votes = {}
    s.progress = {}
    if s.leaving:
        s.others = tuple(p for p in s.others if p not in s.leaving)
        s.leaving = ()
    reset_election_timer(s, now)


def reply(s: RaftState, out: Out, index: int, result: Result) -> None:
    """Answer the proposer of the entry at `index` and forget it."""
    _term, ref = s.pending.pop(index)
    out.replies.append(Reply(ref, result))


def drop_pending_from(s: RaftState, index: int, out: Out) -> None:
    """Proposals at `index` and above lost their entries: they were never committed."""
    for i in sorted(i for i in s.pending if i >= index):
        reply(s, out, i, Dropped(i))


__all__ = [
    "Install",
    "InvalidRaftConfig",
    "Out",
    "PendingRead",
    "Progress",
    "RaftConfig",
    "RaftProtocolError",
    "RaftState",
    "Role",
    "become_follower",
    "drop_pending_from",
    "entries_between",
    "find_conflict_by_term",
    "in_lease",
    "is_up_to_date",
    "last_index",
    "last_term",
    "reply",
    "reset_election_timer",
    "term_at",
]
