"""The supervisor's call API as plain request values.

Use them with `ctx.call(sup, which_children())` in a process or `rt.call(sup, ...)` from
the driver; replies follow OTP (`("ok", pid)`, `("error", reason)`, lists and dicts).
"""

from __future__ import annotations

from typing import Any

from sediment.runtime.pid import Pid
from sediment.runtime.reasons import NORMAL
from sediment.supervision.spec import ChildSpec

SUP = "$sup"


def start_child(spec_or_args: ChildSpec | tuple[Any, ...]) -> tuple[str, str, Any]:
    """A ChildSpec for static strategies; extra args (a tuple) for simple_one_for_one."""
    return (SUP, "start_child", spec_or_args)


def terminate_child(id_or_pid: Any) -> tuple[str, str, Any]:
    return (SUP, "terminate_child", id_or_pid)


def restart_child(child_id: Any) -> tuple[str, str, Any]:
    return (SUP, "restart_child", child_id)


def delete_child(child_id: Any) -> tuple[str, str, Any]:
    return (SUP, "delete_child", child_id)


def which_children() -> tuple[str, str, None]:
    return (SUP, "which_children", None)


def count_children() -> tuple[str, str, None]:
    return (SUP, "count_children", None)


def stop(reason: Any = NORMAL) -> tuple[str, str, Any]:
    """Stop the supervisor (children first, in reverse start order); replies when done."""
    return (SUP, "stop", reason)


def decode(request: tuple[Any, ...]) -> tuple[str, Any]:
    if len(request) != 3:
        return ("malformed", None)
    return request[1], request[2]


def child_pid(which: list[tuple[Any, Pid | str | None, str]], child_id: Any) -> Pid | None:
    """The pid of `child_id` in a which_children reply (None if not running)."""
    for cid, pid, _ in which:
        if cid == child_id and isinstance(pid, Pid):
            return pid
    return None
