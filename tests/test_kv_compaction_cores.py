"""Watch-aware compaction: the node's admission core and the leader's coordinator core.

Table tests of each rule, hand-driven orchestration cases (refusing, silent and
retry-confirming nodes, stale replies, leadership lost), and a seeded simulation of N
admission states plus a coordinator over a lossy, reordering network with leadership
flips, checking the safety invariants after every step.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from coordinator_helpers import NODES, Fx, feed, of

from sediment.actors.kv import admission as adm
from sediment.actors.kv import coordinator_core as co
from sediment.actors.kv.admission import (
    AdmissionState,
    Admitted,
    CancelWatch,
    Confirmed,
    CycleId,
    NoticeRefused,
    PersistCompaction,
)
from sediment.actors.kv.coordinator_core import (
    CoordinatorConfig,
    CoordinatorState,
    CycleEnded,
    MinReply,
    NoticeReply,
    ProposeCompact,
    ProposeResult,
    SendMinRequest,
    SendNotice,
    SendRollback,
    SetTimer,
    Start,
    Stop,
    Tick,
    Timeout,
)
from sediment.actors.kv.errors import ErrCompacted

C1, C2, C3 = CycleId(1, 1), CycleId(1, 2), CycleId(2, 3)
W1, W2 = ("w", 1), ("w", 2)


def node(committed: int = 100, floor: int = 0, **watches: int) -> AdmissionState:
    """A node at `committed` whose floor was learned from the leader; watches by name."""
    state, _ = adm.leader_initial(AdmissionState(committed=committed), floor)
    for name, start in watches.items():
        state, ok = adm.create_watch(state, (name, 0), start)
        assert isinstance(ok, Admitted), ok
    return state


# ---- admission: queries and admit ---------------------------------------------------------


@pytest.mark.parametrize(("committed", "starts", "expected"), [
    (50, (), 50),  # no watches: the committed revision
    (50, (10, 30), 10),
    (50, (60,), 50),  # a future watch never lifts it above committed
    (50, (0,), 50),  # "from now" starts at 51: it does not stall compaction (Netsy 2.5.2)
    (0, (), 0),
])
def test_min_revision(committed: int, starts: tuple[int, ...], expected: int) -> None:
    state = AdmissionState(committed=committed)
    for i, start in enumerate(starts):
        state, _ = adm.create_watch(state, ("w", i), start)
    assert adm.min_revision(state) == expected


@pytest.mark.parametrize(("floor", "committed", "start", "expected"), [
    (0, 10, 1, Admitted(1)),
    (5, 10, 5, ErrCompacted(5)),  # at the floor: refused
    (5, 10, 4, ErrCompacted(5)),
    (5, 10, 6, Admitted(6)),
    (5, 10, 0, Admitted(11)),  # from now: committed + 1
    (12, 10, 0, Admitted(13)),  # lagging node: from now is still above the floor
    (5, 10, 40, Admitted(40)),  # future start: allowed, as in etcd
])
def test_admit(floor: int, committed: int, start: int, expected: object) -> None:
    got = adm.admit(node(committed, floor), start)
    if isinstance(expected, ErrCompacted):
        assert isinstance(got, ErrCompacted) and got.compact_revision == expected.compact_revision
    else:
        assert got == expected


def test_admit_rejects_negative_and_duplicate_watch() -> None:
    with pytest.raises(ValueError):
        adm.admit(node(), -1)
    state = node(a=10)
    with pytest.raises(ValueError):
        adm.create_watch(state, ("a", 0), 20)


def test_watch_lifecycle() -> None:
    state, ok = adm.create_watch(node(committed=20), W1, 5)
    assert ok == Admitted(5) and adm.min_revision(state) == 5
    refused_state, err = adm.create_watch(node(committed=20, floor=7), W1, 7)
    assert isinstance(err, ErrCompacted) and not refused_state.watches
    state = adm.progress_watch(state, W1, 9)
    assert adm.min_revision(state) == 9
    assert adm.progress_watch(state, W1, 3) is state  # never lowered
    assert adm.progress_watch(state, W2, 30) is state  # unknown key
    assert adm.cancel_watch(state, W2) is state
    assert adm.min_revision(adm.cancel_watch(state, W1)) == 20


def test_advance_never_goes_backwards() -> None:
    state = adm.advance(AdmissionState(committed=10), 5)
    assert state.committed == 10
    assert adm.advance(state, 12).committed == 12


# ---- admission: notice, rollback, compact --------------------------------------------------


@pytest.mark.parametrize(("watches", "revision", "confirmed"), [
    ({}, 10, True),
    ({"a": 11}, 10, True),  # needs 11 > 10: safe
    ({"a": 10}, 10, False),  # needs exactly 10: compacted away (Netsy's `<` let it pass)
    ({"a": 3, "b": 20}, 10, False),
    ({"a": 0}, 99, True),  # from now at 101
])
def test_notice_checks_every_watch(watches: dict[str, int], revision: int,
                                   confirmed: bool) -> None:
    before = node(100, 0, **watches)
    after, result = adm.notice(before, C1, revision)
    if confirmed:
        assert result == Confirmed(revision) and adm.floor(after) == revision
    else:
        assert isinstance(result, NoticeRefused) and after == before  # floor rolled back
        assert result.watch_revision is not None and result.watch_revision <= revision


def test_notice_names_the_lowest_blocking_watch() -> None:
    _, result = adm.notice(node(100, 0, a=8, b=3, c=50), C1, 10)
    assert result == NoticeRefused(10, ("b", 0), 3)


def test_notice_raise_and_check_are_one_step() -> None:
    """After a confirmed notice no watch at or below it can be admitted."""
    state, _ = adm.notice(node(100), C1, 40)
    for start in (1, 39, 40):
        assert isinstance(adm.admit(state, start), ErrCompacted)
    assert adm.admit(state, 41) == Admitted(41)


def test_notice_at_or_below_the_floor_is_idempotent() -> None:
    state, _ = adm.notice(node(100), C1, 40)
    again, result = adm.notice(state, C1, 40)
    assert result == Confirmed(40) and again == state
    lower, result = adm.notice(state, C2, 30)
    assert result == Confirmed(30) and adm.floor(lower) == 40


def test_rollback_restores_the_previous_floor() -> None:
    state, _ = adm.notice(node(100, floor=5), C1, 40)
    state = adm.rollback(state, C1, 40)
    assert adm.floor(state) == 5
    assert adm.admit(state, 6) == Admitted(6)


def test_rollback_of_another_revision_or_cycle_is_a_no_op() -> None:
    state, _ = adm.notice(node(100), C1, 40)
    assert adm.floor(adm.rollback(state, C1, 39)) == 40
    assert adm.floor(adm.rollback(state, C2, 40)) == 40


def test_rollback_never_lowers_under_another_cycles_notice() -> None:
    """An old leader's cycle raised to 12; a new leader's cycle confirmed 10 (idempotent)
    and proposed it; the old cycle's late rollback must leave the floor at 10."""
    state, _ = adm.notice(node(100), C1, 12)
    state, result = adm.notice(state, C3, 10)
    assert result == Confirmed(10)
    state = adm.rollback(state, C1, 12)
    assert adm.floor(state) == 10
    assert isinstance(adm.admit(state, 10), ErrCompacted)


def test_rollback_keeps_a_persisted_compaction() -> None:
    state, _ = adm.notice(node(100), C1, 40)
    state, _ = adm.compact_committed(state, 40)
    assert adm.floor(adm.rollback(state, C1, 40)) == 40


def test_late_notice_of_a_rolled_back_cycle_is_refused() -> None:
    state = adm.rollback(node(100), C1, 40)  # the rollback overtook the retry
    after, result = adm.notice(state, C1, 40)
    assert result == NoticeRefused(40, None, None) and adm.floor(after) == 0


def test_pins_are_bounded_without_lowering_the_floor() -> None:
    state = node(1000)
    for k in range(1, 3 * adm.MAX_PINS):
        state, _ = adm.notice(state, CycleId(1, k), 10 * k)
    assert len(state.pins) <= adm.MAX_PINS
    assert adm.floor(state) == 10 * (3 * adm.MAX_PINS - 1)
    for k in range(1, 3 * adm.MAX_PINS):  # roll every one back: the folded ones stay
        state = adm.rollback(state, CycleId(1, k), 10 * k)
    assert len(state.rolled_back) <= adm.MAX_ROLLED_BACK
    assert adm.floor(state) == 10 * (2 * adm.MAX_PINS - 1)


def test_compact_committed_persists_once_and_never_backwards() -> None:
    state, _ = adm.notice(node(100), C1, 40)
    state, fx = adm.compact_committed(state, 40)
    assert fx == (PersistCompaction(40),) and state.persisted == 40 and state.pins == ()
    assert adm.compact_committed(state, 40) == (state, ())
    assert adm.compact_committed(state, 30) == (state, ())
    assert adm.floor(state) == 40


def test_compact_committed_cancels_a_watch_it_compacted() -> None:
    """Only a node that lost its floor gets here; the watch is cancelled as in etcd."""
    state, fx = adm.compact_committed(node(100, 0, a=10, b=50), 20)
    assert fx == (PersistCompaction(20), CancelWatch(("a", 0), 20))
    assert set(state.watches) == {("b", 0)}


@pytest.mark.parametrize(("persisted", "derived", "floor", "effects"), [
    (0, 0, 0, ()),
    (30, 0, 30, ()),
    (0, 25, 25, (PersistCompaction(25, seeded=True),)),  # empty table: seeded from rows
    (30, 25, 30, ()),
    (20, 25, 25, ()),  # table not empty: not seeded, but the floor covers the rows
])
def test_restore(persisted: int, derived: int, floor: int,
                 effects: tuple[PersistCompaction, ...]) -> None:
    state, fx = adm.restore(persisted, committed=100, derived=derived)
    assert adm.floor(state) == floor and fx == effects and state.committed == 100
    assert isinstance(adm.admit(state, floor or 1), ErrCompacted) == (floor > 0)


def test_restore_then_leader_initial_takes_the_max() -> None:
    state, _ = adm.restore(30, committed=100)
    raised, fx = adm.leader_initial(state, 45)
    assert adm.floor(raised) == 45 and fx == ()
    kept, _ = adm.leader_initial(raised, 10)
    assert adm.floor(kept) == 45


def test_leader_initial_cancels_watches_below_it() -> None:
    _, fx = adm.leader_initial(node(100, 0, a=5, b=60), 40)
    assert fx == (CancelWatch(("a", 0), 40),)


# ---- coordinator ------------------------------------------------------------------------

CFG = CoordinatorConfig(interval=10.0, min_timeout=1.0, notice_timeout=1.0,
                        propose_timeout=2.0)




def leader(last: int = 0, term: int = 1) -> CoordinatorState:
    s, fx = feed(co.init(CFG, last), Start(0.0, term, NODES, last))
    assert fx == [SetTimer(10.0, None, "interval")]
    return s


def running(last: int = 0) -> tuple[CoordinatorState, CycleId, Fx]:
    s, fx = feed(leader(last), Tick(10.0))
    assert s.cycle is not None
    return s, s.cycle.id, fx


def mins(cid: CycleId, *revs: int, now: float = 10.1) -> list[co.Event]:
    return [MinReply(n, cid, r, now) for n, r in zip(NODES, revs, strict=True)]


def replies(cid: CycleId, rev: int, attempt: int, nodes: str, ok: bool = True,
            now: float = 10.2) -> list[co.Event]:
    return [NoticeReply(n, cid, rev, attempt, ok, now) for n in nodes]


def noticed(last: int = 0) -> tuple[CoordinatorState, CycleId]:
    """A cycle whose minimums were 50, 41, 60: notices for 40 are out."""
    s, cid, _ = running(last)
    s, fx = feed(s, *mins(cid, 50, 41, 60))
    assert [(e.node, e.revision, e.attempt) for e in of(fx, SendNotice)] == [
        (n, 40, 1) for n in NODES]
    return s, cid


def ended(fx: Fx) -> CycleEnded:
    [end] = of(fx, CycleEnded)
    return end


def test_config_rejects_non_positive_times() -> None:
    with pytest.raises(ValueError):
        CoordinatorConfig(interval=0.0)
    with pytest.raises(ValueError):
        CoordinatorConfig(interval=1.0, notice_timeout=-1.0)


def test_happy_path() -> None:
    s = leader()
    assert feed(s, Tick(9.0)) == (s, [])  # early tick: nothing
    s, cid, fx = running()
    assert fx == [SetTimer(20.0, None, "interval"), *(SendMinRequest(n, cid) for n in NODES),
                  SetTimer(11.0, cid, "min")]
    s, fx = feed(s, *mins(cid, 50, 41, 60))
    assert fx[-1] == SetTimer(11.1, cid, "notice")
    s, fx = feed(s, *replies(cid, 40, 1, "abc"))
    assert fx == [ProposeCompact(cid, 40), SetTimer(12.2, cid, "propose")]
    s, fx = feed(s, ProposeResult(cid, 40, True, 10.5))
    assert fx == [CycleEnded(cid, "compacted", 40, (), 0.5)]
    assert fx[0].mins == tuple(zip(NODES, (50, 41, 60), strict=True))  # for the log
    assert s.cycle is None and s.last_revision == 40


@pytest.mark.parametrize(("last", "revs"), [(40, (50, 41, 60)), (0, (1, 5, 9)), (0, (0, 0, 0))])
def test_nothing_to_compact_unless_forward(last: int, revs: tuple[int, ...]) -> None:
    s, cid, _ = running(last)
    s, fx = feed(s, *mins(cid, *revs))
    assert ended(fx).outcome == "nothing_to_compact" and not of(fx, SendNotice)
    assert s.cycle is None


def test_silent_node_aborts_the_min_phase() -> None:
    s, cid, _ = running()
    s, fx = feed(s, MinReply("a", cid, 50, 10.1), MinReply("b", cid, 50, 10.1),
                 Timeout(cid, "min", 11.0))
    end = ended(fx)
    assert (end.outcome, end.nodes) == ("min_failed", ("c",))
    assert not of(fx, SendNotice) and not of(fx, SendRollback)
    s, fx = feed(s, MinReply("c", cid, 50, 11.5))  # too late
    assert fx == []


def test_refusing_node_is_retried_once_then_everything_is_rolled_back() -> None:
    s, cid = noticed()
    s, fx = feed(s, *replies(cid, 40, 1, "ab"), *replies(cid, 40, 1, "c", ok=False))
    assert of(fx, SendNotice) == [SendNotice("c", cid, 40, 2)]
    assert SetTimer(11.2, cid, "retry") in fx
    s, fx = feed(s, *replies(cid, 40, 2, "c", ok=False))
    assert of(fx, SendRollback) == [SendRollback(n, cid, 40) for n in NODES]
    assert (ended(fx).outcome, ended(fx).nodes) == ("refused", ("c",))
    assert not of(fx, ProposeCompact) and s.cycle is None and s.last_revision == 0


def test_node_refusing_first_and_confirming_on_retry() -> None:
    s, cid = noticed()
    s, fx = feed(s, *replies(cid, 40, 1, "b", ok=False), *replies(cid, 40, 1, "ac"))
    assert of(fx, SendNotice) == [SendNotice("b", cid, 40, 2)]
    s, fx = feed(s, *replies(cid, 40, 2, "b"))
    assert of(fx, ProposeCompact) == [ProposeCompact(cid, 40)]


def test_silent_nodes_in_the_notice_phase() -> None:
    s, cid = noticed()
    s, fx = feed(s, *replies(cid, 40, 1, "a"), Timeout(cid, "notice", 11.1))
    assert of(fx, SendNotice) == [SendNotice("b", cid, 40, 2), SendNotice("c", cid, 40, 2)]
    s, fx = feed(s, *replies(cid, 40, 2, "b"), Timeout(cid, "retry", 12.1))
    assert (ended(fx).outcome, ended(fx).nodes) == ("notice_timeout", ("c",))
    assert len(of(fx, SendRollback)) == 3


def test_late_attempt_one_confirmation_counts_during_the_retry() -> None:
    s, cid = noticed()
    s, _ = feed(s, *replies(cid, 40, 1, "ab"), Timeout(cid, "notice", 11.1))
    s, fx = feed(s, *replies(cid, 40, 1, "c"))  # its pin is still in place
    assert of(fx, ProposeCompact) == [ProposeCompact(cid, 40)]


@pytest.mark.parametrize("stale", [
    MinReply("a", CycleId(1, 1), 5, 10.3),  # a min reply in the notice phase
    NoticeReply("c", CycleId(1, 1), 39, 1, True, 10.3),  # wrong revision
    NoticeReply("c", CycleId(1, 0), 40, 1, True, 10.3),  # an earlier cycle
    NoticeReply("z", CycleId(1, 1), 40, 1, True, 10.3),  # not a member
    NoticeReply("c", CycleId(1, 1), 40, 1, False, 10.3),  # attempt-1 refusal in the retry
    Timeout(CycleId(1, 1), "notice", 10.3),  # the attempt-1 timer
    Timeout(CycleId(1, 0), "retry", 10.3),
    ProposeResult(CycleId(1, 1), 40, True, 10.3),
])
def test_stale_events_are_ignored(stale: co.Event) -> None:
    s, cid = noticed()
    s, _ = feed(s, *replies(cid, 40, 1, "ab"), *replies(cid, 40, 1, "c", ok=False))
    assert s.cycle is not None and s.cycle.phase == "retry"
    assert feed(s, stale) == (s, [])


def test_tick_during_a_cycle_only_rearms_the_interval() -> None:
    s, cid, _ = running()
    s, fx = feed(s, Tick(20.0))
    assert fx == [SetTimer(30.0, None, "interval")] and s.cycle is not None
    assert s.cycle.id == cid


def test_leadership_lost_in_the_min_phase() -> None:
    s, cid, _ = running()
    s, fx = feed(s, Stop(10.5))
    assert fx == [CycleEnded(cid, "leadership_lost", 0, (), 0.5)]
    assert feed(s, *mins(cid, 50, 41, 60), Tick(100.0)) == (s, [])  # not leader: inert


def test_leadership_lost_in_the_notice_phase_rolls_back() -> None:
    s, cid = noticed()
    s, fx = feed(s, *replies(cid, 40, 1, "ab"), Stop(10.5))
    assert of(fx, SendRollback) == [SendRollback(n, cid, 40) for n in NODES]
    assert ended(fx).outcome == "leadership_lost" and not of(fx, ProposeCompact)
    assert feed(s, *replies(cid, 40, 1, "c")) == (s, [])


def test_leadership_lost_after_proposing_rolls_nothing_back() -> None:
    s, cid = noticed()
    s, _ = feed(s, *replies(cid, 40, 1, "abc"))
    s, fx = feed(s, Stop(10.5))
    assert ended(fx).outcome == "leadership_lost" and not of(fx, SendRollback)
    assert feed(s, ProposeResult(cid, 40, True, 10.6)) == (s, [])
    assert s.last_revision == 40  # the proposal may still commit: never proposed again


def test_a_newer_term_ends_the_old_cycle() -> None:
    s, cid = noticed()
    s, fx = feed(s, Start(10.5, 2, NODES, 0))
    assert ended(fx).outcome == "leadership_lost" and len(of(fx, SendRollback)) == 3
    assert fx[-1] == SetTimer(20.5, None, "interval")
    assert feed(s, Start(10.6, 1, NODES, 0)) == (s, [])  # stale Start
    s, fx = feed(s, Tick(20.5))
    assert s.cycle is not None and s.cycle.id == CycleId(2, 2)  # seq never reused


@pytest.mark.parametrize("end", [
    ProposeResult(CycleId(1, 1), 40, False, 10.5),
    Timeout(CycleId(1, 1), "propose", 12.2),
])
def test_a_failed_proposal_is_never_reproposed(end: co.Event) -> None:
    s, cid = noticed()
    s, _ = feed(s, *replies(cid, 40, 1, "abc"), end)
    assert s.cycle is None and s.last_revision == 40
    s, _ = feed(s, Tick(20.0))
    assert s.cycle is not None
    s, fx = feed(s, *mins(s.cycle.id, 41, 41, 41, now=20.1))
    assert ended(fx).outcome == "nothing_to_compact"


def test_no_nodes_fails_the_cycle() -> None:
    s, _ = feed(co.init(CFG), Start(0.0, 1, (), 0))
    s, fx = feed(s, Tick(10.0))
    assert ended(fx).outcome == "min_failed" and s.cycle is None


def test_start_takes_the_applied_compaction_revision() -> None:
    s, cid, _ = running(last=45)
    s, fx = feed(s, *mins(cid, 50, 41, 60))
    assert ended(fx).outcome == "nothing_to_compact"


# ---- a small cluster, synchronous and lossless ---------------------------------------------


class Cluster:
    """Admission cores of NODES and a coordinator: a synchronous, lossless shell."""

    def __init__(self) -> None:
        self.nodes = {n: node(100) for n in NODES}
        self.s = leader()
        self.proposed: list[int] = []
        self.now = 0.0

    def cycle(self, before_notices: Any = None) -> CycleEnded:
        self.now += CFG.interval
        todo = self.step(Tick(self.now))
        ends: list[CycleEnded] = []
        while todo:
            e = todo.pop(0)
            if isinstance(e, SendNotice) and before_notices is not None:
                before_notices()
                before_notices = None
            todo += self.effect(e, ends)
        [end] = ends
        return end

    def step(self, ev: co.Event) -> Fx:
        self.s, fx = co.step(self.s, ev)
        return list(fx)

    def effect(self, e: co.Effect, ends: list[CycleEnded]) -> Fx:
        nodes, now = self.nodes, self.now
        if isinstance(e, SendMinRequest):
            return self.step(MinReply(e.node, e.cycle, adm.min_revision(nodes[e.node]), now))
        if isinstance(e, SendNotice):
            nodes[e.node], r = adm.notice(nodes[e.node], e.cycle, e.revision)
            ok = isinstance(r, Confirmed)
            return self.step(NoticeReply(e.node, e.cycle, e.revision, e.attempt, ok, now))
        if isinstance(e, SendRollback):
            nodes[e.node] = adm.rollback(nodes[e.node], e.cycle, e.revision)
        elif isinstance(e, ProposeCompact):
            self.proposed.append(e.revision)
            for n in NODES:
                nodes[n], _ = adm.compact_committed(nodes[n], e.revision)
            return self.step(ProposeResult(e.cycle, e.revision, True, now))
        elif isinstance(e, CycleEnded):
            ends.append(e)
        return []


def test_a_watch_admitted_between_minimum_and_notice_blocks_the_cycle() -> None:
    c = Cluster()
    c.nodes["b"], _ = adm.create_watch(c.nodes["b"], W1, 30)
    assert (c.cycle().outcome, c.proposed) == ("compacted", [29])  # 30 is still safe
    assert all(adm.floor(n) == 29 for n in c.nodes.values())
    c.nodes["b"] = adm.cancel_watch(c.nodes["b"], W1)

    def sneak_in() -> None:  # admitted above the floor, after the minimums were taken
        c.nodes["a"], ok = adm.create_watch(c.nodes["a"], W2, 35)
        assert ok == Admitted(35)

    end = c.cycle(sneak_in)
    assert (end.outcome, end.revision, end.nodes) == ("refused", 99, ("a",))
    assert all(adm.floor(n) == 29 for n in c.nodes.values())  # rolled back everywhere
    assert adm.admit(c.nodes["b"], 30) == Admitted(30)
    assert c.cycle().revision == 34  # the watch at 35 holds it at 34
    c.nodes["a"] = adm.cancel_watch(c.nodes["a"], W2)
    assert c.cycle().outcome == "compacted" and c.proposed == [29, 34, 99]


# ---- the seeded simulation ------------------------------------------------------------------


@dataclass(order=True)
class Item:
    at: float
    seq: int
    what: tuple[Any, ...] = field(compare=False)


class Sim:
    """N nodes (admission cores plus a ground-truth record of their watches), one
    coordinator (re-created now and then: another node won the election), a lossy
    reordering network, partitions, a raft that commits, fails or loses proposals."""

    def __init__(self, seed: int) -> None:
        self.rng = rng = random.Random(seed)
        self.names = tuple(f"n{i}" for i in range(rng.randint(1, 5)))
        self.loss = rng.choice((0.0, 0.02, 0.1))
        self.late = rng.choice((0.0, 0.05, 0.2))  # share of messages later than timeouts
        self.dup = rng.choice((0.0, 0.05, 0.2))
        self.slow_rollbacks = rng.random() < 0.3  # they interleave with the next cycles
        self.cfg = CoordinatorConfig(interval=2.0, min_timeout=1.5, notice_timeout=1.5,
                                     propose_timeout=3.0)
        self.nodes = {n: AdmissionState() for n in self.names}
        self.truth: dict[str, dict[adm.WatchKey, int]] = {n: {} for n in self.names}
        self.cut: set[str] = set()
        self.coord = co.init(self.cfg)
        self.term = 0
        self.now = 0.0
        self.head = 0
        self.queue: list[Item] = []
        self.seq = 0
        self.watch_ids = 0
        self.confirms: dict[tuple[CycleId, str], int] = {}
        self.protected = dict.fromkeys(self.names, 0)
        self.proposed: list[int] = []  # this coordinator incarnation's proposals
        self.apply_at = dict.fromkeys(self.names, 0.0)
        self.stats: Counter[str] = Counter()

    # -- plumbing --
    def at(self, delay: float, *what: Any) -> None:
        self.seq += 1
        heapq.heappush(self.queue, Item(self.now + delay, self.seq, what))

    def send(self, *what: Any) -> None:
        rng = self.rng
        if rng.random() >= self.loss:
            late = rng.random() < self.late or (self.slow_rollbacks and _is_rollback(what))
            self.at(rng.uniform(1.0, 8.0) if late else rng.uniform(0.01, 0.5), *what)
        if rng.random() < self.dup:  # a copy much later: stale replies, notices, rollbacks
            self.at(rng.uniform(0.5, 10.0), *what)

    def coord_step(self, ev: co.Event) -> None:
        self.coord, fx = co.step(self.coord, ev)
        for e in fx:
            self.effect(e)

    def effect(self, e: co.Effect) -> None:
        if isinstance(e, SendMinRequest | SendNotice | SendRollback):
            self.send("node", e)
        elif isinstance(e, SetTimer):
            self.at(max(0.0, e.deadline - self.now), "timer", e)
        elif isinstance(e, ProposeCompact):
            self.propose(e)
        else:
            self.stats[e.outcome] += 1

    # -- the invariants --
    def propose(self, e: ProposeCompact) -> None:
        assert not self.proposed or e.revision > self.proposed[-1], (self.proposed, e)
        self.proposed.append(e.revision)
        for n in self.names:
            assert (e.cycle, n) in self.confirms, f"{n} never confirmed {e}"
            assert self.confirms[e.cycle, n] == e.revision
            assert all(r > e.revision for r in self.truth[n].values()), (n, e, self.truth[n])
            assert e.revision < self.nodes[n].committed  # never a future revision
            self.protected[n] = max(self.protected[n], e.revision)
        self.raft(e)

    def raft(self, e: ProposeCompact) -> None:
        fate = self.rng.random()
        commits = fate < 0.7 or (fate > 0.9 and self.rng.random() < 0.5)
        if commits:
            for n in self.names:  # applied in raft order on every node
                self.apply_at[n] = max(self.apply_at[n], self.now + self.rng.uniform(0, 2))
                self.at(self.apply_at[n] - self.now, "apply", n, e.revision)
        if fate < 0.9:
            self.at(self.rng.uniform(0.01, 1.0), "coord",
                    ProposeResult(e.cycle, e.revision, commits, 0.0))

    def on_node(self, n: str, e: co.Effect) -> None:
        if n in self.cut:
            return
        st = self.nodes[n]
        if isinstance(e, SendMinRequest):
            self.send("coord", MinReply(n, e.cycle, adm.min_revision(st), 0.0))
        elif isinstance(e, SendNotice):
            self.nodes[n], r = adm.notice(st, e.cycle, e.revision)
            ok = isinstance(r, Confirmed)
            if ok:  # the core invariant, against the ground truth
                assert all(v > e.revision for v in self.truth[n].values()), (n, e)
                self.confirms[e.cycle, n] = e.revision
            self.stats["confirm" if ok else "refuse"] += 1
            self.send("coord", NoticeReply(n, e.cycle, e.revision, e.attempt, ok, 0.0))
        elif isinstance(e, SendRollback):
            self.nodes[n] = adm.rollback(st, e.cycle, e.revision)

    def apply(self, n: str, revision: int) -> None:
        assert all(v > revision for v in self.truth[n].values()), (n, revision)
        self.nodes[n], fx = adm.compact_committed(self.nodes[n], revision)
        assert not any(isinstance(x, CancelWatch) for x in fx)  # no watch ever compacted
        self.stats["applied"] += bool(fx)

    # -- the world --
    def world(self) -> None:
        rng = self.rng
        self.head += rng.choice((0, 1, 1, 2, 5))
        for n in self.names:
            st = self.nodes[n]
            self.nodes[n] = adm.advance(st, rng.randint(st.committed, self.head))
        for _ in range(rng.randint(0, 2)):
            self.watch_event(rng.choice(self.names))
        if rng.random() < 0.01:
            self.cut.add(rng.choice(self.names))  # partitioned: drops what it receives
        elif self.cut and rng.random() < 0.1:
            self.cut.pop()
        if self.coord.leader and rng.random() < 0.02:
            self.coord_step(Stop(self.now))
        elif not self.coord.leader and rng.random() < 0.3:
            self.elect()

    def elect(self) -> None:
        self.term += 1
        who = self.rng.choice(self.names)
        if self.rng.random() < 0.5:  # another node's coordinator: a fresh state
            self.coord = co.init(self.cfg, self.nodes[who].persisted)
            self.proposed = []
        self.coord_step(Start(self.now, self.term, self.names, self.nodes[who].persisted))

    def watch_event(self, n: str) -> None:
        rng, st, truth = self.rng, self.nodes[n], self.truth[n]
        roll = rng.random()
        if truth and roll < 0.35:
            key = rng.choice(sorted(truth))
            del truth[key]
            self.nodes[n] = adm.cancel_watch(st, key)
        elif truth and roll < 0.5:
            key = rng.choice(sorted(truth))
            nxt = rng.randint(truth[key], max(truth[key], st.committed + 1))
            truth[key] = max(truth[key], nxt)
            self.nodes[n] = adm.progress_watch(st, key, nxt)
        else:
            self.watch_ids += 1
            key = (n, self.watch_ids)
            start = self.start_revision(st, roll)
            self.nodes[n], got = adm.create_watch(st, key, start)
            if isinstance(got, Admitted):
                assert got.start_revision > adm.floor(st), (n, got, st)
                assert got.start_revision > self.protected[n], (n, got, self.protected[n])
                truth[key] = got.start_revision
            self.stats["admitted" if isinstance(got, Admitted) else "admit_refused"] += 1

    def start_revision(self, st: AdmissionState, roll: float) -> int:
        """From now, or just above the floor (where notices and admission race), or
        anywhere in recent history."""
        if roll < 0.75:
            return 0
        low = adm.floor(st) if roll < 0.9 else st.committed - 30
        return self.rng.randint(max(1, low - 1), max(1, low) + 6)

    def run(self, steps: int) -> None:
        self.elect()
        for _ in range(steps):
            self.now += 0.25
            self.world()
            while self.queue and self.queue[0].at <= self.now:
                item = heapq.heappop(self.queue)
                kind, *rest = item.what
                if kind == "node":
                    self.on_node(rest[0].node, rest[0])
                elif kind == "apply":
                    self.apply(rest[0], rest[1])
                elif kind == "coord":
                    self.coord_step(replace(rest[0], now=item.at))
                else:
                    self.timer(rest[0], item.at)

    def timer(self, e: SetTimer, at: float) -> None:
        if e.cycle is None:
            self.coord_step(Tick(at))
        elif e.phase != "interval":
            self.coord_step(Timeout(e.cycle, e.phase, at))


def _is_rollback(what: tuple[Any, ...]) -> bool:
    return isinstance(what[-1], SendRollback)


SEEDS_PER_CHUNK = 100


@pytest.mark.parametrize("chunk", range(4))
def test_simulation_safety_over_many_seeds(chunk: int) -> None:
    totals: Counter[str] = Counter()
    for seed in range(chunk * SEEDS_PER_CHUNK, (chunk + 1) * SEEDS_PER_CHUNK):
        sim = Sim(seed)
        try:
            sim.run(300)
        except AssertionError as err:
            err.add_note(f"simulation seed {seed}")
            raise
        totals += sim.stats
    for outcome in ("compacted", "nothing_to_compact", "min_failed", "refused",
                    "notice_timeout", "propose_failed", "propose_timeout", "leadership_lost"):
        assert totals[outcome] > 0, (outcome, totals)  # every path was exercised
    assert totals["applied"] > 50 and totals["refuse"] > 0 and totals["admit_refused"] > 0
