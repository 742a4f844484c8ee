"""One driver that runs a pure `step(state, event) -> (state, effects)` core in a process.

Every protocol in Sediment is a pure core with a thin process shell around it. Each shell
used to write its own pump (step, execute the effects in order, feed the outcomes of
that execution back as events, then wait for the mailbox); six copies of that loop
differed only in small, unintended ways. This module is the one pump, in the spirit of
etcd-io/raft's `RawNode`/`Ready`: the shell keeps only what is its own (turning mailbox
messages into events, and carrying out each effect type).

- `on(EffectType, handler)`: how the shell carries out one effect type. A handler may be
  sync or async and returns None, one follow-up event or a list of them (the outcome of
  the work: a call's reply, a written file, a spawned child).
- `step(event)`: one core step; its effects run in order; follow-up events are queued,
  not stepped (a shell that must answer a call before the follow-ups runs them later).
- `execute(effects)`: run effects no step of this driver produced (the core's `start`,
  a retry the shell decides on) as a step's are run; follow-ups are queued.
- `drain()`: step queued events first in, first out until none is left (or `while_`
  turns false): the follow-ups of an effect reach the core before any new message, as
  OTP's synchronous restarts and every phase of a compaction cycle require.
- `serve(to_events)`: the whole process loop for a plain shell: drain, receive one
  message, turn it into events (none, one or several), repeat.
- `after_step(hook)`: what the shell does once a step's effects have all run.
- `arm_at` / `arm_after`: a timer for the core, through the process context: the
  message comes back to the shell's own mailbox at the deadline.

An effect type with no handler is an error (`UnhandledEffect`), never silently dropped.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Generic, TypeVar, cast

from .errors import RuntimeErrorBase
from .process import Process

S = TypeVar("S")  # the core's state
E = TypeVar("E")  # the core's events
F = TypeVar("F")  # the core's effects
X = TypeVar("X")  # one effect type

Follow = Any  # None, one event, or a list of events
Handler = Callable[[Any], "Follow | Awaitable[Follow]"]


class UnhandledEffect(RuntimeErrorBase):
    """The core returned an effect type the shell registered no handler for."""


class CoreDriver(Generic[S, E, F]):
    """Owns a core's state and runs its steps; see the module docstring."""

    def __init__(self, ctx: Process, step: Callable[[S, E], tuple[S, Iterable[F]]],
                 state: S) -> None:
        self.ctx = ctx
        self.state = state
        self._step = step
        self._handlers: dict[type, Handler] = {}
        self._queue: deque[E] = deque()
        self._after_step: Callable[[list[F]], None] | None = None

    def on(self, kind: type[X], handler: Callable[[X], Follow | Awaitable[Follow]]) -> None:
        """Carry out effects of type `kind` (or a subclass) with `handler`."""
        if kind in self._handlers:
            raise ValueError(f"a handler for {kind.__name__} is already registered")
        self._handlers[kind] = cast(Handler, handler)

    def ignore(self, *kinds: type) -> None:
        """Effects of these types need nothing done by this shell."""
        for kind in kinds:
            self.on(kind, _nothing)

    def after_step(self, hook: Callable[[list[F]], None]) -> None:
        """Call `hook(effects)` once every step's effects have run (a shell that hands
        what the effects queued to a waiting caller)."""
        self._after_step = hook

    def post(self, *events: E) -> None:
        """Queue events for the next `drain`."""
        self._queue.extend(events)

    @property
    def pending(self) -> int:
        """How many events are queued."""
        return len(self._queue)

    async def step(self, event: E) -> list[F]:
        """Step the core once and run its effects in order; returns the effects.
        Follow-up events are queued for `drain`."""
        self.state, produced = self._step(self.state, event)
        effects = list(produced)
        await self.execute(effects)
        if self._after_step is not None:
            self._after_step(effects)
        return effects

    async def execute(self, effects: Iterable[F]) -> None:
        """Run `effects` in order with their handlers; queue their follow-up events."""
        for effect in effects:
            follow = self._handler(effect)(effect)
            if inspect.isawaitable(follow):
                follow = await follow
            if follow is None:
                continue
            if isinstance(follow, list):
                self._queue.extend(follow)
            else:
                self._queue.append(follow)

    async def drain(self, while_: Callable[[], bool] | None = None) -> None:
        """Step queued events FIFO until none is left or `while_()` is false."""
        while self._queue and (while_ is None or while_()):
            await self.step(self._queue.popleft())

    async def run(self, *events: E) -> None:
        """Queue `events` and drain."""
        self.post(*events)
        await self.drain()

    async def serve(self, to_events: Callable[[Any], Awaitable[Iterable[E]]],
                    receive: Callable[[], Awaitable[Any]] | None = None) -> None:
        """The process loop: drain, then receive one message and queue the events
        `to_events` makes of it (it also answers calls that need no core); forever,
        until a handler or `to_events` raises (a process exit included). `receive`:
        how the next message is taken (default: the oldest in the mailbox)."""
        take = receive if receive is not None else self.ctx.receive
        while True:
            await self.drain()
            self.post(*await to_events(await take()))

    def arm_at(self, deadline: float, msg: Any) -> None:
        """Deliver `msg` to this process at `deadline` (its clock)."""
        self.ctx.send_at(deadline, self.ctx.self(), msg)

    def arm_after(self, delay: float, msg: Any) -> None:
        """Deliver `msg` to this process after `delay` seconds."""
        self.ctx.send_after(delay, self.ctx.self(), msg)

    def _handler(self, effect: F) -> Handler:
        handlers = self._handlers
        for kind in type(effect).__mro__:
            handler = handlers.get(kind)
            if handler is not None:
                return handler
        raise UnhandledEffect(f"no handler for effect {type(effect).__name__}: {effect!r}"[:300])


def _nothing(effect: Any) -> None:
    del effect


__all__ = ["CoreDriver", "UnhandledEffect"]
