"""The pure raft core, table by table, in the style of etcd's raft_paper_test.go.

Single members are driven by hand-built events; `Cluster` is a tiny synchronous shell
(perfect network, instant fsync) for the multi-member cases. Section numbers refer to
the Raft paper (and the thesis for pre-vote, §9.6).
"""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sediment.actors.log import kv_machine as kv
from sediment.actors.log.machine import StateMachine
from sediment.actors.log.raft import (
    AppendEntries,
    AppendReply,
    AppendToLog,
    Apply,
    Committed,
    Dropped,
    Effect,
    Entry,
    Event,
    HardState,
    InstallSnapshot,
    InstallSnapshotReply,
    InvalidRaftConfig,
    LeaderChanged,
    NotLeader,
    Persisted,
    PersistHardState,
    Propose,
    RaftConfig,
    RaftProtocolError,
    RaftState,
    Receive,
    Reply,
    RequestVote,
    RestoreMachine,
    Send,
    SendSnapshot,
    SnapshotInstalled,
    SnapshotMeta,
    SnapshotSendFailed,
    SnapshotTaken,
    StoreSnapshotChunk,
    Tick,
    TruncateLog,
    VoteReply,
    WriteSparse,
    init,
    step,
    wakeup_at,
)
from sediment.actors.log.raft.state import last_index, term_at

G = "g"
PEERS = ("a", "b", "c")


def cfg(peers: tuple[str, ...] = PEERS, **kw: Any) -> RaftConfig:
    kw.setdefault("election_timeout", (1.0, 2.0))
    kw.setdefault("heartbeat_interval", 0.25)
    return RaftConfig(peers, group=G, **kw)


def ents(*terms: int, start: int = 1) -> tuple[Entry, ...]:
    """Entries start, start+1, ... with the given terms (command = its index)."""
    return tuple(Entry(start + k, t, 0.0, ("put", f"k{start + k}", start + k))
                 for k, t in enumerate(terms))


def member(me: str = "a", terms: tuple[int, ...] = (), term: int = 0,
           voted_for: str | None = None, config: RaftConfig | None = None,
           snapshot: SnapshotMeta | None = None, seed: int = 0) -> RaftState:
    start = snapshot.index + 1 if snapshot else 1
    return init(config or cfg(), me, HardState(term, voted_for), ents(*terms, start=start),
                snapshot, seed)


def feed(s: RaftState, *events: Event) -> tuple[RaftState, list[Effect]]:
    out: list[Effect] = []
    for ev in events:
        s, fx = step(s, ev)
        out += fx
    return s, out


def sent(fx: list[Effect], kind: type | None = None) -> list[tuple[str, Any]]:
    return [(e.to, e.msg) for e in fx
            if isinstance(e, Send) and (kind is None or isinstance(e.msg, kind))]


def of(fx: list[Effect], kind: type) -> list[Any]:
    return [e for e in fx if isinstance(e, kind)]


def ae(term: int, prev: int, prev_term: int, entries: tuple[Entry, ...] = (), commit: int = 0,
       leader: str = "b") -> Receive:
    return Receive(AppendEntries(G, term, leader, prev, prev_term, entries, commit), 0.0)


def vote(term: int, cand: str, last_index: int = 0, last_term: int = 0,
         pre: bool = False, now: float = 0.0) -> Receive:
    return Receive(RequestVote(G, pre, term, cand, last_index, last_term), now)


def elapse(s: RaftState) -> tuple[RaftState, list[Effect]]:
    """Let the member's election timeout expire (starting its timer first if needed)."""
    if s.election_deadline is None:
        s, _ = step(s, Tick(s.now))
    return step(s, Tick(wakeup_at(s) + 1e-9))


def make_leader(s: RaftState) -> RaftState:
    """Elect `s` by feeding it a quorum of votes (no network)."""
    s, _ = elapse(s)
    if s.role == "pre_candidate":
        for peer in s.others[: s.config.quorum - 1]:
            s, _ = feed(s, Receive(VoteReply(G, True, s.term + 1, True, peer), s.now))
    for peer in s.others[: s.config.quorum - 1]:
        s, _ = feed(s, Receive(VoteReply(G, False, s.term, True, peer), s.now))
    assert s.role == "leader"
    return s


class Cluster:
    """A synchronous shell for several members: perfect network, fsync at once."""

    def __init__(self, peers: tuple[str, ...] = PEERS, config: RaftConfig | None = None,
                 states: dict[str, RaftState] | None = None) -> None:
        self.config = config or cfg(peers)
        self.s = states or {p: init(self.config, p, seed=i) for i, p in enumerate(peers)}
        self.net: deque[tuple[str, str, Any]] = deque()
        self.applied: dict[str, list[Entry]] = {p: [] for p in self.s}
        self.cut: set[str] = set()
        self.effects: dict[str, list[Effect]] = {p: [] for p in self.s}
        self.now = 0.0

    def feed(self, who: str, ev: Event) -> None:
        todo: deque[Event] = deque([ev])
        while todo:
            s, fx = step(self.s[who], todo.popleft())
            self.s[who] = s
            self.effects[who] += fx
            for e in fx:
                if isinstance(e, AppendToLog):
                    todo.append(Persisted(e.entries[-1].index, e.entries[-1].term))
                elif isinstance(e, Send):
                    self.net.append((who, e.to, e.msg))
                elif isinstance(e, Apply):
                    self.applied[who] += e.entries

    def deliver(self) -> None:
        while self.net:
            frm, to, msg = self.net.popleft()
            if frm not in self.cut and to not in self.cut:
                self.feed(to, Receive(msg, self.now))

    def elect(self, who: str) -> None:
        self.now = max(self.now, wakeup_at(self.s[who])) + 1e-6
        self.feed(who, Tick(self.now))
        self.now = max(self.now, wakeup_at(self.s[who])) + 1e-6
        self.feed(who, Tick(self.now))
        self.deliver()
        assert self.s[who].role == "leader", self.s[who].role

    def tick_all(self, dt: float) -> None:
        self.now += dt
        for p in self.s:
            if p not in self.cut:
                self.feed(p, Tick(self.now))
        self.deliver()

    def log(self, who: str) -> tuple[Entry, ...]:
        return self.s[who].entries


# ---- configuration and init -------------------------------------------------------------


@pytest.mark.parametrize("kw", [
    dict(election_timeout=(2.0, 1.0)),
    dict(election_timeout=(0.0, 1.0)),
    dict(heartbeat_interval=1.5),
    dict(max_append_entries=0),
    dict(max_inflight=0),
])
def test_config_rejects_bad_values(kw: dict[str, Any]) -> None:
    with pytest.raises(InvalidRaftConfig):
        cfg(**kw)
    with pytest.raises(InvalidRaftConfig):
        RaftConfig(("a", "a"))


def test_restart_restores_persisted_state() -> None:
    s = member(terms=(1, 1, 2), term=3, voted_for="b", snapshot=SnapshotMeta(5, 1))
    assert (s.term, s.voted_for, s.role) == (3, "b", "follower")
    assert (s.snap_index, last_index(s), s.commit, s.applied, s.persisted) == (5, 8, 5, 5, 8)
    # It already voted in term 3: another candidate with a better log gets nothing.
    _, fx = feed(s, vote(3, "c", last_index=20, last_term=3))
    assert sent(fx) == [("c", VoteReply(G, False, 3, False, "a"))]
    _, fx = feed(s, vote(3, "b", last_index=20, last_term=3))
    assert sent(fx) == [("b", VoteReply(G, False, 3, True, "a"))]


@pytest.mark.parametrize("tail", [
    (Entry(2, 1, 0, "x"),),  # gap after the snapshot-less start
    (Entry(1, 2, 0, "x"), Entry(2, 1, 0, "y")),  # terms go down
])
def test_restart_rejects_a_broken_log_tail(tail: tuple[Entry, ...]) -> None:
    with pytest.raises(RaftProtocolError):
        init(cfg(), "a", HardState(2, None), tail)


def test_restart_skips_entries_covered_by_the_snapshot() -> None:
    s = init(cfg(), "a", HardState(1, None), ents(1, 1, 1, 1), SnapshotMeta(2, 1))
    assert [e.index for e in s.entries] == [3, 4]


# ---- §5.2 leader election ---------------------------------------------------------------


def test_follower_starts_pre_vote_at_timeout_without_changing_term() -> None:
    s = member(terms=(1, 1), term=1)
    s, fx = feed(s, Tick(0.0))
    assert s.role == "follower" and fx == []  # the first tick only arms the timer
    deadline = wakeup_at(s)
    assert 1.0 <= deadline < 2.0
    s, fx = feed(s, Tick(deadline - 1e-6))
    assert s.role == "follower" and fx == []
    s, fx = feed(s, Tick(deadline))
    assert s.role == "pre_candidate" and s.term == 1 and of(fx, PersistHardState) == []
    assert sent(fx) == [(p, RequestVote(G, True, 2, "a", 2, 1)) for p in ("b", "c")]


def test_candidate_persists_term_and_vote_before_asking() -> None:
    s = member(config=cfg(pre_vote=False), term=4)
    s, fx = elapse(s)
    assert (s.role, s.term, s.voted_for) == ("candidate", 5, "a")
    assert fx[0] == PersistHardState(5, "a")
    assert fx[1:] == [Send(p, RequestVote(G, False, 5, "a", 0, 0)) for p in ("b", "c")]


@pytest.mark.parametrize("pre_vote", [True, False])
def test_candidate_wins_with_a_quorum_and_appends_a_noop(pre_vote: bool) -> None:
    s = member(config=cfg(pre_vote=pre_vote), terms=(1,), term=1)
    s, _ = elapse(s)
    if pre_vote:
        s, fx = feed(s, Receive(VoteReply(G, True, 2, True, "b"), s.now))
        assert s.role == "candidate" and fx[0] == PersistHardState(2, "a")
    s, fx = feed(s, Receive(VoteReply(G, False, 2, True, "c"), s.now))
    assert s.role == "leader" and s.leader == "a"
    noop = Entry(2, 2, s.now, None)
    assert of(fx, AppendToLog) == [AppendToLog((noop,))]
    assert sent(fx) == [(p, AppendEntries(G, 2, "a", 1, 1, (noop,), 0)) for p in ("b", "c")]
    assert fx[-1] == LeaderChanged("a", 2)
    assert wakeup_at(s) == s.now + 0.25  # heartbeats from now on


def test_candidate_loses_to_a_quorum_of_rejections() -> None:
    s = member(config=cfg(("a", "b", "c", "d", "e"), pre_vote=False), term=1)
    s, _ = elapse(s)
    for voter in ("b", "c"):
        s, _ = feed(s, Receive(VoteReply(G, False, 2, False, voter), s.now))
        assert s.role == "candidate"
    s, _ = feed(s, Receive(VoteReply(G, False, 2, False, "d"), s.now))
    assert s.role == "follower" and s.term == 2


def test_single_member_elects_itself() -> None:
    s = member(config=cfg(("a",)))
    s, fx = elapse(s)
    assert s.role == "leader" and fx[0] == PersistHardState(1, "a")
    s, fx = feed(s, Persisted(1, 1))
    assert s.commit == 1 and of(fx, Apply) == [Apply((Entry(1, 1, s.now, None),))]


def test_election_timeouts_are_randomized_and_seeded() -> None:
    deadlines = {wakeup_at(feed(member(seed=seed), Tick(0.0))[0]) for seed in range(50)}
    assert len(deadlines) == 50 and all(1.0 <= d < 2.0 for d in deadlines)
    again = {wakeup_at(feed(member(seed=seed), Tick(0.0))[0]) for seed in range(50)}
    assert again == deadlines


# §5.2, §5.4.1: a vote per term, only for a log at least as up to date as ours.
@pytest.mark.parametrize("voted_for,last_index,last_term,granted", [
    (None, 2, 2, True),  # same log
    (None, 3, 2, True),  # longer
    (None, 1, 3, True),  # higher last term wins over length
    (None, 1, 2, False),  # shorter, same last term
    (None, 5, 1, False),  # lower last term
    ("c", 2, 2, True),  # the same candidate again
    ("b", 9, 9, False),  # already voted for someone else
])
def test_vote_rules(voted_for: str | None, last_index: int, last_term: int,
                    granted: bool) -> None:
    s = member(terms=(1, 2), term=2, voted_for=voted_for)
    s, fx = feed(s, vote(2, "c", last_index, last_term))
    assert sent(fx) == [("c", VoteReply(G, False, 2, granted, "a"))]
    assert s.voted_for == ("c" if granted else voted_for)
    if granted and voted_for is None:  # vote persisted before the reply goes out
        assert fx == [PersistHardState(2, "c"), Send("c", VoteReply(G, False, 2, True, "a"))]


def test_higher_term_request_resets_the_vote_then_votes() -> None:
    s = member(terms=(1,), term=1, voted_for="b")
    s, fx = feed(s, vote(3, "c", 1, 1))
    assert (s.term, s.voted_for) == (3, "c")
    assert fx == [PersistHardState(3, "c"), Send("c", VoteReply(G, False, 3, True, "a"))]


def test_stale_vote_requests_are_ignored_but_stale_pre_votes_learn_our_term() -> None:
    s = member(term=5)
    assert feed(s, vote(4, "c"))[1] == []
    assert sent(feed(s, vote(4, "c", pre=True))[1]) == [("c", VoteReply(G, True, 5, False, "a"))]


@pytest.mark.parametrize("role", ["leader", "candidate", "follower"])
def test_any_message_with_a_higher_term_makes_a_follower(role: str) -> None:
    s = member(config=cfg(pre_vote=False), terms=(1,), term=1)
    if role == "leader":
        s = make_leader(s)
    elif role == "candidate":
        s, _ = elapse(s)
    s, fx = feed(s, Receive(AppendReply(G, 7, "b", False, 0), 0.0))
    assert (s.role, s.term, s.voted_for) == ("follower", 7, None)
    assert fx[0] == PersistHardState(7, None)


# ---- pre-vote (thesis §9.6) and the leader lease ----------------------------------------


def test_pre_vote_is_granted_without_changing_term_or_vote() -> None:
    s = member(terms=(1,), term=1)
    s2, fx = feed(s, vote(2, "c", 1, 1, pre=True))
    assert fx == [Send("c", VoteReply(G, True, 2, True, "a"))]
    assert (s2.term, s2.voted_for) == (1, None)
    _, fx = feed(s, vote(2, "c", 0, 0, pre=True))  # out of date log
    assert fx == [Send("c", VoteReply(G, True, 1, False, "a"))]


def test_pre_vote_does_not_disrupt_a_stable_leader() -> None:
    c = Cluster()
    c.elect("a")
    c.tick_all(0.25)
    assert {p: c.s[p].leader for p in PEERS} == {"a": "a", "b": "a", "c": "a"}
    # c is partitioned away, times out again and again: pre-votes never bump its term.
    c.cut = {"c"}
    for _ in range(20):
        c.now += 0.5
        for p in PEERS:
            c.feed(p, Tick(c.now))
        c.net = deque((f, t, m) for f, t, m in c.net if "c" not in (f, t))
        c.deliver()
    assert c.s["c"].term == 1 and c.s["c"].role == "pre_candidate"
    # Back in the cluster, its pre-votes go to members that hear from the leader: ignored.
    c.cut = set()
    c.feed("c", Tick(c.now + 5.0))
    assert [m for _, _, m in c.net if isinstance(m, RequestVote)]
    c.deliver()
    assert c.s["a"].role == "leader" and c.s["a"].term == 1
    assert c.s["b"].term == 1


def test_lease_ignores_real_votes_with_check_quorum() -> None:
    follower = feed(member(term=2), ae(2, 0, 0))[0]  # heard from leader b at time 0
    _, fx = feed(follower, vote(3, "c", 9, 9, now=0.5))
    assert fx == []
    no_cq = feed(member(term=2, config=cfg(check_quorum=False)), ae(2, 0, 0))[0]
    s, fx = feed(no_cq, vote(3, "c", 9, 9, now=0.5))
    assert s.term == 3 and sent(fx) == [("c", VoteReply(G, False, 3, True, "a"))]
    # After an election timeout without the leader the lease is over.
    s, fx = feed(follower, vote(3, "c", 9, 9, now=1.5))
    assert sent(fx) == [("c", VoteReply(G, False, 3, True, "a"))]


# ---- check-quorum -----------------------------------------------------------------------


def test_check_quorum_steps_down_a_leader_cut_off_from_the_quorum() -> None:
    s = make_leader(member(term=1))
    t0 = s.now
    s, fx = feed(s, Receive(AppendReply(G, s.term, "b", True, 0), t0 + 0.5))
    s, fx = feed(s, Tick(t0 + 1.0))  # b answered: quorum of 2 reached
    assert s.role == "leader"
    s, fx = feed(s, Tick(t0 + 2.0))  # nobody answered since
    assert s.role == "follower" and s.leader is None
    assert fx[-1] == LeaderChanged(None, s.term)
    s2, _ = feed(make_leader(member(term=1, config=cfg(check_quorum=False))), Tick(50.0))
    assert s2.role == "leader"


# ---- §5.3 log replication ---------------------------------------------------------------


def test_follower_acks_only_after_persisting() -> None:
    s = member(term=1)
    s, fx = feed(s, ae(1, 0, 0, ents(1, 1), commit=1))
    assert of(fx, AppendToLog) == [AppendToLog(ents(1, 1))] and sent(fx) == []
    assert s.commit == 1 and of(fx, Apply) == []  # committed, but not durable here yet
    s, fx = feed(s, Persisted(1, 1))
    assert sent(fx) == [("b", AppendReply(G, 1, "a", True, 1))]
    assert of(fx, Apply) == [Apply(ents(1))]
    s, fx = feed(s, Persisted(2, 1))
    assert sent(fx) == [("b", AppendReply(G, 1, "a", True, 2))]
    assert feed(s, Persisted(2, 1))[1] == []  # old news


# etcd TestFollowerCheckMsgApp: reject when (prev_index, prev_term) does not match.
@pytest.mark.parametrize("prev,prev_term,ok,hint", [
    (0, 0, True, None),
    (1, 1, True, None),
    (2, 2, True, None),
    (2, 1, False, (1, 1)),  # term mismatch: back up to the last entry with term <= 1
    (3, 3, False, (2, 2)),  # beyond our log
])
def test_follower_checks_prev(prev: int, prev_term: int, ok: bool,
                              hint: tuple[int, int] | None) -> None:
    s = member(terms=(1, 2), term=2)
    s, fx = feed(s, ae(2, prev, prev_term))
    expected = AppendReply(G, 2, "a", ok, min(prev, 2) if ok else prev, hint)
    assert sent(fx) == [("b", expected)]


# etcd TestFollowerAppendEntries: conflicts truncate, matching entries are kept.
@pytest.mark.parametrize("prev,prev_term,new,log,truncate_from", [
    (2, 2, ents(3, start=3), (1, 2, 3), None),
    (1, 1, ents(3, 4, start=2), (1, 3, 4), 2),
    (0, 0, ents(1, start=1), (1, 2), None),
    (0, 0, ents(3, start=1), (3,), 1),
])
def test_follower_appends_and_resolves_conflicts(prev: int, prev_term: int,
                                                 new: tuple[Entry, ...], log: tuple[int, ...],
                                                 truncate_from: int | None) -> None:
    s = member(terms=(1, 2), term=2)
    s, fx = feed(s, ae(3, prev, prev_term, new))
    assert tuple(e.term for e in s.entries) == log
    assert of(fx, TruncateLog) == ([TruncateLog(truncate_from)] if truncate_from else [])
    storage = [e for e in fx if isinstance(e, TruncateLog | AppendToLog)]
    assert storage == sorted(storage, key=lambda e: isinstance(e, AppendToLog))


def test_committed_prefix_is_never_rewritten() -> None:
    """Entries at or below the commit index match every later leader's log, so they are
    skipped unchecked; only what follows is compared."""
    s = feed(member(terms=(1, 1), term=1), ae(1, 2, 1, commit=2))[0]
    s, fx = feed(s, ae(2, 0, 0, ents(2, 2, 2), commit=2))
    assert [e.term for e in s.entries] == [1, 1, 2]
    assert of(fx, AppendToLog) == [AppendToLog(ents(2, start=3))]


# Figure 7 of the paper: whatever the follower's log, the leader's replaces it.
FIG7_LEADER = (1, 1, 1, 4, 4, 5, 5, 6, 6, 6)
FIG7_FOLLOWERS = [
    (1, 1, 1, 4, 4, 5, 5, 6, 6),
    (1, 1, 1, 4),
    (1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 6),
    (1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 7, 7),
    (1, 1, 1, 4, 4, 4, 4),
    (1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3),
]


@pytest.mark.parametrize("follower", FIG7_FOLLOWERS)
@pytest.mark.parametrize("max_entries", [1, 3, 64])
def test_leader_brings_any_follower_log_in_line(follower: tuple[int, ...],
                                                max_entries: int) -> None:
    config = cfg(max_append_entries=max_entries, pre_vote=False)
    states = {
        "a": member("a", FIG7_LEADER, term=8, config=config),
        "b": member("b", follower, term=8, config=config),
        "c": member("c", FIG7_LEADER, term=8, config=config),
    }
    c = Cluster(config=config, states=states)
    c.cut = {"b"}  # c votes; b's log may be more up to date than a's (Figure 7 c, d)
    c.elect("a")
    c.cut = set()
    for _ in range(5):
        c.tick_all(0.25)
    assert c.log("b") == c.log("a") and [e.term for e in c.log("a")][-1] == 9
    assert c.s["a"].commit == 11 and c.s["b"].commit == 11


def test_heartbeat_reverifies_a_follower_that_restarted() -> None:
    """Regression (safety harness seed 169): b acked 3, restarted, and only heartbeats
    followed; they sit at b's match index so b can verify and commit again."""
    c = Cluster()
    c.elect("a")
    c.feed("a", Propose(("put", "x", 1), "r", c.now))
    c.deliver()
    b = c.s["b"]
    c.s["b"] = init(c.config, "b", HardState(b.term, b.voted_for), b.entries, None, 1)
    c.tick_all(0.25)
    c.tick_all(0.25)
    assert c.s["b"].commit == 2 and [e.index for e in c.applied["b"]][-1] == 2


# ---- §5.3/§5.4 commit -------------------------------------------------------------------


def test_leader_counts_itself_only_once_persisted() -> None:
    s = make_leader(member(term=1, config=cfg(("a", "b", "c", "d", "e"))))
    s, fx = feed(s, Propose(("put", "x", 1), "r1", s.now))
    for follower in ("b", "c"):
        s, _ = feed(s, Receive(AppendReply(G, s.term, follower, True, 2), s.now))
    assert s.commit == 0  # b and c have it, but a quorum of 5 is 3 durable copies
    s, _ = feed(s, Persisted(1, 2))
    assert s.commit == 1  # the no-op is durable on a, b, c
    s, fx = feed(s, Persisted(2, 2))
    assert s.commit == 2
    assert of(fx, Reply) == [Reply("r1", Committed(2))]
    assert of(fx, Apply) == [Apply(s.entries[1:2])]


# etcd TestLeaderOnlyCommitsLogFromCurrentTerm (Raft §5.4.2, Figure 8).
@pytest.mark.parametrize("acked,commit", [(1, 0), (2, 0), (3, 3)])
def test_leader_only_commits_entries_of_its_own_term(acked: int, commit: int) -> None:
    s = make_leader(member(terms=(1, 1), term=2, config=cfg(pre_vote=False)))
    assert s.term == 3 and s.entries[-1] == Entry(3, 3, s.now, None)
    s, _ = feed(s, Persisted(3, 3), Receive(AppendReply(G, 3, "b", True, acked), s.now))
    assert s.commit == commit


def test_follower_commits_up_to_the_last_new_entry_only() -> None:
    # etcd TestFollowerCommitEntry: min(leader_commit, index of last new entry).
    s = member(terms=(1, 1, 1, 1), term=1)
    s, _ = feed(s, ae(2, 1, 1, ents(2, start=2), commit=4))
    assert s.commit == 2  # entries 3, 4 are not known to match the leader yet


def test_proposals_to_followers_get_the_leader_hint() -> None:
    s = member(term=1)
    _, fx = feed(s, Propose("x", "r", 0.0))
    assert fx == [Reply("r", NotLeader(None))]
    s, _ = feed(s, ae(1, 0, 0))
    _, fx = feed(s, Propose("x", "r", 0.0))
    assert fx == [Reply("r", NotLeader("b"))]
    with pytest.raises(RaftProtocolError):
        feed(s, Propose(None, "r", 0.0))


def test_pending_proposals_are_bounded() -> None:
    s = make_leader(member(term=1, config=cfg(max_pending=2)))
    s, fx = feed(s, *(Propose(("get", "k"), f"r{i}", s.now) for i in range(3)))
    assert of(fx, Reply) == [Reply("r2", Dropped(None))]


def test_overwritten_proposals_are_dropped() -> None:
    s = make_leader(member(term=1, config=cfg(pre_vote=False)))
    s, _ = feed(s, Propose(("put", "x", 1), "r", s.now))
    assert [e.index for e in s.entries] == [1, 2]
    # A new leader of term 5 overwrites index 2 (its log has a different entry there).
    s, fx = feed(s, ae(5, 1, 2, (Entry(2, 5, 0.0, None),), leader="c"))
    assert of(fx, TruncateLog) == [TruncateLog(2)]
    assert of(fx, Reply) == [Reply("r", Dropped(2))]


def test_replication_is_pipelined_and_bounded() -> None:
    config = cfg(max_append_entries=2, max_inflight=2)
    s = make_leader(member(term=1, config=config))
    s, _ = feed(s, Persisted(1, 2), Receive(AppendReply(G, 2, "b", True, 1), s.now))
    assert s.progress["b"].state == "replicate"
    s, fx = feed(s, *(Propose(("get", "k"), i, s.now) for i in range(10)))
    to_b = [m for to, m in sent(fx) if to == "b"]
    assert len(to_b) == 2 and all(len(m.entries) <= 2 for m in to_b)  # window full
    s, fx = feed(s, Receive(AppendReply(G, 2, "b", True, to_b[0].entries[-1].index), s.now))
    assert len(sent(fx)) == 1  # one slot freed, one more message


def test_apply_is_in_order_and_once() -> None:
    c = Cluster()
    c.elect("a")
    for i in range(5):
        c.feed("a", Propose(("put", "k", i), i, c.now))
        c.deliver()
    c.tick_all(0.25)
    for p in PEERS:
        assert [e.index for e in c.applied[p]] == [1, 2, 3, 4, 5, 6]


# ---- snapshots --------------------------------------------------------------------------


def test_snapshot_taken_drops_the_in_memory_prefix() -> None:
    c = Cluster()
    c.elect("a")
    for i in range(4):
        c.feed("a", Propose(("put", "k", i), i, c.now))
    c.deliver()
    assert c.s["a"].term == 1 and c.s["a"].applied == 5
    s, fx = feed(c.s["a"], SnapshotTaken(3, 1))
    assert (s.snap_index, s.snap_term, [e.index for e in s.entries]) == (3, 1, [4, 5])
    assert fx == []
    assert feed(s, SnapshotTaken(2, 1)) == (s, [])  # older than ours: nothing to do
    with pytest.raises(RaftProtocolError):
        feed(c.s["a"], SnapshotTaken(3, 2))  # wrong term
    s2 = replace(c.s["a"], applied=2)
    with pytest.raises(RaftProtocolError):
        feed(s2, SnapshotTaken(3, 1))  # beyond applied


def lagging_leader() -> RaftState:
    """Leader `a` (term 2) that compacted its log up to 6; b answers a probe: its log ends at 2."""
    s = member("a", terms=(1, 1, 1), term=1, snapshot=SnapshotMeta(6, 1),
               config=cfg(pre_vote=False))
    s = make_leader(s)
    s, fx = feed(s, Receive(AppendReply(G, 2, "b", False, 9, (2, 1)), s.now))
    return s


def test_follower_behind_the_snapshot_gets_send_snapshot() -> None:
    s = member("a", terms=(1, 1, 1), term=1, snapshot=SnapshotMeta(6, 1),
               config=cfg(pre_vote=False))
    s = make_leader(s)
    s, fx = feed(s, Receive(AppendReply(G, 2, "b", False, 9, (2, 1)), s.now))
    assert s.progress["b"].state == "snapshot"
    assert of(fx, SendSnapshot) == [SendSnapshot("b", 2, 6, 1, "init")]


def test_leader_drives_the_install_phases() -> None:
    s = lagging_leader()

    def answer(s: RaftState, **kw: Any) -> tuple[RaftState, list[Any]]:
        reply = InstallSnapshotReply(G, 2, "b", 6, ok=True, **kw)
        s, fx = feed(s, Receive(reply, s.now))
        return s, of(fx, SendSnapshot) + sent(fx, AppendEntries)

    s, fx = answer(s, phase="init", live_upto=2)
    assert fx == [SendSnapshot("b", 2, 6, 1, "pre", live_from=2)]
    s, fx = answer(s, phase="pre", live_upto=4)
    assert fx == [SendSnapshot("b", 2, 6, 1, "pre", live_from=4)]
    s, fx = answer(s, phase="pre", live_upto=5, last=True)
    assert fx == [SendSnapshot("b", 2, 6, 1, "chunk", chunk_no=0)]
    s, fx = answer(s, phase="next", next_chunk=1)
    assert fx == [SendSnapshot("b", 2, 6, 1, "chunk", chunk_no=1)]
    s, fx = answer(s, phase="next", next_chunk=1)  # a duplicate: same cursor
    assert fx == [SendSnapshot("b", 2, 6, 1, "chunk", chunk_no=1)]
    # The follower stored it and acks the snapshot index: probe, then replicate.
    s, fx = feed(s, Receive(AppendReply(G, 2, "b", True, 6), s.now))
    assert s.progress["b"].state == "probe"
    assert sent(fx) == [("b", AppendEntries(G, 2, "a", 6, 1, s.entries, 6))]
    s, fx = feed(s, Receive(AppendReply(G, 2, "b", True, 10), s.now))
    assert s.progress["b"].state == "replicate" and s.progress["b"].match == 10


def test_install_restarts_on_failure_and_timeout() -> None:
    s = lagging_leader()
    s2, fx = feed(s, Receive(InstallSnapshotReply(G, 2, "b", 6, "next", False), s.now))
    assert of(fx, SendSnapshot) == [SendSnapshot("b", 2, 6, 1, "init")]
    # The shell lost snapshot 6 and we have a newer one: start over from it.
    s3 = replace(feed(s, Persisted(10, 2))[0], commit=10, applied=10)
    s3, _ = feed(s3, SnapshotTaken(10, 2))
    s3, fx = feed(s3, SnapshotSendFailed("b", 6))
    assert of(fx, SendSnapshot) == [SendSnapshot("b", 2, 10, 2, "init")]
    # No answer for an election timeout: the heartbeat retries.
    s4, fx = feed(s, Tick(s.now + 2.5))
    assert of(fx, SendSnapshot) == [SendSnapshot("b", 2, 6, 1, "init")]


def test_a_missing_snapshot_is_retried_at_the_next_heartbeat_not_at_once() -> None:
    """The shell answers a SendSnapshot it cannot build with SnapshotSendFailed, fed back
    before it reads its mailbox (where the news of the newer snapshot waits). Sending the
    same missing snapshot again at once spun such a leader forever (a CI hang)."""
    s = lagging_leader()
    pending: list[Event] = [SnapshotSendFailed("b", 6)]
    for _ in range(100):  # the shell's loop, with a disk that lost snapshot 6
        if not pending:
            break
        s, fx = step(s, pending.pop(0))
        pending += [SnapshotSendFailed(e.to, e.snapshot_index) for e in of(fx, SendSnapshot)]
    assert not pending, "the leader asks again for the snapshot it was told is gone"
    assert s.progress["b"].state == "probe"
    # The next heartbeat tries again, from whatever snapshot the leader has by then.
    _, fx = feed(s, Tick(s.heartbeat_due))
    assert of(fx, SendSnapshot) == [SendSnapshot("b", 2, 6, 1, "init")]
    newer = replace(feed(s, Persisted(10, 2))[0], commit=10, applied=10)
    newer, _ = feed(newer, SnapshotTaken(10, 2))
    _, fx = feed(newer, Tick(newer.heartbeat_due))
    assert [e for e in of(fx, SendSnapshot) if e.to == "b"] == [SendSnapshot("b", 2, 10, 2, "init")]


def install(phase: str, **kw: Any) -> Receive:
    return Receive(InstallSnapshot(G, 2, "b", 6, 1, phase, **kw), 0.0)  # type: ignore[arg-type]


def test_follower_install_phases_with_live_entries() -> None:
    s = member("a", terms=(1, 1), term=2)
    s = feed(s, ae(2, 2, 1, commit=1))[0]  # commit 1, applied 1
    assert s.applied == 1
    s, fx = feed(s, install("init"))
    assert sent(fx) == [("b", InstallSnapshotReply(G, 2, "a", 6, "init", True, live_upto=1))]
    live = (Entry(1, 1, 0.0, "old"), Entry(4, 1, 0.0, "x"), Entry(5, 1, 0.0, "y"))
    s, fx = feed(s, install("pre", live_entries=live, last=True))
    # Only the live entries above last_applied: index 1 is applied here already.
    assert of(fx, WriteSparse) == [WriteSparse(6, live[1:])]
    assert sent(fx) == [("b", InstallSnapshotReply(G, 2, "a", 6, "pre", True, 5, last=True))]
    s, fx = feed(s, install("next", chunk=b"ab", chunk_no=0))
    assert of(fx, StoreSnapshotChunk) == [StoreSnapshotChunk(6, 1, 0, b"ab", False)]
    assert sent(fx) == [("b", InstallSnapshotReply(G, 2, "a", 6, "next", True, next_chunk=1))]
    s, fx = feed(s, install("last", chunk=b"zz", chunk_no=5))  # out of order: cursor
    assert sent(fx) == [("b", InstallSnapshotReply(G, 2, "a", 6, "next", True, next_chunk=1))]
    s, fx = feed(s, install("last", chunk=b"cd", chunk_no=1))
    assert of(fx, StoreSnapshotChunk) == [StoreSnapshotChunk(6, 1, 1, b"cd", True)]
    assert sent(fx) == []  # the ack comes once the shell has stored it
    s, fx = feed(s, SnapshotInstalled(6, 1))
    # Our log (ending at 2) does not hold entry 6: the whole log goes, atomically.
    assert fx == [RestoreMachine(6, 1, discard_log=True),
                  Send("b", AppendReply(G, 2, "a", True, 6))]
    assert (s.snap_index, s.commit, s.applied, s.entries) == (6, 6, 6, ())


def test_install_keeps_the_log_after_a_matching_snapshot_entry() -> None:
    s = member("a", terms=(1, 1, 1, 1, 1, 1, 2), term=2)
    s, _ = feed(s, install("init"), install("last", chunk=b"x"))
    s, fx = feed(s, SnapshotInstalled(6, 1))
    assert fx[0] == RestoreMachine(6, 1, discard_log=False)
    assert [e.index for e in s.entries] == [7]


def test_install_needs_an_init_and_a_stale_install_changes_nothing() -> None:
    s = member("a", terms=(1,), term=2)
    s, fx = feed(s, install("next", chunk=b"x"))
    assert sent(fx) == [("b", InstallSnapshotReply(G, 2, "a", 6, "next", False))]
    applied = feed(member("a", terms=(1,) * 7, term=2), ae(2, 7, 1, commit=7),
                   Persisted(7, 1))[0]
    s, fx = feed(applied, install("init"))  # applied 7 >= 6: nothing to install
    assert sent(fx) == [("b", InstallSnapshotReply(G, 2, "a", 6, "init", True, live_upto=7))]
    assert feed(applied, SnapshotInstalled(6, 1))[1] == []


def test_snapshot_install_end_to_end() -> None:
    """A follower that was down while the others compacted catches up by install."""
    c = Cluster()
    c.elect("a")
    c.cut = {"c"}
    for i in range(6):
        c.feed("a", Propose(("put", f"k{i}", i), i, c.now))
        c.deliver()
    c.tick_all(0.25)
    for p in ("a", "b"):
        c.feed(p, SnapshotTaken(c.s[p].applied, c.s[p].term))
    c.cut = set()
    store: list[Any] = []
    for _ in range(12):
        c.tick_all(0.25)
        for e in c.effects["a"]:
            if isinstance(e, SendSnapshot) and e not in store:
                store.append(e)
                step_ = {"init": "init", "pre": "pre", "chunk": "last"}[e.step]
                msg = InstallSnapshot(G, e.term, "a", e.snapshot_index, e.snapshot_term,
                                      step_, last=True)  # type: ignore[arg-type]
                c.net.append(("a", e.to, msg))
        c.effects["a"] = []
        for e in c.effects["c"]:
            if isinstance(e, StoreSnapshotChunk) and e.last:
                c.feed("c", SnapshotInstalled(e.snapshot_index, e.snapshot_term))
        c.effects["c"] = []
        c.deliver()
    assert c.s["c"].snap_index == 7 and c.s["c"].commit == c.s["a"].commit
    assert c.s["a"].progress["c"].state == "replicate"


# ---- the effect contract as properties --------------------------------------------------

PEER_MSGS = st.one_of(
    st.builds(RequestVote, st.just(G), st.booleans(), st.integers(0, 4), st.sampled_from("bc"),
              st.integers(0, 6), st.integers(0, 4)),
    st.builds(VoteReply, st.just(G), st.booleans(), st.integers(0, 4), st.booleans(),
              st.sampled_from("bc")),
    st.builds(AppendReply, st.just(G), st.integers(0, 4), st.sampled_from("bc"), st.booleans(),
              st.integers(0, 6), st.none() | st.tuples(st.integers(0, 6), st.integers(0, 4))),
)


@st.composite
def append_entries(draw: st.DrawFn) -> AppendEntries:
    """A leader's AppendEntries: terms in the entries never exceed the message term."""
    term = draw(st.integers(1, 4))
    prev = draw(st.integers(0, 5))
    prev_term = draw(st.integers(0, term)) if prev else 0
    terms = sorted(draw(st.lists(st.integers(max(prev_term, 1), term), max_size=3)))
    entries = tuple(Entry(prev + 1 + k, t, 0.0, ("get", "k")) for k, t in enumerate(terms))
    return AppendEntries(G, term, "b", prev, prev_term, entries, draw(st.integers(0, 8)))


EVENTS = st.one_of(
    st.builds(Tick, st.floats(0, 10)),
    st.builds(Receive, PEER_MSGS | append_entries(), st.floats(0, 10)),
    st.builds(Propose, st.just(("get", "k")), st.integers(), st.floats(0, 10)),
    st.builds(Persisted, st.integers(0, 8), st.integers(0, 4)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(EVENTS, max_size=30), st.integers(0, 3))
def test_core_properties(events: list[Event], seed: int) -> None:
    """Whatever the peers say (one leader per term: b), the core keeps its promises."""
    s = init(cfg(), "a", seed=seed)
    applied = 0
    now = 0.0
    for ev in events:
        if isinstance(ev, Tick | Receive | Propose):  # time only moves forward
            now = max(now, ev.now)
            ev = replace(ev, now=now)
        msg = ev.msg if isinstance(ev, Receive) else None
        if isinstance(msg, AppendEntries) and s.role != "follower" and msg.term == s.term:
            continue  # b cannot lead the term we campaign in
        frozen = copy.deepcopy(s)
        try:
            s2, fx = step(s, ev)
        except RaftProtocolError:
            continue  # inconsistent input (e.g. b contradicting a committed entry)
        assert s == frozen, "step mutated its input"
        assert step(frozen, ev) == (s2, fx), "step is not deterministic"
        hard = [e for e in fx if isinstance(e, PersistHardState)]
        if (s2.term, s2.voted_for) != (s.term, s.voted_for):
            assert fx[0] == PersistHardState(s2.term, s2.voted_for)
        else:
            assert hard == []
        assert s2.term >= s.term
        assert s2.applied <= s2.commit <= max(last_index(s2), s2.snap_index)
        assert s2.applied <= s2.persisted <= last_index(s2)
        for e in of(fx, Apply):
            assert [x.index for x in e.entries] == list(range(applied + 1, applied + 1
                                                               + len(e.entries)))
            applied += len(e.entries)
        if s2.role == "follower" and s2.verified:
            assert term_at(s2, s2.verified) is not None
        s = s2


# ---- the kv machine ---------------------------------------------------------------------


def test_kv_machine_keeps_only_indexes_and_leaves_holes() -> None:
    m: StateMachine[kv.KvState] = kv.KV
    state = m.initial()
    log = [("put", "a", "1"), ("put", "b", "2"), ("put", "a", "3"), ("get", "a"),
           ("delete", "b"), ("get", "b"), None, ("bogus",), "junk"]
    results = []
    for i, cmd in enumerate(log, start=1):
        state, result = m.apply(state, Entry(i, 1, 0.0, cmd))
        results.append(result)
    assert results[:7] == [1, 2, 3, 3, 2, None, None]
    assert isinstance(results[7], kv.KvRefused) and isinstance(results[8], kv.KvRefused)
    assert m.live_indexes(state) == [3]  # 1 overwritten, 2 deleted: holes to compact
    assert m.restore(m.snapshot(state)) == state
    assert b"1" not in m.snapshot(state).replace(b"3", b"")  # no values in the snapshot


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["put", "get", "delete"]),
                          st.sampled_from("abcd"), st.integers(0, 9))))
def test_kv_machine_matches_a_dict_model(ops: list[tuple[str, str, int]]) -> None:
    state, model = kv.initial(), {}
    for i, (op, key, value) in enumerate(ops, start=1):
        cmd: tuple[Any, ...] = (op, key, value) if op == "put" else (op, key)
        state, result = kv.apply(state, Entry(i, 1, 0.0, cmd))
        if op == "put":
            model[key] = (i, value)
            assert result == i
        elif op == "get":
            assert result == (model[key][0] if key in model else None)
        else:
            assert result == (model.pop(key)[0] if key in model else None)
        assert kv.live_indexes(state) == sorted(i for i, _ in model.values())
        assert kv.restore(kv.snapshot(state)) == state
