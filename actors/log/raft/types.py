"""The values a raft group stores and the messages its members exchange.

Everything is a frozen value so a core's inputs and outputs can be compared, logged and
replayed. Several raft groups share a node, so every message names its `group`; the
node's shell routes it to that group's core. Index 0 / term 0 is the empty log prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

NodeId = str


@dataclass(frozen=True, slots=True)
class Entry:
    """One log entry. `timestamp` is the leader's clock when it appended the entry (for
    leases); `index` is the fencing token other protocols compare. `command` None is the
    no-op a new leader appends to commit the entries of earlier terms (Raft §5.4.2)."""

    index: int
    term: int
    timestamp: float
    command: Any


@dataclass(frozen=True, slots=True)
class Membership:
    """A group's configuration. Voters elect leaders and count for commit, check-quorum
    and ReadIndex; learners receive the log and snapshots and count for nothing. A
    member always uses the latest configuration in its log, committed or not (raft
    thesis §4.1); below the log it is the snapshot's, below that the bootstrap one."""

    voters: tuple[NodeId, ...]
    learners: tuple[NodeId, ...] = ()

    @property
    def members(self) -> tuple[NodeId, ...]:
        return self.voters + self.learners

    @property
    def quorum(self) -> int:
        return len(self.voters) // 2 + 1


ChangeOp = Literal["add_learner", "promote", "remove"]
CHANGE_OPS: tuple[ChangeOp, ...] = ("add_learner", "promote", "remove")


@dataclass(frozen=True, slots=True)
class ConfChange:
    """The command of a configuration-change entry: one server added as a learner,
    promoted to voter, or removed; `membership` is the configuration after it, so a
    member reads its configuration from its log without replaying the changes."""

    op: ChangeOp
    node: NodeId
    membership: Membership


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be durable before any message that depends on it is sent."""

    term: int = 0
    voted_for: NodeId | None = None


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    """The last entry a snapshot covers and the configuration in effect there (None: a
    snapshot from before configurations were recorded, or a group that never changed:
    the bootstrap configuration)."""

    index: int
    term: int
    membership: Membership | None = None


# ---- messages ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestVote:
    """A vote request. A pre-vote (thesis §9.6) carries the term the candidate *would*
    campaign at and changes no one's term or vote."""

    group: str
    pre_vote: bool
    term: int
    candidate: NodeId
    last_log_index: int
    last_log_term: int


@dataclass(frozen=True, slots=True)
class VoteReply:
    group: str
    pre_vote: bool
    term: int
    granted: bool
    voter: NodeId


@dataclass(frozen=True, slots=True)
class AppendEntries:
    """Entries after (prev_index, prev_term). A heartbeat has no entries and sits at the
    follower's acked match index (or at (0, 0), the empty prefix): it never fails.
    `read_round`: the leader's latest ReadIndex round when it sent this (0: none). `ack`
    False: a heartbeat that only announces the commit index needs no answer (unless it
    starts a read round)."""

    group: str
    term: int
    leader: NodeId
    prev_index: int
    prev_term: int
    entries: tuple[Entry, ...]
    leader_commit: int
    read_round: int = 0
    ack: bool = True


@dataclass(frozen=True, slots=True)
class AppendReply:
    """success: `match_index` is the follower's durable prefix that agrees with the leader.
    Failure: `match_index` is the rejected prev_index and `conflict_hint` (index, term) is
    the follower's last entry at or below it whose term <= prev_term (fast backup). Either
    way it acknowledges the leader of its term up to `read_round` (ReadIndex)."""

    group: str
    term: int
    follower: NodeId
    success: bool
    match_index: int
    conflict_hint: tuple[int, int] | None = None
    read_round: int = 0  # the highest read round this follower saw from this leader


SnapshotPhase = Literal["init", "pre", "next", "last"]


@dataclass(frozen=True, slots=True)
class InstallSnapshot:
    """One step of a snapshot install, built by the leader's shell from its storage (Ra).

    "init" announces the snapshot; "pre" carries live entries above the follower's
    last_applied (`last`: no more live entries follow); "next"/"last" carry snapshot
    chunk `chunk_no` ("last" is the final one, with the snapshot's whole live set: the
    follower keeps the live entries at or below its last_applied from its own log)."""

    group: str
    term: int
    leader: NodeId
    snapshot_index: int
    snapshot_term: int
    phase: SnapshotPhase
    live_entries: tuple[Entry, ...] = ()
    chunk: bytes = b""
    chunk_no: int = 0
    last: bool = False
    live_indexes: tuple[int, ...] = ()  # on the final chunk: every live index of the snapshot
    membership: Membership | None = None  # on the final chunk: the configuration at the index


@dataclass(frozen=True, slots=True)
class InstallSnapshotReply:
    """The follower's cursor in the install: `live_upto` is its last_applied after "init"
    and the highest live entry stored after "pre" (`last` echoes the pre message);
    `next_chunk` is the chunk it expects next. ok False: restart the install."""

    group: str
    term: int
    follower: NodeId
    snapshot_index: int
    phase: SnapshotPhase
    ok: bool
    live_upto: int = 0
    next_chunk: int = 0
    last: bool = False


Message = (
    RequestVote | VoteReply | AppendEntries | AppendReply | InstallSnapshot | InstallSnapshotReply
)


def sender(msg: Message) -> NodeId:
    """The member that sent `msg`."""
    match msg:
        case RequestVote():
            return msg.candidate
        case VoteReply():
            return msg.voter
        case AppendEntries() | InstallSnapshot():
            return msg.leader
        case AppendReply() | InstallSnapshotReply():
            return msg.follower


__all__ = [
    "CHANGE_OPS",
    "AppendEntries",
    "AppendReply",
    "ChangeOp",
    "ConfChange",
    "Entry",
    "HardState",
    "InstallSnapshot",
    "InstallSnapshotReply",
    "Membership",
    "Message",
    "NodeId",
    "RequestVote",
    "SnapshotMeta",
    "SnapshotPhase",
    "VoteReply",
    "sender",
]
