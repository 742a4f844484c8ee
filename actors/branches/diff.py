"""Diffs (pure): two metaranges against each other, and a branch's uncommitted changes.

`diff_ranges` walks two metaranges in path order and skips every pair of identical
ranges without reading them (both sides at the start of ranges with the same id hold
the same entries), so the diff of a compacted metarange against its commit's costs
the ranges that changed, which content-defined boundaries keep few (Graveler's
`committed.Diff`). The result of a diff of two metaranges never changes (both are
immutable), so the shell caches it.

`join_uncommitted` is DiffUncommitted (seed, "Uncommitted" reads): the merged staging
layers (staging token, then sealed tokens) joined with the two-way diff of the
compacted metarange against the commit's. A path the staging layers touch is
compared with the commit's entry; a path only the compaction changed comes from the
two-way diff. The result is exactly the difference between what the branch reads and
what its commit holds; "is staging empty" is that it yields nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from sediment.actors.branches.apply import RangeRef
from sediment.actors.branches.entry import Entry, Record

DiffKind = Literal["added", "removed", "changed"]


@dataclass(frozen=True, slots=True)
class Diff:
    """`left`: the entry before (the commit's), `right`: after (the branch's)."""

    path: str
    kind: DiffKind
    left: Entry | None
    right: Entry | None


def classify(path: str, left: Entry | None, right: Entry | None) -> Diff | None:
    """The diff of one path, or None when both sides agree."""
    if left == right:
        return None
    if left is None:
        return Diff(path, "added", None, right)
    if right is None:
        return Diff(path, "removed", left, None)
    return Diff(path, "changed", left, right)


class _Side:
    """A cursor over a metarange that can tell whether it stands at a range start."""

    def __init__(self, ranges: Sequence[RangeRef], load: Callable[[RangeRef], Sequence[Record]],
                 start: str) -> None:
        self.ranges = ranges
        self.load = load
        self.start = start
        self.i = 0
        while self.i < len(ranges) and ranges[self.i].max_path < start:
            self.i += 1
        self.records: Sequence[Record] | None = None
        self.pos = 0

    @property
    def done(self) -> bool:
        return self.i >= len(self.ranges)

    @property
    def at_range_start(self) -> bool:
        return self.records is None and not self.done

    def peek(self) -> Record | None:
        if self.done:
            return None
        if self.records is None:
            self.records = self.load(self.ranges[self.i])
            self.pos = 0
            while self.pos < len(self.records) and self.records[self.pos][0] < self.start:
                self.pos += 1
            if self.pos >= len(self.records):
                self._next_range()
                return self.peek()
        return self.records[self.pos]

    def advance(self) -> None:
        self.pos += 1
        if self.records is not None and self.pos >= len(self.records):
            self._next_range()

    def skip_range(self) -> None:
        self._next_range()

    def _next_range(self) -> None:
        self.i += 1
        self.records = None
        self.pos = 0


def diff_ranges(left: Sequence[RangeRef], right: Sequence[RangeRef],
                load: Callable[[RangeRef], Sequence[Record]], start: str = "") -> Iterator[Diff]:
    """Every path whose entry differs between metaranges `left` (before) and `right`
    (after), in path order, from `start` on. Identical ranges met at their starts on
    both sides are skipped unread."""
    a, b = _Side(left, load, start), _Side(right, load, start)
    while True:
        if a.at_range_start and b.at_range_start and a.ranges[a.i].id == b.ranges[b.i].id:
            a.skip_range()
            b.skip_range()
            continue
        x, y = a.peek(), b.peek()
        if x is None and y is None:
            return
        if y is None or (x is not None and x[0] < y[0]):
            assert x is not None
            yield Diff(x[0], "removed", x[1], None)
            a.advance()
        elif x is None or y[0] < x[0]:
            yield Diff(y[0], "added", None, y[1])
            b.advance()
        else:
            d = classify(x[0], x[1], y[1])
            if d is not None:
                yield d
            a.advance()
            b.advance()


def join_uncommitted(staged: Iterable[Record], compaction: Iterable[Diff],
                     committed: Callable[[str], Entry | None]) -> Iterator[Diff]:
    """The branch's uncommitted changes. `staged`: the merged staging layers (newest
    record per path, tombstones kept); `compaction`: diff(commit metarange, compacted
    metarange), empty without a compacted metarange; `committed(path)`: the commit's
    entry, asked in increasing path order for staged paths the compaction diff does
    not cover."""
    s_it, c_it = iter(staged), iter(compaction)
    s, c = next(s_it, None), next(c_it, None)
    while s is not None or c is not None:
        if c is None or (s is not None and s[0] < c.path):
            assert s is not None
            d = classify(s[0], committed(s[0]), s[1])
            s = next(s_it, None)
        elif s is None or c.path < s[0]:
            d = c
            c = next(c_it, None)
        else:  # both: the staged entry is over the compacted one; compare with the commit
            d = classify(s[0], c.left, s[1])
            s, c = next(s_it, None), next(c_it, None)
        if d is not None:
            yield d


__all__ = ["Diff", "DiffKind", "classify", "diff_ranges", "join_uncommitted"]
