"""The simulation backend's driver API: synchronous calls that advance virtual time."""

from __future__ import annotations

from typing import Any

from ..api import Runtime, outcome
from ..errors import BadArgument, CallTimeout
from ..failpoints import Failpoint, check_point
from ..kernel import DEFAULT_CALL_TIMEOUT, ProcessFn
from ..messages import ExitSignal, FailpointSignal, MessageSignal, SuspendSignal
from ..pid import Pid
from ..process import Process
from ..reasons import KILL, SHUTDOWN
from ..validation import check_host, make_spawn_opts
from .kernel import DRIVER, SimKernel


async def _call_once(ctx: Process, dest: Pid | str, request: Any, timeout: float | None) -> Any:
    return await ctx.call(dest, request, timeout)


class SimRuntime(Runtime):
    """All processes in this Python process, on a seeded virtual-time scheduler."""

    backend = "sim"

    def __init__(self, seed: int = 0, nodes: tuple[str, ...] | list[str] = ("n1", "n2", "n3"),
                 trace: bool = True, check_pickle: bool = True,
                 default_host: str | None = None) -> None:
        if not nodes:
            raise BadArgument("a runtime needs at least one node")
        if default_host is not None:
            check_host(default_host)
        self.nodes = tuple(nodes)
        self.kernel = SimKernel(seed, self.nodes, trace=trace, check_pickle=check_pickle,
                                default_host=default_host)
        self.loop = self.kernel.loop

    @property
    def trace(self) -> list[str]:
        return self.kernel.trace

    def _node(self, node: str | None) -> str:
        node = node or self.nodes[0]
        if node not in self.nodes:
            raise BadArgument(f"unknown node {node!r}; this runtime has {list(self.nodes)}")
        return node

    def settle(self, max_time: float | None = None) -> None:
        """Run until nothing is left to do (or until virtual time `max_time`)."""
        self.loop.run_until(lambda: False, until_time=max_time)

    def spawn(self, fn: ProcessFn, *args: Any, node: str | None = None, name: str | None = None,
              trap_exit: bool = False, mailbox_capacity: int | None = None,
              label: str | None = None, failpoints: dict[str, Failpoint] | None = None,
              host: str | None = None) -> Pid:
        opts = make_spawn_opts(self._node(node), None, name, trap_exit, mailbox_capacity, label,
                               failpoints, host)
        pid = self.kernel.spawn_now(None, fn, args, opts)
        return pid

    def run(self, fn: ProcessFn, *args: Any, node: str | None = None,
            timeout: float = 60.0, host: str | None = None) -> Any:
        pid = self.spawn(fn, *args, node=node, host=host)
        deadline = self.loop.time() + timeout
        ended_flag: list[bool] = []
        self.kernel.exit_waiters[pid] = lambda: ended_flag.append(True)
        ended = self.loop.run_until(lambda: bool(ended_flag), until_time=deadline)
        if not ended:
            self.kill(pid)
            raise CallTimeout(f"{pid} did not finish within {timeout} virtual seconds")
        reason, result = self.kernel.results[pid]
        return outcome(pid, reason, result)

    def send(self, dest: Pid | str, msg: Any) -> None:
        pid = self.whereis(dest) if isinstance(dest, str) else dest
        if pid is not None:
            self.kernel.deliver(None, pid, MessageSignal(msg))

    def call(self, dest: Pid | str, request: Any,
             timeout: float | None = DEFAULT_CALL_TIMEOUT) -> Any:
        limit = 3600.0 if timeout is None else timeout + 1.0
        return self.run(_call_once, dest, request, timeout, timeout=limit)

    def exit(self, pid: Pid, reason: Any) -> None:
        if reason == KILL:
            self.kill(pid)
        else:
            self.kernel._route(DRIVER, pid, ExitSignal(DRIVER, reason, from_link=False))

    def kill(self, pid: Pid) -> None:
        self.kernel.kill(None, pid)

    def kill_node(self, node: str) -> list[Pid]:
        return self.kernel.kill_node(self._node(node))

    def kill_host(self, node: str, host: str) -> list[Pid]:
        check_host(host)
        if not host:
            raise BadArgument("kill_host needs a named host (kill a process of its own with kill)")
        return self.kernel.kill_host(self._node(node), host)

    def partition(self, side_a: list[str], side_b: list[str]) -> None:
        self.kernel.partition([self._node(n) for n in side_a], [self._node(n) for n in side_b])

    def heal(self) -> None:
        self.kernel.heal()

    def set_faults(self, src: str, dst: str, *, delay: tuple[float, float] | None = None,
                   drop: float = 0.0) -> None:
        """Delay and/or drop messages from node `src` to `dst` ('*' for every node)."""
        self.kernel.net.set_faults(self._node(src), dst if dst == "*" else self._node(dst),
                                   delay=delay, drop=drop)

    def clear_faults(self) -> None:
        self.kernel.net.clear_faults()

    def whereis(self, name: str) -> Pid | None:
        return self.kernel.names.get(name)

    def processes(self) -> list[Pid]:
        return [proc.pid for proc in self.kernel.procs.values()]

    def exit_reason(self, pid: Pid) -> Any:
        """How an ended process ended (None while it runs)."""
        entry = self.kernel.results.get(pid)
        return None if entry is None else entry[0]

    def arm_failpoint(self, pid: Pid, name: str, action: str, *, count: int | None = 1,
                      seconds: float | None = None, notify: Pid | None = None,
                      tag: str = "") -> None:
        fp = Failpoint(action, count, seconds, notify, tag)
        self.kernel._route(DRIVER, pid, FailpointSignal(name, fp))

    def release_failpoint(self, pid: Pid, name: str) -> None:
        self.kernel._route(DRIVER, pid, FailpointSignal(name, None))

    def arm_failpoint_everywhere(self, name: str, action: str, *, seconds: float | None = None,
                                 notify: Pid | None = None, tag: str = "") -> None:
        self.kernel.net.arm_everywhere(check_point(name),
                                       Failpoint(action, None, seconds, notify, tag))

    def release_failpoint_everywhere(self, name: str) -> None:
        self.kernel.net.release_everywhere(check_point(name))
        for proc in list(self.kernel.procs.values()):
            proc.everywhere_changed()

    def suspend(self, pid: Pid) -> None:
        self.kernel._route(DRIVER, pid, SuspendSignal(True))

    def resume(self, pid: Pid) -> None:
        self.kernel._route(DRIVER, pid, SuspendSignal(False))

    def set_clock_skew(self, node: str, seconds: float) -> None:
        self.kernel.net.set_skew(self._node(node), seconds)

    def sleep(self, seconds: float) -> None:
        if seconds < 0:
            raise BadArgument(f"sleep needs seconds >= 0, got {seconds}")
        self.loop.run_until(lambda: False, until_time=self.loop.time() + seconds)

    def now(self) -> float:
        return self.loop.time()

    def shutdown(self) -> None:
        """Stop every live process (their tasks are cancelled), then close the loop."""
        for proc in reversed(list(self.kernel.procs.values())):
            proc._finish(SHUTDOWN)
        self.loop.run_until(lambda: False, max_steps=1_000_000)
        self.loop.close()
