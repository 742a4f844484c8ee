"""Who waits for what on a raft server: proposers for their entry's result, callers of
a major compaction for its end.

A proposal's outcome reaches the server twice in either order: the core says the entry
committed at an index (its `Reply`), and the machine applies it. Whichever comes second
answers the proposer; a result nobody asked for yet is kept, bounded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_RESULTS = 10_000  # results kept for proposers not heard of yet; half go when reached


@dataclass
class Waiters:
    waiting: dict[int, Any] = field(default_factory=dict)  # index -> proposer awaiting apply
    results: dict[int, Any] = field(default_factory=dict)  # index -> result, proposer unknown
    compactions: list[Any] = field(default_factory=list)  # callers of a major compaction

    def applied(self, index: int, result: Any) -> Any | None:
        """The entry at `index` was applied: its proposer, when one waits (answer it
        `Done(index, result)`), else None and the result is kept."""
        waiter = self.waiting.pop(index, None)
        if waiter is None:
            self.results[index] = result
        return waiter

    def committed(self, index: int, ref: Any) -> tuple[bool, Any]:
        """The proposer `ref`'s entry committed at `index`: (True, its result) when it
        was applied already, else (False, None) and the proposer waits."""
        if index in self.results:
            return True, self.results.pop(index)
        self.waiting[index] = ref
        return False, None

    def bound(self) -> None:
        """Outcomes nobody asked for: keep the map bounded."""
        if len(self.results) > MAX_RESULTS:
            for index in sorted(self.results)[:MAX_RESULTS // 2]:
                del self.results[index]


__all__ = ["MAX_RESULTS", "Waiters"]
