"""The supervisor API calls a user makes: start_child, terminate_child,
restart_child, delete_child (which_children and count_children are queries in
`state.py`), with OTP's answers and errors.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from sediment.runtime.pid import Pid
from sediment.supervision.errors import InvalidChildSpec
from sediment.supervision.protocol import (
    ChildKey,
    DeleteChildCall,
    DynId,
    Effect,
    Reply,
    RestartChildCall,
    StartChildCall,
    TerminateChildCall,
)
from sediment.supervision.requests import SupervisorError
from sediment.supervision.spec import ChildSpec, validate_child_spec
from sediment.supervision.state import (
    Child,
    SupervisorState,
    _lookup,
    _remove,
    _Reply,
    _Start,
    _Stop,
)

# ---- API calls -----------------------------------------------------------------------


def _on_start_child(s: SupervisorState, event: StartChildCall, fx: list[Effect]) -> None:
    if s.template is not None:
        _start_dynamic(s, s.template, event, fx)
        return
    spec = event.spec_or_args
    try:
        validate_child_spec(spec, s.flags.auto_shutdown)
    except InvalidChildSpec as exc:
        fx.append(Reply(event.reply_to, SupervisorError(("invalid_child_spec", str(exc)))))
        return
    old = s.children.get(spec.id)
    if old is not None:
        reason = ("already_started", old.pid) if old.pid is not None else "already_present"
        fx.append(Reply(event.reply_to, SupervisorError(reason)))
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
        fx.append(Reply(event.reply_to, SupervisorError(("invalid_args", extra))))
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
        fx.append(Reply(event.reply_to, SupervisorError("simple_one_for_one")))
        return
    if key is None:
        fx.append(Reply(event.reply_to, SupervisorError("not_found")))
        return
    s.plan = deque([_Stop(key), _Reply(event.reply_to, "ok")])


def _find_restarting(s: SupervisorState, pid: Pid) -> ChildKey | None:
    return next((k for k, c in s.children.items() if c.restarting and c.last_pid == pid), None)


def _stopped_child_or_error(s: SupervisorState, key: Any) -> Child | SupervisorError:
    """restart_child / delete_child only act on a known, stopped, static child."""
    if s.template is not None:
        return SupervisorError("simple_one_for_one")
    child = _lookup(s, key)
    if child is None:
        return SupervisorError("not_found")
    if child.restarting:
        return SupervisorError("restarting")
    if child.pid is not None:
        return SupervisorError("running")
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
    fx.append(Reply(event.reply_to, "ok" if isinstance(found, Child) else found))
