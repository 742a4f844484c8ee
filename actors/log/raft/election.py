"""Leader election: randomized timeouts, pre-vote (thesis §9.6) and the leader lease.

Pre-vote: a node whose election timer fires first asks whether it *could* win at
term+1 without changing anyone's term; only a quorum of yes starts a real election. So
a partitioned node that rejoins cannot disrupt a stable leader by inflating terms.
A member that heard from a leader within the minimum election timeout ignores
vote requests for a higher term (pre-votes always; real votes with check_quorum).
Only voters campaign (`membership.may_campaign`) and the votes of the voters of the
candidate's latest configuration count (not its own, if it is no voter there); any
member answers a vote request.
"""

from __future__ import annotations

from sediment.actors.log.raft.membership import latest
from sediment.actors.log.raft.protocol import Send
from sediment.actors.log.raft.replication import broadcast, leader_append, maybe_commit
from sediment.actors.log.raft.state import (
    Out,
    Progress,
    RaftState,
    become_follower,
    in_lease,
    is_up_to_date,
    last_index,
    last_term,
    reset_election_timer,
)
from sediment.actors.log.raft.types import RequestVote, VoteReply


def campaign(s: RaftState, now: float, out: Out, pre_vote: bool) -> None:
    """Start a (pre-)election: vote for ourselves (it counts if we are a voter) and ask
    every other voter of our latest configuration."""
    s.leader = None
    s.votes = {s.me: True}
    s.progress = {}
    reset_election_timer(s, now)
    if pre_vote:
        s.role = "pre_candidate"
        term = s.term + 1
    else:
        s.role = "candidate"
        s.term += 1
        s.voted_for = s.me
        s.verified = s.commit
        s.ack_pending = False
        s.install = None
        term = s.term
    conf = latest(s)
    if _granted(s) >= conf.quorum:
        _won(s, now, out)
        return
    for peer in conf.voters:
        if peer != s.me:
            msg = RequestVote(s.config.group, pre_vote, term, s.me, last_index(s), last_term(s))
            out.sends.append(Send(peer, msg))


def on_request_vote(s: RaftState, m: RequestVote, now: float, out: Out) -> None:
    if m.term > s.term:
        if in_lease(s, now) and (m.pre_vote or s.config.check_quorum):
            return  # a live leader exists: do not help anyone depose it
        if not m.pre_vote:
            become_follower(s, m.term, None, now)
    elif m.term < s.term:
        if m.pre_vote:  # tell the stale pre-candidate our term so it catches up
            out.sends.append(Send(m.candidate, _vote_reply(s, True, s.term, False)))
        return
    up_to_date = is_up_to_date(s, m.last_log_term, m.last_log_index)
    free = s.voted_for == m.candidate or (s.voted_for is None and s.leader is None)
    if m.pre_vote:
        grant = up_to_date and (m.term > s.term or free)
        term = m.term if grant else s.term
    else:
        grant = up_to_date and free
        term = s.term
        if grant:
            s.voted_for = m.candidate  # persisted by core.step before the reply is sent
            reset_election_timer(s, now)
    out.sends.append(Send(m.candidate, _vote_reply(s, m.pre_vote, term, grant)))


def on_vote_reply(s: RaftState, m: VoteReply, now: float, out: Out) -> None:
    if m.term > s.term and not (m.pre_vote and m.granted):
        become_follower(s, m.term, None, now)
        return
    if s.role == "pre_candidate" and m.pre_vote:
        if m.term != (s.term + 1 if m.granted else s.term):
            return
    elif not (s.role == "candidate" and not m.pre_vote and m.term == s.term):
        return
    conf = latest(s)
    if m.voter not in conf.voters:
        return  # a learner's (or a stranger's) vote counts for nothing
    s.votes[m.voter] = m.granted
    if _granted(s) >= conf.quorum:
        _won(s, now, out)
    elif _rejected(s) > len(conf.voters) - conf.quorum:
        become_follower(s, s.term, None, now)


def _granted(s: RaftState) -> int:
    """Votes granted by voters of the latest configuration (it may change while we
    campaign: an installed snapshot)."""
    voters = latest(s).voters
    return sum(granted for voter, granted in s.votes.items() if voter in voters)


def _rejected(s: RaftState) -> int:
    voters = latest(s).voters
    return sum(not granted for voter, granted in s.votes.items() if voter in voters)


def _won(s: RaftState, now: float, out: Out) -> None:
    if s.role == "pre_candidate":
        campaign(s, now, out, pre_vote=False)
    else:
        become_leader(s, now, out)


def become_leader(s: RaftState, now: float, out: Out) -> None:
    """Probe every other member (learners too) from our last index and append the term's
    no-op entry."""
    s.role = "leader"
    s.leader = s.me
    s.votes = {}
    s.install = None
    s.ack_pending = False
    s.election_deadline = None
    s.read_round, s.reads = 0, ()  # read rounds count per leader
    s.commit_notify_due = None
    s.heartbeat_due = now + s.config.heartbeat_interval
    s.quorum_due = now + s.config.election_timeout[0]
    s.progress = {peer: Progress(next=last_index(s) + 1) for peer in s.others}
    leader_append(s, None, now, out)
    broadcast(s, out)
    maybe_commit(s, out)


def _vote_reply(s: RaftState, pre_vote: bool, term: int, granted: bool) -> VoteReply:
    return VoteReply(s.config.group, pre_vote, term, granted, s.me)


__all__ = ["become_leader", "campaign", "on_request_vote", "on_vote_reply"]
