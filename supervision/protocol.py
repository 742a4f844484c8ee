"""The messages between a supervisor's process shell and its pure core.

Events go into `core.step`, effects come out. Everything here is a plain frozen value:
the core never touches a process, a clock or a random source, so the same events always
give the same effects. Times are float seconds of the shell's monotonic clock.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from sediment.runtime.pid import Pid
from sediment.supervision.spec import ShutdownMode

ChildKey = Hashable  # a static child's spec id, or a DynId for simple_one_for_one


@dataclass(frozen=True, order=True)
class DynId:
    """Key of one simple_one_for_one child (which_children shows its id as None, as OTP)."""

    n: int

    def __repr__(self) -> str:
        return f"DynId({self.n})"


# ---- start outcomes (what the child's start function returned) ----------------------


@dataclass(frozen=True)
class StartOk:
    pid: Pid


@dataclass(frozen=True)
class StartIgnore:
    """The start function returned `ignore`: no process, the spec may be kept."""


@dataclass(frozen=True)
class StartError:
    reason: Any


IGNORE = StartIgnore()
StartOutcome = StartOk | StartIgnore | StartError


# ---- events ----------------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """Start the static children left to right (the tail of OTP's init/1)."""


@dataclass(frozen=True)
class StartResult:
    """Outcome of the pending SpawnChild; must be the very next event after it."""

    id: ChildKey
    outcome: StartOutcome


@dataclass(frozen=True)
class TerminateResult:
    """How a child stopped by StopChild/StopChildren died (the reason of its DOWN)."""

    id: ChildKey
    pid: Pid
    reason: Any


@dataclass(frozen=True)
class ChildExit:
    """An EXIT signal from a linked process (unknown pids are ignored, as in OTP)."""

    pid: Pid
    reason: Any
    now: float


@dataclass(frozen=True)
class RetryRestart:
    """OTP's try_again_restart cast, or a backoff timer firing. Stale ones are ignored."""

    id: ChildKey
    now: float


@dataclass(frozen=True)
class StopRequest:
    """Stop the children in reverse start order, then exit with `reason`."""

    reason: Any


@dataclass(frozen=True)
class StartChildCall:
    """A ChildSpec (static strategies) or a tuple of extra args (simple_one_for_one)."""

    spec_or_args: Any
    reply_to: Any


@dataclass(frozen=True)
class TerminateChildCall:
    """By child id, or by pid for simple_one_for_one."""

    id_or_pid: Any
    reply_to: Any


@dataclass(frozen=True)
class RestartChildCall:
    id: ChildKey
    reply_to: Any


@dataclass(frozen=True)
class DeleteChildCall:
    id: ChildKey
    reply_to: Any


@dataclass(frozen=True)
class WhichChildrenCall:
    reply_to: Any


@dataclass(frozen=True)
class CountChildrenCall:
    reply_to: Any


Event = (
    Start
    | StartResult
    | TerminateResult
    | ChildExit
    | RetryRestart
    | StopRequest
    | StartChildCall
    | TerminateChildCall
    | RestartChildCall
    | DeleteChildCall
    | WhichChildrenCall
    | CountChildrenCall
)


# ---- effects ---------------------------------------------------------------------


@dataclass(frozen=True)
class SpawnChild:
    """Spawn and link `fn(*args)`; feed back StartResult(id, ...) before anything else."""

    id: ChildKey
    fn: Callable[..., Any]
    args: tuple[Any, ...]


@dataclass(frozen=True)
class StopChild:
    """Monitor pid, exit(pid, shutdown) and wait `shutdown` s, then kill ("brutal_kill":
    kill at once; "infinity": wait forever). Feed back TerminateResult before anything else."""

    id: ChildKey
    pid: Pid
    shutdown: ShutdownMode


@dataclass(frozen=True)
class StopChildren:
    """simple_one_for_one: signal all at once, one shared timer; one TerminateResult each."""

    children: tuple[tuple[ChildKey, Pid], ...]
    shutdown: ShutdownMode


@dataclass(frozen=True)
class Reply:
    reply_to: Any
    value: Any


@dataclass(frozen=True)
class Schedule:
    """Deliver `event` to this supervisor's mailbox after `delay` s (0: a cast to self).

    `event.now` holds the due time; the shell should restamp it with its clock on delivery.
    """

    delay: float
    event: RetryRestart


@dataclass(frozen=True)
class Report:
    """A log report: child_terminated, start_error, shutdown_error,
    reached_max_restart_intensity or restart_backoff."""

    kind: str
    data: Mapping[str, Any]


@dataclass(frozen=True)
class Exit:
    """The supervisor terminates with `reason`; its children are already stopped."""

    reason: Any


Effect = SpawnChild | StopChild | StopChildren | Reply | Schedule | Report | Exit

__all__ = [
    "IGNORE",
    "ChildExit",
    "ChildKey",
    "CountChildrenCall",
    "DeleteChildCall",
    "DynId",
    "Effect",
    "Event",
    "Exit",
    "Reply",
    "Report",
    "RestartChildCall",
    "RetryRestart",
    "Schedule",
    "SpawnChild",
    "Start",
    "StartChildCall",
    "StartError",
    "StartIgnore",
    "StartOk",
    "StartOutcome",
    "StartResult",
    "StopChild",
    "StopChildren",
    "StopRequest",
    "TerminateChildCall",
    "TerminateResult",
    "WhichChildrenCall",
]
