"""Metaranges as a store: cached, verified reads of range files, point lookups, ordered
iteration, writing a new metarange from a base and changes, and cached diffs.

`MetaRangeStore` owns the block-store directory of the branch tier and two bounded
LRU caches: decoded ranges (by total entries) and metarange range lists. Ranges and
metaranges are immutable, so a cached one never goes stale; a file that is damaged
raises `CorruptRange` on its first read and is never cached.

The merge that writes a metarange goes through a `MergeBackend`. `InProcessMerge`
runs `apply.apply_changes` here; `span_merge.SpanMerge` and `spark_merge.SparkMerge`
run the same merge cut into spans (`spans.py`: the same files, byte for byte);
`SizedMerge` picks one of two by the merge's shape (`span_merge.spark_pays`: the base
entries it reads against a threshold measured on this machine, docs/branches.md).
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from sediment.actors.branches import rangefile as rf
from sediment.actors.branches.apply import ApplyStats, RangeRef, SplitRule, apply_changes
from sediment.actors.branches.diff import Diff, diff_ranges
from sediment.actors.branches.entry import Entry, Record


class MergeBackend(Protocol):
    def apply(self, store: MetaRangeStore, repo: str, base_id: str,
              changes: Iterable[Record]) -> tuple[str, ApplyStats]:
        """Write the metarange of `changes` (sorted, tombstones allowed) applied onto
        metarange `base_id`; its id and what the merge did."""


class InProcessMerge:
    """The merge in this process (`apply.apply_changes`), for any input size."""

    def apply(self, store: MetaRangeStore, repo: str, base_id: str,
              changes: Iterable[Record]) -> tuple[str, ApplyStats]:
        base = store.ranges(repo, base_id)
        ranges, stats = apply_changes(base, lambda r: store.load(repo, r), changes,
                                      store.rule, _Sink(store, repo))
        return store.write_metarange(repo, ranges), stats


class SizedMerge:
    """`large` for merges `span_merge.spark_pays` sends to Spark (at least `threshold`
    base entries read, at most half as many changes), `small` (default in-process) for
    the rest."""

    def __init__(self, large: MergeBackend, threshold: int,
                 small: MergeBackend | None = None) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 0:
            raise ValueError(f"threshold must be a non-negative int: {threshold!r}")
        self.large = large
        self.small: MergeBackend = small or InProcessMerge()
        self.threshold = threshold

    def apply(self, store: MetaRangeStore, repo: str, base_id: str,
              changes: Iterable[Record]) -> tuple[str, ApplyStats]:
        from sediment.actors.branches.span_merge import spark_pays

        listed = list(changes)
        large = spark_pays(store.ranges(repo, base_id), [p for p, _ in listed], self.threshold)
        backend = self.large if large else self.small
        return backend.apply(store, repo, base_id, listed)


@dataclass(frozen=True)
class _Sink:
    store: MetaRangeStore
    repo: str

    def write(self, entries: Sequence[tuple[str, Entry]]) -> RangeRef:
        return self.store.write_range(self.repo, entries)


class MetaRangeStore:
    """Range files of every repository under `root` (the block store directory)."""

    def __init__(self, root: str, rule: SplitRule | None = None,
                 cache_entries: int = 2_000_000, cache_metaranges: int = 256,
                 cache_diffs: int = 64, diff_cache_limit: int = 100_000,
                 merge: MergeBackend | None = None) -> None:
        self.root = root
        self.rule = rule or SplitRule()
        self.merge: MergeBackend = merge or InProcessMerge()
        self._lock = threading.Lock()
        self._ranges: OrderedDict[tuple[str, str], list[Record]] = OrderedDict()
        self._cached_entries = 0
        self._cache_entries = cache_entries
        self._metaranges: OrderedDict[tuple[str, str], list[RangeRef]] = OrderedDict()
        self._cache_metaranges = cache_metaranges
        self._diffs: OrderedDict[tuple[str, str, str], list[Diff]] = OrderedDict()
        self._cache_diffs = cache_diffs
        self._diff_cache_limit = diff_cache_limit
        self.reads = 0  # range files read (cache misses), for tests and benchmarks

    # ---- files ------------------------------------------------------------------------

    def write_range(self, repo: str, entries: Sequence[tuple[str, Entry]]) -> RangeRef:
        records: list[Record] = list(entries)
        return rf.write_range(self.root, repo, records)

    def write_metarange(self, repo: str, ranges: Sequence[RangeRef]) -> str:
        mr = rf.write_metarange(self.root, repo, ranges)
        with self._lock:
            self._put_metarange((repo, mr), list(ranges))
        return mr

    def empty(self, repo: str) -> str:
        """The id of the metarange with no ranges (a new repository's first commit)."""
        return self.write_metarange(repo, [])

    def ranges(self, repo: str, metarange_id: str) -> list[RangeRef]:
        key = (repo, metarange_id)
        with self._lock:
            cached = self._metaranges.get(key)
            if cached is not None:
                self._metaranges.move_to_end(key)
                return cached
        ranges = rf.read_metarange(self.root, repo, metarange_id)
        with self._lock:
            self._put_metarange(key, ranges)
        return ranges

    def _put_metarange(self, key: tuple[str, str], ranges: list[RangeRef]) -> None:
        self._metaranges[key] = ranges
        self._metaranges.move_to_end(key)
        while len(self._metaranges) > self._cache_metaranges:
            self._metaranges.popitem(last=False)

    def load(self, repo: str, r: RangeRef) -> list[Record]:
        key = (repo, r.id)
        with self._lock:
            cached = self._ranges.get(key)
            if cached is not None:
                self._ranges.move_to_end(key)
                return cached
        records = rf.read_range(self.root, repo, r.id)
        with self._lock:
            self.reads += 1
            if key not in self._ranges:
                self._ranges[key] = records
                self._cached_entries += len(records)
            while self._cached_entries > self._cache_entries and len(self._ranges) > 1:
                _, dropped = self._ranges.popitem(last=False)
                self._cached_entries -= len(dropped)
        return records

    # ---- reads ------------------------------------------------------------------------

    def get(self, repo: str, metarange_id: str, path: str) -> Entry | None:
        ranges = self.ranges(repo, metarange_id)
        i = bisect.bisect_left([r.max_path for r in ranges], path)
        if i == len(ranges) or ranges[i].min_path > path:
            return None
        records = self.load(repo, ranges[i])
        j = bisect.bisect_left(records, path, key=lambda rec: rec[0])
        if j < len(records) and records[j][0] == path:
            return records[j][1]
        return None

    def iterate(self, repo: str, metarange_id: str, start: str = "") -> Iterator[Record]:
        """Every record from path `start` on, in order (ranges read as reached)."""
        ranges = self.ranges(repo, metarange_id)
        i = bisect.bisect_left([r.max_path for r in ranges], start)
        for r in ranges[i:]:
            records = self.load(repo, r)
            j = bisect.bisect_left(records, start, key=lambda rec: rec[0]) if start else 0
            yield from records[j:]

    def lookup(self, repo: str, metarange_id: str) -> Callable[[str], Entry | None]:
        """A point lookup for paths asked in increasing order: one pass over the
        ranges, each read at most once."""
        ranges = self.ranges(repo, metarange_id)
        state = {"i": 0}

        def get(path: str) -> Entry | None:
            i = state["i"]
            while i < len(ranges) and ranges[i].max_path < path:
                i += 1
            state["i"] = i
            if i == len(ranges) or ranges[i].min_path > path:
                return None
            records = self.load(repo, ranges[i])
            j = bisect.bisect_left(records, path, key=lambda rec: rec[0])
            return records[j][1] if j < len(records) and records[j][0] == path else None

        return get

    def count(self, repo: str, metarange_id: str) -> int:
        return sum(r.count for r in self.ranges(repo, metarange_id))

    # ---- writes and diffs -------------------------------------------------------------

    def apply(self, repo: str, base_id: str,
              changes: Iterable[Record]) -> tuple[str, ApplyStats]:
        return self.merge.apply(self, repo, base_id, changes)

    def diff(self, repo: str, left_id: str, right_id: str, start: str = "") -> Iterator[Diff]:
        """diff(left -> right) from `start` on. The whole diff of two metaranges is kept
        (both are immutable) when it has at most `diff_cache_limit` paths."""
        if left_id == right_id:
            return iter(())
        key = (repo, left_id, right_id)
        with self._lock:
            cached = self._diffs.get(key)
            if cached is not None:
                self._diffs.move_to_end(key)
        if cached is None:
            cached = self._compute_diff(repo, left_id, right_id)
        if cached is None:
            return diff_ranges(self.ranges(repo, left_id), self.ranges(repo, right_id),
                               lambda r: self.load(repo, r), start)
        i = bisect.bisect_left(cached, start, key=lambda d: d.path)
        return iter(cached[i:])

    def _compute_diff(self, repo: str, left_id: str, right_id: str) -> list[Diff] | None:
        out: list[Diff] = []
        for d in diff_ranges(self.ranges(repo, left_id), self.ranges(repo, right_id),
                             lambda r: self.load(repo, r)):
            if len(out) >= self._diff_cache_limit:
                return None
            out.append(d)
        with self._lock:
            self._diffs[(repo, left_id, right_id)] = out
            while len(self._diffs) > self._cache_diffs:
                self._diffs.popitem(last=False)
        return out

    def forget(self) -> None:
        """Drop every cache (tests that damage files on disk)."""
        with self._lock:
            self._ranges.clear()
            self._cached_entries = 0
            self._metaranges.clear()
            self._diffs.clear()


__all__ = ["InProcessMerge", "MergeBackend", "MetaRangeStore", "SizedMerge"]
