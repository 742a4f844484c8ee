"""Running a plan: ops run in order; one that needs the shell (spawn or stop a child)
emits its effect and parks the plan until the shell feeds the result back, which is
then handled here (a start's outcome by why it was started: init, restart, start_child,
restart_child).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sediment.runtime.pid import Pid
from sediment.runtime.reasons import KILLED, SHUTDOWN, Shutdown, is_clean_shutdown
from sediment.supervision.errors import SupervisorProtocolError
from sediment.supervision.protocol import (
    ChildKey,
    Effect,
    Event,
    Exit,
    Reply,
    Report,
    SpawnChild,
    StartError,
    StartIgnore,
    StartOk,
    StartOutcome,
    StartResult,
    StopChild,
    StopChildren,
    TerminateResult,
)
from sediment.supervision.requests import ChildStarted, SupervisorError
from sediment.supervision.restarts import _retry_later, _shutdown_plan
from sediment.supervision.spec import ChildSpec
from sediment.supervision.state import (
    SupervisorState,
    _AwaitStops,
    _del_child,
    _Exit,
    _put,
    _Reply,
    _Start,
    _Stop,
    _StopDynamic,
)

# ---- the plan runner ------------------------------------------------------------------


def _run_plan(s: SupervisorState, fx: list[Effect]) -> None:
    while s.plan and s.waiting is None:
        match s.plan.popleft():
            case _Start() as op:
                _exec_start(s, op, fx)
            case _Stop(key=key):
                _exec_stop(s, key, fx)
            case _StopDynamic():
                _exec_stop_dynamic(s, fx)
            case _Reply(reply_to=reply_to, value=value):
                fx.append(Reply(reply_to, value))
            case _Exit(reason=reason):
                fx.append(Exit(reason))
                s.exited = True
                s.plan.clear()


def _exec_start(s: SupervisorState, op: _Start, fx: list[Effect]) -> None:
    child = op.new if op.new is not None else s.children[op.key]
    fx.append(SpawnChild(op.key, child.spec.fn, child.spec.args))
    s.waiting = op


def _exec_stop(s: SupervisorState, key: ChildKey, fx: list[Effect]) -> None:
    child = s.children.get(key)
    if child is None:
        return
    if child.pid is None:
        _del_child(s, key)
        return
    fx.append(StopChild(key, child.pid, child.spec.shutdown_mode))
    s.waiting = _Stop(key)


def _exec_stop_dynamic(s: SupervisorState, fx: list[Effect]) -> None:
    assert s.template is not None
    running = tuple((key, c.pid) for key, c in s.children.items() if c.pid is not None)
    if running:
        fx.append(StopChildren(running, s.template.shutdown_mode))
        s.waiting = _AwaitStops(frozenset(key for key, _ in running))


def _on_result(s: SupervisorState, event: Event, fx: list[Effect]) -> None:
    w = s.waiting
    if isinstance(w, _Start) and isinstance(event, StartResult) and event.id == w.key:
        if not _valid_outcome(event.outcome):
            raise SupervisorProtocolError(f"not a start outcome: {event.outcome!r}")
        s.waiting = None
        _STARTED[w.why](s, w, event.outcome, fx)
    elif isinstance(w, _Stop) and isinstance(event, TerminateResult) and event.id == w.key:
        s.waiting = None
        _stopped(s, event, fx)
    elif (
        isinstance(w, _AwaitStops)
        and isinstance(event, TerminateResult)
        and event.id in w.remaining
    ):
        rest = w.remaining - {event.id}
        s.waiting = _AwaitStops(rest) if rest else None
        _stopped(s, event, fx)
    else:
        raise SupervisorProtocolError(f"awaiting the result of {w!r}, got {event!r}")


def _valid_outcome(outcome: object) -> bool:
    if isinstance(outcome, StartOk):
        return isinstance(outcome.pid, Pid)
    return isinstance(outcome, StartIgnore | StartError)


def _stopped(s: SupervisorState, event: TerminateResult, fx: list[Effect]) -> None:
    child = s.children[event.id]
    if child.pid != event.pid:
        raise SupervisorProtocolError(f"TerminateResult for {event.pid}, child runs as {child.pid}")
    if not _clean_stop(child.spec, event.reason):
        fx.append(
            Report("shutdown_error", {"id": event.id, "pid": event.pid, "reason": event.reason})
        )
    _del_child(s, event.id)


def _clean_stop(spec: ChildSpec, reason: Any) -> bool:
    """killed after brutal_kill, shutdown after a timeout; {shutdown,_} and normal too
    unless the child is permanent. Anything else is a shutdown_error report."""
    expected = KILLED if spec.shutdown_mode == "brutal_kill" else SHUTDOWN
    if reason == expected:
        return True
    return spec.restart != "permanent" and is_clean_shutdown(reason)


# ---- start results --------------------------------------------------------------------


def _started_init(s: SupervisorState, op: _Start, outcome: StartOutcome, fx: list[Effect]) -> None:
    match outcome:
        case StartOk(pid=pid):
            _put(s, replace(s.children[op.key], pid=pid))
        case StartIgnore():
            _del_child(s, op.key)
        case StartError(reason=reason):
            fx.append(Report("start_error", {"id": op.key, "reason": reason}))
            s.plan = _shutdown_plan(s, Shutdown(("failed_to_start_child", op.key, reason)))


def _started_restart(
    s: SupervisorState, op: _Start, outcome: StartOutcome, fx: list[Effect]
) -> None:
    match outcome:
        case StartOk(pid=pid):
            _put(s, replace(s.children[op.key], pid=pid, restarting=False, last_pid=None))
        case StartIgnore():
            _del_child(s, op.key)
        case StartError(reason=reason):
            fx.append(Report("start_error", {"id": op.key, "reason": reason}))
            _retry_later(s, op.key, op.now, fx)


def _started_start_child(
    s: SupervisorState, op: _Start, outcome: StartOutcome, fx: list[Effect]
) -> None:
    assert op.new is not None
    child = op.new
    value: ChildStarted | SupervisorError
    match outcome:
        case StartOk(pid=pid):
            _put(s, replace(child, pid=pid))
            value = ChildStarted(pid)
        case StartIgnore():
            if s.template is None and not child.temporary:
                _put(s, child)
            value = ChildStarted(None)
        case StartError(reason=reason):
            plain = s.template is not None or SupervisorError(reason).already_started
            value = SupervisorError(reason if plain else (reason, child.spec))
    fx.append(Reply(op.reply_to, value))


def _started_restart_child(
    s: SupervisorState, op: _Start, outcome: StartOutcome, fx: list[Effect]
) -> None:
    value: ChildStarted | SupervisorError
    match outcome:
        case StartOk(pid=pid):
            _put(s, replace(s.children[op.key], pid=pid))
            value = ChildStarted(pid)
        case StartIgnore():
            value = ChildStarted(None)
        case StartError(reason=reason):
            value = SupervisorError(reason)
    fx.append(Reply(op.reply_to, value))


_STARTED = {
    "init": _started_init,
    "restart": _started_restart,
    "start_child": _started_start_child,
    "restart_child": _started_restart_child,
}

