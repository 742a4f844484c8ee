"""What the branch tier's service processes (`sensor.py`, `compactor.py`,
`gc_process.py`) are asked and what they answer: one frozen dataclass per message, so a
caller matches on a type instead of re-parsing a tuple.

- The sensor: `sensor.Take()` (the core's own event, called) -> the next queued
  `Trigger`, or None; it nudges the compactor with a `Work()` message when a trigger
  is queued.
- The compactor: `Compact(repo, branch, force)` -> `Compacted(compaction)` or
  `CompactFailed(error)` (a `BranchesError` or `KvError`, e.g. CompactionThrottled).
- The collector: `Sweep(repo)` -> `Swept(result)` (a `gc.Swept`) or
  `SweepFailed(error)`.
- Each: `Status()` -> a dict (the common status call every process answers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Work:
    """The sensor's nudge to the compactor: a trigger is queued (a message)."""


@dataclass(frozen=True, slots=True)
class Compact:
    """Compact `branch` of `repo` now; `force`: even within the compaction interval."""

    repo: str
    branch: str
    force: bool


@dataclass(frozen=True, slots=True)
class Compacted:
    """The compaction ran (`compactor.Compaction`)."""

    compaction: Any


@dataclass(frozen=True, slots=True)
class CompactFailed:
    """The compaction did not run or failed, with `error`."""

    error: BaseException


@dataclass(frozen=True, slots=True)
class Sweep:
    """Sweep `repo`'s garbage now."""

    repo: str


@dataclass(frozen=True, slots=True)
class Swept:
    """What the sweep collected (`gc.Swept`)."""

    result: Any


@dataclass(frozen=True, slots=True)
class SweepFailed:
    """The sweep failed with `error`."""

    error: BaseException


__all__ = ["Compact", "CompactFailed", "Compacted", "Sweep", "SweepFailed", "Swept", "Work"]
