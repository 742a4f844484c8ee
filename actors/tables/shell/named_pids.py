"""Calls to registered processes with the pid of each name remembered.

On Ray, a call by name asks the runtime's registry (one Ray actor for the whole
cluster) where the name lives before the call itself: a Ray call per request, to an
actor every host shares. The tables tier called its local metastore member, the raft
members of partitions and the table nodes by name on every transaction step and every
background look, which made each step wait behind the registry. A `NamedPids` keeps
the pid found for each name and calls it directly.

A remembered pid can be stale: its process ended (a crash, a kill, a stop) and a new
one may hold the name now. A call that finds the remembered process gone (`NoProc` or
`CallExit`) forgets it and asks the registry once more: if the name is now held by
another pid, the request goes there (a call by name made just then would have reached
it); if nobody holds it, `NoProc` (what a call by name raises); if the registry still
names the same pid, the error as it came. The retry
can deliver a request twice only when the old process took it and ended before
answering, which a caller that retries on `CallError` (every caller here does) already
allows. Timeouts keep the pid (the process may be slow, not gone).

`of(ctx)` is the memory shared by every process of the caller's host (its kernel: a
Ray host actor, or the whole simulated runtime), so short-lived task and reader
processes start with what the table node already found, and where each raft group's
leader was last found. It lives as long as that
kernel and is not protocol state: forgetting it all only costs registry calls.
"""

from __future__ import annotations

import weakref
from typing import Any

from sediment.runtime.errors import CallExit, NoProc
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

MAX_NAMES = 4_096  # bound: the oldest half is dropped past it


class NamedPids:
    """One process's (or one host's) memory of name -> pid."""

    def __init__(self, known: dict[str, Pid] | None = None) -> None:
        self._pids: dict[str, Pid] = dict(known or {})
        # raft group -> the node whose member last took a request (group_task.py); a
        # hint only: a wrong one costs the "not leader" answer it costs anyway
        self.leaders: dict[str, str] = {}

    def known(self, name: str) -> Pid | None:
        return self._pids.get(name)

    def remember(self, name: str, pid: Pid) -> None:
        if name not in self._pids and len(self._pids) >= MAX_NAMES:
            for old in list(self._pids)[: MAX_NAMES // 2]:
                del self._pids[old]
        self._pids[name] = pid

    def forget(self, name: str, pid: Pid | None = None) -> None:
        """Forget `name` (only if it still maps to `pid`, when one is given)."""
        if pid is None or self._pids.get(name) == pid:
            self._pids.pop(name, None)

    async def whereis(self, ctx: Process, name: str) -> Pid | None:
        pid = self._pids.get(name)
        if pid is None:
            pid = await ctx.whereis(name)
            if pid is not None:
                self.remember(name, pid)
        return pid

    async def call(self, ctx: Process, name: str, request: Any,
                   timeout: float | None) -> Any:
        """`ctx.call(name, request)`, with the registry asked only when needed."""
        pid = self._pids.get(name)
        if pid is not None:
            try:
                return await ctx.call(pid, request, timeout=timeout)
            except (NoProc, CallExit) as err:
                self.forget(name, pid)
                fresh = await self.whereis(ctx, name)
                if fresh is None:  # what a call by name would have raised now
                    raise NoProc(f"no process registered as {name!r}") from err
                if fresh == pid:
                    raise
                return await self._call_fresh(ctx, name, fresh, request, timeout)
        fresh = await self.whereis(ctx, name)
        if fresh is None:
            raise NoProc(f"no process registered as {name!r}")
        return await self._call_fresh(ctx, name, fresh, request, timeout)

    async def _call_fresh(self, ctx: Process, name: str, pid: Pid, request: Any,
                          timeout: float | None) -> Any:
        try:
            return await ctx.call(pid, request, timeout=timeout)
        except (NoProc, CallExit):
            self.forget(name, pid)
            raise


_BY_KERNEL: weakref.WeakKeyDictionary[Any, NamedPids] = weakref.WeakKeyDictionary()


def of(ctx: Process) -> NamedPids:
    """The memory of the caller's host (created on first use)."""
    named = _BY_KERNEL.get(ctx.kernel)
    if named is None:
        named = _BY_KERNEL[ctx.kernel] = NamedPids()
    return named


async def call(ctx: Process, name: str, request: Any, timeout: float | None) -> Any:
    """`ctx.call(name, request, timeout)` through the host's memory of pids."""
    return await of(ctx).call(ctx, name, request, timeout)


__all__ = ["NamedPids", "call", "of"]
