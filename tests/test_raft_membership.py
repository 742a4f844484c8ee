"""Configuration changes in the pure raft core, rule by rule: learners, one voter change
at a time (raft thesis §4.1), the configuration carried in the log and in snapshots.

The cases follow etcd-io/raft's tests of the same rules (named in each docstring:
TestLearner*, TestAddNode/TestRemoveNode, TestCommitAfterRemoveNode, TestStepIgnoreConfig,
TestNewLeaderPendingConfig, TestLearnerCanVote ...), on the synchronous `Cluster` of
test_raft_core (perfect network, instant fsync) and on single members fed by hand.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest
from test_raft_core import Cluster, cfg, elapse, ents, feed, make_leader, of, sent

from sediment.actors.log.raft import (
    AppendEntries,
    Committed,
    ConfChange,
    Dropped,
    Effect,
    Entry,
    HardState,
    InstallSnapshot,
    LeaderChanged,
    Membership,
    NotLeader,
    Propose,
    ProposeChange,
    RaftProtocolError,
    ReadIndex,
    ReadReady,
    Receive,
    Refused,
    Reply,
    RequestVote,
    RestoreMachine,
    SendSnapshot,
    SnapshotInstalled,
    SnapshotMeta,
    SnapshotTaken,
    StoreSnapshotChunk,
    Tick,
    VoteReply,
    caught_up,
    current_membership,
    init,
    membership_at,
    step,
)
from sediment.actors.log.raft.protocol import REFUSALS
from sediment.actors.log.raft.state import last_index

G = "g"


class MCluster(Cluster):
    """Cluster plus what a shell does for configuration changes: members started from
    nothing, changes proposed at the leader, snapshots that record their configuration
    and installs that carry it."""

    def __init__(self, peers: tuple[str, ...] = ("a", "b", "c"),
                 learners: tuple[str, ...] = (), **kw: Any) -> None:
        config = cfg(peers, learners=learners, **kw)
        states = {p: init(config, p, seed=i) for i, p in enumerate(peers + learners)}
        super().__init__(peers, config, states)
        self.snaps: dict[str, tuple[int, int, Membership]] = {}
        self.replies: list[tuple[Any, Any]] = []

    def feed(self, who: str, ev: Any) -> None:
        before = len(self.effects[who])
        super().feed(who, ev)
        for e in self.effects[who][before:]:
            if isinstance(e, Reply):
                self.replies.append((e.ref, e.result))
            elif isinstance(e, SendSnapshot):
                self._install_step(who, e)
            elif isinstance(e, StoreSnapshotChunk) and e.last:
                self.feed(who, SnapshotInstalled(e.snapshot_index, e.snapshot_term,
                                                 e.membership))
            elif isinstance(e, RestoreMachine):
                conf = e.membership or self.config.bootstrap
                self.snaps[who] = (e.snapshot_index, e.snapshot_term, conf)

    def _install_step(self, leader: str, e: SendSnapshot) -> None:
        """The leader's shell: one message per step, the configuration from its snapshot's
        metadata on the final chunk."""
        index, term, conf = self.snaps[leader]
        assert (index, term) == (e.snapshot_index, e.snapshot_term)
        phase = {"init": "init", "pre": "pre", "chunk": "last"}[e.step]
        msg = InstallSnapshot(G, e.term, leader, index, term, phase,  # type: ignore[arg-type]
                              last=True, membership=conf if phase == "last" else None)
        self.net.append((leader, e.to, msg))

    def snapshot(self, who: str) -> None:
        """The shell's local snapshot at applied, recording the configuration there."""
        s = self.s[who]
        term = s.entries[s.applied - s.snap_index - 1].term if s.applied > s.snap_index \
            else s.snap_term
        self.snaps[who] = (s.applied, term, membership_at(s, s.applied))
        self.feed(who, SnapshotTaken(s.applied, term))

    def start(self, node: str) -> None:
        """A member on a new node, from nothing: it knows only the bootstrap voters."""
        self.s[node] = init(self.config, node, seed=len(self.s))
        self.applied[node], self.effects[node] = [], []

    def change(self, leader: str, op: str, node: str) -> Any:
        ref = ("change", op, node, len(self.replies))
        self.feed(leader, ProposeChange(op, node, ref, self.now))
        self.deliver()
        return next((r for f, r in self.replies if f == ref), None)

    def put(self, who: str, i: int) -> Any:
        ref = ("put", i)
        self.feed(who, Propose(("put", f"k{i}", i), ref, self.now))
        self.deliver()
        return next((r for f, r in self.replies if f == ref), None)

    def settle(self, rounds: int = 4) -> None:
        for _ in range(rounds):
            self.tick_all(0.25)


def conf_of(c: Cluster, who: str) -> Membership:
    return current_membership(c.s[who])


def settled(**kw: Any) -> MCluster:
    c = MCluster(**kw)
    c.elect("a")
    c.settle(1)
    return c


def no_campaign(fx: list[Effect]) -> bool:
    return not sent(fx, RequestVote)


# ---- learners ---------------------------------------------------------------------------


def test_learner_never_campaigns() -> None:
    """TestLearnerElectionTimeout, TestPromotable: a learner's election timeout passes
    and nothing happens; a member in no configuration it knows (one joining from
    nothing) neither."""
    s = init(cfg(learners=("d",)), "d")
    for _ in range(5):
        s, fx = elapse(s)
        assert s.role == "follower" and no_campaign(fx)
    joining = init(cfg(), "z")
    for _ in range(5):
        joining, fx = elapse(joining)
        assert joining.role == "follower" and no_campaign(fx)


def test_learner_gets_the_log_but_counts_for_no_commit() -> None:
    """TestLearnerLogReplication: entries reach the learner and it applies them; with the
    other voter cut off, the learner's acks commit nothing (voters a, b: quorum 2)."""
    c = settled(peers=("a", "b"), learners=("c",))
    assert c.put("a", 1) == Committed(2)
    c.settle(1)
    assert [e.index for e in c.applied["c"]] == [1, 2]
    c.cut = {"b"}
    c.feed("a", Propose(("put", "x", 1), "x", c.now))
    c.deliver()
    assert c.s["a"].progress["c"].match == 3 and c.s["a"].commit == 2
    c.cut = set()
    c.settle(3)  # b lost the append: re-probed at a heartbeat
    assert c.s["a"].commit == 3 and ("x", Committed(3)) in c.replies


def test_learner_receives_a_snapshot() -> None:
    """TestLearnerReceiveSnapshot: a learner behind the leader's snapshot is installed,
    and the snapshot tells it the configuration (it is a learner there)."""
    c = settled(learners=("d",))
    c.cut = {"d"}
    for i in range(5):
        c.put("a", i)
    c.settle(1)
    c.snapshot("a")
    c.cut = set()
    c.settle(3)
    d = c.s["d"]
    assert d.snap_index == c.s["a"].snap_index and d.commit == c.s["a"].commit
    assert conf_of(c, "d") == Membership(("a", "b", "c"), ("d",))


def test_learner_votes_when_asked_but_only_counts_where_it_is_a_voter() -> None:
    """TestLearnerCanVote (etcd-io/etcd#10998): a learner asked for its vote grants it (the
    candidate may know it as a voter already); a candidate whose configuration says the
    replier is a learner does not count it."""
    learner = init(cfg(learners=("d",)), "d")
    _, fx = feed(learner, Receive(RequestVote(G, False, 1, "a", 0, 0), 0.0))
    assert sent(fx) == [("a", VoteReply(G, False, 1, True, "d"))]
    s = init(cfg(("a", "b", "c"), learners=("d",), pre_vote=False), "a")
    s, _ = elapse(s)
    assert s.role == "candidate"
    s, _ = feed(s, Receive(VoteReply(G, False, s.term, True, "d"), s.now))
    assert s.role == "candidate" and "d" not in s.votes
    s, fx = feed(s, Receive(VoteReply(G, False, s.term, True, "b"), s.now))
    assert s.role == "leader"


def test_campaign_asks_only_voters() -> None:
    s = init(cfg(learners=("d",), pre_vote=False), "a")
    _, fx = elapse(s)
    assert sorted(to for to, _ in sent(fx, RequestVote)) == ["b", "c"]


def test_learner_acks_confirm_no_read() -> None:
    """ReadIndex rounds count voters only: with b cut off, c (a learner) acking the round
    does not serve the read; b's ack does."""
    c = settled(peers=("a", "b"), learners=("c",))
    c.cut = {"b"}
    c.feed("a", ReadIndex(("r",), c.now))
    c.deliver()
    assert c.s["a"].progress["c"].read_round == c.s["a"].read_round
    assert not [r for f, r in c.replies if f == "r"]
    c.cut = set()
    c.settle(1)
    assert [r for f, r in c.replies if f == "r"] == [ReadReady(c.s["a"].commit)]


def test_check_quorum_counts_only_voters() -> None:
    """A leader that hears only from a learner steps down: the learner is no quorum."""
    c = settled(learners=("d",), check_quorum=True)
    c.cut = {"b", "c"}
    for _ in range(8):
        c.tick_all(0.25)
    assert c.s["a"].role == "follower"


# ---- changes: add, promote, remove -----------------------------------------------------


def test_add_a_learner_from_nothing_then_promote_it() -> None:
    """TestAddLearner, TestLearnerPromotion, TestAddNode: the configuration changes when
    the entry is appended; the new member, started from nothing, learns it from the log
    and is caught up; promoted, it counts for commit (4 voters: quorum 3)."""
    c = settled()
    c.put("a", 1)
    c.start("d")
    assert c.change("a", "add_learner", "d") == Committed(3)
    assert conf_of(c, "a") == conf_of(c, "b") == Membership(("a", "b", "c"), ("d",))
    c.settle(2)
    assert conf_of(c, "d") == Membership(("a", "b", "c"), ("d",))
    assert caught_up(c.s["a"], "d") and c.s["d"].commit == c.s["a"].commit
    assert c.change("a", "promote", "d") == Committed(4)
    assert conf_of(c, "d") == Membership(("a", "b", "c", "d"))
    c.cut = {"b", "c"}
    c.feed("a", Propose(("put", "y", 1), "y", c.now))
    c.deliver()
    assert c.s["a"].commit == 4  # a and d are 2 of 4 voters
    c.cut = {"c"}
    c.settle(3)
    assert ("y", Committed(5)) in c.replies


def test_the_configuration_takes_effect_on_append_not_commit() -> None:
    """Thesis §4.1: the leader uses a configuration once it appended it, and so does each
    follower once it stored it, whether it committed or not."""
    c = settled()
    c.cut = {"b", "c"}
    c.feed("a", ProposeChange("remove", "c", "rm", c.now))
    assert conf_of(c, "a") == Membership(("a", "b"))
    assert c.s["a"].commit < last_index(c.s["a"])
    c.cut = {"c"}
    c.settle(1)
    assert conf_of(c, "b") == Membership(("a", "b"))
    assert ("rm", Committed(last_index(c.s["a"]))) in c.replies  # a and b: 2 of 2


def test_a_truncated_change_reverts_the_configuration() -> None:
    """The configuration follows the log: a follower whose uncommitted change is
    overwritten by a new leader goes back to the configuration before it."""
    change = ConfChange("remove", "c", Membership(("a", "b")))
    s = init(cfg(), "b", HardState(2, None), ents(1, 2))
    s, _ = feed(s, Receive(AppendEntries(G, 2, "a", 2, 2, (Entry(3, 2, 0.0, change),), 2),
                           0.0))
    assert current_membership(s) == Membership(("a", "b"))
    new = (Entry(3, 3, 0.0, ("put", "k", 1)),)
    s, _ = feed(s, Receive(AppendEntries(G, 3, "c", 2, 2, new, 2), 0.0))
    assert current_membership(s) == Membership(("a", "b", "c")) and s.others == ("a", "c")


def test_commit_after_remove_node() -> None:
    """TestCommitAfterRemoveNode: an entry stuck for want of a quorum commits once the
    silent voter is removed (the smaller configuration counts at once, at its append)."""
    c = settled(peers=("a", "b"))
    c.cut = {"b"}
    c.feed("a", Propose(("put", "x", 1), "x", c.now))
    assert c.s["a"].commit == 1
    assert c.change("a", "remove", "b") == Committed(3)
    assert ("x", Committed(2)) in c.replies
    assert c.s["a"].progress == {} and c.s["a"].others == ()
    assert c.put("a", 9) == Committed(4)


def test_remove_node_shrinks_the_quorum_and_stops_replication() -> None:
    """TestRemoveNode: after the removal commits the leader forgets the member."""
    c = settled()
    assert c.change("a", "remove", "c") == Committed(2)
    assert set(c.s["a"].progress) == {"b"}
    last = c.s["c"].commit
    c.cut = {"b"}
    assert c.put("a", 1) is None  # a alone is 1 of 2
    c.cut = set()
    c.settle(3)
    assert c.s["a"].commit == 3 and c.s["c"].commit == last  # c gets nothing more


def test_a_removed_member_learns_it_and_stops_campaigning() -> None:
    """The leader keeps replicating to a member it removes until the removal commits, so
    the member stores the entry; knowing it is no voter, it never campaigns again."""
    c = settled()
    c.change("a", "remove", "c")
    assert conf_of(c, "c") == Membership(("a", "b"))
    c.cut = {"a", "b"}
    for _ in range(12):
        c.tick_all(0.25)
    assert c.s["c"].role == "follower" and no_campaign(c.effects["c"][-10:])
    assert not sent(c.effects["c"], RequestVote)


def test_leader_removing_itself_steps_down_once_committed() -> None:
    """Thesis §4.2.2: a leader removing itself manages the group until the change commits,
    not counting itself (b alone cannot commit it with a: quorum of b, c is 2), then
    steps down; it never campaigns and a remaining voter takes over."""
    c = settled()
    c.cut = {"c"}
    c.feed("a", ProposeChange("remove", "a", "self", c.now))
    c.deliver()
    assert c.s["a"].role == "leader" and c.s["a"].commit < last_index(c.s["a"])
    c.effects["a"] = []
    c.cut = set()
    c.settle(3)
    assert ("self", Committed(2)) in c.replies
    assert c.s["a"].role == "follower"
    assert LeaderChanged(None, c.s["a"].term) in c.effects["a"]
    for _ in range(16):
        c.tick_all(0.25)
    leaders = [p for p in ("b", "c") if c.s[p].role == "leader"]
    assert len(leaders) == 1 and not sent(c.effects["a"], RequestVote)
    assert c.put(leaders[0], 1) is not None


def test_a_leader_that_removed_itself_and_lost_its_followers_is_still_electable() -> None:
    """Thesis §4.2.2, figure 4.6: a removes itself (voters a, b -> b) and loses b before
    the change commits; a steps down. b lacks the entry, so its configuration still
    needs a's vote, and a's longer log refuses it: a, no voter of its latest
    configuration but of the committed one, must campaign. It wins on b's vote alone,
    commits its removal, steps down, and b leads the group of one."""
    c = settled(peers=("a", "b"), check_quorum=True)
    c.cut = {"b"}
    c.feed("a", ProposeChange("remove", "a", "self", c.now))
    for _ in range(8):
        c.tick_all(0.25)
    assert c.s["a"].role == "follower" and conf_of(c, "a") == Membership(("b",))
    assert conf_of(c, "b") == Membership(("a", "b"))
    c.cut = set()
    for _ in range(40):
        c.tick_all(0.25)
    assert ("self", Committed(2)) in c.replies
    assert c.s["b"].role == "leader" and conf_of(c, "b") == Membership(("b",))
    assert c.s["a"].role == "follower" and c.s["a"].commit >= 2
    c.effects["a"] = []
    for _ in range(16):
        c.tick_all(0.25)
    assert not sent(c.effects["a"], RequestVote)  # it knows its removal committed


def test_reads_on_a_leader_that_removed_itself_need_the_other_voters() -> None:
    c = settled()
    c.cut = {"b", "c"}
    c.feed("a", ProposeChange("remove", "a", "self", c.now))
    c.feed("a", ReadIndex(("r",), c.now))
    c.deliver()
    assert not [r for f, r in c.replies if f == "r"]  # a does not count itself
    c.cut = {"c"}
    c.tick_all(0.25)
    assert not [r for f, r in c.replies if f == "r"]  # b is 1 of the 2 voters b, c


# ---- one change at a time, and the other refusals ---------------------------------------


def test_one_change_at_a_time() -> None:
    """TestStepIgnoreConfig: a change while the previous one is uncommitted is refused
    and changes nothing; once it commits, the next is accepted."""
    c = settled()
    c.start("d")
    c.cut = {"b", "c"}
    c.feed("a", ProposeChange("add_learner", "d", "first", c.now))
    before = copy.deepcopy(c.s["a"])
    c.feed("a", ProposeChange("remove", "c", "second", c.now))
    assert ("second", Refused("change_pending")) in c.replies
    assert c.s["a"] == replace(before, now=c.now)
    c.cut = set()
    c.settle(1)
    assert c.change("a", "remove", "c") == Committed(last_index(c.s["a"]))


def test_a_new_leader_changes_only_after_committing_in_its_term() -> None:
    """TestNewLeaderPendingConfig, and Ongaro's fix of single-server changes (raft-dev
    2015): until its no-op commits, a new leader refuses changes."""
    s = make_leader(init(cfg(), "a"))
    _, fx = feed(s, ProposeChange("add_learner", "d", "r", s.now))
    assert of(fx, Reply) == [Reply("r", Refused("leader_not_ready"))]


@pytest.mark.parametrize(("op", "node", "reason"), [
    ("add_learner", "b", "already_member"),
    ("add_learner", "d", "already_member"),
    ("promote", "b", "not_a_learner"),
    ("promote", "z", "not_a_learner"),
    ("promote", "d", "not_caught_up"),
    ("remove", "z", "not_a_member"),
    ("demote", "b", "unknown_op"),
])
def test_bad_changes_are_refused_and_change_nothing(op: str, node: str, reason: str) -> None:
    c = MCluster(learners=("d",))
    c.cut = {"d"}  # d never answered: not caught up
    c.elect("a")
    c.settle(1)
    before = copy.deepcopy(c.s["a"])
    c.feed("a", ProposeChange(op, node, "r", c.now))
    assert ("r", Refused(reason)) in c.replies and reason in REFUSALS
    assert c.s["a"] == replace(before, now=c.now)
    assert not c.net


def test_the_last_voter_cannot_be_removed_and_followers_point_to_the_leader() -> None:
    c = settled(peers=("a",), learners=("b",))
    assert c.change("a", "remove", "a") == Refused("last_voter")
    _, fx = feed(c.s["b"], ProposeChange("remove", "a", "r", c.now))
    assert of(fx, Reply) == [Reply("r", NotLeader("a"))]


def test_pending_changes_count_against_the_bound() -> None:
    c = MCluster(max_pending=1)
    c.elect("a")
    c.cut = {"b", "c"}
    c.feed("a", Propose(("put", "k", 1), "p", c.now))
    s, fx = step(c.s["a"], ProposeChange("add_learner", "d", "r", c.now))
    assert of(fx, Reply) == [Reply("r", Dropped(None))]
    assert current_membership(s) == current_membership(c.s["a"])


def test_a_raw_conf_change_proposal_is_a_shell_bug() -> None:
    s = make_leader(init(cfg(), "a"))
    with pytest.raises(RaftProtocolError):
        step(s, Propose(ConfChange("remove", "b", Membership(("a", "c"))), "r", s.now))


# ---- the configuration in snapshots and at restart --------------------------------------


def test_restart_reads_the_configuration_from_the_log_then_the_snapshot() -> None:
    """A restarted member knows its configuration: the latest change in its log tail,
    else its snapshot's, else the bootstrap one; a change below the snapshot is the
    snapshot's business (skipped with the entries it covers)."""
    grown = Membership(("a", "b", "c"), ("d",))
    tail = (Entry(1, 1, 0.0, None), Entry(2, 1, 0.0, ConfChange("add_learner", "d", grown)),
            Entry(3, 1, 0.0, ("put", "k", 1)))
    assert current_membership(init(cfg(), "d", HardState(1), tail)) == grown
    assert init(cfg(), "d", HardState(1), tail).others == ("a", "b", "c")
    snap = SnapshotMeta(5, 1, Membership(("b", "c", "d")))
    s = init(cfg(), "d", HardState(1), (), snap)
    assert current_membership(s) == Membership(("b", "c", "d")) and s.others == ("b", "c")
    s = init(cfg(), "d", HardState(1), tail, SnapshotMeta(2, 1, grown))
    assert (current_membership(s), s.confs) == (grown, ())
    assert current_membership(init(cfg(), "a", HardState(1), tail[:1])).voters == ("a", "b", "c")


def test_a_snapshot_records_the_configuration_at_its_index() -> None:
    c = settled()
    c.start("d")
    c.put("a", 1)  # index 2
    c.change("a", "add_learner", "d")  # index 3
    s = c.s["a"]
    assert membership_at(s, 2) == Membership(("a", "b", "c"))
    assert membership_at(s, 3) == Membership(("a", "b", "c"), ("d",))
    c.snapshot("a")
    assert c.s["a"].snap_conf == Membership(("a", "b", "c"), ("d",)) and c.s["a"].confs == ()
    with pytest.raises(RaftProtocolError):
        membership_at(c.s["a"], 2)


def test_an_install_carries_the_configuration_and_restore_records_it() -> None:
    """A follower that discards its log takes the snapshot's configuration (echoed by the
    shell in SnapshotInstalled) and RestoreMachine tells the shell to record it."""
    moved = Membership(("b", "c", "d"))
    s = init(cfg(), "d", HardState(2), ents(1))
    s, _ = feed(s, Receive(InstallSnapshot(G, 2, "b", 6, 1, "init"), 0.0),
                Receive(InstallSnapshot(G, 2, "b", 6, 1, "last", chunk=b"x", last=True,
                                        membership=moved), 0.0))
    s, fx = feed(s, SnapshotInstalled(6, 1, moved))
    assert of(fx, RestoreMachine) == [RestoreMachine(6, 1, True, moved)]
    assert current_membership(s) == moved and s.others == ("b", "c")


def test_an_install_that_keeps_the_log_must_agree_with_it() -> None:
    s = init(cfg(), "a", HardState(2), ents(1, 1, 1, 1, 1, 1, 2))
    s, _ = feed(s, Receive(InstallSnapshot(G, 2, "b", 6, 1, "init"), 0.0),
                Receive(InstallSnapshot(G, 2, "b", 6, 1, "last", chunk=b"x"), 0.0))
    with pytest.raises(RaftProtocolError):
        feed(s, SnapshotInstalled(6, 1, Membership(("x",))))
    s2, fx = feed(s, SnapshotInstalled(6, 1, Membership(("a", "b", "c"))))
    assert of(fx, RestoreMachine) == [RestoreMachine(6, 1, False)]


def test_a_candidate_that_loses_its_vote_by_install_gives_up() -> None:
    """An install activated while campaigning may say we are no voter: stop."""
    s = init(cfg(pre_vote=False), "a", HardState(1), ents(1))
    s, _ = feed(s, Receive(InstallSnapshot(G, 1, "b", 6, 1, "init"), 0.0),
                Receive(InstallSnapshot(G, 1, "b", 6, 1, "last", chunk=b"x"), 0.0))
    s, _ = elapse(s)
    assert s.role == "candidate"
    s, fx = feed(s, SnapshotInstalled(6, 1, Membership(("b", "c", "d"))))
    assert s.role == "follower"
    s, fx = elapse(s)
    assert no_campaign(fx)


def test_membership_values_survive_pickling() -> None:
    """Entries travel pickled (the shell's WAL codec)."""
    import pickle

    change = ConfChange("promote", "d", Membership(("a", "d"), ("e",)))
    assert pickle.loads(pickle.dumps(change)) == change
    assert pickle.loads(pickle.dumps(Tick(1.0))) == Tick(1.0)
