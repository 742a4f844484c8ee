"""What a scenario run's processes tell its recorder (`processes.recorder`), and what the
runner asks it.

Reports are sent and never answered: `OpDone`, `WatchDone`, `Sampled`, `EntriesRead`,
`SessionOpened`, `Finished` (and the `FailpointHit`s of the failpoints the nemesis armed).
Questions are calls: `HeadRevision()` -> the highest header revision an operation got,
`Sessions()` -> {client: (session pid, node)}, `FiredFailpoints()` -> {tag: first hit},
`LastSample()` -> the last `ClusterView` or None, `TakeDump()` -> a `Dump` of everything;
the shared `Status()` -> counts. Anything else -> `UnknownRequest`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sediment.runtime.pid import Pid
from sediment.scenarios.history import WatchLog
from sediment.scenarios.observe import ClusterView

if TYPE_CHECKING:  # processes.py, which makes these records, imports this module
    from sediment.scenarios.processes import Entry, OpRecord


@dataclass(frozen=True, slots=True)
class OpDone:
    """A client operation finished (a traffic client's, the compactor's, a final read's)."""

    record: OpRecord


@dataclass(frozen=True, slots=True)
class WatchDone:
    """A watch stream's log, once the stream ended."""

    log: WatchLog


@dataclass(frozen=True, slots=True)
class Sampled:
    """The monitor's view of every member at one moment."""

    view: ClusterView


@dataclass(frozen=True, slots=True)
class EntriesRead:
    """Committed raft entries the log tail read, in index order."""

    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class SessionOpened:
    """A watch client's session: its pid on `node` (for the faults that target it)."""

    client: int
    pid: Pid
    node: str


@dataclass(frozen=True, slots=True)
class Finished:
    """A process of the run (`client-1`, `watcher-2`, `compactor`, `tail`, ...) is done."""

    who: str


@dataclass(frozen=True, slots=True)
class HeadRevision:
    """-> the highest header revision any recorded operation got."""


@dataclass(frozen=True, slots=True)
class Sessions:
    """-> {client: (session pid, node)} of the watch clients."""


@dataclass(frozen=True, slots=True)
class FiredFailpoints:
    """-> {tag: the first `FailpointHit`} of the failpoints the nemesis armed."""


@dataclass(frozen=True, slots=True)
class LastSample:
    """-> the monitor's last `ClusterView`, or None."""


@dataclass(frozen=True, slots=True)
class TakeDump:
    """-> a `Dump` of everything recorded."""


Report = OpDone | WatchDone | Sampled | EntriesRead | SessionOpened | Finished

__all__ = ["EntriesRead", "FiredFailpoints", "Finished", "HeadRevision", "LastSample", "OpDone",
           "Report", "Sampled", "SessionOpened", "Sessions", "TakeDump", "WatchDone"]
