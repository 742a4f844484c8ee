"""The hybrid logical clock and its timestamps (Ignite's HybridClock, HybridTimestamp).

A timestamp is one integer: physical milliseconds in the high bits, a 16-bit logical
counter in the low ones, so a logical overflow simply carries into the physical part
and timestamps compare as integers, exactly as Ignite's `long` form does. The clock is
pure: the caller passes the physical time it read (from the runtime's clock, virtual on
sim), the clock returns its new state and the timestamp. `now` never goes back and
never repeats; `update` on receiving a message moves the clock past the sender's time,
so a reply is always stamped later than the request that caused it.
"""

from __future__ import annotations

from dataclasses import dataclass

LOGICAL_BITS = 16
LOGICAL_MASK = (1 << LOGICAL_BITS) - 1


@dataclass(frozen=True, order=True, slots=True)
class HybridTimestamp:
    """A point on the hybrid clock; compare and order them like integers."""

    value: int

    def __post_init__(self) -> None:
        if not isinstance(self.value, int) or isinstance(self.value, bool) or self.value < 0:
            raise ValueError(f"a hybrid timestamp is a non-negative integer: {self.value!r}")

    @property
    def physical(self) -> int:
        """Milliseconds."""
        return self.value >> LOGICAL_BITS

    @property
    def logical(self) -> int:
        return self.value & LOGICAL_MASK

    def tick(self) -> HybridTimestamp:
        """The next timestamp after this one."""
        return HybridTimestamp(self.value + 1)

    def add_physical(self, millis: int) -> HybridTimestamp:
        return HybridTimestamp(self.value + (millis << LOGICAL_BITS))

    def subtract_physical(self, millis: int) -> HybridTimestamp:
        """Never below MIN (a low watermark candidate early in a cluster's life)."""
        return HybridTimestamp(max(0, self.value - (millis << LOGICAL_BITS)))

    def __str__(self) -> str:
        return f"{self.physical}.{self.logical}"


def hts(physical: int, logical: int = 0) -> HybridTimestamp:
    """The timestamp (physical ms, logical)."""
    if physical < 0 or not 0 <= logical <= LOGICAL_MASK:
        raise ValueError(f"bad hybrid timestamp parts: ({physical}, {logical})")
    return HybridTimestamp((physical << LOGICAL_BITS) | logical)


MIN = HybridTimestamp(0)
MAX = HybridTimestamp((1 << 63) - 1)


@dataclass(frozen=True, slots=True)
class ClockState:
    """The latest timestamp this clock handed out or observed."""

    latest: HybridTimestamp = MIN


def now(state: ClockState, physical_ms: int) -> tuple[ClockState, HybridTimestamp]:
    """A fresh timestamp: the physical time if it is ahead, else one tick past the latest."""
    ts = max(hts(max(0, physical_ms)), state.latest.tick())
    return ClockState(ts), ts


def update(state: ClockState, physical_ms: int,
           received: HybridTimestamp) -> tuple[ClockState, HybridTimestamp]:
    """On receiving a message stamped `received`: move past it (and past our own time)."""
    ts = max(hts(max(0, physical_ms)), state.latest.tick(), received.tick())
    return ClockState(ts), ts


def current(state: ClockState, physical_ms: int) -> HybridTimestamp:
    """What `now` would return, without taking it (a bound for comparisons)."""
    return max(hts(max(0, physical_ms)), state.latest.tick())


__all__ = [
    "LOGICAL_BITS",
    "MAX",
    "MIN",
    "ClockState",
    "HybridTimestamp",
    "current",
    "hts",
    "now",
    "update",
]
