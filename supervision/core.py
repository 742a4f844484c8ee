"""The supervisor's decisions as a pure state machine, with OTP's supervisor.erl semantics.

`step(state, event) -> (state, effects)` decides and the process shell acts. The core
reads no clock and no random source: time comes in event fields, jitter from a seeded
generator kept in the state. The same events therefore always give the same effects.

Multi-step work (restarting a one_for_all set, shutting down, rolling back a failed
init) is a *plan*: a queue of ops run in order. An op that needs the outside world
(spawn or stop a child) emits its effect as the last effect of the step and parks the
plan until the shell feeds the result back, which it must do before any other event.
A plan therefore runs atomically with respect to the mailbox, like OTP's synchronous
restart_multiple_children and terminate_children.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from sediment.runtime.pid import Pid
from sediment.runtime.reasons import KILLED, SHUTDOWN, Shutdown, is_clean_shutdown
from sediment.supervision.backoff import BackoffState, next_delay, next_uniform
from sediment.supervision.errors import InvalidChildSpec, SupervisorProtocolError
from sediment.supervision.protocol import (
    ChildExit,
    ChildKey,
    CountChildrenCall,
    DeleteChildCall,
    DynId,
    Effect,
    Event,
    Exit,
    Reply,
    Report,
    RestartChildCall,
    RetryRestart,
    Schedule,
    SpawnChild,
    Start,
    StartChildCall,
    StartError,
    StartIgnore,
    StartOk,
    StartOutcome,
    StartResult,
    StopChild,
    StopChildren,
    StopRequest,
    TerminateChildCall,
    TerminateResult,
    WhichChildrenCall,
)
from sediment.supervision.spec import ChildSpec, SupFlags, validate_child_spec, validate_child_specs


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


def init(flags: SupFlags, specs: Sequence[ChildSpec], seed: int = 0) -> SupervisorState:
    """Validate the configuration (raises InvalidSupFlags / InvalidChildSpec); start nothing."""
    validate_child_specs(flags, specs)
    if flags.strategy == "simple_one_for_one":
        return SupervisorState(flags, specs[0], {}, rng=seed)
    return SupervisorState(flags, None, {spec.id: Child(spec.id, spec) for spec in specs}, rng=seed)


def step(state: SupervisorState, event: Event) -> tuple[SupervisorState, list[Effect]]:
    """Apply one event. At most one SpawnChild/StopChild/StopChildren comes out, and last."""
    s = state.copy()
    fx: list[Effect] = []
    if s.exited:
        return s, fx
    if s.waiting is not None:
        _on_result(s, event, fx)
    elif not s.started and not isinstance(event, Start):
        raise SupervisorProtocolError(f"the first event must be Start, got {event!r}")
    else:
        _dispatch(s, event, fx)
    _run_plan(s, fx)
    return s, fx


def _dispatch(s: SupervisorState, event: Event, fx: list[Effect]) -> None:
    match event:
        case Start():
            _on_start(s)
        case ChildExit():
            _on_child_exit(s, event, fx)
        case RetryRestart():
            _on_retry(s, event, fx)
        case StopRequest(reason=reason):
            s.plan = _shutdown_plan(s, reason)
        case StartChildCall():
            _on_start_child(s, event, fx)
        case TerminateChildCall():
            _on_terminate_child(s, event, fx)
        case RestartChildCall():
            _on_restart_child(s, event, fx)
        case DeleteChildCall():
            _on_delete_child(s, event, fx)
        case WhichChildrenCall(reply_to=reply_to):
            fx.append(Reply(reply_to, which_children(s)))
        case CountChildrenCall(reply_to=reply_to):
            fx.append(Reply(reply_to, count_children(s)))
        case _:
            raise SupervisorProtocolError(f"no result is awaited, got {event!r}")


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


def _shutdown_plan(s: SupervisorState, reason: Any) -> deque[_Op]:
    """Stop every child in reverse start order (dynamic ones in parallel), then exit."""
    stops: list[_Op] = (
        [_StopDynamic()] if s.template is not None else [_Stop(k) for k in reversed(s.children)]
    )
    return deque([*stops, _Exit(reason)])


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
    value: Any
    match outcome:
        case StartOk(pid=pid):
            _put(s, replace(child, pid=pid))
            value = ("ok", pid)
        case StartIgnore():
            if s.template is None and not child.temporary:
                _put(s, child)
            value = ("ok", None)
        case StartError(reason=reason):
            plain = s.template is not None or _is_already_started(reason)
            value = ("error", reason if plain else (reason, child.spec))
    fx.append(Reply(op.reply_to, value))


def _started_restart_child(
    s: SupervisorState, op: _Start, outcome: StartOutcome, fx: list[Effect]
) -> None:
    value: Any
    match outcome:
        case StartOk(pid=pid):
            _put(s, replace(s.children[op.key], pid=pid))
            value = ("ok", pid)
        case StartIgnore():
            value = ("ok", None)
        case StartError(reason=reason):
            value = ("error", reason)
    fx.append(Reply(op.reply_to, value))


_STARTED = {
    "init": _started_init,
    "restart": _started_restart,
    "start_child": _started_start_child,
    "restart_child": _started_restart_child,
}


def _is_already_started(reason: Any) -> bool:
    return isinstance(reason, tuple) and len(reason) == 2 and reason[0] == "already_started"


# ---- exits and restarts ---------------------------------------------------------------


def _on_start(s: SupervisorState) -> None:
    if s.started:
        raise SupervisorProtocolError("Start was already delivered")
    s.started = True
    s.plan = deque(_Start(key, "init") for key in s.children)


def _on_child_exit(s: SupervisorState, event: ChildExit, fx: list[Effect]) -> None:
    """OTP's do_restart: restart by restart type and reason, else forget the child."""
    key = s.pids.get(event.pid)
    if key is None:
        return  # not a child (or one already stopped): ignored, as OTP
    child = s.children[key]
    clean = is_clean_shutdown(event.reason)
    report = Report("child_terminated", {"id": key, "pid": event.pid, "reason": event.reason})
    if child.spec.restart == "permanent" or (child.spec.restart == "transient" and not clean):
        fx.append(report)
        _put(s, replace(child, pid=None, last_pid=event.pid))
        if s.flags.backoff is None:
            _restart_now(s, key, event.now, fx)
        else:
            _retry_later(s, key, event.now, fx)
        return
    if not clean:
        fx.append(report)
    _del_child(s, key)
    _auto_shutdown(s, child)


def _on_retry(s: SupervisorState, event: RetryRestart, fx: list[Effect]) -> None:
    child = _lookup(s, event.id)
    if child is not None and child.restarting:
        _restart_now(s, event.id, event.now, fx)


def _restart_now(s: SupervisorState, key: ChildKey, now: float, fx: list[Effect]) -> None:
    """Count the restart first (OTP's add_restart); escalate or plan the strategy's restart."""
    s.restarts = _add_restart(s.restarts, now, s.flags.period)
    if len(s.restarts) > s.flags.intensity:
        info = {"id": key, "intensity": s.flags.intensity, "period": s.flags.period}
        fx.append(Report("reached_max_restart_intensity", info))
        _del_child(s, key)
        s.plan = _shutdown_plan(s, SHUTDOWN)
        return
    _put(s, replace(s.children[key], restarting=False))
    affected = _affected(s, key)
    stops = [_Stop(k) for k in reversed(affected) if k != key]
    starts = [
        _Start(k, "restart", now) for k in affected if k == key or not s.children[k].temporary
    ]
    s.plan = deque([*stops, *starts])


def _add_restart(restarts: tuple[float, ...], now: float, period: float) -> tuple[float, ...]:
    """Sliding window, newest first, inclusive edge: keep R while R >= now - period."""
    threshold = now - period
    return (now, *itertools.takewhile(lambda r: r >= threshold, restarts))


def _affected(s: SupervisorState, key: ChildKey) -> list[ChildKey]:
    """The children a restart of `key` stops and starts again, in start order."""
    keys = list(s.children)
    if s.flags.strategy == "one_for_all":
        return keys
    if s.flags.strategy == "rest_for_one":
        return keys[keys.index(key) :]
    return [key]


def _retry_later(s: SupervisorState, key: ChildKey, now: float, fx: list[Effect]) -> None:
    """Mark `key` restarting and schedule RetryRestart: at once (OTP) or after backoff.

    Pending starts of the current restart are dropped; the retry restarts the set again.
    With backoff the affected siblings are stopped now rather than left running alone.
    """
    s.plan.clear()
    child = s.children[key]
    delay = 0.0
    policy = s.flags.backoff
    if policy is not None:
        u, s.rng = next_uniform(s.rng)
        delay, history = next_delay(policy, child.backoff, now, u)
        child = replace(child, backoff=history)
        fx.append(
            Report("restart_backoff", {"id": key, "delay": delay, "failures": history.failures})
        )
        s.plan.extend(_Stop(k) for k in reversed(_affected(s, key)) if k != key)
    _put(s, replace(child, pid=None, restarting=True))
    fx.append(Schedule(delay, RetryRestart(key, now + delay)))


def _auto_shutdown(s: SupervisorState, gone: Child) -> None:
    """A significant child ended by itself: maybe shut the supervisor down (OTP 24+)."""
    mode = s.flags.auto_shutdown
    if mode == "never" or not gone.spec.significant:
        return
    if mode == "all_significant" and any(
        c.spec.significant and (c.pid is not None or c.restarting) for c in s.children.values()
    ):
        return
    s.plan = _shutdown_plan(s, SHUTDOWN)


# ---- API calls -----------------------------------------------------------------------


def _on_start_child(s: SupervisorState, event: StartChildCall, fx: list[Effect]) -> None:
    if s.template is not None:
        _start_dynamic(s, s.template, event, fx)
        return
    spec = event.spec_or_args
    try:
        validate_child_spec(spec, s.flags.auto_shutdown)
    except InvalidChildSpec as exc:
        fx.append(Reply(event.reply_to, ("error", ("invalid_child_spec", str(exc)))))
        return
    old = s.children.get(spec.id)
    if old is not None:
        reason = ("already_started", old.pid) if old.pid is not None else "already_present"
        fx.append(Reply(event.reply_to, ("error", reason)))
        return
    s.plan = deque(
        [_Start(spec.id, "start_child", reply_to=event.reply_to, new=Child(spec.id, spec))]
    )


def _start_dynamic(
    s: SupervisorState, template: ChildSpec, event: StartChildCall, fx: list[Effect]
) -> None:
    extra = event.spec_or_args
    if isinstance(extra, list):
        extra = tuple(extra)
    if not isinstance(extra, tuple):
        fx.append(Reply(event.reply_to, ("error", ("invalid_args", extra))))
        return
    key = DynId(s.next_dyn)
    s.next_dyn += 1
    child = Child(key, template.with_extra_args(extra))
    s.plan = deque([_Start(key, "start_child", reply_to=event.reply_to, new=child)])


def _on_terminate_child(s: SupervisorState, event: TerminateChildCall, fx: list[Effect]) -> None:
    """Static: by id, the spec is kept (not for temporary). simple_one_for_one: by pid."""
    target = event.id_or_pid
    if s.template is None:
        child = _lookup(s, target)
        key = None if child is None else child.key
    elif isinstance(target, Pid):
        key = s.pids[target] if target in s.pids else _find_restarting(s, target)
    else:
        fx.append(Reply(event.reply_to, ("error", "simple_one_for_one")))
        return
    if key is None:
        fx.append(Reply(event.reply_to, ("error", "not_found")))
        return
    s.plan = deque([_Stop(key), _Reply(event.reply_to, "ok")])


def _find_restarting(s: SupervisorState, pid: Pid) -> ChildKey | None:
    return next((k for k, c in s.children.items() if c.restarting and c.last_pid == pid), None)


def _stopped_child_or_error(s: SupervisorState, key: Any) -> Child | tuple[str, str]:
    """restart_child / delete_child only act on a known, stopped, static child."""
    if s.template is not None:
        return ("error", "simple_one_for_one")
    child = _lookup(s, key)
    if child is None:
        return ("error", "not_found")
    if child.restarting:
        return ("error", "restarting")
    if child.pid is not None:
        return ("error", "running")
    return child


def _on_restart_child(s: SupervisorState, event: RestartChildCall, fx: list[Effect]) -> None:
    found = _stopped_child_or_error(s, event.id)
    if isinstance(found, Child):
        s.plan = deque([_Start(found.key, "restart_child", reply_to=event.reply_to)])
    else:
        fx.append(Reply(event.reply_to, found))


def _on_delete_child(s: SupervisorState, event: DeleteChildCall, fx: list[Effect]) -> None:
    found = _stopped_child_or_error(s, event.id)
    if isinstance(found, Child):
        _remove(s, found.key)
        found_value: Any = "ok"
    else:
        found_value = found
    fx.append(Reply(event.reply_to, found_value))
