"""Where the flusher reads committed history from: a port the wiring layer fills in.

The block tier flushes the KV's history, but it does not name the KV: the wiring layer
(`sediment/wiring/kv_history.py`) hands the tier a `HistorySource`, the group whose
local leader the flush follower runs beside and a function that reads that member's
committed rows, as it hands the KV its flush hold (`KvNodeConfig.flush_hold`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from sediment.actors.blocks.flusher_core import Row
from sediment.runtime.process import Process


@dataclass(frozen=True)
class HistoryBatch:
    """Every committed row with lo <= revision <= through, by (revision, key), whole
    revisions only; `more`: rows above `through` may exist already."""

    rows: tuple[Row, ...]
    through: int
    more: bool


# (ctx, lo, max_rows, timeout) -> a HistoryBatch, or what the source answered instead
# (kept as the flusher's failure reason); a runtime CallError when no answer came
ReadHistory = Callable[[Process, int, int, float], Awaitable[object]]


@dataclass(frozen=True)
class HistorySource:
    """`group`: the raft group whose local leader the flusher follows; `read`: reads
    that group's local member's committed history."""

    group: str
    read: ReadHistory = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.group, str) or not self.group:
            raise ValueError(f"group must be a raft group name, got {self.group!r}")
        if not callable(self.read):
            raise ValueError(f"read must be a function, got {self.read!r}")


__all__ = ["HistoryBatch", "HistorySource", "ReadHistory"]
