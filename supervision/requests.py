"""The supervisor's call API and its replies as typed values.

Use the requests with `ctx.call(sup, WhichChildren())` in a process or
`rt.call(sup, ...)` from the driver. Replies follow OTP: `ChildStarted(pid)` for a
start or restart (`pid` None when the start function returned ignore),
`SupervisorError(reason)` with OTP's reason terms, `"ok"` for terminate, delete and
stop, a list for which_children and a dict for count_children.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sediment.runtime.pid import Pid
from sediment.runtime.reasons import NORMAL
from sediment.supervision.spec import ChildSpec

# ---- requests ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StartChild:
    """A ChildSpec for static strategies; extra args (a tuple) for simple_one_for_one."""

    spec_or_args: ChildSpec | tuple[Any, ...]


@dataclass(frozen=True)
class TerminateChild:
    """By child id, or by pid for simple_one_for_one."""

    id_or_pid: Any


@dataclass(frozen=True)
class RestartChild:
    id: Any


@dataclass(frozen=True)
class DeleteChild:
    id: Any


@dataclass(frozen=True)
class WhichChildren:
    """[(id, pid | "restarting" | None, type)] in start order."""


@dataclass(frozen=True)
class CountChildren:
    """OTP's count_children dict: specs, active, supervisors, workers."""


@dataclass(frozen=True)
class StopSupervisor:
    """Stop the supervisor (children first, in reverse start order); replies when done."""

    reason: Any = NORMAL


SupervisorRequest = (
    StartChild | TerminateChild | RestartChild | DeleteChild | WhichChildren | CountChildren
    | StopSupervisor
)


# ---- replies and reports ----------------------------------------------------------------


@dataclass(frozen=True)
class ChildStarted:
    """start_child / restart_child succeeded; `pid` None: the start returned ignore."""

    pid: Pid | None


@dataclass(frozen=True)
class SupervisorError:
    """A refused or failed API call, with OTP's reason term (`"not_found"`, `"running"`,
    `("already_started", pid)`, a start function's error, ...)."""

    reason: Any

    @property
    def already_started(self) -> bool:
        """start_child of an id that runs already (a caller that wanted it running is done)."""
        r = self.reason
        return isinstance(r, tuple) and len(r) == 2 and r[0] == "already_started"


@dataclass(frozen=True)
class SupervisorReport:
    """Sent to a supervisor's `report_to`: child_terminated, start_error, shutdown_error,
    reached_max_restart_intensity or restart_backoff, with its data."""

    supervisor: Pid
    kind: str
    data: dict[str, Any] = field(default_factory=dict)


def is_running(reply: Any) -> bool:
    """A start_child reply that leaves the child running: started now or already."""
    return isinstance(reply, ChildStarted) or (
        isinstance(reply, SupervisorError) and reply.already_started)


def child_pid(which: list[tuple[Any, Pid | str | None, str]], child_id: Any) -> Pid | None:
    """The pid of `child_id` in a which_children reply (None if not running)."""
    for cid, pid, _ in which:
        if cid == child_id and isinstance(pid, Pid):
            return pid
    return None


__all__ = [
    "ChildStarted",
    "CountChildren",
    "DeleteChild",
    "RestartChild",
    "StartChild",
    "StopSupervisor",
    "SupervisorError",
    "SupervisorReport",
    "SupervisorRequest",
    "TerminateChild",
    "WhichChildren",
    "child_pid",
    "is_running",
]
