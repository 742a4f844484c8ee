"""Failpoints: named places in process code where a test can inject a fault.

Process code writes `await ctx.failpoint("wal.before_fsync")`. Unarmed, that is one dict
lookup. Armed on one process, it crashes the process (abruptly, as a kill would), raises
`FailpointError`, or pauses it until released or for a duration.

Armed everywhere (`Runtime.arm_failpoint_everywhere`), it is armed on every process,
those started later included, and fires every time until it is released everywhere.
With `notify`, a process that reaches it first sends `FailpointHit` to that pid: a pause
that tells someone is a breakpoint, how a fault scenario holds a protocol moment open
(the coordinator between its notices and its Compact proposal, say) until its fault has
landed, instead of polling for a moment that may last milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .errors import BadArgument
from .pid import Pid

ACTIONS = ("crash", "raise", "pause")


@dataclass(frozen=True, slots=True)
class Failpoint:
    """What an armed failpoint does, how many times (None = every time), and whom it
    tells when it fires (`notify`, with `tag` to tell one arming from another)."""

    action: str
    count: int | None = 1
    seconds: float | None = None  # for pause: None = until released
    notify: Pid | None = None
    tag: str = ""

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise BadArgument(f"failpoint action must be one of {ACTIONS}, got {self.action!r}")
        if self.count is not None and self.count < 1:
            raise BadArgument(f"failpoint count must be >= 1 or None, got {self.count}")
        if self.seconds is not None and self.seconds < 0:
            raise BadArgument(f"failpoint pause seconds must be >= 0, got {self.seconds}")
        if self.notify is not None and not isinstance(self.notify, Pid):
            raise BadArgument(f"failpoint notify must be a Pid, got {self.notify!r}")
        if not isinstance(self.tag, str):
            raise BadArgument(f"failpoint tag must be a str, got {self.tag!r}")

    def consumed(self) -> Failpoint | None:
        """The failpoint after it fired once (None when it is used up)."""
        if self.count is None:
            return self
        if self.count <= 1:
            return None
        return replace(self, count=self.count - 1)


@dataclass(frozen=True, slots=True)
class FailpointHit:
    """Sent to a failpoint's `notify` pid when a process reaches it: which arming
    (`tag`), which point, which process, at what time of that process's clock."""

    tag: str
    point: str
    pid: Pid
    t: float


def check_point(name: object) -> str:
    """A failpoint name: a non-empty str."""
    if not isinstance(name, str) or not name:
        raise BadArgument(f"a failpoint name must be a non-empty str, got {name!r}")
    return name
