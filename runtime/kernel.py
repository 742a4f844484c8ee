"""The interface a backend offers to the processes it hosts.

`Process` holds the per-process semantics (mailbox, links, monitors, trap_exit,
timers, exit signals) and calls a `Kernel` for everything that crosses a process
boundary. The sim backend implements it with a seeded in-memory network; the Ray backend
with one kernel per host actor, shared by every process that host runs.

Placement: a process either gets a host of its own (on Ray: its own actor, an OS process)
or joins a named host on its node (`SpawnOpts.host`), the way many Erlang processes share
one BEAM node. Processes of one host exchange messages as in-memory enqueues; a crash of
one of them ends only that one; the loss of the host ends all of them at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .failpoints import Failpoint
from .messages import CallRef, Signal
from .pid import Pid, Ref

if TYPE_CHECKING:
    from .process import Process

ProcessFn = Callable[..., Awaitable[Any]]
DEFAULT_MAILBOX_CAPACITY = 100_000
DEFAULT_CALL_TIMEOUT = 5.0


@dataclass(frozen=True)
class SpawnOpts:
    """How to start a process. `link_to` makes spawn+link atomic (spawn_link)."""

    node: str | None = None
    link_to: Pid | None = None
    name: str | None = None
    trap_exit: bool = False
    mailbox_capacity: int = DEFAULT_MAILBOX_CAPACITY
    failpoints: dict[str, Failpoint] = field(default_factory=dict)
    label: str | None = None  # for logs: what this process is (e.g. "supervisor:top")
    host: str | None = None  # a named host on `node` to run in; None: the runtime's default


class Kernel(Protocol):
    """Everything a process needs from its backend."""

    def now(self) -> float: ...

    def clock_offset(self, node: str) -> float:
        """Seconds a clock-skew fault adds to `node`'s clock (0 without one)."""

    def everywhere_failpoint(self, name: str) -> Failpoint | None:
        """The failpoint `name` if it is armed on every process, else None."""

    def deliver(self, src: Process, dest: Pid, signal: Signal) -> None:
        """Send a signal; per (src, dest) pair signals arrive in order or not at all."""

    async def call(self, src: Process, dest: Pid, request: Any, timeout: float | None) -> Any: ...

    def reply(self, src: Process, from_: CallRef, value: Any) -> None: ...

    async def spawn(self, src: Process | None, fn: ProcessFn, args: tuple[Any, ...],
                    opts: SpawnOpts) -> Pid: ...

    def watch(self, src: Process, peer: Pid, ref: Ref | None) -> None:
        """Notify `src` when `peer` ends: an exit signal (ref None: a link) or a DOWN (ref)."""

    def unwatch(self, src: Process, peer: Pid, ref: Ref | None) -> None: ...

    async def register(self, src: Process, name: str) -> None: ...

    async def unregister(self, src: Process, name: str) -> None: ...

    async def whereis(self, src: Process | None, name: str) -> Pid | None: ...

    def kill(self, src: Process | None, pid: Pid) -> None:
        """Untrappable, immediate termination with reason `killed` (brutal_kill)."""

    def crash(self, proc: Process) -> None:
        """End `proc` abruptly, as a power cut would: no code of it runs again."""

    def exited(self, proc: Process, reason: Any) -> None:
        """`proc` ended with `reason`: tell its watchers, free its names."""
