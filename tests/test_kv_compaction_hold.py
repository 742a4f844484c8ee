"""The compaction coordinator's hold: with a block tier, the metastore's flushed-through
revision is one more participant of the "min" phase, and no compaction revision is ever
chosen above it (the hot store may drop only values the blocks already hold).

Table tests of the rule (hold below the watches, above them, equal to the last
compaction, unreachable, late, stale, duplicated), the unchanged behaviour without a
block tier, and a seeded run of many cycles whose replies arrive in random order and
whose hold moves forward meanwhile: every proposal is at or below the hold the cycle
read, and strictly increasing.
"""

from __future__ import annotations

import random

import pytest
from coordinator_helpers import NODES, Fx, feed, of

from sediment.actors.kv import coordinator_core as co
from sediment.actors.kv.admission import CycleId
from sediment.actors.kv.coordinator_core import (
    HOLD,
    CoordinatorConfig,
    CoordinatorState,
    CycleEnded,
    HoldReply,
    MinReply,
    NoticeReply,
    ProposeCompact,
    ProposeResult,
    QueryHold,
    SendMinRequest,
    SendNotice,
    SetTimer,
    Start,
    Tick,
    Timeout,
)

HELD = CoordinatorConfig(interval=10.0, min_timeout=1.0, notice_timeout=1.0,
                         propose_timeout=2.0, hold=True)




def running(config: CoordinatorConfig = HELD, last: int = 0) -> tuple[CoordinatorState,
                                                                      CycleId, Fx]:
    s, _ = feed(co.init(config, last), Start(0.0, 1, NODES, last))
    s, fx = feed(s, Tick(10.0))
    assert s.cycle is not None
    return s, s.cycle.id, fx


def mins(cid: CycleId, *revs: int) -> list[co.Event]:
    """Min replies of the first len(revs) nodes."""
    return [MinReply(n, cid, r, 10.1) for n, r in zip(NODES, revs, strict=False)]


def test_a_held_cycle_asks_the_hold_with_the_nodes() -> None:
    _, cid, fx = running()
    assert fx == [SetTimer(20.0, None, "interval"), *(SendMinRequest(n, cid) for n in NODES),
                  QueryHold(cid), SetTimer(11.0, cid, "min")]


def test_without_a_block_tier_nothing_is_asked_and_nothing_is_held() -> None:
    config = CoordinatorConfig(interval=10.0, min_timeout=1.0, notice_timeout=1.0)
    s, cid, fx = running(config)
    assert not of(fx, QueryHold)
    s, fx = feed(s, *mins(cid, 50, 41, 60))
    assert {e.revision for e in of(fx, SendNotice)} == {40}
    s, fx = feed(s, HoldReply(cid, 5, 10.2))  # no hold configured: ignored
    assert fx == []


@pytest.mark.parametrize(("last", "revs", "hold", "outcome", "revision"), [
    (0, (50, 41, 60), 30, "notice", 30),  # the hold is below the watches: it decides
    (0, (50, 41, 60), 90, "notice", 40),  # the hold is above them: the watches decide
    (0, (50, 41, 60), 40, "notice", 40),  # equal: compacting at the hold itself is fine
    (30, (50, 41, 60), 30, "nothing_to_compact", 30),  # nothing flushed since last time
    (30, (50, 41, 60), 12, "nothing_to_compact", 12),  # a lagging replica's hold: lower
    (0, (50, 41, 60), 0, "nothing_to_compact", 0),  # nothing flushed at all
])
def test_the_revision_is_never_above_the_hold(last: int, revs: tuple[int, ...], hold: int,
                                              outcome: str, revision: int) -> None:
    s, cid, _ = running(last=last)
    s, fx = feed(s, *mins(cid, *revs[:2]), HoldReply(cid, hold, 10.1))
    assert not of(fx, SendNotice) and not of(fx, CycleEnded)  # node c has not answered
    s, fx = feed(s, MinReply("c", cid, revs[2], 10.1))
    if outcome == "notice":
        assert [(e.node, e.revision) for e in of(fx, SendNotice)] == [(n, revision)
                                                                      for n in NODES]
        s, fx = feed(s, *(NoticeReply(n, cid, revision, 1, True, 10.2) for n in NODES))
        assert of(fx, ProposeCompact) == [ProposeCompact(cid, revision)]
    else:
        [end] = of(fx, CycleEnded)
        assert (end.outcome, end.revision) == (outcome, revision)
        assert s.cycle is None and s.last_revision == last


def test_the_hold_answering_last_completes_the_phase() -> None:
    s, cid, _ = running()
    s, fx = feed(s, *mins(cid, 50, 41, 60))
    assert fx == []  # every node answered, the hold not yet
    s, fx = feed(s, HoldReply(cid, 35, 10.3))
    assert {e.revision for e in of(fx, SendNotice)} == {35}


def test_an_unreachable_hold_aborts_the_cycle_and_compacts_nothing() -> None:
    s, cid, _ = running()
    s, fx = feed(s, *mins(cid, 50, 41, 60), Timeout(cid, "min", 11.0))
    [end] = of(fx, CycleEnded)
    assert (end.outcome, end.nodes) == ("min_failed", (HOLD,))
    assert not of(fx, SendNotice) and not of(fx, ProposeCompact) and s.cycle is None
    # a late answer of the aborted cycle changes nothing
    assert feed(s, HoldReply(cid, 99, 11.5)) == (s, [])
    # the next cycle asks again
    s, fx = feed(s, Tick(20.0))
    assert s.cycle is not None and of(fx, QueryHold) == [QueryHold(s.cycle.id)]


def test_silent_nodes_and_hold_are_all_named() -> None:
    s, cid, _ = running()
    s, fx = feed(s, MinReply("a", cid, 50, 10.1), Timeout(cid, "min", 11.0))
    [end] = of(fx, CycleEnded)
    assert end.nodes == ("b", "c", HOLD)


@pytest.mark.parametrize("stale", [
    HoldReply(CycleId(1, 9), 5, 10.2),  # another cycle
    HoldReply(CycleId(0, 1), 5, 10.2),  # another term
])
def test_stale_hold_replies_are_ignored(stale: HoldReply) -> None:
    s, cid, _ = running()
    s2, fx = feed(s, stale)
    assert (s2, fx) == (s, [])
    s2, fx = feed(s2, *mins(cid, 50, 41, 60))
    assert fx == []  # still waiting for this cycle's hold


def test_a_duplicated_hold_reply_keeps_the_first() -> None:
    s, cid, _ = running()
    s, _ = feed(s, HoldReply(cid, 20, 10.1), HoldReply(cid, 90, 10.1))
    s, fx = feed(s, *mins(cid, 50, 41, 60))
    assert {e.revision for e in of(fx, SendNotice)} == {20}


def test_a_hold_reply_after_the_min_phase_is_ignored() -> None:
    s, cid, _ = running()
    s, _ = feed(s, HoldReply(cid, 30, 10.1), *mins(cid, 50, 41, 60))
    assert s.cycle is not None and s.cycle.phase == "notice"
    assert feed(s, HoldReply(cid, 1, 10.2)) == (s, [])


@pytest.mark.parametrize("seed", range(40))
def test_seeded_cycles_never_compact_past_the_hold(seed: int) -> None:
    """Many cycles: replies in random order, some lost, the hold and the watches moving
    forward between cycles. Every proposal is <= the hold its cycle read and above the
    previous one."""
    rng = random.Random(seed)
    s, _ = feed(co.init(HELD, 0), Start(0.0, 1, NODES, 0))
    now, hold, watch_floor = 0.0, 0, 1
    proposed: list[int] = []
    for _ in range(30):
        hold += rng.randrange(0, 6)
        watch_floor += rng.randrange(0, 6)
        now += 10.0
        s, fx = feed(s, Tick(now))
        if s.cycle is None:
            continue
        cid = s.cycle.id
        read_hold = hold - rng.randrange(0, 3) if hold > 2 else hold  # a lagging replica
        answers: list[co.Event] = [MinReply(n, cid, watch_floor + rng.randrange(0, 4), now)
                                   for n in NODES]
        answers.append(HoldReply(cid, read_hold, now))
        rng.shuffle(answers)
        if rng.random() < 0.2:
            answers.pop()  # a participant stays silent
        s, fx = feed(s, *answers)
        if s.cycle is not None and s.cycle.phase == "min":
            s, fx = feed(s, Timeout(cid, "min", now + 1.0))
            assert not of(fx, SendNotice)
            continue
        notices = of(fx, SendNotice)
        if not notices:
            continue
        revision = notices[0].revision
        assert revision <= read_hold <= hold
        s, fx = feed(s, *(NoticeReply(n, cid, revision, 1, True, now) for n in NODES))
        [proposal] = of(fx, ProposeCompact)
        assert not proposed or proposal.revision > proposed[-1]
        proposed.append(proposal.revision)
        s, _ = feed(s, ProposeResult(cid, revision, True, now + 0.5))
    assert proposed, "no cycle compacted: the run tests nothing"
