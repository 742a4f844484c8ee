"""Blocking file work (Parquet merges, deletes) off a process's event loop.

A process's mailbox is served by its event loop; a merge that holds the loop for
seconds would also hold every message (lease refreshes included). On a loop with a
thread pool (each Ray actor's) the work runs in a thread. The simulation's loop has no
threads and a virtual clock that stands still while code runs, so there the work runs
inline: nothing else could have happened meanwhile anyway, and runs stay deterministic.
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


__all__ = ["run_blocking"]
