"""A process: one running function with a mailbox, links, monitors and timers.

Process code is an `async def fn(ctx, *args)`; `ctx` is the `Process`. The same code runs
on every backend: this class holds the Erlang semantics, the backend's `Kernel` moves
signals between processes. Exit rules:

- `fn` returns: exit reason `normal` (its return value is kept for `Runtime.run`);
- `raise ProcessExit(reason)` or `ctx.exit(ctx.self(), reason)`: that reason;
- any other uncaught exception: `Error(...)`; the process ends (Ray would keep an actor
  alive after a raising method; the runtime does not).

Failpoints and suspension are the `FaultInjection` part of the class (process_faults.py).
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from sediment import log, metrics

from . import signals
from .errors import (
    BadArgument,
    FailpointError,
    MailboxOverflow,
    NoProc,
    ProcessCrashed,
    ProcessExit,
    ReceiveTimeout,
)
from .failpoints import Failpoint
from .kernel import DEFAULT_CALL_TIMEOUT, Kernel, ProcessFn, SpawnOpts
from .mailbox import Mailbox, compile_match
from .messages import (
    Call,
    CallRef,
    Cast,
    Down,
    DownSignal,
    Exit,
    ExitSignal,
    FailpointSignal,
    LinkSignal,
    MessageSignal,
    ReplySignal,
    Signal,
    SuspendSignal,
    UnlinkSignal,
)
from .pid import Pid, Ref
from .process_faults import FaultInjection
from .reasons import KILL, KILLED, NORMAL, Error, kind_of
from .validation import check_name, check_timeout, make_spawn_opts

_TIMED_OUT = object()
_logger = log.get_logger("sediment.runtime")


MIN_TIMER_DELAY = 1e-6  # seconds: above the clock's resolution at any realistic reading


class Process(FaultInjection):
    """The context a process function receives: Erlang's BIFs as methods."""

    def __init__(self, kernel: Kernel, pid: Pid, fn: ProcessFn, args: tuple[Any, ...],
                 opts: SpawnOpts, parent: Pid | None) -> None:
        self.kernel = kernel
        self.pid = pid
        self.parent = parent
        self.label = opts.label or getattr(fn, "__qualname__", "process")
        self._fn = fn
        self._args = args
        self._mailbox = Mailbox(opts.mailbox_capacity)
        self._waiter: asyncio.Future[Any] | None = None
        self.links: dict[Pid, None] = {}
        self.monitors: dict[Ref, Pid] = {}
        self.trap_exit_flag = opts.trap_exit
        self.names: list[str] = []
        self._timers: dict[Ref, asyncio.TimerHandle] = {}
        self._refs = itertools.count(1)
        self._pending_calls: dict[Ref, asyncio.Future[Any]] = {}
        self._failpoints: dict[str, Failpoint] = dict(opts.failpoints)
        self._paused: dict[str, list[asyncio.Future[Any]]] = {}  # by failpoint (tasks too)
        self._suspended: asyncio.Future[Any] | None = None  # set while stopped (SIGSTOP)
        self._deferred_timers: list[tuple[Pid, Any]] = []  # timers that fired while stopped
        self.alive = True
        self.exit_reason: Any = None
        self.result: Any = None
        self._task: asyncio.Task[Any] | None = None
        if opts.link_to is not None:
            self.links[opts.link_to] = None

    def __repr__(self) -> str:
        return f"Process({self.pid}, {self.label})"

    # --- lifecycle --------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> asyncio.Task[Any]:
        """Begin running the process function on `loop`."""
        for peer in self.links:
            self.kernel.watch(self, peer, None)
        self._task = loop.create_task(self._main())
        return self._task

    async def _main(self) -> None:
        log.bind_process(self.pid.node, f"{self.label}{self.pid}")
        try:
            self.result = await self._fn(self, *self._args)
            reason: Any = NORMAL
        except ProcessExit as exc:
            reason = exc.reason
        except asyncio.CancelledError:
            if not self.alive:
                return
            reason = KILLED
        except GeneratorExit:
            raise  # the interpreter is discarding a frozen (crashed) process
        except ProcessCrashed:
            return  # a crash failpoint already ended it
        except BaseException as exc:  # noqa: BLE001 - an uncaught exception ends the process
            reason = Error.from_exception(exc)
            if isinstance(exc, FailpointError):  # an injected fault ended it, not a bug
                _logger.info("process ended by a failpoint", reason=str(reason))
            else:
                _logger.error("process crashed", reason=str(reason), traceback=reason.traceback)
        self._finish(reason)

    def _finish(self, reason: Any) -> None:
        """End the process with `reason`; idempotent. Stops its task if still running."""
        if not self.alive:
            return
        self.alive = False
        self.exit_reason = reason
        metrics.PROCESS_EXITS.inc(tags={"node": self.pid.node, "kind": kind_of(reason)})
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for futs in self._paused.values():
            for fut in futs:
                if not fut.done():
                    fut.cancel()
        if self._suspended is not None and not self._suspended.done():
            self._suspended.cancel()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.cancel()
        self.kernel.exited(self, reason)
        task = self._task
        if (task is not None and not task.done()
                and task is not asyncio.current_task(task.get_loop())):
            task.cancel()

    def _check_alive(self) -> None:
        if not self.alive:
            raise asyncio.CancelledError()

    # --- incoming signals -------------------------------------------------------

    def on_signal(self, sig: Signal) -> None:
        """Apply one signal that arrived from another process (or from the kernel)."""
        if not self.alive:
            return
        if isinstance(sig, MessageSignal):
            self._put(sig.payload)
        elif isinstance(sig, ExitSignal):
            self._on_exit_signal(sig)
        elif isinstance(sig, ReplySignal):
            fut = self._pending_calls.get(sig.ref)
            if fut is not None and not fut.done():
                if sig.failed:
                    fut.set_exception(sig.value)
                else:
                    fut.set_result(sig.value)
        elif isinstance(sig, DownSignal):
            if self.monitors.pop(sig.ref, None) is not None:
                self._put(Down(sig.ref, sig.pid, sig.reason))
        elif isinstance(sig, LinkSignal):
            if sig.sender not in self.links:
                self.links[sig.sender] = None
                self.kernel.watch(self, sig.sender, None)
        elif isinstance(sig, UnlinkSignal):
            if self.links.pop(sig.sender, 0) is None:
                self.kernel.unwatch(self, sig.sender, None)
        elif isinstance(sig, FailpointSignal):
            self._on_failpoint_signal(sig)
        elif isinstance(sig, SuspendSignal):
            self._on_suspend_signal(sig.suspend)

    def _on_exit_signal(self, sig: ExitSignal) -> None:
        action = signals.on_exit_signal(
            reason=sig.reason,
            from_link=sig.from_link,
            link_active=sig.sender in self.links,
            trap_exit=self.trap_exit_flag,
            from_self=sig.sender == self.pid,
        )
        if sig.from_link and not isinstance(action, signals.Drop):
            self.links.pop(sig.sender, None)
        if isinstance(action, signals.Terminate):
            self._finish(action.reason)
        elif isinstance(action, signals.ToMessage):
            self._put(Exit(sig.sender, sig.reason))

    def _put(self, msg: Any) -> None:
        try:
            self._mailbox.put(msg)
        except MailboxOverflow as exc:
            _logger.error("mailbox overflow: process fails", receiver=str(self.pid),
                          capacity=self._mailbox.capacity)
            self._finish(Error.from_exception(exc))
            return
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # --- identity -----------------------------------------------------------------

    def self(self) -> Pid:
        """Erlang's self()."""
        return self.pid

    def make_ref(self) -> Ref:
        return Ref(self.pid.id, next(self._refs))

    def now(self) -> float:
        """The runtime's monotonic clock in seconds (virtual on sim), as this process's
        node reads it: a clock-skew fault shifts one node's clock."""
        return self.kernel.now() + self.kernel.clock_offset(self.pid.node)

    # --- messages -------------------------------------------------------------------

    def send(self, dest: Pid, msg: Any) -> None:
        """Send `msg` to `dest`. Never fails for a dead or unreachable target (Erlang's !).

        Raises UnpicklableMessage (nothing sent) for a message that cannot be serialized.
        """
        if not self.alive:
            return
        if not isinstance(dest, Pid):
            raise BadArgument(f"send needs a Pid, got {dest!r}; resolve names with whereis()")
        if dest == self.pid:
            self._put(msg)
            return
        self.kernel.deliver(self, dest, MessageSignal(msg))

    def cast(self, dest: Pid, request: Any) -> None:
        """gen_server:cast: a `Cast(request)` message."""
        self.send(dest, Cast(request))

    async def receive(self, match: Any = None, timeout: float | None = None) -> Any:
        """Selective receive: the oldest message accepted by `match`.

        `match`: None (any), a type or tuple of types, or a predicate. `timeout` in
        seconds; None waits forever, 0 polls. Raises ReceiveTimeout.
        """
        if self._suspended is not None:
            await self._stay_stopped()
        if match is None and timeout is None and self._mailbox and self.alive:
            return self._mailbox.take_first()  # the common case, kept cheap
        check_timeout(timeout)
        self._check_alive()
        matcher = compile_match(match)
        found, msg = self._mailbox.take(matcher)
        if found:
            return msg
        if timeout == 0:
            raise ReceiveTimeout()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            waiter = loop.create_future()
            self._waiter = waiter
            handle = None if deadline is None else loop.call_at(deadline, _expire, waiter)
            try:
                await waiter
            finally:
                self._waiter = None
                if handle is not None:
                    handle.cancel()
            self._check_alive()
            if self._suspended is not None:
                await self._stay_stopped()
            found, msg = self._mailbox.take(matcher, resume=True)
            if found:
                return msg
            if waiter.result() is _TIMED_OUT:
                raise ReceiveTimeout()

    def receive_all(self, match: Any, limit: int) -> list[Any]:
        """Take every message accepted by `match` already in the mailbox (up to `limit`,
        oldest first) without waiting: how a shell batches what piled up while it worked."""
        matcher = compile_match(match)
        if matcher is None or not self.alive or self._suspended is not None:
            return []
        return list(self._mailbox.take_all(matcher, limit))

    async def call(self, dest: Pid | str, request: Any,
                   timeout: float | None = DEFAULT_CALL_TIMEOUT) -> Any:
        """gen_server:call. Raises CallTimeout, NoProc or CallExit; late replies are dropped."""
        check_timeout(timeout)
        self._check_alive()
        target = await self._resolve(dest)
        started = self.kernel.now()
        reply = await self.kernel.call(self, target, request, timeout)
        if self._suspended is not None:
            await self._stay_stopped()
        metrics.CALL_SECONDS.observe(self.kernel.now() - started, {"node": self.pid.node})
        return reply

    def reply(self, from_: CallRef, value: Any) -> None:
        """Answer a `Call`."""
        if not isinstance(from_, CallRef):
            raise BadArgument(f"reply needs the Call's from_, got {from_!r}")
        if from_.pid == self.pid:
            fut = self._pending_calls.get(from_.ref)
            if fut is not None and not fut.done():
                fut.set_result(value)
            return
        self.kernel.reply(self, from_, value)

    async def _resolve(self, dest: Pid | str) -> Pid:
        if isinstance(dest, Pid):
            return dest
        if isinstance(dest, str):
            pid = await self.kernel.whereis(self, dest)
            if pid is None:
                raise NoProc(f"no process registered as {dest!r}")
            return pid
        raise BadArgument(f"expected a Pid or a registered name, got {dest!r}")

    # used by kernels: a pending call answered through this process
    def pending_call(self) -> tuple[Ref, asyncio.Future[Any]]:
        ref = self.make_ref()
        fut = asyncio.get_running_loop().create_future()
        self._pending_calls[ref] = fut
        return ref, fut

    def forget_call(self, ref: Ref) -> None:
        self._pending_calls.pop(ref, None)

    def fail_pending_calls(self, exc_for: Any) -> None:
        for fut in self._pending_calls.values():
            if not fut.done():
                fut.set_exception(exc_for())
        self._pending_calls.clear()

    # --- timers -----------------------------------------------------------------------

    def send_after(self, delay: float, dest: Pid, msg: Any) -> Ref:
        """Deliver `msg` to `dest` after `delay` seconds, unless cancelled."""
        check_timeout(delay)
        ref = self.make_ref()
        loop = asyncio.get_running_loop()
        self._timers[ref] = loop.call_later(delay, self._fire_timer, ref, dest, msg)
        return ref

    def send_at(self, deadline: float, dest: Pid, msg: Any) -> Ref:
        """Deliver `msg` once this process's clock (`now()`) reads `deadline` or later.

        Why not `send_after(deadline - now())`: a deadline a few ulps ahead would give a
        delay the clock cannot resolve, so the timer would fire with the deadline still
        ahead, and a process that waits for it would re-arm it forever at one instant."""
        delay = deadline - self.now()
        return self.send_after(max(delay, MIN_TIMER_DELAY) if delay > 0 else 0.0, dest, msg)

    def _fire_timer(self, ref: Ref, dest: Pid, msg: Any) -> None:
        if self._timers.pop(ref, None) is not None:
            if self._suspended is not None:
                self._deferred_timers.append((dest, msg))
            else:
                self.send(dest, msg)

    def cancel_timer(self, ref: Ref) -> float | bool:
        """Cancel a timer: the time it had left, or False if it already fired or never was."""
        handle = self._timers.pop(ref, None)
        if handle is None:
            return False
        handle.cancel()
        return max(0.0, handle.when() - asyncio.get_running_loop().time())

    async def sleep(self, seconds: float) -> None:
        """Wait without touching the mailbox (virtual time on sim)."""
        check_timeout(seconds)
        self._check_alive()
        await asyncio.sleep(seconds)
        if self._suspended is not None:
            await self._stay_stopped()

    # --- links, monitors, exits ---------------------------------------------------------

    def link(self, peer: Pid) -> None:
        """Bidirectional link; linking to a process that does not exist gives `noproc`."""
        if not isinstance(peer, Pid):
            raise BadArgument(f"link needs a Pid, got {peer!r}")
        if peer == self.pid or peer in self.links:
            return
        self.links[peer] = None
        self.kernel.deliver(self, peer, LinkSignal(self.pid))
        self.kernel.watch(self, peer, None)

    def unlink(self, peer: Pid) -> None:
        """Remove a link; no exit signal from it arrives after this returns."""
        if self.links.pop(peer, 0) is None:
            self.kernel.deliver(self, peer, UnlinkSignal(self.pid))
            self.kernel.unwatch(self, peer, None)

    def monitor(self, peer: Pid) -> Ref:
        """A `Down(ref, peer, reason)` arrives when `peer` ends (`noproc` if it never lived)."""
        if not isinstance(peer, Pid):
            raise BadArgument(f"monitor needs a Pid, got {peer!r}")
        ref = self.make_ref()
        self.monitors[ref] = peer
        self.kernel.watch(self, peer, ref)
        return ref

    def demonitor(self, ref: Ref, flush: bool = True) -> bool:
        """Stop a monitor; with `flush`, drop a `Down` for it already in the mailbox."""
        peer = self.monitors.pop(ref, None)
        if peer is not None:
            self.kernel.unwatch(self, peer, ref)
        if flush:
            self._mailbox.take(lambda m: isinstance(m, Down) and m.ref == ref)
        return peer is not None

    def trap_exit(self, flag: bool) -> bool:
        """Turn exit signals into `Exit` messages; returns the old value."""
        old, self.trap_exit_flag = self.trap_exit_flag, bool(flag)
        return old

    def exit(self, dest: Pid, reason: Any) -> None:
        """Send an exit signal. `exit(self(), reason)` ends this process (unless trapped)."""
        if not isinstance(dest, Pid):
            raise BadArgument(f"exit needs a Pid, got {dest!r}")
        if dest == self.pid:
            if reason == KILL:
                raise ProcessExit(KILLED)
            if not self.trap_exit_flag:
                raise ProcessExit(reason)
            self._put(Exit(self.pid, reason))
            return
        if reason == KILL:
            self.kernel.kill(self, dest)
            return
        self.kernel.deliver(self, dest, ExitSignal(self.pid, reason, from_link=False))

    # --- processes and names --------------------------------------------------------------

    async def spawn(self, fn: ProcessFn, *args: Any, node: str | None = None,
                    link: bool = False, name: str | None = None, trap_exit: bool = False,
                    mailbox_capacity: int | None = None, label: str | None = None,
                    failpoints: dict[str, Failpoint] | None = None,
                    host: str | None = None) -> Pid:
        """Start a process running `fn(ctx, *args)`; `link=True` is spawn_link. `host`: a
        named host on the node to run in (on Ray a spawn there is an in-memory step when
        this process runs in it), `runtime.validation.OWN` for a host of its own, None
        for the runtime's default."""
        self._check_alive()
        opts = make_spawn_opts(node or self.pid.node, self.pid if link else None, name,
                               trap_exit, mailbox_capacity, label, failpoints, host)
        pid = await self.kernel.spawn(self, fn, args, opts)
        if link and self.alive and pid not in self.links:
            self.links[pid] = None
            self.kernel.watch(self, pid, None)
        return pid

    async def register(self, name: str) -> None:
        """Register this process under `name`; NameTaken if a live process holds it."""
        check_name(name)
        await self.kernel.register(self, name)
        self.names.append(name)

    async def unregister(self, name: str) -> None:
        check_name(name)
        await self.kernel.unregister(self, name)
        if name in self.names:
            self.names.remove(name)

    async def whereis(self, name: str) -> Pid | None:
        check_name(name)
        return await self.kernel.whereis(self, name)


def _expire(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_result(_TIMED_OUT)


__all__ = ["Process", "Call", "Cast", "Exit", "Down"]
