"""Checking the arguments of runtime calls at the boundary.

Bad input raises `BadArgument` with one sentence naming the argument, before anything is
sent or spawned.
"""

from __future__ import annotations

from typing import Any

from .errors import BadArgument
from .failpoints import Failpoint
from .kernel import SpawnOpts
from .pid import Pid


def check_timeout(timeout: float | None) -> None:
    if timeout is not None and (not isinstance(timeout, int | float) or timeout < 0):
        raise BadArgument(f"timeout must be None or a number >= 0, got {timeout!r}")


def check_name(name: Any) -> None:
    if not isinstance(name, str) or not name:
        raise BadArgument(f"a registered name must be a non-empty str, got {name!r}")


def make_spawn_opts(node: str, link_to: Pid | None, name: str | None, trap_exit: bool,
                    mailbox_capacity: int | None, label: str | None,
                    failpoints: dict[str, Failpoint] | None,
                    host: str | None = None) -> SpawnOpts:
    """Validate spawn arguments at the boundary."""
    if not isinstance(node, str) or not node:
        raise BadArgument(f"node must be a non-empty str, got {node!r}")
    if name is not None:
        check_name(name)
    if mailbox_capacity is not None and (not isinstance(mailbox_capacity, int)
                                         or mailbox_capacity < 1):
        raise BadArgument(f"mailbox_capacity must be a positive int, got {mailbox_capacity!r}")
    for key, fp in (failpoints or {}).items():
        if not isinstance(fp, Failpoint):
            raise BadArgument(f"failpoint {key!r} must be a Failpoint, got {fp!r}")
    if host is not None:
        check_host(host)
    kwargs: dict[str, Any] = {}
    if mailbox_capacity is not None:
        kwargs["mailbox_capacity"] = mailbox_capacity
    return SpawnOpts(node=node, link_to=link_to, name=name, trap_exit=trap_exit, label=label,
                     failpoints=dict(failpoints or {}), host=host, **kwargs)


OWN = ""  # `host=OWN`: a host of the process's own, whatever the runtime's default


def check_host(host: Any) -> None:
    """A host name: a str of letters, digits, '-' and '_' (or OWN)."""
    if not isinstance(host, str) or not all(c.isalnum() or c in "-_" for c in host):
        raise BadArgument(f"a host must be a name of letters, digits, '-' and '_', got {host!r}")
