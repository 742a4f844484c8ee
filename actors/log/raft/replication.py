"""Log replication: the leader's per-follower flow control, the follower's append and
ack, commit (Raft §5.3, §5.4.2) and apply.

Flow control follows etcd: a follower is probed one AppendEntries per heartbeat until
it accepts, then entries are pipelined (at most `max_inflight` unacked messages of at
most `max_append_entries` entries); a follower behind the leader's snapshot gets a
snapshot install. A pipelined follower that acked nothing for a whole heartbeat
interval (one that already had entries to ack at the heartbeat before) is probed again
from its match index, which recovers from lost messages.
"""

from __future__ import annotations

from dataclasses import replace

from sediment.actors.log.raft import membership
from sediment.actors.log.raft.protocol import (
    AppendToLog,
    Apply,
    Committed,
    Dropped,
    Send,
    SendSnapshot,
    TruncateLog,
    Unknown,
)
from sediment.actors.log.raft.state import (
    Out,
    Progress,
    RaftProtocolError,
    RaftState,
    drop_pending_from,
    entries_between,
    find_conflict_by_term,
    last_index,
    reply,
    term_at,
)
from sediment.actors.log.raft.types import AppendEntries, AppendReply, Entry, NodeId

# ---- leader -----------------------------------------------------------------------------


def leader_append(s: RaftState, command: object, now: float, out: Out) -> Entry:
    """Append to our own log; it counts toward commit once Persisted says it is durable."""
    return leader_append_all(s, (command,), now, out)[0]


def leader_append_all(s: RaftState, commands: tuple[object, ...], now: float,
                      out: Out) -> tuple[Entry, ...]:
    """Append a batch of commands as one log write (one fsync covers them all)."""
    first = last_index(s) + 1
    entries = tuple(Entry(first + k, s.term, now, c) for k, c in enumerate(commands))
    s.entries = (*s.entries, *entries)
    out.storage.append(AppendToLog(entries))
    membership.appended(s, entries)
    return entries


def send_to(s: RaftState, peer: NodeId, msg: AppendEntries, out: Out) -> None:
    """Send an AppendEntries; it tells `peer` the commit index."""
    out.sends.append(Send(peer, msg))
    pr = s.progress[peer]
    if pr.commit_sent != msg.leader_commit:
        s.progress[peer] = replace(pr, commit_sent=msg.leader_commit)


def heartbeat_msg(s: RaftState, peer: NodeId, ack: bool = True) -> AppendEntries:
    """An empty AppendEntries after the follower's match index: it acked that prefix as
    durable, so the heartbeat cannot fail, and it re-verifies the prefix for a follower
    that restarted meanwhile (and lost what it had verified). (0, 0), the empty prefix,
    when our snapshot covers the match index."""
    match = s.progress[peer].match
    prev = term_at(s, match)
    if prev is None:
        return AppendEntries(s.config.group, s.term, s.me, 0, 0, (), s.commit, s.read_round,
                             ack)
    return AppendEntries(s.config.group, s.term, s.me, match, prev, (), s.commit, s.read_round,
                         ack)


def nudge(s: RaftState, peer: NodeId, out: Out, ack: bool = True) -> None:
    """Send `peer` what it may get now, or else a heartbeat: it learns the commit index and
    the read round at once. A heartbeat for the commit alone (`ack` False) is not
    answered."""
    if not send_append(s, peer, out) and s.progress[peer].state != "snapshot":
        send_to(s, peer, heartbeat_msg(s, peer, ack), out)


def notify_commit(s: RaftState, now: float, out: Out) -> None:
    """Followers whose last message from us carried an older commit index learn the new
    one (a follower applies, and serves its reads and watches, only what it knows is
    committed). Run `commit_notify_delay` after the commit advanced: under load the next
    AppendEntries carries it first, at no cost."""
    s.commit_notify_due = None
    for peer in s.others:
        if s.progress[peer].commit_sent < s.commit:
            nudge(s, peer, out, ack=False)


def tell_leaving(s: RaftState, out: Out) -> None:
    """Before the leader forgets the members a committed configuration removed, each
    hears the commit once more (lazily announced commits would never reach it): knowing
    its removal committed, it never campaigns again."""
    if s.role != "leader" or not s.leaving or membership.latest_index(s) > s.commit:
        return
    for peer in s.leaving:
        pr = s.progress.get(peer)
        if pr is not None and pr.commit_sent < s.commit:
            nudge(s, peer, out, ack=False)


def commit_advanced(s: RaftState, out: Out) -> None:
    """The leader's commit moved: announce it now, or by `commit_notify_delay`."""
    if s.config.commit_notify_delay <= 0:
        notify_commit(s, s.now, out)
    elif s.commit_notify_due is None:
        s.commit_notify_due = s.now + s.config.commit_notify_delay


def start_snapshot(s: RaftState, peer: NodeId, out: Out) -> None:
    """The follower needs entries we compacted: install our newest snapshot."""
    pr = s.progress[peer]
    deadline = s.now + s.config.election_timeout[1]
    s.progress[peer] = replace(
        pr, state="snapshot", snapshot=s.snap_index, snapshot_term=s.snap_term, inflight=(),
        probe_sent=False, snapshot_deadline=deadline,
    )
    out.sends.append(SendSnapshot(peer, s.term, s.snap_index, s.snap_term, "init"))


def send_append(s: RaftState, peer: NodeId, out: Out) -> bool:
    """Send the next AppendEntries `peer` may get now; True if one was sent."""
    pr = s.progress[peer]
    if pr.state == "snapshot" or (pr.state == "probe" and pr.probe_sent):
        return False
    if pr.state == "replicate" and len(pr.inflight) >= s.config.max_inflight:
        return False
    if pr.next <= s.snap_index:
        start_snapshot(s, peer, out)
        return False
    prev = pr.next - 1
    hi = min(last_index(s), prev + s.config.max_append_entries)
    if pr.state == "replicate" and hi == prev:
        return False
    prev_term = term_at(s, prev)
    assert prev_term is not None, (prev, s.snap_index)
    entries = entries_between(s, prev + 1, hi) if hi > prev else ()
    msg = AppendEntries(s.config.group, s.term, s.me, prev, prev_term, entries, s.commit,
                        s.read_round)
    send_to(s, peer, msg, out)
    if pr.state == "replicate":
        s.progress[peer] = replace(pr, next=hi + 1, inflight=(*pr.inflight, hi))
    else:
        s.progress[peer] = replace(pr, probe_sent=True)
    return True


def send_all(s: RaftState, peer: NodeId, out: Out) -> None:
    """Fill the follower's pipeline (bounded by max_inflight)."""
    while send_append(s, peer, out) and s.progress[peer].state == "replicate":
        pass


def broadcast(s: RaftState, out: Out) -> None:
    for peer in s.others:
        send_all(s, peer, out)


def heartbeat(s: RaftState, now: float, out: Out) -> None:
    """Every heartbeat_interval: keep followers' timers quiet, re-probe stalled ones and
    retry snapshot installs that stopped answering."""
    last = last_index(s)
    for peer in s.others:
        pr = s.progress[peer]
        stalled = pr.state == "replicate" and pr.waiting and not pr.progressed
        if stalled or (pr.state == "snapshot" and now >= pr.snapshot_deadline):
            pr = _probe(pr, pr.match + 1)
        s.progress[peer] = replace(
            pr, progressed=False, probe_sent=False, waiting=pr.match < last
        )
        if not send_append(s, peer, out) and s.progress[peer].state != "probe":
            send_to(s, peer, heartbeat_msg(s, peer), out)


def _probe(pr: Progress, next_index: int) -> Progress:
    return replace(pr, state="probe", next=next_index, inflight=(), probe_sent=False)


def on_append_reply(s: RaftState, m: AppendReply, out: Out) -> None:
    pr = s.progress.get(m.follower)
    if pr is None:
        return
    pr = replace(pr, active=True, read_round=max(pr.read_round, m.read_round))
    if not m.success:
        s.progress[m.follower] = _after_reject(s, pr, m)
        send_all(s, m.follower, out)
        return
    advanced = m.match_index > pr.match
    if advanced:
        inflight = tuple(i for i in pr.inflight if i > m.match_index)
        pr = replace(pr, match=m.match_index, progressed=True, inflight=inflight)
    if pr.state == "probe" and pr.match >= pr.next - 1:
        pr = replace(pr, state="replicate", next=pr.match + 1, inflight=(), probe_sent=False)
    elif pr.state == "replicate":
        pr = replace(pr, next=max(pr.next, pr.match + 1))
    elif pr.state == "snapshot" and pr.match >= pr.snapshot:
        pr = _probe(pr, pr.match + 1)
    s.progress[m.follower] = pr
    if advanced:
        maybe_commit(s, out)
    send_all(s, m.follower, out)


def _after_reject(s: RaftState, pr: Progress, m: AppendReply) -> Progress:
    rejected = m.match_index
    stale = (
        pr.state == "snapshot"
        or (pr.state == "replicate" and rejected <= pr.match)
        or (pr.state == "probe" and rejected != pr.next - 1)
    )
    if stale:
        return pr
    hint_index, hint_term = m.conflict_hint if m.conflict_hint is not None else (rejected - 1, 0)
    if hint_term > 0:
        hint_index = find_conflict_by_term(s, hint_index, hint_term)
    return _probe(pr, max(min(rejected, hint_index + 1), pr.match + 1))


def maybe_commit(s: RaftState, out: Out) -> None:
    """Commit the highest index durable on a quorum of the latest configuration's voters
    (us only if we are one), only if it is from our term (§5.4.2)."""
    conf = membership.latest(s)
    matches = sorted([s.persisted if p == s.me else s.progress[p].match for p in conf.voters],
                     reverse=True)
    n = matches[conf.quorum - 1]
    if n > s.commit and term_at(s, n) == s.term:
        advance_commit(s, n, out)
        commit_advanced(s, out)


# ---- follower ---------------------------------------------------------------------------


def on_append_entries(s: RaftState, m: AppendEntries, out: Out) -> None:
    """Raft's AppendEntries receiver; the caller already handled term and leadership."""
    new_round = m.read_round > s.read_round
    s.read_round = max(s.read_round, m.read_round)
    entries = m.entries
    if m.prev_index < s.commit:
        # The committed prefix matches every leader's log: skip it, checked or not.
        entries = entries[s.commit - m.prev_index :]
        last_new = max(s.commit, m.prev_index + len(m.entries))
    elif term_at(s, m.prev_index) != m.prev_term:
        _reject(s, m, out)
        return
    else:
        last_new = m.prev_index + len(entries)
    _append(s, entries, out)
    s.verified = max(s.verified, last_new)
    commit = min(m.leader_commit, s.verified)
    if commit > s.commit:
        advance_commit(s, commit, out)
    if m.entries:
        if s.persisted >= last_new:
            out.sends.append(Send(m.leader, ack(s)))
    elif m.ack or new_round:
        out.sends.append(Send(m.leader, ack(s)))
    s.ack_pending = s.persisted < s.verified


def _append(s: RaftState, entries: tuple[Entry, ...], out: Out) -> None:
    for k, entry in enumerate(entries):
        term = term_at(s, entry.index)
        if term == entry.term:
            continue
        if term is not None:
            if entry.index <= s.commit:
                raise RaftProtocolError(f"{s.me}: conflict at committed index {entry.index}")
            truncate(s, entry.index, out)
        new = entries[k:]
        if new[0].index != last_index(s) + 1:
            raise RaftProtocolError(f"{s.me}: gap before {new[0].index}")
        s.entries = (*s.entries, *new)
        out.storage.append(AppendToLog(new))
        membership.appended(s, new)
        return


def truncate(s: RaftState, index: int, out: Out) -> None:
    s.entries = s.entries[: index - s.snap_index - 1]
    s.persisted = min(s.persisted, index - 1)
    s.verified = min(s.verified, index - 1)
    out.storage.append(TruncateLog(index))
    drop_pending_from(s, index, out)
    membership.truncated(s, index)


def _reject(s: RaftState, m: AppendEntries, out: Out) -> None:
    hint = min(m.prev_index, last_index(s))
    while hint > s.commit and (term_at(s, hint) or 0) > m.prev_term:
        hint -= 1
    hint_term = term_at(s, hint)
    assert hint_term is not None, (hint, s.snap_index)
    msg = AppendReply(
        s.config.group, s.term, s.me, False, m.prev_index, conflict_hint=(hint, hint_term),
        read_round=s.read_round,
    )
    out.sends.append(Send(m.leader, msg))


def ack(s: RaftState) -> AppendReply:
    """Acknowledge only what is both durable and known to match the leader."""
    return AppendReply(s.config.group, s.term, s.me, True, min(s.persisted, s.verified),
                       read_round=s.read_round)


def on_persisted(s: RaftState, index: int, term: int, out: Out) -> None:
    if index <= s.persisted or term_at(s, index) != term:
        return  # old news, or the entry was truncated since (a later Persisted follows)
    s.persisted = index
    if s.role == "leader":
        maybe_commit(s, out)
    elif s.role == "follower" and s.ack_pending and s.leader is not None:
        out.sends.append(Send(s.leader, ack(s)))
        s.ack_pending = s.persisted < s.verified


# ---- both -------------------------------------------------------------------------------


def advance_commit(s: RaftState, index: int, out: Out) -> None:
    s.commit = index
    for i in sorted(i for i in s.pending if i <= index):
        term, _ref = s.pending[i]
        actual = term_at(s, i)
        if actual is None:
            reply(s, out, i, Unknown(i))
        else:
            reply(s, out, i, Committed(i) if actual == term else Dropped(i))


def apply_committed(s: RaftState, out: Out) -> None:
    """Hand committed entries to the machine, never beyond our durable log: a snapshot's
    live indexes must be readable from local storage."""
    hi = min(s.commit, s.persisted)
    if hi > s.applied:
        out.machine.append(Apply(entries_between(s, s.applied + 1, hi)))
        s.applied = hi


__all__ = [
    "ack",
    "advance_commit",
    "apply_committed",
    "broadcast",
    "heartbeat",
    "heartbeat_msg",
    "leader_append",
    "leader_append_all",
    "nudge",
    "notify_commit",
    "send_to",
    "maybe_commit",
    "on_append_entries",
    "on_append_reply",
    "on_persisted",
    "send_all",
    "send_append",
    "start_snapshot",
]
