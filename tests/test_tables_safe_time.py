"""The safe-time core for read-only reads (`actors/tables/safe_time.py`), by table:
the minimum of what each node was last heard at, nothing safe before every node was
heard from, restarts start over, late and foreign messages change nothing, and the
read decision serves at or below the safe time only."""

from __future__ import annotations

import pytest

from sediment.actors.catalog.hlc import HybridTimestamp, hts
from sediment.actors.tables import safe_time as st

NODES = frozenset({"a", "b", "c"})


def state(*heard: tuple[str, float, int]) -> st.SafeTime:
    s = st.init("a", NODES)
    for node, inc, ms in heard:
        s = st.heard(s, node, inc, hts(ms))
    return s


@pytest.mark.parametrize("heard, now, safe", [
    ((), 100, None),  # nobody heard from: nothing is safe
    ((("b", 1, 90),), 100, None),  # c not yet
    ((("b", 1, 90), ("c", 1, 95)), 100, 90),  # the slowest node
    ((("b", 1, 90), ("c", 1, 95)), 80, 80),  # own clock behind: its own time
    ((("b", 1, 90), ("b", 1, 120), ("c", 1, 130)), 200, 120),  # newer times move it
    ((("b", 1, 120), ("b", 1, 90), ("c", 1, 130)), 200, 120),  # an older one does not
    ((("b", 1, 120), ("b", 2, 60), ("c", 1, 130)), 200, 60),  # b restarted: starts over
    ((("b", 2, 60), ("b", 1, 120), ("c", 1, 130)), 200, 60),  # late, earlier incarnation
    ((("b", 1, 90), ("c", 1, 95), ("x", 1, 10)), 100, 90),  # not in the topology
    ((("b", 1, 90), ("c", 1, 95), ("a", 1, 10)), 100, 90),  # itself: its own clock
])
def test_safe_time(heard: tuple[tuple[str, float, int], ...], now: int,
                   safe: int | None) -> None:
    got = st.safe_time(state(*heard), hts(now))
    assert got == (None if safe is None else hts(safe))


def test_a_node_that_left_is_forgotten_and_must_be_heard_again() -> None:
    s = state(("b", 1, 90), ("c", 1, 50))
    s = st.topology_changed(s, frozenset({"a", "b"}))  # c left
    assert st.safe_time(s, hts(100)) == hts(90)
    s = st.topology_changed(s, NODES)  # back: not heard since
    assert st.safe_time(s, hts(100)) is None
    s = st.heard(s, "c", 2, hts(99))
    assert st.safe_time(s, hts(100)) == hts(90)


@pytest.mark.parametrize("requested, decision", [
    (None, st.Serve(hts(90))),  # as late as is safe
    (80, st.Serve(hts(80))),
    (90, st.Serve(hts(90))),
    (91, st.Wait(hts(90))),  # a commit at 91 may still be stamped: wait
])
def test_read_decisions(requested: int | None, decision: st.ReadDecision) -> None:
    s = state(("b", 1, 90), ("c", 1, 95))
    asked: HybridTimestamp | None = None if requested is None else hts(requested)
    assert st.read_at(s, hts(100), asked) == decision


def test_nothing_heard_means_wait() -> None:
    assert st.read_at(st.init("a", NODES), hts(100), None) == st.Wait(None)
    assert st.read_at(st.init("a", frozenset()), hts(100), None) == st.Serve(hts(100))
