"""The raft core's speed paths, table by table: proposals appended as one batch, a
commit announced to the followers at once, and linearizable reads by ReadIndex (raft
thesis §6.4) answered without log entries."""

from __future__ import annotations

from test_raft_core import Cluster, cfg, of, sent

from sediment.actors.log.raft import (
    AppendEntries,
    AppendToLog,
    Committed,
    Dropped,
    NotLeader,
    ProposeBatch,
    ReadIndex,
    ReadReady,
    Reply,
    Tick,
)


def _replies(c: Cluster, who: str) -> dict[object, object]:
    return {e.ref: e.result for e in of(c.effects[who], Reply)}


def _settled() -> Cluster:
    c = Cluster()
    c.elect("a")
    c.effects = {p: [] for p in c.s}
    return c


def test_a_batch_of_proposals_is_one_log_write_and_one_append_per_follower() -> None:
    c = _settled()
    items = tuple((("put", f"k{i}", i), f"r{i}") for i in range(5))
    c.feed("a", ProposeBatch(items, c.now))
    writes = of(c.effects["a"], AppendToLog)
    assert [len(w.entries) for w in writes] == [5]
    appends = [m for _, m in sent(c.effects["a"], AppendEntries) if m.entries]
    assert sorted(len(m.entries) for m in appends) == [5, 5]  # one per follower
    c.deliver()
    assert {ref: type(r) for ref, r in _replies(c, "a").items()} == {
        f"r{i}": Committed for i in range(5)}


def test_a_batch_beyond_the_pending_bound_drops_the_rest() -> None:
    c = Cluster(config=cfg(max_pending=3))
    c.elect("a")
    c.cut = {"b", "c"}  # nothing commits: the proposals stay pending
    c.effects = {p: [] for p in c.s}
    c.feed("a", ProposeBatch(tuple((("put", "k", i), i) for i in range(5)), c.now))
    replies = _replies(c, "a")
    assert replies == {3: Dropped(None), 4: Dropped(None)}


def test_a_batch_to_a_follower_gets_the_leader_hint() -> None:
    c = _settled()
    c.feed("b", ProposeBatch(((("put", "k", 1), "x"), (("put", "k", 2), "y")), c.now))
    assert _replies(c, "b") == {"x": NotLeader("a"), "y": NotLeader("a")}


def test_followers_learn_a_commit_within_the_notify_delay_by_an_unanswered_heartbeat() -> None:
    c = _settled()
    c.feed("a", ProposeBatch(((("put", "k", 1), "r"),), c.now))
    c.deliver()
    index = c.s["a"].commit
    assert c.s["b"].commit < index  # not yet: the next AppendEntries would carry it
    c.effects = {p: [] for p in c.s}
    c.now += c.config.commit_notify_delay  # long before the next heartbeat
    c.feed("a", Tick(c.now))
    notices = [m for _, m in sent(c.effects["a"], AppendEntries)]
    assert len(notices) == 2 and all(not m.entries and not m.ack for m in notices)
    c.deliver()
    assert index == c.s["b"].commit == c.s["c"].commit
    assert c.applied["b"][-1].index == index
    assert not sent(c.effects["b"]) and not sent(c.effects["c"])  # no answer to them


def test_under_load_the_next_append_carries_the_commit_and_no_notice_is_sent() -> None:
    c = _settled()
    c.feed("a", ProposeBatch(((("put", "k", 1), "r1"),), c.now))
    c.deliver()
    first = c.s["a"].commit
    c.feed("a", ProposeBatch(((("put", "k", 2), "r2"),), c.now))  # before the delay
    c.deliver()
    assert c.s["b"].commit >= first
    c.effects = {p: [] for p in c.s}
    c.now += c.config.commit_notify_delay
    c.feed("a", Tick(c.now))
    assert all(m.entries or m.leader_commit > first
               for _, m in sent(c.effects["a"], AppendEntries))


def test_a_read_waits_for_a_quorum_to_ack_its_round() -> None:
    c = _settled()
    c.cut = {"b", "c"}
    c.feed("a", ReadIndex(("q",), c.now))
    c.deliver()
    assert "q" not in _replies(c, "a")  # no quorum heard the round: no answer yet
    c.cut = set()
    c.tick_all(c.config.heartbeat_interval)
    assert _replies(c, "a")["q"] == ReadReady(c.s["a"].commit)


def test_every_read_of_a_batch_shares_one_round_of_messages() -> None:
    c = _settled()
    c.feed("a", ReadIndex(("q1", "q2", "q3"), c.now))
    rounds = {m.read_round for _, m in sent(c.effects["a"], AppendEntries)}
    assert rounds == {c.s["a"].read_round} and len(sent(c.effects["a"])) == 2
    c.deliver()
    assert set(_replies(c, "a")) == {"q1", "q2", "q3"}
    assert not any(of(c.effects[p], AppendToLog) for p in ("b", "c"))  # no log entry


def test_a_read_is_served_only_once_its_index_is_applied() -> None:
    c = _settled()
    c.feed("a", ProposeBatch(((("put", "k", 1), "w"),), c.now))  # not delivered yet
    c.feed("a", ReadIndex(("q",), c.now))
    assert "q" not in _replies(c, "a")
    c.deliver()
    ready = _replies(c, "a")["q"]
    assert isinstance(ready, ReadReady) and ready.index <= c.s["a"].applied


def test_a_leader_that_steps_down_answers_its_waiting_reads_not_leader() -> None:
    c = _settled()
    c.cut = {"b", "c"}
    c.feed("a", ReadIndex(("q",), c.now))
    for _ in range(4):  # check-quorum: a hears from no quorum and steps down
        c.tick_all(c.config.election_timeout[1])
    assert c.s["a"].role != "leader"
    assert isinstance(_replies(c, "a")["q"], NotLeader)


def test_a_single_member_serves_reads_at_once() -> None:
    c = Cluster(peers=("a",))
    c.elect("a")
    c.feed("a", ReadIndex(("q",), c.now))
    assert _replies(c, "a")["q"] == ReadReady(c.s["a"].commit)


def test_reads_at_a_follower_get_the_leader_hint() -> None:
    c = _settled()
    c.feed("b", ReadIndex(("q",), c.now))
    assert _replies(c, "b") == {"q": NotLeader("a")}
