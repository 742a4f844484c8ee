"""What a compactor that just started must redo (pure).

A compaction killed after step 1 (its process killed, or its node lost the KV
leadership and the services moved, `shell/service.py`) leaves the branch with a sealed
token and a fresh CompactionStartTime: readable and equivalent, but the token is read
through by every read until some later compaction or commit folds it in, and the
sensor's claim refuses another compaction of the branch for the interval. The sensor's
counts live in memory (as lakeFS's do), so no trigger would come for it.

So a compactor, when it starts, lists the branches and schedules one unforced
compaction for each branch holding sealed tokens, due when the claim of the last
compaction expires. A branch compacted or committed meanwhile reads as done then (its
compaction is refused as NothingToCompact, or throttled by the newer claim: the newer
compaction folds the tokens in).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sediment.actors.branches.branch import Branch

MAX_RECOVERIES = 1000  # branches scheduled per start: a bound, as the sensor's queue


@dataclass(frozen=True, slots=True, order=True)
class Recovery:
    """Compact `repo`/`branch` (unforced) at or after `due` (clock seconds)."""

    due: float
    repo: str
    branch: str


def recoveries(branches: Iterable[tuple[str, str, Branch]], now: float,
               interval: float, limit: int = MAX_RECOVERIES) -> list[Recovery]:
    """The branches with sealed tokens, each due when its compaction claim expires
    (now, if it has none), earliest first, at most `limit`."""
    out = []
    for repo, name, b in branches:
        if b.sealed_tokens:
            started = b.compaction_start_time
            due = now if started is None else max(now, started + interval)
            out.append(Recovery(due, repo, name))
    return sorted(out)[:limit]


def due(pending: list[Recovery], now: float) -> tuple[list[Recovery], list[Recovery]]:
    """(the recoveries due at `now`, the rest), both in order."""
    return [r for r in pending if r.due <= now], [r for r in pending if r.due > now]


__all__ = ["MAX_RECOVERIES", "Recovery", "due", "recoveries"]
