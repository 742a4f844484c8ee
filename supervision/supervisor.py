"""The supervisor process: a thin shell that feeds events to the pure core and acts.

It traps exits, turns mailbox messages into core events (a child's EXIT, an API call,
a scheduled retry, its parent's exit signal), and executes the effects: spawn and link a
child, stop one (monitor, `shutdown` exit signal, wait, then kill), reply, schedule, log.
Results of spawning and stopping go straight back into the core before any other
message, as OTP's synchronous restarts require.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import Any

from sediment import log, metrics
from sediment.runtime.common_calls import UnknownRequest
from sediment.runtime.core_driver import CoreDriver
from sediment.runtime.errors import ProcessExit, ReceiveTimeout
from sediment.runtime.messages import Call, CallRef, Down, Exit
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process
from sediment.runtime.reasons import KILL, SHUTDOWN, Error
from sediment.supervision import core
from sediment.supervision import protocol as p
from sediment.supervision import requests as rq
from sediment.supervision.spec import ChildSpec, ShutdownMode, SupFlags, validate_child_specs
from sediment.supervision.starting import IGNORE, is_start_function

_logger = log.get_logger("sediment.supervision")


@dataclass(frozen=True)
class _Scheduled:
    """A core `Schedule` effect coming due in the supervisor's own mailbox."""

    event: p.RetryRestart


async def supervisor(ctx: Process, flags: SupFlags, specs: list[ChildSpec],
                     report_to: Pid | None = None, seed: int = 0) -> None:
    """Process entry: supervise `specs` under `flags` until stopped or escalating."""
    driver: CoreDriver[core.SupervisorState, p.Event, p.Effect] = CoreDriver(
        ctx, core.step, core.init(flags, specs, seed))
    ctx.trap_exit(True)
    shell = _Shell(ctx, report_to)
    driver.on(p.SpawnChild, shell.spawn_child)
    driver.on(p.StopChild, shell.stop_child)
    driver.on(p.StopChildren, shell.stop_children)
    driver.on(p.Reply, lambda effect: ctx.reply(effect.reply_to, effect.value))
    driver.on(p.Schedule, lambda effect: driver.arm_after(effect.delay,
                                                          _Scheduled(effect.event)))
    driver.on(p.Report, shell.report)
    driver.on(p.Exit, shell.exit)
    driver.post(p.Start())
    await driver.serve(shell.events)


class _Shell:
    def __init__(self, ctx: Process, report_to: Pid | None) -> None:
        self.ctx = ctx
        self.report_to = report_to
        self.stop_waiters: list[CallRef] = []

    async def events(self, msg: Any) -> list[p.Event]:
        event = self._event(msg)
        return [] if event is None else [event]

    def _event(self, msg: Any) -> p.Event | None:
        ctx = self.ctx
        if isinstance(msg, Exit):
            if msg.pid == ctx.parent:
                return p.StopRequest(msg.reason)
            return p.ChildExit(msg.pid, msg.reason, ctx.now())
        if isinstance(msg, _Scheduled):
            return replace(msg.event, now=ctx.now())
        if isinstance(msg, Call):
            return self._api(msg)
        if not isinstance(msg, Down):  # Downs of already-stopped children are expected
            _logger.warning("supervisor got an unexpected message", message=repr(msg))
        return None

    def _api(self, call: Call) -> p.Event | None:
        match call.request:
            case rq.StopSupervisor(reason=reason):
                self.stop_waiters.append(call.from_)
                return p.StopRequest(reason)
            case rq.StartChild(spec_or_args=spec_or_args):
                return p.StartChildCall(spec_or_args, call.from_)
            case rq.TerminateChild(id_or_pid=id_or_pid):
                return p.TerminateChildCall(id_or_pid, call.from_)
            case rq.RestartChild(id=child_id):
                return p.RestartChildCall(child_id, call.from_)
            case rq.DeleteChild(id=child_id):
                return p.DeleteChildCall(child_id, call.from_)
            case rq.WhichChildren():
                return p.WhichChildrenCall(call.from_)
            case rq.CountChildren():
                return p.CountChildrenCall(call.from_)
        self.ctx.reply(call.from_, UnknownRequest.of(call.request))
        return None

    # effects; a spawn's or a stop's result is the event the core must see next

    async def spawn_child(self, effect: p.SpawnChild) -> p.Event:
        return p.StartResult(effect.id, await self._spawn(effect))

    async def stop_child(self, effect: p.StopChild) -> p.Event:
        reasons = await self._stop([effect.pid], effect.shutdown)
        return p.TerminateResult(effect.id, effect.pid, reasons[effect.pid])

    async def stop_children(self, effect: p.StopChildren) -> list[p.Event]:
        reasons = await self._stop([pid for _, pid in effect.children], effect.shutdown)
        return [p.TerminateResult(key, pid, reasons[pid]) for key, pid in effect.children]

    def exit(self, effect: p.Exit) -> None:
        for waiter in self.stop_waiters:
            self.ctx.reply(waiter, "ok")
        raise ProcessExit(effect.reason)

    async def _spawn(self, effect: p.SpawnChild) -> p.StartOutcome:
        try:
            if is_start_function(effect.fn):
                got = await effect.fn(self.ctx, *effect.args)
                if got is IGNORE or isinstance(got, p.StartIgnore):
                    return p.IGNORE
                if not isinstance(got, Pid):
                    return p.StartError(("bad_start_return", repr(got)))
                return p.StartOk(got)
            pid = await self.ctx.spawn(effect.fn, *effect.args, link=True,
                                       label=str(effect.id))
            return p.StartOk(pid)
        except Exception as exc:  # noqa: BLE001 - a failed start is data for the core
            return p.StartError(Error.from_exception(exc))

    async def _stop(self, pids: list[Pid], shutdown: ShutdownMode) -> dict[Pid, Any]:
        """OTP's shutdown: monitor, unlink, signal, wait for DOWN (kill at the deadline)."""
        ctx = self.ctx
        refs = {ctx.monitor(pid): pid for pid in pids}
        for pid in pids:
            ctx.unlink(pid)
            ctx.exit(pid, KILL if shutdown == "brutal_kill" else SHUTDOWN)
        reasons: dict[Pid, Any] = {}
        timeout = None if shutdown in ("brutal_kill", "infinity") else float(shutdown)
        deadline = None if timeout is None else ctx.now() + timeout
        killed = False
        while len(reasons) < len(pids):
            left = None if deadline is None else max(0.0, deadline - ctx.now())
            try:
                down = await ctx.receive(lambda m: isinstance(m, Down) and m.ref in refs,
                                         timeout=left)
            except ReceiveTimeout:
                if killed:  # a kill is always answered; keep waiting for it
                    deadline = None
                    continue
                for pid in pids:
                    if pid not in reasons:
                        ctx.exit(pid, KILL)
                killed, deadline = True, None
                continue
            reasons[refs[down.ref]] = down.reason
        for pid in pids:  # an EXIT that raced the unlink holds the real reason (unlink_flush)
            with contextlib.suppress(ReceiveTimeout):
                queued = await ctx.receive(
                    lambda m, pid=pid: isinstance(m, Exit) and m.pid == pid, timeout=0)
                reasons[pid] = queued.reason
        return reasons

    def report(self, effect: p.Report) -> None:
        metrics.SUPERVISOR_EVENTS.inc(tags={"kind": effect.kind})
        level = "info" if effect.kind in ("child_terminated", "restart_backoff") else "error"
        getattr(_logger, level)("supervisor report", kind=effect.kind,
                                **{k: repr(v) for k, v in effect.data.items()})
        if self.report_to is not None:
            self.ctx.send(self.report_to, rq.SupervisorReport(self.ctx.self(), effect.kind,
                                                              dict(effect.data)))


async def start_link(ctx: Process, flags: SupFlags, specs: list[ChildSpec], *,
                     node: str | None = None, name: str | None = None,
                     report_to: Pid | None = None, timeout: float = 120.0,
                     host: str | None = None) -> Pid:
    """Start a supervisor linked to the caller; returns once all its children started
    (`host`: a named host on `node` to run in, see Process.spawn).

    Bad flags or specs raise InvalidSupFlags / InvalidChildSpec here, before anything
    is spawned. A child that fails to start makes the supervisor exit; the caller gets
    that exit (CallExit here, and the link's exit signal).
    """
    validate_child_specs(flags, specs)
    pid = await ctx.spawn(supervisor, flags, list(specs), report_to, node=node, name=name,
                          link=True, label="supervisor", host=host)
    await ctx.call(pid, rq.WhichChildren(), timeout=timeout)
    return pid


def start_top(rt: Any, flags: SupFlags, specs: list[ChildSpec], *, name: str = "top",
              node: str | None = None, report_to: Pid | None = None,
              timeout: float = 120.0) -> Pid:
    """Start the cluster's top supervisor from the driver, registered under `name`."""
    validate_child_specs(flags, specs)
    pid: Pid = rt.spawn(supervisor, flags, list(specs), report_to, node=node, name=name,
                        label=f"supervisor:{name}")
    rt.call(pid, rq.WhichChildren(), timeout=timeout)
    return pid
