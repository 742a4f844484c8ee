"""gen_server: the request/reply server behaviour on top of a process.

Subclass `GenServer`, override the callbacks you need, and spawn it with
`ctx.spawn(serve, MyServer, *args)` (or use `MyServer.child_spec(...)` under a
supervisor). As in OTP:

- `handle_call` returns the reply (or `NOREPLY` and answers later with `ctx.reply`);
- raising `Stop(reason)` from a callback ends the server cleanly with that reason;
- an uncaught exception ends it with `Error(...)` after `terminate` ran;
- when the server traps exits, an exit signal from its parent ends it with the
  parent's reason (the way supervisors shut their children down).
"""

from __future__ import annotations

from typing import Any

from .errors import ProcessExit
from .messages import Call, Cast, Exit
from .messages import CallRef as From
from .process import Process
from .reasons import NORMAL, Error


class _NoReply:
    def __repr__(self) -> str:
        return "NOREPLY"


NOREPLY: Any = _NoReply()


class Stop(Exception):
    """Raise from a callback to stop the server with `reason` (after replying `reply`)."""

    def __init__(self, reason: Any = NORMAL, reply: Any = NOREPLY) -> None:
        super().__init__(reason)
        self.reason = reason
        self.reply = reply


class GenServer:
    """Base class: every callback has a sensible default."""

    async def init(self, ctx: Process, *args: Any) -> None:
        """Set up state; runs before the first message is handled."""

    async def handle_call(self, ctx: Process, request: Any, from_: From) -> Any:
        raise Stop(("bad_call", request))

    async def handle_cast(self, ctx: Process, request: Any) -> None:
        raise Stop(("bad_cast", request))

    async def handle_info(self, ctx: Process, msg: Any) -> None:
        """Any other message (timers, Exit/Down when trapping or monitoring)."""

    async def terminate(self, ctx: Process, reason: Any) -> None:
        """Last words; runs on a clean stop, on an error, and on the parent's exit signal."""


async def serve(ctx: Process, cls: type[GenServer], *args: Any) -> Any:
    """The gen_server loop: the process entry function for a `GenServer` subclass."""
    server = cls()
    await server.init(ctx, *args)
    reason: Any = NORMAL
    try:
        while True:
            msg = await ctx.receive()
            if isinstance(msg, Call):
                try:
                    reply = await server.handle_call(ctx, msg.request, msg.from_)
                except Stop as stop:
                    if stop.reply is not NOREPLY:
                        ctx.reply(msg.from_, stop.reply)
                    raise
                if reply is not NOREPLY:
                    ctx.reply(msg.from_, reply)
            elif isinstance(msg, Cast):
                await server.handle_cast(ctx, msg.request)
            elif _is_parent_exit(ctx, msg):
                reason = msg.reason
                break
            else:
                await server.handle_info(ctx, msg)
    except Stop as stop:
        reason = stop.reason
    except ProcessExit as exit_:
        reason = exit_.reason
    except Exception as exc:
        reason = Error.from_exception(exc)
        await server.terminate(ctx, reason)
        raise
    await server.terminate(ctx, reason)
    if reason != NORMAL:
        raise ProcessExit(reason)
    return None


def _is_parent_exit(ctx: Process, msg: Any) -> bool:
    return isinstance(msg, Exit) and ctx.trap_exit_flag and msg.pid == ctx.parent
