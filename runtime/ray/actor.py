"""`ProcessActor`: one Erlang-style process in one Ray actor.

Async actor, `num_cpus=0`, `max_restarts=0` (the supervisor restarts, not Ray), detached
and named in the `sediment` namespace so any process can find it by pid. Messages,
calls and watches run on the default group's event loop; exit/link/failpoint signals
come in on their own concurrency group (so a flooded mailbox cannot delay a kill) and
are handed to the main loop. After its process ends, the actor answers watchers, then
terminates itself (the runtime never leaves a dead process's actor running).
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from typing import Any

import ray

from ..errors import CallExit, MailboxOverflow, NameTaken
from ..kernel import ProcessFn, SpawnOpts
from ..mailbox import ReorderBuffer
from ..messages import Call, CallRef, MessageSignal, Signal
from ..pid import Pid
from ..process import Process
from ..reasons import NOPROC, Error
from .kernel import RayKernel
from .transport import ACTOR_MAX_CONCURRENCY, ClusterConfig


@ray.remote(num_cpus=0, max_restarts=0, max_concurrency=ACTOR_MAX_CONCURRENCY,
            concurrency_groups={"signals": 100})
class ProcessActor:
    def __init__(self, config: ClusterConfig, node: str, pid_id: str, registry: Any) -> None:
        self.config = config
        self.registry = registry
        me = ray.get_runtime_context().current_actor
        self.pid = Pid(node, pid_id, me)
        self.proc: Process | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reorder: ReorderBuffer | None = None
        self._ended = asyncio.Event()
        self._watch_futs: dict[asyncio.Future[Any], str] = {}  # watch -> watcher id
        self._watch_registered: set[asyncio.Future[Any]] = set()
        self._links_at_exit: frozenset[Pid] = frozenset()
        self._received: Counter[str] = Counter()  # signals in, by kind (see `info`)

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self, fn: ProcessFn, args: tuple[Any, ...], opts: SpawnOpts,
                    parent: Pid | None) -> Pid:
        """Run `fn(ctx, *args)` here. Registers `opts.name` first (NameTaken aborts)."""
        self._loop = asyncio.get_running_loop()
        self._reorder = ReorderBuffer(opts.mailbox_capacity)
        kernel = RayKernel(self.config, self.pid, self.registry, self._inject, self._exited)
        self.kernel = kernel
        if opts.name is not None:
            holder = await self.registry.register.remote(opts.name, self.pid)
            if holder is not None:
                raise NameTaken(opts.name, holder)
        proc = Process(kernel, self.pid, fn, args, opts, parent)
        if opts.name is not None:
            proc.names.append(opts.name)
        self.proc = proc
        kernel.transport.set_net(await self.registry.track.remote(self.pid))
        proc.start(self._loop)
        return self.pid

    def _exited(self, proc: Process, reason: Any) -> None:
        """Answer the watchers, let `run()` return, and schedule the actor's own end."""
        self._links_at_exit = frozenset(proc.links)
        for fut, watcher_id in self._watch_futs.items():
            if not fut.done():
                registered = fut in self._watch_registered
                fut.set_result(self._answer_watch(watcher_id, registered))
        self._watch_futs.clear()
        assert self._loop is not None
        self._ended.set()
        self._loop.call_later(self.config.reap_delay, self._reap)

    def _reap(self) -> None:
        ray.get_runtime_context().current_actor.__ray_terminate__.remote()

    async def run(self) -> tuple[Any, Any]:
        """Wait for the process to end: (exit reason, return value)."""
        await self._ended.wait()
        assert self.proc is not None
        return self.proc.exit_reason, _portable(self.proc.result)

    async def watch(self, watcher_id: str, seq: int) -> tuple[Any, int]:
        """Resolves when the process ends: (reason, last seq it sent to the watcher).

        The watch takes its place in the watcher's ordered stream, so a message sent after
        `monitor()` cannot end the process before the monitor is in place.
        """
        proc = self.proc
        if proc is None or not proc.alive:
            return self._answer_watch(watcher_id, registered=False)
        fut = asyncio.get_running_loop().create_future()
        self._watch_futs[fut] = watcher_id
        self._accept(watcher_id, seq, _WatchRegistration(fut))
        result: tuple[Any, int] = await fut
        return result

    def _answer_watch(self, watcher_id: str, registered: bool) -> tuple[Any, int]:
        """What a watcher learns: the real reason if it watched (or was linked) in time."""
        proc = self.proc
        last = self.kernel.transport.last_seq(watcher_id) if proc is not None else 0
        if proc is not None and (registered or any(p.id == watcher_id
                                                   for p in self._links_at_exit)):
            return proc.exit_reason, last
        return NOPROC, last

    async def ping(self) -> str:
        return "pong"

    async def info(self) -> dict[str, Any]:
        """What runs here, for operators matching OS processes to Sediment processes."""
        proc = self.proc
        return {"os_pid": os.getpid(), "pid": repr(self.pid),
                "label": proc.label if proc is not None else None,
                "received": dict(self._received.most_common(RECEIVED_KINDS)),
                "names": list(proc.names) if proc is not None else [],
                "alive": proc is not None and proc.alive}

    @ray.method(concurrency_group="signals")
    async def set_net(self, rules: Any) -> None:
        """The runtime's network faults, clock skews or failpoints armed everywhere
        changed (see `BatchingTransport`)."""
        loop = self._loop
        if loop is not None and self.proc is not None:
            loop.call_soon_threadsafe(self._set_net, rules)

    def _set_net(self, rules: Any) -> None:
        self.kernel.transport.set_net(rules)
        if self.proc is not None:
            self.proc.everywhere_changed()  # a failpoint released everywhere lets go here

    # --- incoming traffic --------------------------------------------------------------------

    async def deliver(self, sender: str, seq: int, sig: Signal) -> None:
        self._accept(sender, seq, sig)

    async def deliver_batch(self, sender: str, first_seq: int, sigs: list[Signal]) -> None:
        """Several signals from one sender, numbered first_seq, first_seq + 1, ..."""
        for i, sig in enumerate(sigs):
            self._accept(sender, first_seq + i, sig)

    @ray.method(concurrency_group="signals")
    async def signal(self, sender: str, seq: int, sig: Signal) -> None:
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(self._accept, sender, seq, sig)

    async def call_in(self, sender: str, seq: int, request: Any) -> tuple[str, Any]:
        """A call: ("ok", reply) or ("exit", reason) if the process ended first."""
        proc = self.proc
        if proc is None or not proc.alive:
            return "exit", NOPROC
        ref, fut = proc.pending_call()
        self._accept(sender, seq, MessageSignal(Call(CallRef(proc.pid, ref), request)))
        try:
            return "ok", await fut
        except CallExit as exc:
            return "exit", exc.reason
        finally:
            proc.forget_call(ref)

    def _accept(self, sender: str, seq: int, sig: Signal) -> None:
        proc, reorder = self.proc, self._reorder
        if proc is None or reorder is None or not proc.alive:
            return
        self._received[_kind(sig)] += 1
        try:
            ready = reorder.accept(sender, seq, sig)
        except MailboxOverflow as exc:  # the reorder buffer overflowed: the process fails
            proc._finish(Error.from_exception(exc))
            return
        for item in ready:
            self._apply(proc, item)

    def _apply(self, proc: Process, item: Any) -> None:
        if isinstance(item, _WatchRegistration):
            self._watch_registered.add(item.fut)
        else:
            proc.on_signal(item)

    def _inject(self, sender: str, last_seq: int | None, sig: Signal) -> None:
        """A watch fired: deliver the exit after everything the peer sent before it."""
        proc, reorder = self.proc, self._reorder
        if proc is None or reorder is None or not proc.alive:
            return
        if last_seq is None:
            reorder.forget(sender)
            proc.on_signal(sig)
            return
        for item in reorder.after(sender, last_seq, sig):
            self._apply(proc, item)


class _WatchRegistration:
    """A watch, queued in the watcher's ordered stream until its turn."""

    __slots__ = ("fut",)

    def __init__(self, fut: asyncio.Future[Any]) -> None:
        self.fut = fut


RECEIVED_KINDS = 12  # the most frequent kinds `info` reports


def _kind(sig: Signal) -> str:
    """A signal's kind for the counts: a message's type, or its tag if a tagged tuple."""
    if not isinstance(sig, MessageSignal):
        return type(sig).__name__
    payload = sig.payload
    if isinstance(payload, Call):
        payload = payload.request
        prefix = "call:"
    else:
        prefix = ""
    if isinstance(payload, tuple) and payload and isinstance(payload[0], str):
        return prefix + payload[0]
    return prefix + type(payload).__name__


def _portable(value: Any) -> Any:
    """A return value that can travel back to the driver (else its repr)."""
    try:
        ray.cloudpickle.dumps(value)
    except Exception:
        return repr(value)
    return value
