"""Failpoints: named places in process code where a test can inject a fault.

Process code writes `await ctx.failpoint("wal.before_fsync")`. Unarmed, that is one dict
lookup. Armed on one process, it crashes the process (abruptly, as a kill would), raises
`FailpointError`, or pauses it until released or for a duration.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import BadArgument

ACTIONS = ("crash", "raise", "pause")


@dataclass(frozen=True, slots=True)
class Failpoint:
    """What an armed failpoint does, how many times (None = every time)."""

    action: str
    count: int | None = 1
    seconds: float | None = None  # for pause: None = until released

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise BadArgument(f"failpoint action must be one of {ACTIONS}, got {self.action!r}")
        if self.count is not None and self.count < 1:
            raise BadArgument(f"failpoint count must be >= 1 or None, got {self.count}")
        if self.seconds is not None and self.seconds < 0:
            raise BadArgument(f"failpoint pause seconds must be >= 0, got {self.seconds}")

    def consumed(self) -> Failpoint | None:
        """The failpoint after it fired once (None when it is used up)."""
        if self.count is None:
            return self
        if self.count <= 1:
            return None
        return Failpoint(self.action, self.count - 1, self.seconds)
