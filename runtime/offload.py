"""Blocking work (Parquet merges, deletes, snapshot encoding) off a process's event loop.

A process's mailbox is served by its event loop; work that holds the loop for seconds
would also hold every message (lease refreshes, raft heartbeats included). On a loop
with a thread pool (each Ray actor's) the work runs in a thread. The simulation's loop
has no threads and a virtual clock that stands still while code runs, so there the
work runs inline: nothing else could have happened meanwhile anyway, and runs stay
deterministic.

Only code that releases the GIL often (SQLite reads, small Python steps, C calls on
small pieces) gains from a thread: one long C call (a `json.dumps` of megabytes) holds
the GIL and so the loop as surely as running it there.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import TypeVar

from sediment.runtime.sim.loop import SimUnsupported

T = TypeVar("T")


async def run_blocking(fn: Callable[..., T], *args: object) -> T:
    """`fn(*args)` in the loop's default thread pool, or inline on the simulation loop."""
    loop = asyncio.get_running_loop()
    try:
        future = loop.run_in_executor(None, functools.partial(fn, *args))
    except SimUnsupported:
        return fn(*args)
    return await future


def submit_blocking(fn: Callable[[], T], done: Callable[[T | None, BaseException | None], None]
                    ) -> None:
    """Run `fn()` in the loop's thread pool and call `done(result, None)` (or
    `done(None, error)`) back on the loop; on the simulation loop both happen now,
    before this returns (a synchronous caller keeps its exact order of effects there)."""
    loop = asyncio.get_running_loop()
    try:
        future = loop.run_in_executor(None, fn)
    except SimUnsupported:
        try:
            result = fn()
        except Exception as err:  # handed to `done`, as a thread's would be
            done(None, err)
            return
        done(result, None)
        return

    def finished(f: asyncio.Future[T]) -> None:
        error = f.exception() if not f.cancelled() else asyncio.CancelledError()
        done(None if error is not None else f.result(), error)

    future.add_done_callback(finished)


__all__ = ["run_blocking", "submit_blocking"]
