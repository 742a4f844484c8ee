"""The kernel of one host actor: the `Kernel` interface for every process it runs.

A host runs its processes on one event loop, as a BEAM node does. Between two processes
of the host a signal is an in-memory step (`loop.call_soon`, FIFO per pair); to another
host it goes through the `BatchingTransport` and arrives through the receiver's reorder
buffer.

Links, monitors and calls are watch entries kept by the host of the process watched:
`(watcher pid, ref, kind)`. A remote watcher registers with a `WatchSignal` in its own
ordered stream, and a process that ends notifies each watcher in that same stream, after
everything it sent before (an exit never overtakes a message). A call registers itself
when its request arrives and is dropped when the callee replies.

A host that dies cannot notify anyone. So every host keeps one long-running `follow()`
call on each host it talks to: when that call fails (ray.kill, a crashed worker, a lost
node), every watch this host's processes hold on processes there fires with `killed`
(an intended exit, a host reaped after its processes ended: `noproc`), and every call
into it fails.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import ray
from ray.exceptions import RayActorError

from sediment import log

from ..errors import CallExit, CallTimeout, MailboxOverflow, NameTaken, NoProc
from ..failpoints import Failpoint
from ..kernel import ProcessFn, SpawnOpts
from ..mailbox import ReorderBuffer
from ..messages import (
    Call,
    CallRef,
    DownSignal,
    ExitSignal,
    KillSignal,
    MessageSignal,
    ReplySignal,
    Signal,
    UnwatchSignal,
    WatchSignal,
)
from ..pid import Pid, Ref
from ..reasons import KILLED, NOPROC, Error
from ..serialization import decode
from .transport import (
    BatchingTransport,
    ClusterConfig,
    Item,
    ProcessEnded,
    classify_death,
    death_error,
)

if TYPE_CHECKING:
    from ..process import Process

_logger = log.get_logger("sediment.runtime.host")
LINK, MONITOR, CALL = "link", "monitor", "call"
CRASH_FLUSH_S = 0.2
GRAVEYARD_SIZE = 10_000  # ended processes remembered (a late watch learns the real reason)
DEAD_HOSTS_SIZE = 10_000
MAX_CALL_WATCHES = 10_000  # per process: calls it was asked and has not answered itself
REORDER_CAPACITY = 1_000_000  # signals held for a gap, over all senders

Key = tuple[Pid, Ref | None, str]  # (watcher, ref, kind)


@dataclass(frozen=True)
class _Grave:
    """What the host remembers of an ended process: why it ended, which processes it
    was linked to then (a late link from one of them learns the reason, others
    `noproc`), and its function's return value."""

    reason: Any
    links: frozenset[str]
    result: Any


class HostKernel:
    """Implements `Kernel` for every process of one host actor."""

    def __init__(self, config: ClusterConfig, node: str, host_id: str, name: str | None,
                 handle: Any, registry: Any, on_empty: Callable[[], None]) -> None:
        self.config = config
        self.node = node
        self.host_id = host_id
        self.name = name  # a named host ("raft"), None for a host of one process
        self.handle = handle
        self.registry = registry
        self.transport = BatchingTransport(config, host_id, node)
        self.procs: dict[str, Process] = {}
        self._on_empty = on_empty
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reorder = ReorderBuffer(REORDER_CAPACITY)
        # watches on this host's processes: pid id -> entries (insertion ordered)
        self._watchers: dict[str, dict[Key, None]] = {}
        # what this host's processes watch, by watcher: pid id -> (target, ref, kind)
        self._watching: dict[str, dict[tuple[Pid, Ref | None, str], None]] = {}
        # remote watches by the target's host: host id -> (target, watcher, ref, kind)
        self._remote: dict[str, dict[tuple[Pid, Pid, Ref | None, str], None]] = {}
        self._followed: dict[str, asyncio.Task[Any]] = {}
        self._dead_hosts: OrderedDict[str, Any] = OrderedDict()
        # pid id -> (reason, ids of its links at exit, result)
        self._graveyard: OrderedDict[str, _Grave] = OrderedDict()
        self._ended: dict[str, asyncio.Event] = {}
        self._named_hosts: dict[tuple[str, str], Any] = {}  # (node, name) -> host Pid-like

    # --- Kernel: clock, rules ---------------------------------------------------------

    def now(self) -> float:
        return time.monotonic()

    def clock_offset(self, node: str) -> float:
        return self.transport.clock_offset(node)

    def everywhere_failpoint(self, name: str) -> Failpoint | None:
        return self.transport.everywhere_failpoint(name)

    def set_net(self, rules: Any) -> None:
        self.transport.set_net(rules)
        for proc in list(self.procs.values()):
            proc.everywhere_changed()  # a failpoint released everywhere lets go here

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def local(self, pid: Pid) -> bool:
        return pid.host == self.host_id

    # --- starting processes here ------------------------------------------------------------

    async def start_here(self, fn: ProcessFn, args: tuple[Any, ...], opts: SpawnOpts,
                         parent: Pid | None) -> Pid:
        """Run `fn(ctx, *args)` in this host. Registers `opts.name` first (NameTaken
        aborts: nothing starts)."""
        from ..process import Process  # the process module imports the kernel's types

        pid = Pid(self.node, f"{self.host_id}.{next(self._ids)}", self.handle, self.host_id)
        if opts.name is not None:
            holder = await self.registry.register.remote(opts.name, pid)
            if holder is not None:
                raise NameTaken(opts.name, holder)
        proc = Process(self, pid, fn, args, opts, parent)
        if opts.name is not None:
            proc.names.append(opts.name)
        self.procs[pid.id] = proc
        self._ended[pid.id] = asyncio.Event()
        proc.start(self.loop)
        return pid

    async def spawn(self, src: Process | None, fn: ProcessFn, args: tuple[Any, ...],
                    opts: SpawnOpts) -> Pid:
        from .spawning import start_remote

        node = opts.node or self.node
        host = self.config.default_host if opts.host is None else opts.host
        if host and node == self.node and host == self.name:
            return await self.start_here(fn, args, opts, src.pid if src is not None else None)
        return await start_remote(self.config, self.registry, self._named_hosts, fn, args,
                                  opts, src.pid if src is not None else None, node, host)

    # --- Kernel: sending ----------------------------------------------------------------------

    def deliver(self, src: Process | None, dest: Pid, signal: Signal) -> None:
        if self.local(dest):
            self.loop.call_soon(self.arrive, dest.id, signal)
        elif dest.host in self._dead_hosts:
            return  # a message to a host that is gone is lost, as to a dead node
        else:
            self._follow(dest)
            self.transport.submit(dest, signal)

    def reply(self, src: Process, from_: CallRef, value: Any) -> None:
        entries = self._watchers.get(src.pid.id)
        if entries:
            entries.pop((from_.pid, from_.ref, CALL), None)
        self.deliver(src, from_.pid, ReplySignal(from_.ref, value))

    async def call(self, src: Process, dest: Pid, request: Any, timeout: float | None) -> Any:
        if dest.host in self._dead_hosts:
            raise death_error(dest, self._dead_hosts[dest.host])
        if self.local(dest) and dest.id not in self.procs:
            raise NoProc(f"no process {dest}")
        ref, fut = src.pending_call()
        remote = (dest, src.pid, ref, CALL)
        if not self.local(dest):
            self._remote.setdefault(dest.host, {})[remote] = None
        self.deliver(src, dest, MessageSignal(Call(CallRef(src.pid, ref), request)))
        try:
            return await _wait(fut, timeout)
        except TimeoutError:
            raise CallTimeout(f"call to {dest} timed out after {timeout} s") from None
        finally:
            src.forget_call(ref)
            entries = self._remote.get(dest.host)
            if entries is not None:
                entries.pop(remote, None)

    # --- Kernel: links and monitors -----------------------------------------------------------

    def watch(self, src: Process, peer: Pid, ref: Ref | None) -> None:
        kind = LINK if ref is None else MONITOR
        self._watching.setdefault(src.pid.id, {})[(peer, ref, kind)] = None
        if self.local(peer):
            if peer.id in self.procs:
                self._watchers.setdefault(peer.id, {})[(src.pid, ref, kind)] = None
            else:
                self.loop.call_soon(self._notify, peer, src.pid, ref, kind,
                                    self._late_reason(peer.id, src.pid, kind))
            return
        dead = self._dead_hosts.get(peer.host)
        if dead is not None:
            self.loop.call_soon(self._notify, peer, src.pid, ref, kind, dead)
            return
        self._remote.setdefault(peer.host, {})[(peer, src.pid, ref, kind)] = None
        self._follow(peer)
        self.transport.submit(peer, WatchSignal(src.pid, ref, kind))

    def unwatch(self, src: Process, peer: Pid, ref: Ref | None) -> None:
        kind = LINK if ref is None else MONITOR
        watching = self._watching.get(src.pid.id)
        if watching is not None:
            watching.pop((peer, ref, kind), None)
        self._unwatch(src.pid, peer, ref, kind)

    def _unwatch(self, watcher: Pid, peer: Pid, ref: Ref | None, kind: str) -> None:
        if self.local(peer):
            entries = self._watchers.get(peer.id)
            if entries is not None:
                entries.pop((watcher, ref, kind), None)
            return
        remote = self._remote.get(peer.host)
        if remote is not None and remote.pop((peer, watcher, ref, kind), 0) is None:
            self.transport.submit(peer, UnwatchSignal(watcher, ref, kind))

    # --- Kernel: names ------------------------------------------------------------------------

    async def register(self, src: Process, name: str) -> None:
        holder = await self.registry.register.remote(name, src.pid)
        if holder is not None:
            raise NameTaken(name, holder)

    async def unregister(self, src: Process, name: str) -> None:
        await self.registry.unregister.remote(name, src.pid)

    async def whereis(self, src: Process | None, name: str) -> Pid | None:
        pid: Pid | None = await self.registry.whereis.remote(name)
        return pid

    # --- Kernel: ends ---------------------------------------------------------------------------

    def kill(self, src: Process | None, pid: Pid) -> None:
        """Untrappable: a process with a host of its own goes with its actor (ray.kill);
        one that shares a host ends alone."""
        if self.local(pid):
            proc = self.procs.get(pid.id)
            if proc is not None:
                self.kill_local(proc)
            return
        if pid.host in self._dead_hosts:
            return
        if _shared(pid.host):
            self.transport.submit(pid, KillSignal())
            return
        handle = self.transport.handle(pid)
        if handle is not None:
            ray.kill(handle)

    def kill_local(self, proc: Process) -> None:
        proc._finish(KILLED)

    def crash(self, proc: Process) -> None:
        """Die like a killed OS process. Alone in its host: the actor exits on the spot
        (no cleanup code runs), after what it had sent goes out (Erlang's `!` is done when
        it returns). Sharing a host: only this process ends; the caller unwinds its code."""
        if self.name is None:
            self.transport.flush()
            time.sleep(CRASH_FLUSH_S)
            os._exit(1)
        proc._finish(KILLED)

    def exited(self, proc: Process, reason: Any) -> None:
        """Tell every watcher (in order after what the process sent), forget its own
        watches, free its names."""
        pid = proc.pid
        self.procs.pop(pid.id, None)
        self._graveyard[pid.id] = _Grave(reason, frozenset(p.id for p in proc.links),
                                         _portable(proc.result))
        while len(self._graveyard) > GRAVEYARD_SIZE:
            self._graveyard.popitem(last=False)
        for watcher, ref, kind in self._watchers.pop(pid.id, {}):
            self._notify(pid, watcher, ref, kind, reason)
        for peer, ref, kind in self._watching.pop(pid.id, {}):
            self._unwatch(pid, peer, ref, kind)
        proc.fail_pending_calls(lambda: CallExit(pid, reason))
        if proc.names:
            self.registry.release.remote(pid)
        ended = self._ended.pop(pid.id, None)
        if ended is not None:
            ended.set()
        if not self.procs:
            self._on_empty()

    async def wait_ended(self, pid_id: str) -> ProcessEnded:
        """The exit reason and result of a process of this host, once it has ended."""
        ended = self._ended.get(pid_id)
        if ended is not None:
            await ended.wait()
        grave = self._graveyard.get(pid_id)
        return ProcessEnded(grave.reason, grave.result) if grave is not None else ProcessEnded(
            NOPROC, None)

    # --- arrivals -----------------------------------------------------------------------------

    def accept(self, sender: str, first_seq: int, items: list[Item]) -> None:
        """Signals from another host (or the driver), numbered first_seq, first_seq + 1, ..."""
        if sender in self._dead_hosts:
            return
        reorder = self._reorder
        for i, item in enumerate(items):
            try:
                ready = reorder.accept(sender, first_seq + i, item)
            except MailboxOverflow as exc:  # the receiving process fails
                proc = self.procs.get(item[0])
                if proc is not None:
                    proc._finish(Error.from_exception(exc))
                continue
            for dest_id, sig in ready:
                self.arrive(dest_id, sig)

    def arrive(self, dest_id: str, sig: Signal | bytes) -> None:
        """One signal reaches process `dest_id` of this host (as bytes from another host)."""
        if isinstance(sig, bytes):
            sig = cast(Signal, decode(sig))
        proc = self.procs.get(dest_id)
        if isinstance(sig, MessageSignal):
            payload = sig.payload
            if isinstance(payload, Call) and payload.from_.pid.id != dest_id:
                caller = payload.from_
                if proc is None or not proc.alive:
                    self._notify(self._pid(dest_id), caller.pid, caller.ref, CALL,
                                 self._late_reason(dest_id, caller.pid, CALL))
                    return
                entries = self._watchers.setdefault(dest_id, {})
                entries[(caller.pid, caller.ref, CALL)] = None
                if len(entries) > MAX_CALL_WATCHES:
                    _drop_oldest_call(entries)
        elif isinstance(sig, WatchSignal):
            if proc is not None and proc.alive:
                self._watchers.setdefault(dest_id, {})[(sig.watcher, sig.ref, sig.kind)] = None
            else:
                self._notify(self._pid(dest_id), sig.watcher, sig.ref, sig.kind,
                             self._late_reason(dest_id, sig.watcher, sig.kind))
            return
        elif isinstance(sig, UnwatchSignal):
            watchers = self._watchers.get(dest_id)
            if watchers is not None:
                watchers.pop((sig.watcher, sig.ref, sig.kind), None)
            return
        elif isinstance(sig, KillSignal):
            if proc is not None:
                self.kill_local(proc)
            return
        if proc is not None:
            proc.on_signal(sig)

    def _pid(self, pid_id: str) -> Pid:
        return Pid(self.node, pid_id, self.handle, self.host_id)

    def _late_reason(self, pid_id: str, watcher: Pid, kind: str) -> Any:
        """Why a process that already ended ended, as a watch arriving now learns it: the
        real reason for a process that was linked to the watcher, else `noproc`."""
        grave = self._graveyard.get(pid_id)
        if grave is not None and kind == LINK and watcher.id in grave.links:
            return grave.reason
        if grave is not None and kind == CALL:
            return grave.reason
        return NOPROC

    def _notify(self, peer: Pid, watcher: Pid, ref: Ref | None, kind: str, reason: Any) -> None:
        """`peer` ended with `reason`: the signal `watcher` gets for its watch."""
        sig: Signal
        if kind == LINK:
            sig = ExitSignal(peer, reason, from_link=True)
        elif kind == MONITOR:
            assert ref is not None
            sig = DownSignal(ref, peer, reason)
        else:
            assert ref is not None
            sig = ReplySignal(ref, death_error(peer, reason), failed=True)
        if self.local(watcher):
            self.loop.call_soon(self.arrive, watcher.id, sig)
        elif watcher.node != "driver":
            self.deliver(None, watcher, sig)

    # --- hosts that die ---------------------------------------------------------------------

    def _follow(self, peer: Pid) -> None:
        """Start following `peer`'s host (once): its death fires this host's watches."""
        host = peer.host
        if host in self._followed or host == self.host_id or not host:
            return
        handle = self.transport.handle(peer)
        if handle is None:
            self._host_died(host, NOPROC)
            return
        self._followed[host] = self.loop.create_task(self._follow_host(host, handle))

    async def _follow_host(self, host: str, handle: Any) -> None:
        try:
            await handle.follow.remote()
            reason: Any = NOPROC  # it stopped on purpose
        except asyncio.CancelledError:
            return
        except RayActorError as exc:
            reason = classify_death(exc)
        except Exception:  # noqa: BLE001 - any other failure: the host is unreachable
            reason = KILLED
        self._host_died(host, reason)

    def _host_died(self, host: str, reason: Any) -> None:
        self._dead_hosts[host] = reason
        while len(self._dead_hosts) > DEAD_HOSTS_SIZE:
            self._dead_hosts.popitem(last=False)
        self._followed.pop(host, None)
        self._reorder.forget(host)
        self.transport.forget(host)
        for key in [k for k, h in self._named_hosts.items() if h[0] == host]:
            del self._named_hosts[key]
        for target, watcher, ref, kind in self._remote.pop(host, {}):
            watching = self._watching.get(watcher.id)
            if watching is not None:
                watching.pop((target, ref, kind), None)
            self._notify(target, watcher, ref, kind, reason)

    def host_gone(self, host: str) -> bool:
        return host in self._dead_hosts

    def stop_following(self) -> None:
        for task in self._followed.values():
            task.cancel()
        self._followed.clear()


def _shared(host: str) -> bool:
    """Whether a host id names a shared (named) host: see `spawning.new_host_id`."""
    return "~" in host


def _drop_oldest_call(entries: dict[Key, None]) -> None:
    for key in entries:
        if key[2] == CALL:
            del entries[key]
            return


async def _wait(fut: asyncio.Future[Any], timeout: float | None) -> Any:
    """Await a future, raising TimeoutError after `timeout` s (None: no limit); lighter
    than asyncio.wait_for (no extra task), which matters on the call path."""
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


def _portable(value: Any) -> Any:
    """A return value that can travel back to the driver (else its repr)."""
    if value is None or isinstance(value, int | float | str | bytes | bool):
        return value
    try:
        ray.cloudpickle.dumps(value)  # type: ignore[no-untyped-call]
    except Exception:
        return repr(value)
    return value


__all__ = ["CALL", "LINK", "MONITOR", "HostKernel"]

