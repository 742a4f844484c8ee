"""Name lookups a process (or the driver) made, remembered while the named process lives.

Erlang's `whereis` reads a table on the local node; here the table is the registry
actor, a round trip away. Clients that resolve a name per request (a KV client per
operation, the log tail per entry, a monitor per sample) made the registry and the
calls into it one of the busiest parts of an idle cluster on Ray. So each lookup's
answer is kept, and the pid is followed through its `run()` call the way the registry
itself follows every process: the entry goes as soon as its process is known to have
ended (no later than the registry learns it), and after `MAX_AGE` seconds in any case,
for a name its living holder gave up (`unregister`). A name that is not registered is
never remembered: whoever waits for it to appear sees it at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..pid import Pid

MAX_AGE = 2.0  # seconds an answer is trusted without a sign of its process's end
MAX_ENTRIES = 256  # names per process; the oldest goes first


@dataclass
class _Entry:
    pid: Pid
    at: float
    ended: Callable[[], bool]  # True once the pid's process is gone


class NameCache:
    """name -> pid answers of the registry, for one process or the driver.

    `follow(pid)` starts watching a pid's end and returns a probe; the cache asks it on
    every hit (it is a check of a future, no call).
    """

    def __init__(self, follow: Callable[[Pid], Callable[[], bool]],
                 max_age: float = MAX_AGE, max_entries: int = MAX_ENTRIES) -> None:
        self._follow = follow
        self._max_age = max_age
        self._max_entries = max_entries
        self._entries: dict[str, _Entry] = {}
        self._probes: dict[str, Callable[[], bool]] = {}  # pid id -> probe (one per pid)

    def get(self, name: str, now: float) -> Pid | None:
        entry = self._entries.get(name)
        if entry is None:
            return None
        if now - entry.at > self._max_age or entry.ended():
            self.forget(name)
            return None
        return entry.pid

    def put(self, name: str, pid: Pid, now: float) -> None:
        probe = self._probes.get(pid.id)
        if probe is None or probe():
            probe = self._follow(pid)
            self._probes[pid.id] = probe
        self._entries.pop(name, None)
        self._entries[name] = _Entry(pid, now, probe)
        while len(self._entries) > self._max_entries:
            self.forget(next(iter(self._entries)))

    def forget(self, name: str) -> None:
        entry = self._entries.pop(name, None)
        if entry is not None and all(e.pid.id != entry.pid.id for e in self._entries.values()):
            self._probes.pop(entry.pid.id, None)

    def __len__(self) -> int:
        return len(self._entries)


def follow_run(pid: Pid) -> Callable[[], bool]:
    """A probe that turns True once `pid`'s process ended (its actor's `run()` answered
    or failed: a killed actor fails it)."""
    future = pid.handle.run.remote().future()
    return future.done  # type: ignore[no-any-return]


__all__ = ["MAX_AGE", "NameCache", "follow_run"]
