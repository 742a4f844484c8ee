"""The low watermark core: the interval, only forward, read locks, recovery above a
compacted catalog (Ignite's ItNodeRecoveryAfterCatalogTruncatedAboveStoredLwmTest)."""

from __future__ import annotations

import pytest

from sediment.actors.catalog import low_watermark as lw
from sediment.actors.catalog.hlc import hts

CONFIG = lw.LowWatermarkConfig(data_availability_ms=1000, update_interval_ms=100,
                               max_clock_skew_ms=50)


def test_defaults_are_ignites() -> None:
    c = lw.LowWatermarkConfig()
    assert (c.data_availability_ms, c.update_interval_ms) == (600_000, 300_000)
    with pytest.raises(ValueError):
        lw.LowWatermarkConfig(update_interval_ms=0)


def test_tick_advances_by_the_availability_window_and_reschedules() -> None:
    s = lw.init(CONFIG)
    s, effects = lw.step(s, lw.Start(0, None, hts(0)))
    assert effects == [lw.SetTimer(100)]
    s, effects = lw.step(s, lw.Tick(hts(5000), 5000))
    assert effects == [lw.Persist(hts(3950)), lw.Changed(hts(3950)), lw.SetTimer(5100)]
    # A clock that lags: no step back, no event.
    s, effects = lw.step(s, lw.Tick(hts(4000), 5100))
    assert effects == [lw.SetTimer(5200)] and s.lwm == hts(3950)
    s, effects = lw.step(s, lw.Propose(hts(100)))
    assert effects == [] and s.lwm == hts(3950)


def test_locks_hold_the_watermark_back() -> None:
    s, _ = lw.step(lw.init(CONFIG), lw.Propose(hts(100)))
    s, effects = lw.step(s, lw.TryLock("ro1", hts(50)))
    assert effects == [lw.LockResult("ro1", False)]  # below the watermark: refused
    s, effects = lw.step(s, lw.TryLock("ro2", hts(150)))
    assert effects == [lw.LockResult("ro2", True)]
    s, effects = lw.step(s, lw.Propose(hts(200)))
    assert effects == [] and s.lwm == hts(100) and s.candidate == hts(200)
    s, effects = lw.step(s, lw.Propose(hts(180)))
    assert effects == [] and s.candidate == hts(200)  # not above the waiting candidate
    s, effects = lw.step(s, lw.Unlock("nope"))
    assert effects == []
    s, effects = lw.step(s, lw.Unlock("ro2"))
    assert effects == [lw.Persist(hts(200)), lw.Changed(hts(200))] and s.candidate is None


@pytest.mark.parametrize(
    ("stored", "earliest", "lwm", "effects"),
    [
        (None, hts(500), None, []),
        (hts(900), hts(500), hts(900), []),
        # nodeWithLwmBelowEarliestCatalogTsShouldRecover: raised to the earliest catalog.
        (hts(300), hts(500), hts(500), [lw.Persist(hts(500)), lw.Changed(hts(500))]),
    ],
)
def test_nodeWithLwmBelowEarliestCatalogTsShouldRecover(stored: object, earliest: object,
                                                        lwm: object, effects: list[object]) -> None:
    s, got = lw.step(lw.init(CONFIG), lw.Start(1000, stored, earliest))  # type: ignore[arg-type]
    assert s.lwm == lwm and got == [*effects, lw.SetTimer(1100)]
