"""Process functions and helpers shared by the backend-parametrized runtime tests.

They live in a module of their own so Ray workers can import them by name.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from sediment.runtime.messages import Call, Cast
from sediment.runtime.process import Process


def eventually(rt: Any, predicate: Callable[[], bool], timeout: float = 20.0,
               step: float = 0.05) -> bool:
    """Poll `predicate` while letting the runtime run (virtual time on sim)."""
    waited = 0.0
    while waited <= timeout:
        if predicate():
            return True
        rt.sleep(step)
        waited += step
    return predicate()


async def echo(ctx: Process) -> None:
    """Replies to calls with ("echo", request); forwards ("ping", to, x) as ("pong", x)."""
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call):
            if msg.request == "crash":
                raise RuntimeError("asked to crash")
            if isinstance(msg.request, tuple) and msg.request[0] == "sleep":
                await ctx.sleep(msg.request[1])
            ctx.reply(msg.from_, ("echo", msg.request))
        elif isinstance(msg, Cast):
            ctx.send(msg.request[0], ("cast", msg.request[1]))
        elif msg == "stop":
            return
        elif isinstance(msg, tuple) and msg[0] == "ping":
            ctx.send(msg[1], ("pong", msg[2]))
        elif isinstance(msg, tuple) and msg[0] == "exit":
            from sediment.runtime.errors import ProcessExit

            raise ProcessExit(msg[1])


async def idle(ctx: Process) -> None:
    """Waits forever for a message it never gets (a target for signals)."""
    await ctx.receive(lambda m: m == "never")


async def trapper(ctx: Process, report_to: Any) -> None:
    """Traps exits and forwards every message it gets to `report_to`."""
    ctx.trap_exit(True)
    while True:
        msg = await ctx.receive()
        ctx.send(report_to, ("got", msg))


async def linking_trapper(ctx: Process, report_to: Any) -> None:
    """Traps exits and forwards every message to `report_to`; a call ("link", pid) links."""
    ctx.trap_exit(True)
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call) and isinstance(msg.request, tuple) and msg.request[0] == "link":
            ctx.link(msg.request[1])
            ctx.reply(msg.from_, "linked")
        else:
            ctx.send(report_to, ("got", msg))


async def collector(ctx: Process) -> None:
    """Keeps every message; a call "get" returns them all."""
    seen: list[Any] = []
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call) and msg.request == "get":
            ctx.reply(msg.from_, list(seen))
        else:
            seen.append(msg)


async def crash_after(ctx: Process, delay: float, reason: Any) -> None:
    await ctx.sleep(delay)
    if reason == "raise":
        raise ValueError("crashed on purpose")
    from sediment.runtime.errors import ProcessExit

    raise ProcessExit(reason)


async def with_failpoint(ctx: Process, report_to: Any) -> str:
    await ctx.receive(lambda m: m == "go")
    ctx.send(report_to, "before")
    await ctx.failpoint("test.point")
    ctx.send(report_to, "after")
    await ctx.receive(lambda m: m == "finish")
    return "finished"


async def sleeper_with_mailbox(ctx: Process) -> None:
    """Never reads its mailbox: a target for overflow."""
    await ctx.sleep(3600)


# Tests whose Ray half adds minutes to CI for code another Ray test already exercises
# run on sim only there; SEDIMENT_RAY_ALL=1 runs them on Ray as well.
RAY_ALL = os.environ.get("SEDIMENT_RAY_ALL") == "1"


def sim_unless_ray_all() -> Any:
    """`@sim_unless_ray_all()` on a test taking `rt`: sim, and ray with SEDIMENT_RAY_ALL=1."""
    import pytest

    return pytest.mark.parametrize("rt", ["sim", "ray"] if RAY_ALL else ["sim"], indirect=True)


async def late_registering(ctx: Process, name: str, point: str, delay: float) -> None:
    """Registers `name` `delay` seconds after it starts (a restart on its way), then
    passes failpoint `point` on every message (the nemesis' arming tests)."""
    await ctx.sleep(delay)
    await ctx.register(name)
    while True:
        await ctx.receive()
        await ctx.failpoint(point)
