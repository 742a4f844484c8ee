"""The raft core of one group member: `init` from persisted state, `step(state, event)`.

Pure: `step` copies the state it is given, reads no clock and no disk, and returns the
effects for the shell to execute in order (see `protocol` for the contract). The
modules beside this one hold the concerns: election, replication, snapshots, reads and
configuration changes (`membership`).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import replace

from sediment.actors.log.raft import election, membership, reads, replication, snapshot_install
from sediment.actors.log.raft.protocol import (
    Dropped,
    Effect,
    Event,
    LeaderChanged,
    NotLeader,
    Persisted,
    PersistHardState,
    Propose,
    ProposeBatch,
    ProposeChange,
    ReadIndex,
    Receive,
    Ref,
    Reply,
    Send,
    SnapshotInstalled,
    SnapshotSendFailed,
    SnapshotTaken,
    Tick,
)
from sediment.actors.log.raft.state import (
    Out,
    RaftConfig,
    RaftProtocolError,
    RaftState,
    become_follower,
    reset_election_timer,
)
from sediment.actors.log.raft.types import (
    AppendEntries,
    AppendReply,
    ConfChange,
    Entry,
    HardState,
    InstallSnapshot,
    InstallSnapshotReply,
    Message,
    NodeId,
    RequestVote,
    SnapshotMeta,
    VoteReply,
    sender,
)

_MASK64 = (1 << 64) - 1
_FRESH = HardState()


def init(
    config: RaftConfig,
    me: NodeId,
    hard_state: HardState = _FRESH,
    log_tail: Sequence[Entry] = (),
    snapshot_meta: SnapshotMeta | None = None,
    seed: int = 0,
) -> RaftState:
    """A follower restored from what was persisted: the hard state, the snapshot and the
    contiguous log entries after it (entries at or below the snapshot are skipped). The
    shell loads the machine from the same snapshot; commit and applied restart there.
    Its configuration is the latest in that log, else the snapshot's, else the bootstrap
    one (`config.peers`); a member in none of them (one joining from nothing) waits for
    a leader and never campaigns."""
    snap = snapshot_meta or SnapshotMeta(0, 0)
    tail = tuple(e for e in log_tail if e.index > snap.index)
    prev_term = snap.term
    for k, entry in enumerate(tail):
        if entry.index != snap.index + 1 + k or entry.term < prev_term:
            raise RaftProtocolError(f"log tail breaks at {entry.index}/{entry.term}")
        prev_term = entry.term
    rng = (seed * 0x9E3779B97F4A7C15 + zlib.crc32(me.encode())) & _MASK64
    snap_conf = snap.membership or config.bootstrap
    confs = membership.changes_in(tail)
    conf = confs[-1][1] if confs else snap_conf
    return RaftState(
        config=config,
        me=me,
        others=tuple(p for p in conf.members if p != me),
        rng=rng,
        term=hard_state.term,
        voted_for=hard_state.voted_for,
        snap_index=snap.index,
        snap_term=snap.term,
        entries=tail,
        persisted=snap.index + len(tail),
        commit=snap.index,
        applied=snap.index,
        verified=snap.index,
        snap_conf=snap_conf,
        confs=confs,
    )


def step(state: RaftState, event: Event) -> tuple[RaftState, list[Effect]]:
    """Apply one event; return the new state and the effects, in execution order."""
    s = state.copy()
    out = Out()
    match event:
        case Tick(now=now):
            s.now = now
            _on_tick(s, now, out)
        case Receive(msg=msg, now=now):
            s.now = now
            _on_message(s, msg, now, out)
        case Propose():
            s.now = event.now
            _on_propose(s, ((event.command, event.ref),), out)
        case ProposeBatch():
            s.now = event.now
            _on_propose(s, event.items, out)
        case ReadIndex():
            s.now = event.now
            reads.on_read_index(s, event.refs, out)
        case ProposeChange():
            s.now = event.now
            _on_propose_change(s, event, out)
        case Persisted(index=index, term=term):
            replication.on_persisted(s, index, term, out)
        case SnapshotTaken(index=index, term=term):
            snapshot_install.on_snapshot_taken(s, index, term)
        case SnapshotInstalled(snapshot_index=index, snapshot_term=term):
            snapshot_install.on_snapshot_installed(s, index, term, event.membership, out)
        case SnapshotSendFailed(to=to, snapshot_index=index):
            snapshot_install.on_send_failed(s, to, index, out)
        case _:
            raise RaftProtocolError(f"not a raft event: {event!r}")
    replication.tell_leaving(s, out)
    membership.after_step(s, out)
    replication.apply_committed(s, out)
    if s.reads:
        if s.role == "leader":
            reads.release(s, out)
        else:
            reads.step_down(s, out)
    return s, _effects(state, s, out)


def wakeup_at(state: RaftState) -> float:
    """The latest time by which the shell must deliver a Tick."""
    s = state
    if s.role != "leader":
        return s.now if s.election_deadline is None else s.election_deadline
    due = s.heartbeat_due
    if s.config.check_quorum:
        due = min(due, s.quorum_due)
    if s.commit_notify_due is not None:
        due = min(due, s.commit_notify_due)
    return due


def _effects(old: RaftState, s: RaftState, out: Out) -> list[Effect]:
    fx: list[Effect] = []
    if (s.term, s.voted_for) != (old.term, old.voted_for):
        fx.append(PersistHardState(s.term, s.voted_for))
    fx += out.storage
    fx += out.sends
    fx += out.machine
    fx += out.replies
    if s.leader != old.leader or (s.leader is not None and s.term != old.term):
        fx.append(LeaderChanged(s.leader, s.term))
    return fx


def _on_tick(s: RaftState, now: float, out: Out) -> None:
    if s.role != "leader":
        if s.election_deadline is None:
            reset_election_timer(s, now)
        elif now >= s.election_deadline:
            if membership.may_campaign(s):
                election.campaign(s, now, out, pre_vote=s.config.pre_vote)
            else:  # a learner, or removed for good: it waits for a leader (or its end)
                reset_election_timer(s, now)
        return
    if s.config.check_quorum and now >= s.quorum_due and not _check_quorum(s, now):
        return
    if now >= s.heartbeat_due:
        s.heartbeat_due = now + s.config.heartbeat_interval
        replication.heartbeat(s, now, out)
    if s.commit_notify_due is not None and now >= s.commit_notify_due:
        replication.notify_commit(s, now, out)


def _check_quorum(s: RaftState, now: float) -> bool:
    """A leader that has not heard from a quorum for an election timeout steps down, so a
    partitioned leader stops accepting proposals it cannot commit. Only voters count (us
    only while we are one). True: still leader."""
    conf = membership.latest(s)
    active = sum(p == s.me or s.progress[p].active for p in conf.voters)
    s.progress = {p: replace(pr, active=False) for p, pr in s.progress.items()}
    s.quorum_due = now + s.config.election_timeout[0]
    if active < conf.quorum:
        become_follower(s, s.term, None, now)
        return False
    return True


def _on_message(s: RaftState, msg: Message, now: float, out: Out) -> None:
    if msg.group != s.config.group:
        raise RaftProtocolError(f"group {s.config.group!r} got a message for {msg.group!r}")
    if sender(msg) == s.me:
        return
    # Messages from outside our configuration count too (raft thesis §4.2): a leader
    # adding us is in no configuration we know yet, a candidate in a newer one may need
    # our vote; its replies are ignored unless we track the sender.
    if s.role != "leader" and s.election_deadline is None:
        reset_election_timer(s, now)
    match msg:
        case RequestVote():
            election.on_request_vote(s, msg, now, out)
        case VoteReply():
            election.on_vote_reply(s, msg, now, out)
        case AppendEntries() | InstallSnapshot():
            _from_leader(s, msg, now, out)
        case AppendReply() | InstallSnapshotReply():
            if msg.term > s.term:
                become_follower(s, msg.term, None, now)
            elif msg.term == s.term and s.role == "leader":
                if isinstance(msg, AppendReply):
                    replication.on_append_reply(s, msg, out)
                else:
                    snapshot_install.on_install_reply(s, msg, out)


def _from_leader(
    s: RaftState, msg: AppendEntries | InstallSnapshot, now: float, out: Out
) -> None:
    if msg.term < s.term:
        # A stale leader: our term in the reply makes it step down (etcd does the same).
        stale: Message
        if isinstance(msg, AppendEntries):
            stale = AppendReply(s.config.group, s.term, s.me, False, 0)
        else:
            stale = InstallSnapshotReply(
                s.config.group, s.term, s.me, msg.snapshot_index, msg.phase, False
            )
        out.sends.append(Send(msg.leader, stale))
        return
    if msg.term > s.term or s.role != "follower" or s.leader != msg.leader:
        become_follower(s, msg.term, msg.leader, now)
    else:
        s.leader_contact = now
        reset_election_timer(s, now)
    if isinstance(msg, AppendEntries):
        replication.on_append_entries(s, msg, out)
    else:
        snapshot_install.on_install_snapshot(s, msg, out)


def _on_propose(s: RaftState, items: Sequence[tuple[object, Ref]], out: Out) -> None:
    """Append every proposal of the batch as one log write and one AppendEntries round;
    beyond `max_pending` outstanding proposals the rest are Dropped (retry later)."""
    if any(command is None or isinstance(command, ConfChange) for command, _ in items):
        raise RaftProtocolError("a command must not be None (the leader's no-op) or a "
                                "ConfChange (ProposeChange checks those)")
    if s.role != "leader":
        out.replies.extend(Reply(ref, NotLeader(s.leader)) for _, ref in items)
        return
    room = max(0, s.config.max_pending - len(s.pending))
    taken = items[:room]
    out.replies.extend(Reply(ref, Dropped(None)) for _, ref in items[room:])
    if not taken:
        return
    entries = replication.leader_append_all(s, tuple(c for c, _ in taken), s.now, out)
    for entry, (_, ref) in zip(entries, taken, strict=True):
        s.pending[entry.index] = (entry.term, ref)
    replication.broadcast(s, out)
    replication.maybe_commit(s, out)


def _on_propose_change(s: RaftState, event: ProposeChange, out: Out) -> None:
    """Append one configuration change if the rules allow it (`membership.refusal`); it
    takes effect at once, here, and commits with the new configuration's quorum."""
    if s.role != "leader":
        out.replies.append(Reply(event.ref, NotLeader(s.leader)))
        return
    refused = membership.refusal(s, event.op, event.node)
    if refused is not None:
        out.replies.append(Reply(event.ref, refused))
        return
    if len(s.pending) >= s.config.max_pending:
        out.replies.append(Reply(event.ref, Dropped(None)))
        return
    conf = membership.changed(membership.latest(s), event.op, event.node)
    change = ConfChange(event.op, event.node, conf)  # type: ignore[arg-type]
    entry = replication.leader_append(s, change, s.now, out)
    s.pending[entry.index] = (entry.term, event.ref)
    replication.broadcast(s, out)
    replication.maybe_commit(s, out)


__all__ = ["init", "step", "wakeup_at"]
