"""A deterministic asyncio event loop with a virtual clock.

Process code is ordinary asyncio (futures, tasks, `asyncio.sleep`, `wait_for`), so the
simulation runs it on a loop whose only sources of events are callbacks the simulation
scheduled itself: no sockets, no threads, no wall clock. Ready callbacks run in FIFO
order; timers in (time, scheduling order). When nothing is ready the clock jumps to the
next timer. Same inputs, same order, every run.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from typing import Any, TypeVar, TypeVarTuple

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")


class SimUnsupported(RuntimeError):
    """Process code used an event-loop feature a simulation cannot offer (I/O, threads)."""


class SimLoop(asyncio.AbstractEventLoop):
    """Just enough of an event loop for asyncio Futures and Tasks, driven step by step."""

    def __init__(self) -> None:
        self._ready: deque[asyncio.Handle] = deque()
        self._timers: list[tuple[float, int, asyncio.TimerHandle]] = []
        self._seq = 0
        self._now = 0.0
        self._closed = False
        self._running = False
        self.errors: list[dict[str, Any]] = []
        self.steps = 0
        self.frozen: set[Any] = set()  # tasks of crashed processes: never resumed

    # --- what Future/Task need ------------------------------------------------------

    def time(self) -> float:
        return self._now

    def call_soon(self, callback: Callable[[*_Ts], object], *args: *_Ts,
                  context: contextvars.Context | None = None) -> asyncio.Handle:
        handle = asyncio.Handle(callback, args, self, context)
        self._ready.append(handle)
        return handle

    def call_later(self, delay: float, callback: Callable[[*_Ts], object],
                   *args: *_Ts,
                   context: contextvars.Context | None = None) -> asyncio.TimerHandle:
        return self.call_at(self._now + max(0.0, delay), callback, *args, context=context)

    def call_at(self, when: float, callback: Callable[[*_Ts], object],
                *args: *_Ts,
                context: contextvars.Context | None = None) -> asyncio.TimerHandle:
        handle = asyncio.TimerHandle(max(when, self._now), callback, args, self, context)
        self._seq += 1
        heapq.heappush(self._timers, (handle.when(), self._seq, handle))
        return handle

    def _timer_handle_cancelled(self, handle: asyncio.TimerHandle) -> None:
        pass  # cancelled timers are skipped when popped

    def create_future(self) -> asyncio.Future[Any]:
        return asyncio.Future(loop=self)

    def create_task(self, coro: Generator[Any, None, _T] | Coroutine[Any, Any, _T], *,
                    name: str | None = None,
                    context: contextvars.Context | None = None) -> asyncio.Task[_T]:
        return asyncio.Task(coro, loop=self, name=name, context=context)

    def get_debug(self) -> bool:
        return False

    def is_running(self) -> bool:
        return self._running

    def is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        self._ready.clear()
        self._timers.clear()

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        msg = context.get("message", "")
        if "Task was destroyed but it is pending" in msg:
            return
        self.errors.append(context)

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        self.call_exception_handler(context)

    # --- driving ------------------------------------------------------------------------

    def next_time(self) -> float | None:
        """When the next event is due (now if something is ready), or None if idle."""
        if self._ready:
            return self._now
        timers = self._timers
        while timers and timers[0][2].cancelled():
            heapq.heappop(timers)
        return timers[0][0] if timers else None

    def run_until(self, done: Callable[[], bool], *, until_time: float | None = None,
                  max_steps: int = 50_000_000) -> bool:
        """Run callbacks until `done()` is true, the clock would pass `until_time`, or
        nothing is left to do. Returns done()."""
        asyncio.events._set_running_loop(self)
        self._running = True
        ready, timers = self._ready, self._timers
        handle: asyncio.Handle
        try:
            steps = 0
            while not done():
                if not ready:
                    while timers and timers[0][2].cancelled():
                        heapq.heappop(timers)
                    if not timers:
                        break
                    when = timers[0][0]
                    if until_time is not None and when > until_time:
                        self._now = until_time
                        break
                    self._now = when
                    while timers and timers[0][0] <= when:
                        handle = heapq.heappop(timers)[2]
                        if not handle.cancelled():
                            ready.append(handle)
                    continue
                handle = ready.popleft()
                if not handle._cancelled:
                    if self.frozen and getattr(handle._callback,  # type: ignore[attr-defined]
                                                      "__self__", None) in self.frozen:
                        continue
                    handle._run()
                steps += 1
                if steps >= max_steps:
                    raise RuntimeError(f"simulation did not settle within {max_steps} steps")
            if until_time is not None and not ready and self._now < until_time and not done():
                self._now = until_time
            self.steps += steps
            return done()
        finally:
            self._running = False
            asyncio.events._set_running_loop(None)

    # --- the rest of the interface is not available in a simulation -----------------------

    def _unsupported(self, *args: Any, **kwargs: Any) -> Any:
        raise SimUnsupported("the simulation loop has no I/O, threads or signals")

    # (assigned, not overridden one by one: mypy cannot match one catch-all to each
    # signature of AbstractEventLoop, hence the ignores)
    run_forever = run_until_complete = stop = shutdown_asyncgens = _unsupported
    call_soon_threadsafe = run_in_executor = set_default_executor = _unsupported  # type: ignore[assignment]
    add_reader = remove_reader = add_writer = remove_writer = _unsupported  # type: ignore[assignment]
    add_signal_handler = remove_signal_handler = _unsupported  # type: ignore[assignment]
    create_connection = create_server = getaddrinfo = getnameinfo = _unsupported
    subprocess_exec = subprocess_shell = sock_connect = sock_recv = sock_sendall = _unsupported
