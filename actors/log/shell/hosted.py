"""The state machine as the raft server hosts it: an object owning the machine's state.

The pure `StateMachine` contract (`actors/log/machine.py`) fits machines that live in
memory. A machine that keeps its state on disk (the Netsy KV in SQLite) is already
restored when its process starts and must not apply an entry twice, so the server talks
to every machine through this one interface:

- `applied`: the highest index the machine has applied (a disk machine: durably, read
  back at open); the server feeds entries above it only.
- `apply(entry)`: apply one committed entry, return the proposer's result.
- `snapshot()`: (bytes, live indexes) of the state at `applied`, durable before return.
- `begin_snapshot()` (optional): the same in two parts, for a machine whose snapshot
  takes long to encode: the state made durable and pinned now, and a job the server
  runs in a thread (the raft host's loop keeps serving heartbeats meanwhile).
- `restore(data, index, read_entry)`: replace the state by a snapshot at `index`;
  `read_entry(i)` gives the live entry at index i (from an installed snapshot, or the
  local log when a start finds the machine behind its latest snapshot).
- `query(request)`: a local read of the state ("serializable" in etcd's terms).
- `status()`: a small summary for the server's status call.
- `background()`: one bounded piece of deferred work (the KV's value-only compaction
  pass); True while more remains. The server runs it only when its mailbox is empty.
- `has_background()`: whether such work is pending now (before any piece of it ran).

A `MachineFactory` is a picklable callable `(group_dir) -> HostedMachine` carried in
the group's spec, so each member opens its own machine where it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from sediment.actors.log import kv_machine
from sediment.actors.log.raft.types import Entry
from sediment.runtime.common_calls import UnknownRequest


class HostedMachine(Protocol):
    applied: int

    def apply(self, entry: Entry) -> Any: ...

    def snapshot(self) -> tuple[bytes, list[int]]: ...

    def restore(self, data: bytes, index: int,
                read_entry: Callable[[int], Entry | None]) -> None: ...

    def query(self, request: Any) -> Any: ...

    def status(self) -> dict[str, Any]: ...

    def background(self) -> bool: ...

    def has_background(self) -> bool: ...

    def close(self) -> None: ...


MachineFactory = Callable[[str], HostedMachine]


@dataclass(frozen=True, slots=True)
class KeyIndex:
    """A query of the reference machine: the index of `key`'s latest put, or None."""

    key: str


class RaKvHost:
    """The in-memory reference machine (`kv_machine`, Ra's ra_kv): key -> index of its
    latest put; values are read from the log by the server."""

    def __init__(self, group_dir: str = "") -> None:
        self.state = kv_machine.initial()
        self.applied = 0

    def apply(self, entry: Entry) -> Any:
        self.state, result = kv_machine.apply(self.state, entry)
        self.applied = entry.index
        return result

    def snapshot(self) -> tuple[bytes, list[int]]:
        return kv_machine.snapshot(self.state), kv_machine.live_indexes(self.state)

    def restore(self, data: bytes, index: int,
                read_entry: Callable[[int], Entry | None]) -> None:
        self.state = kv_machine.restore(data)
        self.applied = index

    def query(self, request: Any) -> Any:
        """`KeyIndex(key)` -> an int or None; anything else -> `UnknownRequest`."""
        match request:
            case KeyIndex(key=key):
                return self.state.keys.get(key)
            case _:
                return UnknownRequest.of(request)

    def status(self) -> dict[str, Any]:
        return {"keys": dict(self.state.keys)}

    def background(self) -> bool:
        return False

    def has_background(self) -> bool:
        return False

    def close(self) -> None:
        pass


def ra_kv(group_dir: str) -> HostedMachine:
    """The default machine factory."""
    return RaKvHost(group_dir)


__all__ = ["HostedMachine", "MachineFactory", "RaKvHost", "ra_kv"]
