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

Modules: this one is the entry (`init`, `step`) and the dispatch of events; the state
and its queries are `state.py`, running a plan and handling its results `plan.py`,
exits and restarts `restarts.py`, the API calls `calls.py`.
"""

from __future__ import annotations

from collections.abc import Sequence

from sediment.supervision.calls import (
    _on_delete_child,
    _on_restart_child,
    _on_start_child,
    _on_terminate_child,
)
from sediment.supervision.errors import SupervisorProtocolError
from sediment.supervision.plan import _on_result, _run_plan
from sediment.supervision.protocol import (
    ChildExit,
    CountChildrenCall,
    DeleteChildCall,
    Effect,
    Event,
    Reply,
    RestartChildCall,
    RetryRestart,
    Start,
    StartChildCall,
    StopRequest,
    TerminateChildCall,
    WhichChildrenCall,
)
from sediment.supervision.restarts import _on_child_exit, _on_retry, _on_start, _shutdown_plan
from sediment.supervision.spec import ChildSpec, SupFlags, validate_child_specs
from sediment.supervision.state import (
    Child,
    SupervisorState,
    count_children,
    which_children,
)


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

__all__ = ["Child", "SupervisorState", "count_children", "init", "step", "which_children"]
