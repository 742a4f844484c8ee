"""`named_pids`: calls by name that skip the registry once a name's pid is known, and
behave as calls by name when the remembered process is gone (on sim)."""

from __future__ import annotations

from typing import Any

import pytest

from sediment.actors.tables.shell import named_pids
from sediment.actors.tables.shell.named_pids import NamedPids
from sediment.runtime import api
from sediment.runtime.errors import NoProc
from sediment.runtime.messages import Call
from sediment.runtime.process import Process


async def echo(ctx: Process, tag: str) -> None:
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call):
            ctx.reply(msg.from_, (tag, msg.request))


class CountingRegistry:
    """Counts the registry lookups a caller makes (wraps `ctx.whereis`)."""

    def __init__(self, ctx: Process) -> None:
        self.ctx = ctx
        self.lookups = 0
        self._whereis = ctx.whereis

    async def whereis(self, name: str) -> Any:
        self.lookups += 1
        return await self._whereis(name)


async def scenario(ctx: Process, rt_calls: list[Any]) -> list[Any]:
    counting = CountingRegistry(ctx)
    ctx.whereis = counting.whereis  # type: ignore[method-assign]
    named = NamedPids()
    out: list[Any] = []
    first = await ctx.spawn(echo, "first", name="svc")
    out.append(await named.call(ctx, "svc", "a", 5))
    out.append(await named.call(ctx, "svc", "b", 5))
    out.append(("lookups", counting.lookups))  # one lookup for two calls
    ctx.exit(first, "kill")
    await ctx.sleep(0.1)
    with pytest.raises(NoProc):  # gone, nobody holds the name: as a call by name
        await named.call(ctx, "svc", "c", 5)
    assert named.known("svc") is None
    await ctx.spawn(echo, "second", name="svc")
    out.append(await named.call(ctx, "svc", "d", 5))
    second = named.known("svc")
    assert second is not None
    ctx.exit(second, "kill")
    await ctx.sleep(0.1)
    await ctx.spawn(echo, "third", name="svc")
    # the remembered pid is stale, the name held by a new process: the call reaches it
    out.append(await named.call(ctx, "svc", "e", 5))
    out.append(("lookups", counting.lookups))
    # the host's shared memory: another process of the same kernel finds it remembered
    out.append(named_pids.of(ctx) is named_pids.of(ctx))
    return out


def test_calls_skip_the_registry_and_follow_a_restarted_name() -> None:
    rt = api.start("sim", nodes=("n1",), seed=1)
    try:
        out = rt.run(scenario, [], node="n1", timeout=30)
    finally:
        rt.shutdown()
    assert out == [("first", "a"), ("first", "b"), ("lookups", 1), ("second", "d"),
                   ("third", "e"), ("lookups", 4), True]


def test_the_memory_is_bounded() -> None:
    from sediment.runtime.pid import Pid

    named = NamedPids()
    for i in range(named_pids.MAX_NAMES + 10):
        named.remember(f"n{i}", Pid("n1", str(i), None, "h"))
    assert len(named._pids) <= named_pids.MAX_NAMES
    assert named.known(f"n{named_pids.MAX_NAMES + 9}") is not None
