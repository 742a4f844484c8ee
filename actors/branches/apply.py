"""Writing a metarange from a base metarange and sorted changes (pure, Graveler's
`committed.Apply`).

A metarange is an ordered list of ranges; a range is an immutable, content-addressed
file of sorted entries. Two rules make unchanged ranges shared between commits:

- Ranges end at content-defined boundaries (`SplitRule`): after at least
  `min_entries` entries, a range ends after any path whose CRC-32 is 0 modulo
  `raggedness`, and always at `max_entries`. A boundary depends on the path alone, so
  after a change the writer falls back onto the base's boundaries at the next boundary
  path, and the ranges after it line up with the base's again.
- A base range with no change inside it, reached while the writer has nothing pending,
  is reused as it is: its id goes into the new metarange and its file is not read.

`apply_records` is the merge rule alone (changes over base, a tombstone removes the
path); `apply_changes` is the whole writer, with loading a range and writing one
injected, so the same rule runs in-process (`metarange.py`) and, cut into spans that
are stitched back (`spans.py`), in a Spark job over the same sorted inputs.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sediment.actors.branches.entry import Entry, Record
from sediment.actors.branches.merge import merge_layers, visible


@dataclass(frozen=True, slots=True)
class RangeRef:
    """One range of a metarange: its id (the content address of its file), its first
    and last path, how many entries it holds and its file's size."""

    id: str
    min_path: str
    max_path: str
    count: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class SplitRule:
    min_entries: int = 1024
    max_entries: int = 65536
    raggedness: int = 8192

    def __post_init__(self) -> None:
        for name in ("min_entries", "max_entries", "raggedness"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int: {v!r}")
        if self.max_entries < self.min_entries:
            raise ValueError(f"max_entries must be >= min_entries: {self}")

    def breaks_after(self, path: str, count: int) -> bool:
        """Whether a range holding `count` entries ends after `path`."""
        if count >= self.max_entries:
            return True
        if count < self.min_entries:
            return False
        return zlib.crc32(path.encode("utf-8")) % self.raggedness == 0


class RangeSink(Protocol):
    def write(self, entries: Sequence[tuple[str, Entry]]) -> RangeRef:
        """Store a range of sorted entries (at least one) and describe it."""


@dataclass(slots=True)
class ApplyStats:
    changes: int = 0  # change records seen (tombstones of absent paths included)
    reused: int = 0  # base ranges kept as they were
    loaded: int = 0  # base ranges read to merge changes into them
    written: int = 0  # ranges written
    entries_written: int = 0


def apply_records(base: Iterable[Record], changes: Iterable[Record]) -> Iterator[tuple[str, Entry]]:
    """The merge rule: the base's entries with the changes applied, in path order (a
    change's entry replaces the base's, a tombstone removes it)."""
    return visible(merge_layers([changes, base]))


@dataclass
class _Writer:
    rule: SplitRule
    sink: RangeSink
    stats: ApplyStats
    out: list[RangeRef] = field(default_factory=list)
    pending: list[tuple[str, Entry]] = field(default_factory=list)
    last: str | None = None

    def add(self, path: str, entry: Entry) -> None:
        if self.last is not None and path <= self.last:
            raise ValueError(f"entries out of order: {path!r:.80} after {self.last!r:.80}")
        self.last = path
        self.pending.append((path, entry))
        if self.rule.breaks_after(path, len(self.pending)):
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.out.append(self.sink.write(self.pending))
            self.stats.written += 1
            self.stats.entries_written += len(self.pending)
            self.pending = []

    def reuse(self, r: RangeRef) -> None:
        if self.last is not None and r.min_path <= self.last:
            raise ValueError(f"base ranges out of order at {r.min_path!r:.80}")
        self.out.append(r)
        self.last = r.max_path
        self.stats.reused += 1


class ChangeStream:
    """The change stream with one record of look-ahead and an order check (ValueError
    when a path does not follow the one before)."""

    def __init__(self, changes: Iterable[Record], stats: ApplyStats) -> None:
        self._it = iter(changes)
        self._stats = stats
        self._last: str | None = None
        self.head: Record | None = None
        self._advance()

    def _advance(self) -> None:
        self.head = next(self._it, None)
        if self.head is not None:
            if self._last is not None and self.head[0] <= self._last:
                raise ValueError(f"changes out of order: {self.head[0]!r:.80}")
            self._last = self.head[0]
            self._stats.changes += 1

    def take_below(self, path: str) -> Iterator[Record]:
        while self.head is not None and self.head[0] < path:
            rec = self.head
            self._advance()
            yield rec

    def take_through(self, path: str) -> list[Record]:
        out: list[Record] = []
        while self.head is not None and self.head[0] <= path:
            out.append(self.head)
            self._advance()
        return out

    def rest(self) -> Iterator[Record]:
        while self.head is not None:
            rec = self.head
            self._advance()
            yield rec


def apply_changes(base: Sequence[RangeRef], load: Callable[[RangeRef], Sequence[Record]],
                  changes: Iterable[Record], rule: SplitRule,
                  sink: RangeSink) -> tuple[list[RangeRef], ApplyStats]:
    """The new metarange's ranges: `changes` (sorted, tombstones allowed) applied onto
    the base ranges. `load` reads a base range's records; `sink` writes a new range.
    ValueError if an input is out of order."""
    stats = ApplyStats()
    writer = _Writer(rule, sink, stats)
    pending = ChangeStream(changes, stats)
    for r in base:
        for path, entry in pending.take_below(r.min_path):
            if entry is not None:  # a tombstone of a path the base does not have: no-op
                writer.add(path, entry)
        head = pending.head
        if not writer.pending and (head is None or head[0] > r.max_path):
            writer.reuse(r)
            continue
        stats.loaded += 1
        for path, entry in apply_records(load(r), pending.take_through(r.max_path)):
            writer.add(path, entry)
    for path, entry in pending.rest():
        if entry is not None:
            writer.add(path, entry)
    writer.flush()
    return writer.out, stats


__all__ = ["ApplyStats", "ChangeStream", "RangeRef", "RangeSink", "SplitRule", "apply_changes",
           "apply_records"]
