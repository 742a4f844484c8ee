"""A group's segment refs: which segment file holds which index range.

Why: this list is what the raft server holds and reads through; compaction and the
segment writer only propose changes to it (new segments, a compaction result) and the
server applies them before any file is deleted. Kept oldest file first, ranges
ascending and non-overlapping: a newer segment that starts at or below an older one's
end overwrote those entries (a new leader truncated the log), so the older range is
limited or dropped (Ra's ``compact_segrefs``).

A ref's range may be sparse (the segment holds live entries only, or skipped entries
below the smallest live index); a reader asks the segment for an index in range.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

__all__ = [
    "SEGMENT_SUFFIX",
    "SegRef",
    "SegRefs",
    "compactable",
    "segment_file_name",
    "segment_number",
]

SEGMENT_SUFFIX: Final = ".segment"


def segment_file_name(number: int) -> str:
    return f"{number:08d}{SEGMENT_SUFFIX}"


def segment_number(name: str) -> int | None:
    """The number of ``NNNNNNNN.<ext>`` (any extension); None if it is not one."""
    stem = name.split(".", 1)[0]
    return int(stem) if stem.isdigit() else None


@dataclass(frozen=True, slots=True)
class SegRef:
    """A segment file (base name) and the index range the server reads from it."""

    file: str
    first: int
    last: int

    def __post_init__(self) -> None:
        if self.first > self.last:
            raise ValueError(f"empty segment ref {self}")

    def contains(self, index: int) -> bool:
        return self.first <= index <= self.last

    @property
    def number(self) -> int:
        n = segment_number(self.file)
        if n is None:
            raise ValueError(f"not a segment file name: {self.file}")
        return n


def _key(ref: SegRef) -> tuple[int, str]:
    n = segment_number(ref.file)
    return (n if n is not None else -1, ref.file)


def _add(refs: list[SegRef], new: SegRef, dropped: list[SegRef]) -> None:
    """Append ``new`` (the newest file): drop or limit older refs it overwrote."""
    while refs and refs[-1].first >= new.first:
        dropped.append(refs.pop())
    if refs and refs[-1].last >= new.first:
        old = refs.pop()
        refs.append(SegRef(old.file, old.first, new.first - 1))
    refs.append(new)


def compactable(refs: Iterable[SegRef], snapshot_index: int) -> list[SegRef]:
    """Segments whose every index is <= the snapshot index, never the newest one.

    The newest (active) segment is excluded even when it qualifies: the segment writer
    may be appending to it while compaction runs.
    """
    ordered = sorted(refs, key=_key)
    return [r for r in ordered[:-1] if r.last <= snapshot_index]


class SegRefs:
    """An immutable, ordered list of segment refs; updates return a new list."""

    __slots__ = ("_lasts", "_refs")

    def __init__(self, refs: Iterable[SegRef] = ()) -> None:
        out: list[SegRef] = []
        dropped: list[SegRef] = []
        for r in sorted(refs, key=_key):
            _add(out, r, dropped)
        self._refs: tuple[SegRef, ...] = tuple(out)
        self._lasts = [r.last for r in out]

    def __iter__(self) -> Iterator[SegRef]:
        return iter(self._refs)

    def __len__(self) -> int:
        return len(self._refs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SegRefs) and self._refs == other._refs

    def __hash__(self) -> int:
        return hash(self._refs)

    def __repr__(self) -> str:
        inner = ", ".join(f"{r.file}:{r.first}-{r.last}" for r in self._refs)
        return f"SegRefs([{inner}])"

    @property
    def refs(self) -> tuple[SegRef, ...]:
        return self._refs

    def files(self) -> list[str]:
        return [r.file for r in self._refs]

    def range(self) -> tuple[int, int] | None:
        if not self._refs:
            return None
        return self._refs[0].first, self._refs[-1].last

    def newest(self) -> SegRef | None:
        return self._refs[-1] if self._refs else None

    def find(self, index: int) -> SegRef | None:
        """The ref whose range holds ``index`` (the segment may still lack it)."""
        k = bisect.bisect_left(self._lasts, index)
        if k < len(self._refs) and self._refs[k].first <= index:
            return self._refs[k]
        return None

    def compactable(self, snapshot_index: int) -> list[SegRef]:
        return compactable(self._refs, snapshot_index)

    def update(self, new: Sequence[SegRef]) -> tuple[SegRefs, list[SegRef]]:
        """Apply the segment writer's new or grown refs (oldest first).

        Returns the new list and the refs that are gone entirely because newer entries
        overwrote their whole range (their files are unreferenced: delete them).
        """
        out = list(self._refs)
        dropped: list[SegRef] = []
        for r in sorted(new, key=_key):
            _add(out, r, dropped)
        kept = {r.file for r in out}
        res = SegRefs.__new__(SegRefs)
        res._refs = tuple(out)
        res._lasts = [r.last for r in out]
        gone = {r.file: r for r in dropped if r.file not in kept}
        return res, list(gone.values())

    def apply(
        self,
        unreferenced: Iterable[str],
        linked: Iterable[str],
        compacted: Iterable[SegRef],
    ) -> SegRefs:
        """Apply a compaction result (Ra's ``handle_compaction_result``).

        Drops unreferenced and linked files, replaces each compacted leader's ref.
        Do this before deleting the unreferenced files.
        """
        compacted = list(compacted)
        exclude = set(unreferenced) | set(linked) | {r.file for r in compacted}
        merged = [r for r in self._refs if r.file not in exclude] + compacted
        merged.sort(key=_key)
        res = SegRefs.__new__(SegRefs)
        res._refs = tuple(merged)
        res._lasts = [r.last for r in merged]
        return res

    def drop_below(self, first_index: int) -> tuple[SegRefs, list[SegRef]]:
        """Forget refs that end below ``first_index`` (after a snapshot install reset)."""
        keep = [r for r in self._refs if r.last >= first_index]
        gone = [r for r in self._refs if r.last < first_index]
        return SegRefs(keep), gone
