"""Children for supervisor tests (importable by Ray workers)."""

from __future__ import annotations

from typing import Any

from sediment.runtime.errors import ProcessExit
from sediment.runtime.gen_server import GenServer, Stop, serve
from sediment.runtime.messages import Call
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process
from sediment.supervision import ChildSpec, Spawn, start_function


class Worker(GenServer):
    """Reports start and terminate to a collector; does what it is told."""

    async def init(self, ctx: Process, name: str, report_to: Pid | None) -> None:
        self.name, self.report_to = name, report_to
        if report_to is not None:
            ctx.send(report_to, ("started", name, ctx.self()))

    async def handle_call(self, ctx: Process, request: Any, from_: Any) -> Any:
        if request == "crash":
            raise RuntimeError(f"{self.name} asked to crash")
        if request == "stop_normal":
            raise Stop("normal", reply="ok")
        if isinstance(request, tuple) and request[0] == "exit":
            raise Stop(request[1], reply="ok")
        return (self.name, request)

    async def terminate(self, ctx: Process, reason: Any) -> None:
        if self.report_to is not None:
            # when, by the runtime's clock: on Ray two workers' reports come from two
            # hosts, so their arrival order at the collector is not the order they ended
            ctx.send(self.report_to, ("terminated", self.name, reason, ctx.now()))


def worker_spec(name: str, report_to: Pid | None = None, *, restart: str = "permanent",
                shutdown: Any = None, node: str | None = None, significant: bool = False,
                trap_exit: bool = True) -> ChildSpec:
    return ChildSpec(id=name,
                     start=(Spawn(serve, node=node, name=name, trap_exit=trap_exit, label=name),
                            (Worker, name, report_to)),
                     restart=restart,  # type: ignore[arg-type]
                     shutdown=shutdown, significant=significant)


async def stubborn(ctx: Process, report_to: Pid) -> None:
    """Traps exits and ignores the shutdown signal: only a kill ends it."""
    ctx.trap_exit(True)
    ctx.send(report_to, ("started", "stubborn", ctx.self()))
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call):
            ctx.reply(msg.from_, "still here")


async def dynamic_child(ctx: Process, kind: str, n: int) -> None:
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call):
            if msg.request == "crash":
                raise RuntimeError("dynamic crash")
            ctx.reply(msg.from_, (kind, n))


async def exits_after(ctx: Process, delay: float, reason: Any) -> None:
    await ctx.sleep(delay)
    raise ProcessExit(reason)


@start_function
async def flaky_start(ctx: Process, counter_name: str, fail_attempts: tuple[int, ...]) -> Any:
    """Fails the start attempts numbered in `fail_attempts` (counted by a counter process)."""
    counter = await ctx.whereis(counter_name)
    assert counter is not None
    n = await ctx.call(counter, "incr")
    if n in fail_attempts:
        raise RuntimeError(f"start attempt {n} fails on purpose")
    return await ctx.spawn(dynamic_child, "flaky", n, link=True)


async def counter(ctx: Process) -> None:
    n = 0
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call):
            if msg.request == "incr":
                n += 1
            ctx.reply(msg.from_, n)
