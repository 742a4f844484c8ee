"""The kernel inside one process actor: the `Kernel` interface on real Ray.

Exit notification works in two ways at once. A process that ends on its own answers
every pending `watch` with (reason, last seq it sent to that watcher), so the watcher
delivers the exit after everything sent before it. A process that is killed (ray.kill,
a crashed worker, a lost node) cannot answer; its watchers' `watch` calls fail with
`ActorDiedError`, which they turn into an exit with reason `killed`.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ray
from ray.exceptions import RayActorError

from ..errors import CallExit, CallTimeout, NameTaken, NoProc
from ..failpoints import Failpoint
from ..kernel import ProcessFn, SpawnOpts
from ..messages import CallRef, DownSignal, ExitSignal, ReplySignal, Signal
from ..pid import Pid, Ref
from ..reasons import NOPROC
from .spawning import spawn_async
from .transport import (
    LOST,
    BatchingTransport,
    ClusterConfig,
    call_result,
    classify_death,
    death_error,
)

if TYPE_CHECKING:
    from ..process import Process


CRASH_FLUSH_S = 0.2


class RayKernel:
    """Implements `Kernel` for the one process hosted by a `ProcessActor`."""

    def __init__(self, config: ClusterConfig, me: Pid, registry: Any,
                 inject: Callable[[str, int | None, Signal], None],
                 on_exit: Callable[[Process, Any], None]) -> None:
        self.config = config
        self.me = me
        self.registry = registry
        self.transport = BatchingTransport(config, me.id, me.node)
        self._inject = inject
        self._on_exit = on_exit
        self._watches: dict[tuple[Pid, Ref | None], asyncio.Task[Any]] = {}

    def now(self) -> float:
        return time.monotonic()

    def clock_offset(self, node: str) -> float:
        return self.transport.clock_offset(node)

    def everywhere_failpoint(self, name: str) -> Failpoint | None:
        return self.transport.everywhere_failpoint(name)

    def deliver(self, src: Process, dest: Pid, signal: Signal) -> None:
        self.transport.submit(dest, signal)

    async def call(self, src: Process, dest: Pid, request: Any, timeout: float | None) -> Any:
        ref = self.transport.submit_call(dest, request)
        if ref is None:
            raise NoProc(f"no process {dest}")
        if ref is LOST:  # a network fault dropped the request: only the timeout answers
            if timeout is None:
                await asyncio.get_running_loop().create_future()  # waits forever
            await asyncio.sleep(timeout)
            raise CallTimeout(f"call to {dest} timed out after {timeout} s")
        try:
            status, value = await _await_with_timeout(ref, timeout)
        except TimeoutError:
            raise CallTimeout(f"call to {dest} timed out after {timeout} s") from None
        except RayActorError as exc:
            raise death_error(dest, exc) from None
        return call_result(dest, status, value)

    def reply(self, src: Process, from_: CallRef, value: Any) -> None:
        self.transport.submit(from_.pid, ReplySignal(from_.ref, value))

    async def spawn(self, src: Process | None, fn: ProcessFn, args: tuple[Any, ...],
                    opts: SpawnOpts) -> Pid:
        pid = await spawn_async(self.config, self.registry, fn, args, opts,
                                parent=src.pid if src is not None else None)
        self.transport.remember(pid)
        return pid

    def watch(self, src: Process, peer: Pid, ref: Ref | None) -> None:
        key = (peer, ref)
        if key in self._watches:
            return
        watch_ref = self.transport.submit_watch(peer)  # now: in order with later sends
        self._watches[key] = asyncio.get_running_loop().create_task(
            self._watch(peer, ref, watch_ref))

    async def _watch(self, peer: Pid, ref: Ref | None, watch_ref: Any) -> None:
        last_seq: int | None
        if watch_ref is None:
            reason: Any = NOPROC
            last_seq = None
        else:
            try:
                reason, last_seq = await watch_ref
            except asyncio.CancelledError:
                return
            except RayActorError as exc:
                reason, last_seq = classify_death(exc), None
        self._watches.pop((peer, ref), None)
        sig: Signal = (ExitSignal(peer, reason, from_link=True) if ref is None
                       else DownSignal(ref, peer, reason))
        self._inject(peer.id, last_seq, sig)

    def unwatch(self, src: Process, peer: Pid, ref: Ref | None) -> None:
        task = self._watches.pop((peer, ref), None)
        if task is not None:
            task.cancel()

    async def register(self, src: Process, name: str) -> None:
        holder = await self.registry.register.remote(name, self.me)
        if holder is not None:
            raise NameTaken(name, holder)

    async def unregister(self, src: Process, name: str) -> None:
        await self.registry.unregister.remote(name, self.me)

    async def whereis(self, src: Process | None, name: str) -> Pid | None:
        pid: Pid | None = await self.registry.whereis.remote(name)
        return pid

    def kill(self, src: Process | None, pid: Pid) -> None:
        handle = self.transport.handle(pid)
        if handle is not None:
            ray.kill(handle)

    def crash(self, proc: Process) -> None:
        """Die like a killed OS process: no cleanup code runs. What the process had already
        sent still goes out (Erlang's `!` is done when it returns), so pending batches are
        flushed and the Ray core worker gets a moment to push them."""
        self.transport.flush()
        time.sleep(CRASH_FLUSH_S)
        os._exit(1)

    def exited(self, proc: Process, reason: Any) -> None:
        self.transport.flush()  # what it sent before it ended goes out before its exit
        for task in self._watches.values():
            task.cancel()
        self._watches.clear()
        proc.fail_pending_calls(lambda: CallExit(proc.pid, reason))
        self._on_exit(proc, reason)


async def _await_with_timeout(ref: Any, timeout: float | None) -> Any:
    """Await an ObjectRef, raising TimeoutError after `timeout` s (None: no limit).

    Lighter than asyncio.wait_for (no extra task), which matters on the call path.
    """
    fut = ref.as_future(_internal=True)
    if timeout is None:
        return await fut
    expired = False

    def expire() -> None:
        nonlocal expired
        if not fut.done():
            expired = True
            fut.cancel()

    handle = asyncio.get_running_loop().call_later(timeout, expire)
    try:
        return await fut
    except asyncio.CancelledError:
        if expired:
            raise TimeoutError() from None
        raise
    finally:
        handle.cancel()
