"""Fault injection inside a process: failpoints (named points that crash, raise or pause
when armed) and suspension (a process stopped as SIGSTOP stops one).

A mixin of `Process` (process.py): the same context object, the concept kept apart from
mailboxes, links and timers. Scenarios arm failpoints by name (here, or everywhere
through the kernel); a paused point goes on when it is disarmed or its time is up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from sediment import log

from .errors import FailpointError, ProcessCrashed
from .failpoints import Failpoint, FailpointHit
from .kernel import Kernel
from .messages import FailpointSignal
from .pid import Pid

if TYPE_CHECKING:
    from .process import Process

_logger = log.get_logger("sediment.runtime")


class FaultInjection:
    """Failpoints and suspension of one process (see the module docstring)."""

    kernel: Kernel
    pid: Pid
    _failpoints: dict[str, Failpoint]
    _paused: dict[str, list[asyncio.Future[Any]]]  # by failpoint (tasks too)
    _suspended: asyncio.Future[Any] | None  # set while stopped (SIGSTOP)
    _deferred_timers: list[tuple[Pid, Any]]  # timers that fired while stopped

    if TYPE_CHECKING:
        def send(self, dest: Pid, msg: Any) -> None: ...

        def _check_alive(self) -> None: ...

    # --- failpoints ------------------------------------------------------------------------

    def _fire(self, name: str) -> Sequence[Failpoint]:
        """What to do at `name`, in order: the failpoint armed everywhere (every time),
        then the one armed here (counted down). Each tells its `notify` pid first."""
        everywhere = self.kernel.everywhere_failpoint(name)
        local = self._failpoints.get(name) if self._failpoints else None
        if everywhere is None and local is None:
            return ()  # the common case: nothing armed
        fired = [] if everywhere is None else [everywhere]
        if local is not None:
            rest = local.consumed()
            if rest is None:
                del self._failpoints[name]
            else:
                self._failpoints[name] = rest
            fired.append(local)
        for fp in fired:
            _logger.info("failpoint fired", failpoint=name, action=fp.action)
            if fp.notify is not None:
                self.send(fp.notify, FailpointHit(fp.tag, name, self.pid, self.kernel.now()))
        return fired

    def failpoint_sync(self, name: str) -> None:
        """A failpoint inside synchronous code (file I/O): `crash` and `raise` only.

        A crash ends the process on the spot (on Ray the OS process exits; on sim the
        process is frozen and `ProcessCrashed` unwinds the synchronous code).
        """
        for fp in self._fire(name):
            if fp.action == "crash":
                self.kernel.crash(cast("Process", self))
                raise ProcessCrashed(name)
            raise FailpointError(f"failpoint {name!r} raised ({fp.action} in synchronous code)")

    async def failpoint(self, name: str) -> None:
        """A named fault-injection point; free when not armed. Armed both everywhere and
        here, both act: the one armed everywhere first (a breakpoint, then what this
        process was armed with)."""
        for fp in self._fire(name):
            await self._act(name, fp)

    def failpoint_due(self, name: str) -> Sequence[Failpoint]:
        """`failpoint` in two halves: what fires at `name` now (counted as fired; empty,
        and free, when nothing is armed), then `await failpoint_act(name, due)` outside
        whatever the caller must not hold across a pause (an open SQLite transaction)."""
        return self._fire(name)

    async def failpoint_act(self, name: str, due: Sequence[Failpoint]) -> None:
        for fp in due:
            await self._act(name, fp)

    async def _act(self, name: str, fp: Failpoint) -> None:
        if fp.action == "crash":
            self.kernel.crash(cast("Process", self))
            raise asyncio.CancelledError()
        if fp.action == "raise":
            raise FailpointError(f"failpoint {name!r} raised")
        fut = asyncio.get_running_loop().create_future()
        waiting = self._paused.setdefault(name, [])
        waiting.append(fut)
        try:
            if fp.seconds is None:
                await fut
            else:
                await asyncio.wait({fut}, timeout=fp.seconds)
        finally:
            waiting.remove(fut)
            if not waiting and self._paused.get(name) is waiting:
                del self._paused[name]

    # --- suspension (a paused process, as SIGSTOP makes one) -------------------------

    def _on_suspend_signal(self, suspend: bool) -> None:
        """Stopped: the process runs no code past its next wait (receive, sleep, call)
        and its timers hold their messages; signals still arrive (a kill still kills).
        Continued: it goes on where it stopped, timers that came due fire now."""
        if suspend and self._suspended is None:
            self._suspended = asyncio.get_running_loop().create_future()
        elif not suspend and self._suspended is not None:
            stopped, self._suspended = self._suspended, None
            if not stopped.done():
                stopped.set_result(None)
            deferred, self._deferred_timers = self._deferred_timers, []
            for dest, msg in deferred:
                self.send(dest, msg)

    async def _stay_stopped(self) -> None:
        while self._suspended is not None:
            await asyncio.shield(self._suspended)
        self._check_alive()

    def _on_failpoint_signal(self, sig: FailpointSignal) -> None:
        if sig.action is None:
            self._failpoints.pop(sig.name, None)
            self._go_on(sig.name)
        else:
            self._failpoints[sig.name] = sig.action

    def everywhere_changed(self) -> None:
        """The failpoints armed everywhere changed: whoever is paused at one that is no
        longer armed, here or everywhere, goes on (its release reached this process)."""
        for name in list(self._paused):
            if name not in self._failpoints and self.kernel.everywhere_failpoint(name) is None:
                self._go_on(name)

    def _go_on(self, name: str) -> None:
        for fut in self._paused.get(name, ()):
            if not fut.done():
                fut.set_result(None)


__all__ = ["FaultInjection"]
