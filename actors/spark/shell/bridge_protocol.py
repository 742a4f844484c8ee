"""What the Spark bridge (`bridge.py`) is asked and what it answers: one frozen
dataclass per message, so a caller matches on a type instead of re-parsing a tuple.

- `Merge(request)` (a `MergeRequest`) -> `Merged(BlockMeta)` | `JobFailed(error)`.
- `MergeRanges(request)` (a `RangeMergeRequest`) -> `Merged(RangeMergeResult)` |
  `JobFailed(error)`.
- `Stop()` -> `Stopped()` once the session is stopped and the process ends.
- `Status()` -> a `BridgeStatus` (the common status call; answered while a job runs).

`error` is typed: `BadBridgeRequest`, `BridgeBusy`, `BridgeStopped` for a refusal, the
merge's own `BlockError` / `BranchesError`, `SparkUnavailable` or `SparkMergeFailed`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Merge:
    """Merge blocks on Spark (`bridge.MergeRequest`)."""

    request: Any


@dataclass(frozen=True, slots=True)
class MergeRanges:
    """Merge a metarange as spans on Spark (`span_merge.RangeMergeRequest`)."""

    request: Any


@dataclass(frozen=True, slots=True)
class Stop:
    """Refuse queued jobs, let the running one answer, stop the session, end."""


@dataclass(frozen=True, slots=True)
class Merged:
    """The job's result: the output `BlockMeta`, or a `RangeMergeResult`."""

    result: Any


@dataclass(frozen=True, slots=True)
class JobFailed:
    """The job was refused or failed, with a typed `error`; nothing was replaced."""

    error: Exception


@dataclass(frozen=True, slots=True)
class Stopped:
    """The bridge stopped."""


JobOutcome = Merged | JobFailed

__all__ = ["JobOutcome", "Merge", "JobFailed", "MergeRanges", "Merged", "Stop", "Stopped"]
