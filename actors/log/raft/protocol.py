"""Events into a raft core and the effects out of it: the whole shell contract.

`core.step(state, event) -> (state, effects)`. The core reads no clock, no disk and no
random source (time comes in event fields, randomness from a seeded generator in the
state), so the same events always give the same effects; etcd-io/raft's `Ready` works
the same way.

The shell executes the effects of one step IN ORDER:

1. `PersistHardState` is a barrier: it must be durable before any later effect runs
   (a vote or a new term must never be visible to a peer before it is on disk).
2. Storage effects (`TruncateLog`, `AppendToLog`, `WriteSparse`, `StoreSnapshotChunk`,
   `RestoreMachine`) go to the group's log in this order. Log writes may complete
   asynchronously (batched fsync): after an fsync that covers an appended entry, feed
   `Persisted(index, term)` of the last durable entry. Sends need not wait for them:
   the core only acks (follower) or counts itself (leader) for persisted entries.
3. `Send` / `SendSnapshot` go to the network (lossy, reordering is fine).
4. `Apply` hands committed entries to the state machine, in order.
5. `Reply` answers proposers; `LeaderChanged` goes to election listeners.

Events the shell must feed back: `Tick` at least at `core.wakeup_at(state)`;
`Persisted` after each log fsync; `SnapshotTaken` after a machine snapshot is durable;
`SnapshotInstalled` once every `WriteSparse` and `StoreSnapshotChunk` of an incoming
snapshot (up to the "last" chunk) is durable, echoing the last chunk's `membership`;
`SnapshotSendFailed` when it cannot build a requested install step (that snapshot is
gone).

Configuration changes (`membership`): entries whose command is a `ConfChange` go to the
state machine as no-ops (the shell hands the machine the entry with command None). A
snapshot records the configuration at its index (`membership_at(state, index)` when
the shell takes one, `RestoreMachine.membership` when it activates one); the leader's
shell puts it on the final chunk of an install, and a restarted member passes it in
`SnapshotMeta`.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Literal

from sediment.actors.log.raft.types import Entry, Membership, Message, NodeId

Ref = Hashable  # the proposer's reference, echoed in its Reply

# ---- events -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passes: election and heartbeat timeouts, check-quorum, snapshot retries."""

    now: float


@dataclass(frozen=True, slots=True)
class Receive:
    msg: Message
    now: float


@dataclass(frozen=True, slots=True)
class Propose:
    """A client command (never None). Non-leaders answer NotLeader(hint)."""

    command: object
    ref: Ref
    now: float


@dataclass(frozen=True, slots=True)
class Persisted:
    """The log is durable up to `index`, whose entry has `term` (stale ones are ignored)."""

    index: int
    term: int


@dataclass(frozen=True, slots=True)
class SnapshotTaken:
    """A snapshot of the machine at `index` (<= applied) and its live indexes is durable:
    the core drops its in-memory entries up to `index`."""

    index: int
    term: int


@dataclass(frozen=True, slots=True)
class SnapshotInstalled:
    """Every chunk and live entry of an incoming snapshot is durable (still staged).
    `membership` echoes the one its final StoreSnapshotChunk carried."""

    snapshot_index: int
    snapshot_term: int
    membership: Membership | None = None


@dataclass(frozen=True, slots=True)
class SnapshotSendFailed:
    """The leader's shell no longer has snapshot `snapshot_index`: restart with the newest."""

    to: NodeId
    snapshot_index: int


@dataclass(frozen=True, slots=True)
class ProposeBatch:
    """Every proposal the shell found waiting, appended as one batch: one log append and
    one AppendEntries per follower for all of them (bounded by the shell)."""

    items: tuple[tuple[object, Ref], ...]  # (command, ref)
    now: float


@dataclass(frozen=True, slots=True)
class ReadIndex:
    """Linearizable reads waiting (raft thesis §6.4): answered `ReadReady(index)` once a
    heartbeat round sent after they arrived was acknowledged by a quorum (so this member
    still led when they arrived) and the machine applied through the commit index of
    that moment. One round serves every read of the batch."""

    refs: tuple[Ref, ...]
    now: float


@dataclass(frozen=True, slots=True)
class ProposeChange:
    """A configuration change (`op` "add_learner", "promote" or "remove" of `node`), one
    at a time: answered Committed once its entry commits, Refused (nothing changed) when
    it breaks a rule, NotLeader by others."""

    op: str
    node: NodeId
    ref: Ref
    now: float


Event = (
    Tick
    | Receive
    | Propose
    | ProposeBatch
    | ReadIndex
    | ProposeChange
    | Persisted
    | SnapshotTaken
    | SnapshotInstalled
    | SnapshotSendFailed
)

# ---- replies to proposers ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Committed:
    index: int


@dataclass(frozen=True, slots=True)
class NotLeader:
    leader_hint: NodeId | None


@dataclass(frozen=True, slots=True)
class Dropped:
    """Definitely not committed (overwritten, or never appended when index is None): safe
    to retry."""

    index: int | None


@dataclass(frozen=True, slots=True)
class Unknown:
    """The outcome cannot be known here (a snapshot install replaced the log under it)."""

    index: int


@dataclass(frozen=True, slots=True)
class ReadReady:
    """A read may be served from the machine now: it has applied through `index`."""

    index: int


@dataclass(frozen=True, slots=True)
class Refused:
    """A configuration change that breaks a rule; nothing changed. `reason`: one of
    REFUSALS."""

    reason: str


REFUSALS = {
    "unknown_op": "the op is not add_learner, promote or remove",
    "change_pending": "the last configuration change is not committed yet",
    "leader_not_ready": "the leader has not committed an entry of its term yet",
    "already_member": "the node is a voter or a learner already",
    "not_a_learner": "only a learner can be promoted",
    "not_a_member": "the node is neither a voter nor a learner",
    "last_voter": "the only voter cannot be removed",
    "not_caught_up": "the learner's log is more than one pipeline behind the commit index",
}

Result = Committed | NotLeader | Dropped | Unknown | ReadReady | Refused

# ---- effects ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PersistHardState:
    """Barrier: durable before any later effect of the same step runs."""

    term: int
    voted_for: NodeId | None


@dataclass(frozen=True, slots=True)
class TruncateLog:
    """Drop log entries from `from_index` on (they conflict with the leader's log)."""

    from_index: int


@dataclass(frozen=True, slots=True)
class AppendToLog:
    """Append contiguous entries after the current last entry; feed Persisted when durable."""

    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class WriteSparse:
    """Live entries (<= snapshot_index) of an incoming snapshot, sent in phase "pre".

    Staged with that snapshot: recovery ignores them unless RestoreMachine activated it."""

    snapshot_index: int
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class StoreSnapshotChunk:
    """Stage one chunk of an incoming snapshot, keyed by snapshot_index. Keep every staging
    until RestoreMachine activates one (then drop those at or below it): a SnapshotInstalled
    for an older install may still be on its way. Recovery drops all stagings."""

    snapshot_index: int
    snapshot_term: int
    chunk_no: int
    data: bytes
    last: bool
    live_indexes: tuple[int, ...] = ()  # with `last`: the snapshot's whole live set
    membership: Membership | None = None  # with `last`: echo it in SnapshotInstalled


@dataclass(frozen=True, slots=True)
class RestoreMachine:
    """Activate the staged snapshot in ONE atomic storage step: it becomes the group's
    snapshot, its sparse live entries join the log, and with `discard_log` every log entry
    above snapshot_index is dropped. Then load the state machine from it. `membership`:
    the configuration at snapshot_index, to record in the snapshot's metadata (None: the
    bootstrap configuration)."""

    snapshot_index: int
    snapshot_term: int
    discard_log: bool
    membership: Membership | None = None


@dataclass(frozen=True, slots=True)
class Send:
    to: NodeId
    msg: Message


SnapshotStep = Literal["init", "pre", "chunk"]


@dataclass(frozen=True, slots=True)
class SendSnapshot:
    """Build and send one InstallSnapshot to `to` from storage: "init"; "pre" with the
    snapshot's live entries above `live_from` (a bounded batch; `last` when none remain);
    "chunk" number `chunk_no` (phase "last" for the final chunk, else "next").
    If that snapshot is gone, feed SnapshotSendFailed instead."""

    to: NodeId
    term: int
    snapshot_index: int
    snapshot_term: int
    step: SnapshotStep
    live_from: int = 0
    chunk_no: int = 0


@dataclass(frozen=True, slots=True)
class Apply:
    """Committed entries, in index order, each exactly once per incarnation of the core."""

    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class Reply:
    ref: Ref
    result: Result


@dataclass(frozen=True, slots=True)
class LeaderChanged:
    """The election listener API: this group's known leader (None: unknown) in `term`."""

    leader: NodeId | None
    term: int


Effect = (
    PersistHardState
    | TruncateLog
    | AppendToLog
    | WriteSparse
    | StoreSnapshotChunk
    | RestoreMachine
    | Send
    | SendSnapshot
    | Apply
    | Reply
    | LeaderChanged
)

__all__ = [
    "Apply",
    "AppendToLog",
    "Committed",
    "Dropped",
    "Effect",
    "Event",
    "LeaderChanged",
    "NotLeader",
    "Persisted",
    "PersistHardState",
    "Propose",
    "ProposeBatch",
    "ProposeChange",
    "REFUSALS",
    "ReadIndex",
    "ReadReady",
    "Receive",
    "Ref",
    "Refused",
    "Reply",
    "RestoreMachine",
    "Result",
    "Send",
    "SendSnapshot",
    "SnapshotInstalled",
    "SnapshotSendFailed",
    "SnapshotStep",
    "SnapshotTaken",
    "StoreSnapshotChunk",
    "Tick",
    "TruncateLog",
    "Unknown",
    "WriteSparse",
]
