"""The driver's view of a runtime: start one, spawn into it, talk to it, break it.

`start(backend="sim"|"ray", ...)` returns a `Runtime`. Both backends offer the same
synchronous methods, so tests and scenarios are written once. Process code itself is
`async def fn(ctx, *args)` and uses the `Process` context.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .errors import BadArgument, RuntimeErrorBase
from .failpoints import Failpoint
from .kernel import DEFAULT_CALL_TIMEOUT, ProcessFn
from .pid import Pid
from .reasons import NORMAL, Error

BACKENDS = ("sim", "ray")


class ProcessFailed(RuntimeErrorBase):
    """`Runtime.run`'s process ended with a reason other than normal."""

    def __init__(self, pid: Pid, reason: Any) -> None:
        super().__init__(f"{pid} exited: {reason}")
        self.pid = pid
        self.reason = reason

    def __reduce__(self) -> Any:
        return (type(self), (self.pid, self.reason))


def outcome(pid: Pid, reason: Any, result: Any) -> Any:
    """The value `Runtime.run` returns for an ended process, or the error it raises."""
    if reason == NORMAL:
        return result
    if isinstance(reason, Error) and reason.exc is not None:
        raise reason.exc
    raise ProcessFailed(pid, reason)


class Runtime(abc.ABC):
    """A running cluster of processes, driven from ordinary (synchronous) Python."""

    backend: str
    nodes: tuple[str, ...]

    @abc.abstractmethod
    def spawn(self, fn: ProcessFn, *args: Any, node: str | None = None, name: str | None = None,
              trap_exit: bool = False, mailbox_capacity: int | None = None,
              label: str | None = None, failpoints: dict[str, Failpoint] | None = None,
              host: str | None = None) -> Pid:
        """Start a process; returns once it exists. `host`: a named host on its node to
        join (None: the runtime's default; `validation.OWN`: a host of its own)."""

    @abc.abstractmethod
    def run(self, fn: ProcessFn, *args: Any, node: str | None = None,
            timeout: float = 60.0, host: str | None = None) -> Any:
        """Run `fn` as a process until it ends; its return value, or its error raised.
        `host` as for `spawn`: a poll run every second joins a named host (on Ray a
        process of its own host is a new OS process each time)."""

    @abc.abstractmethod
    def send(self, dest: Pid | str, msg: Any) -> None: ...

    @abc.abstractmethod
    def call(self, dest: Pid | str, request: Any,
             timeout: float | None = DEFAULT_CALL_TIMEOUT) -> Any: ...

    @abc.abstractmethod
    def exit(self, pid: Pid, reason: Any) -> None:
        """Send an exit signal from outside (`kill` is untrappable)."""

    @abc.abstractmethod
    def kill(self, pid: Pid) -> None:
        """Kill the process abruptly (Ray: ray.kill of its actor)."""

    @abc.abstractmethod
    def kill_node(self, node: str) -> list[Pid]:
        """Kill every process on a logical node at once (a node crash); returns their pids.

        The node itself stays usable: what runs there again is up to the supervisors.
        """

    @abc.abstractmethod
    def kill_host(self, node: str, host: str) -> list[Pid]:
        """Kill the named host on `node` and every process in it at once (on Ray,
        ray.kill of the host actor); returns their pids. Their links and monitors get
        `killed`. A later spawn into that host starts a new one."""

    @abc.abstractmethod
    def partition(self, side_a: list[str], side_b: list[str]) -> None:
        """Cut the nodes of side_a from those of side_b: messages between them are lost."""

    @abc.abstractmethod
    def heal(self) -> None:
        """Remove every partition."""

    @abc.abstractmethod
    def set_faults(self, src: str, dst: str, *, delay: tuple[float, float] | None = None,
                   drop: float = 0.0) -> None:
        """Delay and/or drop messages from node `src` to `dst` ('*' for every node)."""

    @abc.abstractmethod
    def clear_faults(self) -> None:
        """Remove every delay and drop fault (partitions stay until `heal`)."""

    def wait_warm(self, timeout: float) -> bool:
        """Return once the runtime has stopped starting spare processes after a burst of
        spawns (True), or after `timeout` seconds (False). On Ray each spawn takes a
        started actor from the warm pool and a new Ray worker boots in its place, about a
        second of CPU each; whoever times something right after spawning many processes
        waits here first. The simulator has nothing to wait for."""
        return True

    def prepare_hosts(self, hosts: Iterable[tuple[str, str]],
                      spares: Mapping[str, int] | None = None, timeout: float = 120.0) -> None:
        """Start the named hosts `hosts` ((node, host name) pairs) all at once, ahead of
        the processes that will join them, and `spares[node]` idle hosts on each node for
        the processes about to be spawned there with a host of their own. A supervisor
        starts its children one after the other, and on Ray each new host is an OS
        process that takes about a second to boot: a cluster's start was the sum of
        those boots. The simulator's hosts cost nothing; there it only checks the nodes
        (so seeds replay as before)."""
        del timeout
        hosts = list(hosts)
        unknown = sorted(({node for node, _ in hosts} | set(spares or ())) - set(self.nodes))
        if unknown:
            raise BadArgument(f"unknown node {unknown[0]!r}; this runtime has {list(self.nodes)}")

    @contextlib.contextmanager
    def network_change(self) -> Iterator[None]:
        """Make the partitions, heals and link faults set inside the block one change, as
        processes see it: no process runs under a half-made set of rules (a `clear_faults`
        followed by the links it restores). On Ray the new rules reach every process once,
        as the block ends, instead of once per call; the simulator is already atomic."""
        yield

    @abc.abstractmethod
    def set_clock_skew(self, node: str, seconds: float) -> None:
        """Shift `node`'s clock (what its processes' `now()` reads) by `seconds` from now
        on, as a machine whose clock differs; 0 puts it back."""

    @abc.abstractmethod
    def suspend(self, pid: Pid) -> None:
        """Stop a process as SIGSTOP would: it runs no code past its next wait, its timers
        hold; messages queue, calls to it time out, a kill still kills."""

    @abc.abstractmethod
    def resume(self, pid: Pid) -> None:
        """Let a suspended process go on (SIGCONT)."""

    @abc.abstractmethod
    def whereis(self, name: str) -> Pid | None: ...

    @abc.abstractmethod
    def processes(self) -> list[Pid]:
        """Live processes, in spawn order."""

    def is_alive(self, pid: Pid) -> bool:
        return pid in self.processes()

    @abc.abstractmethod
    def arm_failpoint(self, pid: Pid, name: str, action: str, *, count: int | None = 1,
                      seconds: float | None = None, notify: Pid | None = None,
                      tag: str = "") -> None:
        """Arm failpoint `name` on one process, to fire `count` times (None: until
        released); with `notify`, the process sends that pid a `FailpointHit` (with
        `tag`) each time it fires, before it acts (a crash's hit goes out first)."""

    @abc.abstractmethod
    def release_failpoint(self, pid: Pid, name: str) -> None:
        """Disarm a failpoint and let a process paused there go on."""

    @abc.abstractmethod
    def arm_failpoint_everywhere(self, name: str, action: str, *, seconds: float | None = None,
                                 notify: Pid | None = None, tag: str = "") -> None:
        """Arm failpoint `name` on every process, those started later too, to fire every
        time until `release_failpoint_everywhere`; with `notify`, each process that
        reaches it sends that pid a `FailpointHit` first (a pause that notifies is a
        breakpoint). A failpoint armed on one process takes precedence there. On Ray it
        is pushed to every process before this returns."""

    @abc.abstractmethod
    def release_failpoint_everywhere(self, name: str) -> None:
        """Disarm what `arm_failpoint_everywhere` armed; processes paused there go on."""

    @abc.abstractmethod
    def sleep(self, seconds: float) -> None:
        """Let the cluster run for `seconds` (virtual on sim)."""

    @abc.abstractmethod
    def now(self) -> float: ...

    @abc.abstractmethod
    def shutdown(self) -> None:
        """Stop every process and release the backend's resources."""

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def start(backend: str = "sim", **kwargs: Any) -> Runtime:
    """Start a runtime. Both: `nodes`, `default_host` (the host a spawn without `host`
    joins on its node; None: a host of its own). sim: `seed`, `trace`; ray: `cluster`,
    `address`, `reap_delay`, `warm_pool`."""
    if backend == "sim":
        from .sim.runtime import SimRuntime

        return SimRuntime(**kwargs)
    if backend == "ray":
        from .ray.runtime import RayRuntime

        return RayRuntime(**kwargs)
    raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
