"""How a supervisor starts a child.

A child spec's `start` is `(fn, args)`. A plain process function is spawned and linked on
the supervisor's own node. For anything else (another node, a registered name, trapping
exits, or OTP's `ignore`) use a *start function*: `Spawn(...)`, or any async function
decorated with `@start_function` that the supervisor calls in its own process and that
returns the new child's Pid (linked to the supervisor) or `IGNORE`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sediment.runtime.pid import Pid
from sediment.runtime.process import Process
from sediment.supervision.protocol import IGNORE

__all__ = ["IGNORE", "Spawn", "is_start_function", "start_function"]


def start_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark `async def fn(ctx, *args) -> Pid | IGNORE` as a start function."""
    fn.__sediment_start__ = True  # type: ignore[attr-defined]
    return fn


def is_start_function(fn: Any) -> bool:
    return isinstance(fn, Spawn) or bool(getattr(fn, "__sediment_start__", False))


@dataclass(frozen=True)
class Spawn:
    """Start a child by spawn_link of `fn(ctx, *args)` with these options."""

    fn: Callable[..., Any]
    node: str | None = None
    name: str | None = None
    trap_exit: bool = False
    label: str | None = None
    host: str | None = None  # a named host on the node to join (see Process.spawn)

    async def __call__(self, ctx: Process, *args: Any) -> Pid:
        return await ctx.spawn(self.fn, *args, node=self.node, link=True, name=self.name,
                               trap_exit=self.trap_exit, label=self.label, host=self.host)
