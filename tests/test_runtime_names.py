"""Name lookups on both backends: a process that looked a name up finds the name's next
holder once the first is gone (no lookup answer outlives its process)."""

from __future__ import annotations

from typing import Any

from runtime_helpers import echo, eventually

from sediment.runtime.pid import Pid
from sediment.runtime.process import Process


async def _lookups(ctx: Process, name: str) -> None:
    """Answers each "where" with its own lookup of `name` (repeated: cached on Ray)."""
    while True:
        msg = await ctx.receive()
        ctx.send(msg[1], ("at", await ctx.whereis(name)))


async def _ask(ctx: Process, looker: Pid) -> Any:
    ctx.send(looker, ("where", ctx.self()))
    return (await ctx.receive(timeout=10))[1]


def test_a_process_that_looked_a_name_up_finds_its_next_holder(rt: Any) -> None:
    first = rt.spawn(echo, name="server", node="n2")
    looker = rt.spawn(_lookups, "server", node="n1")
    assert rt.run(_ask, looker) == first
    assert rt.run(_ask, looker) == first  # the remembered answer
    rt.kill(first)
    assert eventually(rt, lambda: rt.run(_ask, looker) is None)
    second = rt.spawn(echo, name="server", node="n3")
    assert eventually(rt, lambda: rt.run(_ask, looker) == second)
    assert rt.call("server", 1) == ("echo", 1)
