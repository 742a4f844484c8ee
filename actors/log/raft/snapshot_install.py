"""Snapshots: dropping the in-memory log below our own snapshot, and Ra's install of a
leader's snapshot on a lagging follower in phases init -> pre -> next... -> last.

The leader's core drives the install one step per follower reply (the shell builds
each InstallSnapshot from its storage), so terms, retries and stale replies are
handled in one place. "pre" carries the snapshot's live entries above the follower's
last_applied: entries at or below it are committed and applied there already, above
it they may be stale (Ra's rule). The follower stages everything; on SnapshotInstalled
it activates the snapshot with Raft's §7 rule: keep the log after the snapshot if it
holds the snapshot's last entry, discard it otherwise. The final chunk carries the
configuration at the snapshot's index (the leader's shell reads it from the snapshot's
metadata); the shell stages it with the chunks and echoes it in SnapshotInstalled.
"""

from __future__ import annotations

from dataclasses import replace

from sediment.actors.log.raft import membership
from sediment.actors.log.raft.protocol import (
    Committed,
    Dropped,
    RestoreMachine,
    Send,
    SendSnapshot,
    SnapshotStep,
    StoreSnapshotChunk,
    Unknown,
    WriteSparse,
)
from sediment.actors.log.raft.replication import ack, send_all
from sediment.actors.log.raft.state import (
    Install,
    Out,
    RaftProtocolError,
    RaftState,
    reply,
    term_at,
)
from sediment.actors.log.raft.types import (
    InstallSnapshot,
    InstallSnapshotReply,
    Membership,
    NodeId,
    SnapshotPhase,
)

# ---- our own snapshots ------------------------------------------------------------------


def on_snapshot_taken(s: RaftState, index: int, term: int) -> None:
    if index <= s.snap_index:
        return  # an install already moved us past it
    if index > s.applied or term_at(s, index) != term:
        raise RaftProtocolError(
            f"{s.me}: snapshot at {index}/{term} but applied={s.applied}, "
            f"term there={term_at(s, index)}"
        )
    membership.compacted(s, index)
    s.entries = s.entries[index - s.snap_index :]
    s.snap_index, s.snap_term = index, term


# ---- leader side ------------------------------------------------------------------------


def on_install_reply(s: RaftState, m: InstallSnapshotReply, out: Out) -> None:
    pr = s.progress.get(m.follower)
    if pr is None:
        return
    pr = replace(pr, active=True)
    s.progress[m.follower] = pr
    if pr.state != "snapshot" or m.snapshot_index != pr.snapshot:
        return  # stale
    deadline = s.now + s.config.election_timeout[1]
    s.progress[m.follower] = pr = replace(pr, snapshot_deadline=deadline)
    if not m.ok:
        restart_install(s, m.follower, out)
    elif m.phase == "init" and m.live_upto >= pr.snapshot:
        # It applied past the snapshot already: plain replication will do.
        s.progress[m.follower] = replace(
            pr, state="probe", next=max(pr.match, pr.snapshot) + 1, probe_sent=False
        )
        send_all(s, m.follower, out)
    elif m.phase == "init" or (m.phase == "pre" and not m.last):
        _send(s, m.follower, "pre", out, live_from=m.live_upto)
    elif m.phase == "pre":
        _send(s, m.follower, "chunk", out)
    elif m.phase == "next":
        _send(s, m.follower, "chunk", out, chunk_no=m.next_chunk)


def restart_install(s: RaftState, peer: NodeId, out: Out) -> None:
    """Start over (from the newest snapshot, if it still needs one)."""
    pr = s.progress[peer]
    s.progress[peer] = replace(
        pr, state="probe", next=pr.match + 1, inflight=(), probe_sent=False
    )
    send_all(s, peer, out)


def on_send_failed(s: RaftState, peer: NodeId, snapshot_index: int, out: Out) -> None:
    """The shell could not build a step of this snapshot (its files are gone). With a
    newer snapshot, start over from it now; with none, wait for the next heartbeat: the
    shell feeds this event back without reading its mailbox, so sending the same missing
    snapshot again at once would spin forever before it learns of the newer one."""
    pr = s.progress.get(peer)
    if pr is None or pr.state != "snapshot" or pr.snapshot != snapshot_index:
        return
    if s.snap_index > snapshot_index:
        restart_install(s, peer, out)
        return
    s.progress[peer] = replace(pr, state="probe", next=pr.match + 1, inflight=(), probe_sent=True)


def _send(
    s: RaftState, peer: NodeId, step: SnapshotStep, out: Out, live_from: int = 0,
    chunk_no: int = 0,
) -> None:
    pr = s.progress[peer]
    msg = SendSnapshot(peer, s.term, pr.snapshot, pr.snapshot_term, step, live_from, chunk_no)
    out.sends.append(msg)


# ---- follower side ----------------------------------------------------------------------


def on_install_snapshot(s: RaftState, m: InstallSnapshot, out: Out) -> None:
    """One install step; the caller already handled term and leadership."""
    if m.phase == "init":
        if m.snapshot_index > s.applied:
            s.install = Install(m.leader, m.snapshot_index, m.snapshot_term, s.applied)
        _reply(s, m, out, True, live_upto=s.applied)
        return
    inst = s.install
    if inst is None or (inst.index, inst.term) != (m.snapshot_index, m.snapshot_term):
        _reply(s, m, out, False)
        return
    if inst.done:
        return  # the shell is finishing; SnapshotInstalled will answer
    if m.phase == "pre":
        fresh = tuple(e for e in m.live_entries if s.applied < e.index <= inst.index)
        if fresh:
            out.storage.append(WriteSparse(inst.index, fresh))
        upto = max([inst.live_upto, *(e.index for e in m.live_entries)])
        s.install = replace(inst, live_upto=upto)
        _reply(s, m, out, True, live_upto=upto, last=m.last)
        return
    if m.chunk_no == inst.next_chunk:
        last = m.phase == "last"
        out.storage.append(StoreSnapshotChunk(inst.index, inst.term, m.chunk_no, m.chunk, last,
                                              m.live_indexes if last else (),
                                              m.membership if last else None))
        s.install = inst = replace(inst, next_chunk=inst.next_chunk + 1, done=last)
        if last:
            return
    _reply(s, m, out, True, next_chunk=inst.next_chunk, phase="next")


def _reply(
    s: RaftState, m: InstallSnapshot, out: Out, ok: bool, live_upto: int = 0,
    next_chunk: int = 0, last: bool = False, phase: SnapshotPhase | None = None,
) -> None:
    msg = InstallSnapshotReply(
        s.config.group, s.term, s.me, m.snapshot_index, phase or m.phase, ok, live_upto,
        next_chunk, last,
    )
    out.sends.append(Send(m.leader, msg))


def on_snapshot_installed(s: RaftState, index: int, term: int, conf: Membership | None,
                          out: Out) -> None:
    """Activate a staged snapshot: it holds only committed state, so it is always safe.
    Its configuration becomes ours unless the log we keep after it says a later one."""
    if s.install is not None and s.install.index == index:
        s.install = None
    if index <= s.applied:
        return  # we got there through the log meanwhile; the staged copy is garbage
    keep = term_at(s, index) == term
    if s.role == "leader" and not keep:
        raise RaftProtocolError(f"{s.me}: leader lacks committed entry {index}/{term}")
    for i in sorted(i for i in s.pending if i <= index):
        reply(s, out, i, Committed(i) if keep else Unknown(i))
    membership.installed(s, index, conf, keep)
    if keep:
        s.entries = s.entries[index - s.snap_index :]
        s.persisted = max(s.persisted, index)
        s.verified = max(s.verified, index)
    else:
        for i in sorted(s.pending):
            reply(s, out, i, Dropped(i))  # above a snapshot we do not chain onto
        s.entries = ()
        s.persisted = s.verified = index
    s.snap_index, s.snap_term = index, term
    s.commit = max(s.commit, index)
    s.applied = index
    conf = None if s.snap_conf == s.config.bootstrap else s.snap_conf
    out.storage.append(RestoreMachine(index, term, discard_log=not keep, membership=conf))
    if s.role == "follower" and s.leader is not None:
        out.sends.append(Send(s.leader, ack(s)))
    s.ack_pending = s.role == "follower" and s.persisted < s.verified


__all__ = [
    "on_install_reply",
    "on_install_snapshot",
    "on_send_failed",
    "on_snapshot_installed",
    "on_snapshot_taken",
    "restart_install",
]
