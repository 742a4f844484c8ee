"""The simulation kernel: every process of a cluster in one Python process.

Processes run on a `SimLoop` (virtual time); signals travel through a seeded `Network`
(delay, loss, partitions, node crashes). Links and monitors are watch entries kept
here; when a process ends, its watchers are notified through the network, after
everything it sent them before (per-pair FIFO). A crashed process is frozen: none of
its code runs again, as with a killed OS process.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import re
from typing import Any

from ..errors import BadArgument, CallExit, CallTimeout, NameTaken, NoProc
from ..failpoints import Failpoint
from ..kernel import ProcessFn, SpawnOpts
from ..messages import (
    Call,
    CallRef,
    DownSignal,
    ExitSignal,
    MessageSignal,
    ReplySignal,
    Signal,
)
from ..pid import Pid, Ref
from ..process import Process
from ..reasons import KILLED, NOCONNECTION, NOPROC
from ..serialization import check_serializable
from .loop import SimLoop
from .network import Network

DRIVER = Pid("driver", "0")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")

# Frozen (crashed) tasks are kept here so garbage collection never resumes their code.
_GRAVEYARD: list[asyncio.Task[Any]] = []
_GRAVEYARD_LIMIT = 200_000

LINK, MONITOR, CALL = "link", "monitor", "call"


def _describe(sig: Signal) -> str:
    text = repr(sig.payload) if isinstance(sig, MessageSignal) else repr(sig)
    return _ADDRESS.sub("", text)


def _format_row(row: tuple[Any, ...]) -> str:
    if len(row) == 2:
        return f"{row[0]:.6f} {row[1]}"
    at, src, dest, sig, delay = row
    fate = "lost" if delay is None else f"+{delay:.6f}"
    return f"{at:.6f} send {src}->{dest} {type(sig).__name__} {_describe(sig)} {fate}"


class SimKernel:
    """Implements `Kernel` for all processes of one simulated cluster."""

    def __init__(self, seed: int, nodes: tuple[str, ...], *, trace: bool = True,
                 check_pickle: bool = True, default_host: str | None = None) -> None:
        self.seed = seed
        self.default_host = default_host or ""
        self.nodes = nodes
        self.loop = SimLoop()  # type: ignore[abstract]  # I/O methods it never offers
        self.rng = random.Random(f"sediment-sim-{seed}")
        self.net = Network(random.Random(f"sediment-net-{seed}"))
        self.procs: dict[str, Process] = {}  # by pid id: str hashes are cached
        self.names: dict[str, Pid] = {}
        self.watchers: dict[Pid, dict[tuple[Pid, Ref | None, str], None]] = {}
        self.results: dict[Pid, tuple[Any, Any]] = {}  # pid -> (reason, result) of ended processes
        self._ids = itertools.count(1)
        # per (src, dest): when its last signal arrives, and whether via the timer heap
        self._last_arrival: dict[tuple[str, str], tuple[float, bool]] = {}
        self.exit_waiters: dict[Pid, Any] = {}  # pid -> callback when it ends
        self.trace_enabled = trace
        self._trace_rows: list[tuple[Any, ...]] = []
        self.check_pickle = check_pickle

    # --- Kernel interface ---------------------------------------------------------------

    def now(self) -> float:
        return self.loop.time()

    def clock_offset(self, node: str) -> float:
        return self.net.skew.get(node, 0.0) if self.net.skew else 0.0

    def everywhere_failpoint(self, name: str) -> Failpoint | None:
        return self.net.failpoints.get(name) if self.net.failpoints else None

    def deliver(self, src: Process | None, dest: Pid, signal: Signal) -> None:
        if self.check_pickle and isinstance(signal, MessageSignal):
            check_serializable(signal.payload)
        self._route(src.pid if src is not None else DRIVER, dest, signal)

    async def call(self, src: Process, dest: Pid, request: Any, timeout: float | None) -> Any:
        if self.check_pickle:
            check_serializable(request)
        if dest.id not in self.procs:
            raise NoProc(f"no process {dest}")
        ref, fut = src.pending_call()
        self.watchers.setdefault(dest, {})[(src.pid, ref, CALL)] = None
        self._route(src.pid, dest, MessageSignal(Call(CallRef(src.pid, ref), request)))
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise CallTimeout(f"call to {dest} timed out after {timeout} s") from None
        finally:
            src.forget_call(ref)
            self._unwatch(dest, (src.pid, ref, CALL))

    def reply(self, src: Process, from_: CallRef, value: Any) -> None:
        self._route(src.pid, from_.pid, ReplySignal(from_.ref, value))

    async def spawn(self, src: Process | None, fn: ProcessFn, args: tuple[Any, ...],
                    opts: SpawnOpts) -> Pid:
        return self.spawn_now(src, fn, args, opts)

    def spawn_now(self, src: Process | None, fn: ProcessFn, args: tuple[Any, ...],
                  opts: SpawnOpts) -> Pid:
        node = opts.node or self.nodes[0]
        if node not in self.nodes:
            raise BadArgument(f"unknown node {node!r}; this runtime has {list(self.nodes)}")
        if node in self.net.down:
            raise NoProc(f"node {node} is down")
        host = self.default_host if opts.host is None else opts.host
        pid = Pid(node, str(next(self._ids)), None, host)
        if opts.name is not None:
            holder = self.names.get(opts.name)
            if holder is not None:
                raise NameTaken(opts.name, holder)
        proc = Process(self, pid, fn, args, opts, parent=src.pid if src is not None else None)
        self.procs[pid.id] = proc
        if opts.name is not None:
            self.names[opts.name] = pid
            proc.names.append(opts.name)
        self._trace(f"spawn {pid} {proc.label} parent={proc.parent}")
        proc.start(self.loop)
        return pid

    def watch(self, src: Process, peer: Pid, ref: Ref | None) -> None:
        kind = LINK if ref is None else MONITOR
        if peer.id not in self.procs:
            self._notify(peer, src.pid, ref, kind, NOPROC, direct=True)
            return
        self.watchers.setdefault(peer, {})[(src.pid, ref, kind)] = None

    def unwatch(self, src: Process, peer: Pid, ref: Ref | None) -> None:
        self._unwatch(peer, (src.pid, ref, LINK if ref is None else MONITOR))

    async def register(self, src: Process, name: str) -> None:
        self.register_now(src.pid, name)

    def register_now(self, pid: Pid, name: str) -> None:
        holder = self.names.get(name)
        if holder is not None and holder != pid:
            raise NameTaken(name, holder)
        self.names[name] = pid

    async def unregister(self, src: Process, name: str) -> None:
        if self.names.get(name) == src.pid:
            del self.names[name]

    async def whereis(self, src: Process | None, name: str) -> Pid | None:
        return self.names.get(name)

    def kill(self, src: Process | None, pid: Pid) -> None:
        proc = self.procs.get(pid.id)
        if proc is not None:
            self.crash(proc)

    def crash(self, proc: Process) -> None:
        task = proc._task
        if task is not None and not task.done():
            self.loop.frozen.add(task)
            _GRAVEYARD.append(task)
            if len(_GRAVEYARD) > _GRAVEYARD_LIMIT:
                del _GRAVEYARD[: _GRAVEYARD_LIMIT // 2]
        proc._task = None  # nothing to cancel: the task is frozen
        proc._finish(KILLED)

    def exited(self, proc: Process, reason: Any) -> None:
        pid = proc.pid
        self.procs.pop(pid.id, None)
        waiter = self.exit_waiters.pop(pid, None)
        if waiter is not None:
            waiter()
        self.results[pid] = (reason, proc.result)
        for name in proc.names:
            if self.names.get(name) == pid:
                del self.names[name]
        self._trace(f"exit {pid} {_ADDRESS.sub('', repr(reason))}")
        for watcher, ref, kind in self.watchers.pop(pid, {}):
            self._notify(pid, watcher, ref, kind, reason)

    # --- faults ----------------------------------------------------------------------------

    def partition(self, side_a: list[str], side_b: list[str]) -> None:
        """Cut the nodes apart; links and monitors across the cut fire `noconnection`."""
        self.net.partition(side_a, side_b)
        self._trace(f"partition {side_a} | {side_b}")
        for peer, entries in list(self.watchers.items()):
            for key in list(entries):
                watcher, ref, kind = key
                if not self.net.connected(peer.node, watcher.node) and watcher.node != "driver":
                    del entries[key]
                    self._notify(peer, watcher, ref, kind, NOCONNECTION, direct=True)

    def heal(self) -> None:
        self.net.heal()
        self._trace("heal")

    def kill_node(self, node: str) -> list[Pid]:
        """Crash every process on `node` at the same instant."""
        victims = [p for p in self.procs.values() if p.pid.node == node]
        self._trace(f"kill_node {node}")
        for proc in victims:
            self.crash(proc)
        return [p.pid for p in victims]

    def kill_host(self, node: str, host: str) -> list[Pid]:
        """Crash every process of the named host on `node` at the same instant."""
        victims = [p for p in self.procs.values() if p.pid.node == node and p.pid.host == host]
        self._trace(f"kill_host {node}/{host}")
        for proc in victims:
            self.crash(proc)
        return [p.pid for p in victims]

    # --- internals -------------------------------------------------------------------------

    def _unwatch(self, peer: Pid, key: tuple[Pid, Ref | None, str]) -> None:
        entries = self.watchers.get(peer)
        if entries is not None:
            entries.pop(key, None)
            if not entries:
                del self.watchers[peer]

    def _notify(self, peer: Pid, watcher: Pid, ref: Ref | None, kind: str, reason: Any,
                direct: bool = False) -> None:
        if kind == LINK:
            sig: Signal = ExitSignal(peer, reason, from_link=True)
        elif kind == MONITOR:
            assert ref is not None
            sig = DownSignal(ref, peer, reason)
        else:
            assert ref is not None
            exc = NoProc(f"no process {peer}") if reason == NOPROC else CallExit(peer, reason)
            sig = ReplySignal(ref, exc, failed=True)
        if direct:
            self.loop.call_at(self.now(), self._arrive, peer, watcher, sig, True)
        else:
            self._route(peer, watcher, sig)

    def _route(self, src: Pid, dest: Pid, sig: Signal) -> None:
        if src.node == "driver" or dest.node == "driver":
            delay: float | None = 0.0
        else:
            delay = self.net.route(src.node, dest.node)
            if (delay is None and not isinstance(sig, MessageSignal)
                    and self.net.connected(src.node, dest.node)):
                delay = 0.0  # loss hits messages only: exits, downs, replies are reliable
        loop = self.loop
        now = loop._now
        if self.trace_enabled:
            self._trace_rows.append((now, src, dest, sig, delay))
        if delay is None:
            return
        key = (src.id, dest.id)
        last = self._last_arrival.get(key)
        if delay == 0.0 and (last is None or last[0] < now or not last[1]):
            # nothing of this pair waits in the timer heap: the ready queue keeps FIFO
            if last is None or last[0] != now:
                self._last_arrival[key] = (now, False)
            loop.call_soon(self._arrive, src, dest, sig, False)
            return
        at = now + delay
        if last is not None and at < last[0]:
            at = last[0]
        self._last_arrival[key] = (at, True)
        loop.call_at(at, self._arrive, src, dest, sig, False)

    def _arrive(self, src: Pid, dest: Pid, sig: Signal, direct: bool) -> None:
        if not direct and src.node != "driver" and not self.net.connected(src.node, dest.node):
            self._trace(f"lost-in-flight {src}->{dest} {type(sig).__name__}")
            return
        proc = self.procs.get(dest.id)
        if proc is not None:
            proc.on_signal(sig)

    def _trace(self, line: str) -> None:
        if self.trace_enabled:
            self._trace_rows.append((self.loop.time(), line))

    @property
    def trace(self) -> list[str]:
        """One line per event: spawns, sends (with delay or loss), exits, faults.

        Rows are kept raw and formatted here, so tracing costs little while running.
        """
        return [_format_row(row) for row in self._trace_rows]
