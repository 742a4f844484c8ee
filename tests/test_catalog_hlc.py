"""The hybrid logical clock: tables of now/update, and ordering under any interleaving."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sediment.actors.catalog import hlc
from sediment.actors.catalog.hlc import ClockState, HybridTimestamp, hts


@pytest.mark.parametrize(
    ("latest", "physical", "expected"),
    [
        (hlc.MIN, 100, hts(100)),  # the physical clock is ahead: take it
        (hts(100), 100, hts(100, 1)),  # same millisecond: one logical tick
        (hts(100, 5), 100, hts(100, 6)),
        (hts(200), 100, hts(200, 1)),  # the physical clock lags: never go back
        (hts(100, 0xFFFF), 100, hts(101, 0)),  # a logical overflow carries (Ignite's long)
        (hlc.MIN, -5, HybridTimestamp(1)),  # a negative reading is treated as 0
    ],
)
def test_now(latest: HybridTimestamp, physical: int, expected: HybridTimestamp) -> None:
    state, ts = hlc.now(ClockState(latest), physical)
    assert ts == expected
    assert state.latest == expected


@pytest.mark.parametrize(
    ("latest", "physical", "received", "expected"),
    [
        (hts(100), 100, hts(50), hts(100, 1)),  # an old message: tick our own time
        (hts(100), 100, hts(300, 2), hts(300, 3)),  # a message from ahead: move past it
        (hts(100), 400, hts(300, 2), hts(400)),  # our physical time is ahead of both
        (hlc.MIN, 0, hts(0, 7), hts(0, 8)),
    ],
)
def test_update(latest: HybridTimestamp, physical: int, received: HybridTimestamp,
                expected: HybridTimestamp) -> None:
    state, ts = hlc.update(ClockState(latest), physical, received)
    assert ts == expected
    assert state.latest == expected


def test_timestamp_parts_and_arithmetic() -> None:
    ts = hts(1234, 7)
    assert (ts.physical, ts.logical) == (1234, 7)
    assert ts.add_physical(10) == hts(1244, 7)
    assert ts.subtract_physical(34) == hts(1200, 7)
    assert ts.subtract_physical(10_000) == hlc.MIN
    assert ts.tick() == hts(1234, 8)
    assert hts(5, 1) > hts(5, 0) > hts(4, 0xFFFF)
    assert str(ts) == "1234.7"
    assert hlc.current(ClockState(ts), 0) == ts.tick()


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_timestamp_rejects_bad_values(bad: object) -> None:
    with pytest.raises(ValueError):
        HybridTimestamp(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("physical", "logical"), [(-1, 0), (0, -1), (0, 1 << 16)])
def test_hts_rejects_bad_parts(physical: int, logical: int) -> None:
    with pytest.raises(ValueError):
        hts(physical, logical)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["now", "send"]), st.integers(0, 3),
                          st.integers(0, 3), st.integers(-50, 50)), max_size=60))
def test_causality_and_monotonicity(ops: list[tuple[str, int, int, int]]) -> None:
    """Four nodes with skewed, non-monotonic physical clocks: each clock's timestamps
    strictly increase, and a message's receipt is stamped after its send."""
    clocks = [ClockState() for _ in range(4)]
    last = [hlc.MIN] * 4
    base = 1000
    for step, (op, a, b, skew) in enumerate(ops):
        physical = base + step + skew * (a + 1)
        clocks[a], sent = hlc.now(clocks[a], physical)
        assert sent > last[a]
        last[a] = sent
        if op == "send":
            clocks[b], received = hlc.update(clocks[b], base + step - skew, sent)
            assert received > sent
            assert received > last[b] or a == b
            last[b] = received
