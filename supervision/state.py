"""What a supervisor knows: its children, the plan it runs, and the queries on them.

`SupervisorState` is the pure core's state (`core.py`); a plan is a queue of the
internal ops below (start, stop, wait for stops, reply, exit), run by `plan.py`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from sediment.runtime.pid import Pid
from sediment.supervision.backoff import BackoffState
from sediment.supervision.errors import SupervisorProtocolError
from sediment.supervision.protocol import (
    ChildKey,
)
from sediment.supervision.spec import ChildSpec, SupFlags


@dataclass(frozen=True)
class Child:
    """One child: its spec and its process. `pid is None` means not running."""

    key: ChildKey
    spec: ChildSpec  # simple_one_for_one: the template with this child's full args
    pid: Pid | None = None
    restarting: bool = False  # a restart failed or waits for backoff; a RetryRestart is due
    last_pid: Pid | None = None  # OTP's {restarting, OldPid}: terminate_child(pid) finds it
    backoff: BackoffState = BackoffState()

    @property
    def temporary(self) -> bool:
        return self.spec.restart == "temporary"


# ---- plan ops (internal) ----------------------------------------------------------

Why = Literal["init", "restart", "start_child", "restart_child"]


@dataclass(frozen=True)
class _Start:
    key: ChildKey
    why: Why
    now: float = 0.0
    reply_to: Any = None
    new: Child | None = None  # start_child: saved only once the start succeeds, as OTP


@dataclass(frozen=True)
class _Stop:
    """Stop the child if it runs, then forget its pid (temporary: forget the child)."""

    key: ChildKey


@dataclass(frozen=True)
class _StopDynamic:
    """simple_one_for_one shutdown: every dynamic child at once."""


@dataclass(frozen=True)
class _AwaitStops:
    remaining: frozenset[ChildKey]


@dataclass(frozen=True)
class _Reply:
    reply_to: Any
    value: Any


@dataclass(frozen=True)
class _Exit:
    reason: Any


_Op = _Start | _Stop | _StopDynamic | _Reply | _Exit


@dataclass
class SupervisorState:
    """All the supervisor knows. `step` never mutates a state it is given."""

    flags: SupFlags
    template: ChildSpec | None  # set iff simple_one_for_one
    children: dict[ChildKey, Child]  # insertion order is start order
    pids: dict[Pid, ChildKey] = field(default_factory=dict)  # running children only
    restarts: tuple[float, ...] = ()  # restart times inside the window, newest first
    rng: int = 0
    next_dyn: int = 0
    started: bool = False
    exited: bool = False
    plan: deque[_Op] = field(default_factory=deque)
    waiting: _Start | _Stop | _AwaitStops | None = None

    def copy(self) -> SupervisorState:
        return replace(
            self, children=dict(self.children), pids=dict(self.pids), plan=deque(self.plan)
        )

    @property
    def idle(self) -> bool:
        """No result is awaited: the shell may deliver the next mailbox event."""
        return self.waiting is None


# ---- queries ------------------------------------------------------------------------


def which_children(s: SupervisorState) -> list[tuple[Any, Pid | str | None, str]]:
    """(id, pid | "restarting" | None, type) in start order; simple_one_for_one ids are None."""
    dynamic = s.template is not None
    return [
        (None if dynamic else key, "restarting" if c.restarting else c.pid, c.spec.type)
        for key, c in s.children.items()
    ]


def count_children(s: SupervisorState) -> dict[str, int]:
    """OTP's count_children: specs, active (running), supervisors, workers."""
    kids = list(s.children.values())
    active = sum(1 for c in kids if c.pid is not None)
    if s.template is not None:
        size = len(kids)
        sups = size if s.template.type == "supervisor" else 0
        return {"specs": 1, "active": active, "supervisors": sups, "workers": size - sups}
    sups = sum(1 for c in kids if c.spec.type == "supervisor")
    return {"specs": len(kids), "active": active, "supervisors": sups, "workers": len(kids) - sups}


# ---- children bookkeeping -------------------------------------------------------------


def _put(s: SupervisorState, child: Child) -> None:
    old = s.children.get(child.key)
    if old is not None and old.pid is not None:
        del s.pids[old.pid]
    s.children[child.key] = child  # an existing key keeps its place in start order
    if child.pid is not None:
        if s.pids.get(child.pid, child.key) != child.key:
            raise SupervisorProtocolError(f"pid {child.pid} already belongs to another child")
        s.pids[child.pid] = child.key


def _remove(s: SupervisorState, key: ChildKey) -> None:
    child = s.children.pop(key)
    if child.pid is not None:
        del s.pids[child.pid]


def _del_child(s: SupervisorState, key: ChildKey) -> None:
    """OTP's del_child: keep the spec without a pid; temporary and dynamic children go."""
    child = s.children[key]
    if child.temporary or s.template is not None:
        _remove(s, key)
    else:
        _put(s, replace(child, pid=None, restarting=False, last_pid=None))


def _lookup(s: SupervisorState, key: Any) -> Child | None:
    try:
        return s.children.get(key)
    except TypeError:  # an unhashable id names no child
        return None
