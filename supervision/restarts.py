"""A child's exit and what follows: restart now (one_for_one, one_for_all,
rest_for_one), later with backoff, or shut the supervisor down when the restart
intensity is exceeded or a significant child ends (auto_shutdown), as OTP does.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import replace
from typing import Any

from sediment.runtime.reasons import SHUTDOWN, is_clean_shutdown
from sediment.supervision.backoff import next_delay, next_uniform
from sediment.supervision.errors import SupervisorProtocolError
from sediment.supervision.protocol import (
    ChildExit,
    ChildKey,
    Effect,
    Report,
    RetryRestart,
    Schedule,
)
from sediment.supervision.state import (
    Child,
    SupervisorState,
    _del_child,
    _Exit,
    _lookup,
    _Op,
    _put,
    _Start,
    _Stop,
    _StopDynamic,
)


def _shutdown_plan(s: SupervisorState, reason: Any) -> deque[_Op]:
    """Stop every child in reverse start order (dynamic ones in parallel), then exit."""
    stops: list[_Op] = (
        [_StopDynamic()] if s.template is not None else [_Stop(k) for k in reversed(s.children)]
    )
    return deque([*stops, _Exit(reason)])


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
