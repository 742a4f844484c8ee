"""Restart backoff with jitter and reset (Akka's restartWithBackoff), as pure functions.

OTP retries a failed child at once; a child that fails on a missing dependency then
burns the restart intensity in milliseconds. Backoff spaces the attempts out:
`min_s * 2**n` capped at `max_s`, times `1 + random_factor * u` so that siblings do not
retry in lockstep, and back to `min_s` after `reset_after_s` seconds without a failure.
Randomness comes in as `u` in [0, 1); `next_uniform` is a seeded generator for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sediment.supervision.spec import Backoff

_MAX_EXPONENT = 1000  # 2.0**1000 is finite; beyond that every delay is max_s anyway
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class BackoffState:
    """Consecutive failures so far and when the last one happened (None: never failed)."""

    failures: int = 0
    last_failure: float | None = None


def next_delay(
    policy: Backoff, state: BackoffState, now: float, u: float
) -> tuple[float, BackoffState]:
    """Record a failure at `now` and return the delay before the next attempt."""
    assert 0.0 <= u < 1.0, u
    failures = state.failures
    if state.last_failure is not None and now - state.last_failure >= policy.reset_after_s:
        failures = 0
    base = min(policy.max_s, policy.min_s * 2.0 ** min(failures, _MAX_EXPONENT))
    delay = base * (1.0 + policy.random_factor * u)
    return delay, BackoffState(failures + 1, now)


def next_uniform(seed: int) -> tuple[float, int]:
    """One splitmix64 step: a float in [0, 1) and the next seed. Pure, so replays match."""
    seed = (seed + 0x9E3779B97F4A7C15) & _MASK64
    z = seed
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    z ^= z >> 31
    return (z >> 11) / float(1 << 53), seed
