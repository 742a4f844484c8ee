"""The environment of the branch tier's flows inside a Sediment process: the runtime's
clock (virtual on sim) and sleep, blocking file work off the event loop where the
runtime has threads (`runtime/offload.py`), and fresh staging tokens.

The clock: the runtime's by default (virtual on sim, monotonic on Ray). With
`wall_clock` it is the wall clock (plus a clock-skew fault's offset): what a cluster
that processes outside the runtime also write to needs (`sediment start`, whose branch
tier the command line reaches over the etcd API), since compaction claims and commit
dates are stored in the KV and compared by every writer, and a monotonic clock means
nothing outside its own machine's boot.

Tokens must never repeat (a token reused after it was dropped could show stale
garbage). On Ray they are uuid4s; with a seed (sim runs that replay byte for byte)
they come from a generator seeded by the seed and the process's own pid, which no
other process (no restart of this one either) has.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from sediment.runtime.offload import run_blocking
from sediment.runtime.process import Process

T = TypeVar("T")


class ProcessEnv:
    def __init__(self, ctx: Process, seed: int | None = None, wall_clock: bool = False) -> None:
        self.ctx = ctx
        self._rng = None if seed is None else random.Random(f"{seed}/{ctx.self()}")
        self.wall_clock = wall_clock

    def now(self) -> float:
        if self.wall_clock:
            return time.time() + self.ctx.kernel.clock_offset(self.ctx.self().node)
        return self.ctx.now()

    async def sleep(self, seconds: float) -> None:
        await self.ctx.sleep(seconds)

    def new_token(self) -> str:
        if self._rng is None:
            return uuid.uuid4().hex
        return f"{self._rng.getrandbits(128):032x}"

    def jitter(self) -> float:
        return self._rng.random() if self._rng is not None else random.random()

    async def blocking(self, fn: Callable[..., T], *args: Any) -> T:
        return await run_blocking(fn, *args)


__all__ = ["ProcessEnv"]
