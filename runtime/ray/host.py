"""`HostActor`: one Ray actor that runs Sediment processes, as a BEAM node runs Erlang's.

Async actor, `num_cpus=0`, `max_restarts=0` (supervisors restart processes, not Ray),
detached and named in the `sediment` namespace. A host of one process (the default for a
spawn) ends itself once that process has ended and its watchers were answered; a named
host ("raft" on n1) lives until it is killed or the runtime shuts down. `ray.kill` of a
host is a node-level crash of everything in it. The process logic lives in `HostKernel`;
this class only turns Ray calls into kernel steps on the actor's event loop.

Messages, calls, spawns and follows run on the default group's event loop; kills, exits,
pauses, failpoints and network rules come in on their own concurrency group (so a
flooded queue cannot delay them) and are handed to the main loop.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from typing import Any

import ray

from ..errors import CallExit
from ..kernel import ProcessFn, SpawnOpts
from ..messages import Call, CallRef, MessageSignal
from ..pid import Pid
from ..reasons import NOPROC
from .channels import Address, Channels
from .kernel import HostKernel
from .transport import (
    ACTOR_MAX_CONCURRENCY,
    CallAnswer,
    CallEnded,
    CallReplied,
    ClusterConfig,
    Item,
    ProcessEnded,
)

RECEIVED_KINDS = 12  # the most frequent signal kinds `info` reports


# ray.remote's overloads omit the actor options (max_concurrency, concurrency_groups)
@ray.remote(num_cpus=0, max_restarts=0, max_concurrency=ACTOR_MAX_CONCURRENCY,  # type: ignore[call-overload]
            concurrency_groups={"signals": 100})
class HostActor:
    def __init__(self, config: ClusterConfig, node: str, host_id: str, name: str | None,
                 registry: Any) -> None:
        self.config = config
        self.node = node
        self.host_id = host_id
        self.name = name
        self.registry = registry
        self.kernel: HostKernel | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._ready: asyncio.Event | None = None  # set once the kernel has its rules
        self._net_pushed = False  # the runtime pushed network rules here (set_net)
        self._received: Counter[str] = Counter()

    async def _kernel(self) -> HostKernel:
        """The kernel, made on the first call that needs it (on the main loop). Callers
        that come while it is being made wait until it has the runtime's network rules
        (the Registry's `follow` often makes it first: a process started meanwhile ran
        before its host knew a failpoint armed everywhere, and passed it)."""
        if self.kernel is None:
            self._loop = asyncio.get_running_loop()
            self._stopped = asyncio.Event()
            self._ready = asyncio.Event()
            me = ray.get_runtime_context().current_actor
            kernel = HostKernel(self.config, self.node, self.host_id, self.name, me,
                                self.registry, self._empty)
            self.kernel = kernel
            rules = await self.registry.host_up.remote(self.host_id)
            if not self._net_pushed:  # a push that came meanwhile is at least as new
                kernel.set_net(rules)
            if self.config.channel_token:
                await self._serve_channels(kernel)
            self._ready.set()
        elif self._ready is not None and not self._ready.is_set():
            await self._ready.wait()
        return self.kernel

    async def _serve_channels(self, kernel: HostKernel) -> None:
        """Listen for peers' direct channels (channels.py); until a peer connects, Ray
        calls carry its traffic."""
        channels = Channels(self.host_id, self.config.channel_token)

        def on_batch(sender: str, first_seq: int, items: list[Item]) -> None:
            self._received["channel"] += 1
            kernel.accept(sender, first_seq, items)

        ip = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        kernel.transport.channel_address = await channels.serve(ip, on_batch)
        kernel.transport.channels = channels

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self, fn: ProcessFn, args: tuple[Any, ...], opts: SpawnOpts,
                    parent: Pid | None) -> Pid:
        """Run `fn(ctx, *args)` here (NameTaken aborts)."""
        kernel = await self._kernel()
        return await kernel.start_here(fn, args, opts, parent)

    def _empty(self) -> None:
        """A host of one process ends a while after it: its watchers are answered by then."""
        if self.name is None and self._loop is not None:
            self._loop.call_later(self.config.reap_delay, self._reap)

    def _reap(self) -> None:
        kernel = self.kernel
        if kernel is None or kernel.procs:
            return
        if self._stopped is not None:
            self._stopped.set()
        kernel.stop_following()
        if kernel.transport.channels is not None:
            kernel.transport.channels.close()
        ray.get_runtime_context().current_actor.__ray_terminate__.remote()

    async def follow(self) -> str:
        """Returns only when this host ends on purpose; fails when it dies."""
        await self._kernel()
        assert self._stopped is not None
        await self._stopped.wait()
        return "stopped"

    async def run(self, pid_id: str) -> ProcessEnded:
        """Wait for a process of this host to end: its exit reason and return value."""
        kernel = await self._kernel()
        return await kernel.wait_ended(pid_id)

    async def processes(self) -> list[Pid]:
        kernel = await self._kernel()
        return [proc.pid for proc in kernel.procs.values() if proc.alive]

    async def alive(self, pid_id: str) -> bool:
        kernel = await self._kernel()
        proc = kernel.procs.get(pid_id)
        return proc is not None and proc.alive

    async def ping(self) -> str:
        return "pong"

    async def info(self) -> dict[str, Any]:
        """What runs here, for operators matching OS processes to Sediment processes."""
        kernel = self.kernel
        procs = list(kernel.procs.values()) if kernel is not None else []
        return {"os_pid": os.getpid(), "host": self.host_id, "name": self.name,
                "labels": [p.label for p in procs], "pids": [repr(p.pid) for p in procs],
                "received": dict(self._received.most_common(RECEIVED_KINDS))}

    async def profile(self, seconds: float, top: int = 40) -> str:
        """Profile this host's event loop (every process in it) for `seconds`: the pstats
        table by cumulative time. For finding where a host spends its CPU (py-spy sees
        Ray's threads too)."""
        import cProfile
        import io
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        await asyncio.sleep(seconds)
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
        return out.getvalue()

    # --- incoming traffic --------------------------------------------------------------------

    async def deliver(self, sender: str, first_seq: int, items: list[Item],
                      channel: Address | None = None) -> None:
        """Signals from `sender`'s host over Ray; `channel`: where that host listens."""
        kernel = self.kernel or await self._kernel()
        self._received["batch"] += 1
        kernel.accept(sender, first_seq, items)
        channels = kernel.transport.channels
        if channel is not None and channels is not None:
            channels.learn(sender, channel)

    @ray.method(concurrency_group="signals")
    async def signal(self, sender: str, seq: int, items: list[Item]) -> None:
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(self._accept_signal, sender, seq, items)

    def _accept_signal(self, sender: str, seq: int, items: list[Item]) -> None:
        if self.kernel is not None:
            self._received["signal"] += 1
            self.kernel.accept(sender, seq, items)

    @ray.method(concurrency_group="signals")
    async def set_net(self, rules: Any) -> None:
        """The runtime's network faults, clock skews or failpoints armed everywhere changed."""
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(self._set_net, rules)

    def _set_net(self, rules: Any) -> None:
        self._net_pushed = True
        if self.kernel is not None:
            self.kernel.set_net(rules)

    async def call_in(self, sender: str, seq: int, dest_id: str,
                      request: Any) -> CallAnswer:
        """A call from the driver: `CallReplied(reply)`, or `CallEnded(reason)` if the
        process ended first. The request keeps its place in the driver's stream to this host."""
        kernel = self.kernel or await self._kernel()
        proc = kernel.procs.get(dest_id)
        if proc is None or not proc.alive:
            # the request's number must still be used up, or the driver's stream to this
            # host would wait for it forever
            kernel.accept(sender, seq, [(dest_id, MessageSignal(None))])
            return CallEnded(NOPROC)
        ref, fut = proc.pending_call()
        kernel.accept(sender, seq, [(dest_id, MessageSignal(Call(CallRef(proc.pid, ref),
                                                                 request)))])
        try:
            return CallReplied(await fut)
        except CallExit as exc:
            return CallEnded(exc.reason)
        finally:
            proc.forget_call(ref)
