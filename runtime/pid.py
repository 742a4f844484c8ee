"""Process identifiers and references.

A `Pid` names one process incarnation: a restarted child gets a new pid, as in Erlang.
It is a plain value (hashable, picklable, comparable) so it can travel in messages on
either backend. Where it runs is not part of the identity: `host` names the host that
runs it (on Ray the host actor's id; on the simulator the host's name, "" for a process
with a host of its own) and `handle` is the Ray actor handle of that host.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Pid:
    """A process: the logical node it lives on and a cluster-unique id."""

    node: str
    id: str
    handle: Any = field(default=None, compare=False, hash=False, repr=False)
    host: str = field(default="", compare=False, hash=False, repr=False)

    def __str__(self) -> str:
        return f"<{self.node}.{self.id}>"

    def __hash__(self) -> int:  # ids are unique per runtime: hashing the id alone is enough
        return hash(self.id)

    def without_handle(self) -> Pid:
        return Pid(self.node, self.id, None, self.host)

    def __reduce__(self) -> tuple[Any, tuple[str, str, None, str]]:
        """A pid travels without its actor handle (receivers find a host's actor by its
        name, once): serializing a Ray handle costs more than the rest of a message."""
        return Pid, (self.node, self.id, None, self.host)


@dataclass(frozen=True, slots=True)
class Ref:
    """A unique reference (monitor, timer, call). Unique per creating process."""

    owner: str
    n: int

    def __str__(self) -> str:
        return f"#Ref<{self.owner}.{self.n}>"
