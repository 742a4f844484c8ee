"""Linearizable reads without log entries: ReadIndex (raft thesis §6.4; etcd's read path).

A read that reaches the leader waits for two things: a heartbeat round sent after it
arrived and acknowledged by a quorum (so no newer leader existed when it arrived), and
the machine applied through the commit index of that moment (so it sees every write
acknowledged before it). Every read that arrives before a round goes out shares that
round: one round of messages serves a batch of any size. Until the leader has committed
an entry of its own term its commit index may be behind an earlier leader's, so reads
take their index only once it has. A leader that steps down answers its waiting reads
NotLeader: the caller retries on the new leader. Only voters confirm a round (the
leader itself only while it is one): a learner's ack proves nothing about elections.
"""

from __future__ import annotations

from sediment.actors.log.raft.membership import latest
from sediment.actors.log.raft.protocol import Dropped, NotLeader, ReadReady, Ref, Reply
from sediment.actors.log.raft.replication import nudge
from sediment.actors.log.raft.state import Out, PendingRead, RaftState, term_at


def on_read_index(s: RaftState, refs: tuple[Ref, ...], out: Out) -> None:
    """Queue reads at the leader and start their round; others answer NotLeader."""
    if s.role != "leader":
        out.replies.extend(Reply(ref, NotLeader(s.leader)) for ref in refs)
        return
    room = max(0, s.config.max_pending - len(s.reads))
    taken, refused = refs[:room], refs[room:]
    out.replies.extend(Reply(ref, Dropped(None)) for ref in refused)
    if not taken:
        return
    rnd = 0
    if latest(s).voters != (s.me,):  # alone, we are the quorum: no round
        s.read_round += 1
        rnd = s.read_round
        for peer in s.others:
            nudge(s, peer, out)
    index = s.commit if term_at(s, s.commit) == s.term else None
    s.reads = (*s.reads, *(PendingRead(ref, rnd, index) for ref in taken))


def confirmed_round(s: RaftState) -> int:
    """The highest read round a quorum of voters (this leader included, if it is one) has
    acknowledged."""
    conf = latest(s)
    acked = sorted((s.progress[p].read_round for p in conf.voters if p != s.me), reverse=True)
    need = conf.quorum - (1 if s.me in conf.voters else 0)  # voters besides the leader
    if need <= 0:
        return s.read_round
    return acked[need - 1] if len(acked) >= need else 0


def release(s: RaftState, out: Out) -> None:
    """Answer every read whose round is confirmed and whose index is applied."""
    if not s.reads or s.role != "leader":
        return
    in_term = term_at(s, s.commit) == s.term
    confirmed = confirmed_round(s)
    waiting: list[PendingRead] = []
    for read in s.reads:
        index = read.index
        if index is None and in_term:
            index = s.commit
        if index is not None and read.round <= confirmed and s.applied >= index:
            out.replies.append(Reply(read.ref, ReadReady(index)))
        else:
            waiting.append(read if index == read.index else PendingRead(read.ref, read.round,
                                                                         index))
    s.reads = tuple(waiting)


def step_down(s: RaftState, out: Out) -> None:
    """A former leader's waiting reads: NotLeader, so they are retried elsewhere."""
    out.replies.extend(Reply(read.ref, NotLeader(s.leader)) for read in s.reads)
    s.reads = ()


__all__ = ["confirmed_round", "on_read_index", "release", "step_down"]
