"""How often and how patiently a conditional update retries (pure).

lakeFS retries a branch update that lost its SetIf race (`kv.ErrPredicateFailed`)
with an exponential back-off: at most `BranchUpdateMaxTries` = 10 tries, intervals
capped at `BranchUpdateMaxInterval` = 5 s, starting at backoff/v4's 0.5 s, growing
1.5x, randomized by +-50 %. The shell asks `delay` after each lost race and sleeps
that long, or gives up (TooManyTries) on None. Randomness comes in as `jitter` in
[0, 1), so the policy itself is deterministic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_tries: int = 10
    initial_interval: float = 0.5
    multiplier: float = 1.5
    max_interval: float = 5.0
    randomization: float = 0.5

    def __post_init__(self) -> None:
        if isinstance(self.max_tries, bool) or not isinstance(self.max_tries, int) \
                or self.max_tries < 1:
            raise ValueError(f"max_tries must be a positive int: {self.max_tries!r}")
        numbers = (self.initial_interval, self.multiplier, self.max_interval, self.randomization)
        if not all(isinstance(x, int | float) and math.isfinite(x) and x >= 0 for x in numbers):
            raise ValueError(f"intervals, multiplier and randomization must be finite and "
                             f">= 0: {self}")
        if self.randomization > 1 or self.multiplier < 1:
            raise ValueError(f"randomization must be <= 1 and multiplier >= 1: {self}")

    def delay(self, failed_tries: int, jitter: float) -> float | None:
        """Seconds to wait after `failed_tries` lost races (>= 1) before trying again;
        None once `max_tries` tries have been spent."""
        if failed_tries >= self.max_tries:
            return None
        base = min(self.initial_interval * self.multiplier ** (failed_tries - 1),
                   self.max_interval)
        spread = self.randomization * base
        return max(0.0, base - spread + 2 * spread * min(max(jitter, 0.0), 1.0))


BRANCH_UPDATE = RetryPolicy()
"""lakeFS's branch updates: 10 tries, back-off up to 5 s."""

STAGED_WRITE = RetryPolicy(max_tries=10, initial_interval=0.01, max_interval=0.2)
"""A staged write whose branch changed under it: read the branch again almost at once
(the change is a seal; the new token is there to write to)."""

SNAPSHOT_READ = RetryPolicy(max_tries=10, initial_interval=0.01, max_interval=0.5)
"""A read whose snapshot revision the KV compacted meanwhile: read again at head."""


__all__ = ["BRANCH_UPDATE", "SNAPSHOT_READ", "STAGED_WRITE", "RetryPolicy"]
