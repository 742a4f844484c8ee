"""The metarange merge cut into spans that run apart and are stitched back into exactly
what `apply.apply_changes` writes (pure; the Spark backend runs the spans on executors).

`apply_changes` is one pass over the base ranges in order. The only state it carries
from one base range to the next is what its writer holds: the entries of the range it
is filling (a base range is reused whole only when the writer holds nothing, and where
a new range ends depends on how many entries it holds). So:

- `plan_spans` cuts the base ranges into consecutive spans of about equal work. Span j
  takes the changes from its first base range's first path (from the start, for the
  first span) up to the next span's first path (to the end, for the last).
- `run_span` runs the pass over one span as if the writer held nothing at its start,
  does not close its last range, and records every *sync point*: a position at which
  its writer holds nothing (a base range about to be decided, or just after a range was
  closed at a path), with how many ranges it had written and its counts there.
- `stitch` takes the spans in order. A span whose predecessor ended holding nothing ran
  from the true state, so its ranges are taken as they are. Otherwise the pass runs
  here, from the entries held, over that span, until it holds nothing at a position the
  span recorded as a sync point: there both passes are in the same state at the same
  input, so the span's later ranges are exactly the pass's and are taken. With
  content-defined boundaries that is usually the next boundary path. A span without
  such a position is run here to its end, and its held entries go on to the next.

The result (every range, the metarange's list, the stats) equals `apply_changes`'s for
any cut; only how much work is done twice depends on the cut. Ranges a span wrote
before the position the stitch joined it at are written for nothing: files no
metarange names, collected by the garbage rules like any other orphan.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sediment.actors.branches.apply import (
    ApplyStats,
    ChangeStream,
    RangeRef,
    RangeSink,
    SplitRule,
    apply_records,
)
from sediment.actors.branches.entry import Entry, Record

Pos = tuple[int, str | None]
"""Where a pass is: (index of a base range, None) just before that range is decided, or
(the index of the range being worked on, path) just after a range was closed at path
(the base's length: the changes after the last base range)."""

Load = Callable[[RangeRef], Sequence[Record]]


@dataclass(frozen=True, slots=True)
class Counts:
    """`ApplyStats` but for the changes (counted per span's input)."""

    reused: int = 0
    loaded: int = 0
    written: int = 0
    entries_written: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(self.reused + other.reused, self.loaded + other.loaded,
                      self.written + other.written,
                      self.entries_written + other.entries_written)

    def __sub__(self, other: Counts) -> Counts:
        return Counts(self.reused - other.reused, self.loaded - other.loaded,
                      self.written - other.written,
                      self.entries_written - other.entries_written)


@dataclass(frozen=True, slots=True)
class Span:
    """Base ranges [first, stop) and the changes with paths in [lo, hi) (hi None: to
    the end)."""

    index: int
    first: int
    stop: int
    lo: str
    hi: str | None

    def holds(self, path: str) -> bool:
        return path >= self.lo and (self.hi is None or path < self.hi)


@dataclass(frozen=True, slots=True)
class SpanResult:
    """What a span's pass wrote (`ranges`), the entries it held at its end
    (`pending`), its counts, its sync points (position -> ranges written and counts
    there) and how many changes it read."""

    index: int
    ranges: tuple[RangeRef, ...]
    pending: tuple[tuple[str, Entry], ...]
    counts: Counts
    syncs: Mapping[Pos, tuple[int, Counts]]
    changes: int


def plan_spans(base: Sequence[RangeRef], change_paths: Sequence[str],
               count: int) -> list[Span]:
    """At most `count` spans of about equal work: a base range's work is its changes
    (those from its first path up to the next range's), plus its entries if a change
    falls inside it (it is read and rewritten). `change_paths` sorted."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive int: {count!r}")
    n = len(base)
    weights = []
    for i, r in enumerate(base):
        lo = bisect.bisect_left(change_paths, r.min_path) if i else 0
        hi = (bisect.bisect_left(change_paths, base[i + 1].min_path) if i + 1 < n
              else len(change_paths))
        inside = (bisect.bisect_right(change_paths, r.max_path)
                  - bisect.bisect_left(change_paths, r.min_path))
        weights.append(hi - lo + (r.count if inside else 0))
    total = sum(weights)
    cuts = [0]
    done = 0
    for i, w in enumerate(weights[:-1]):
        done += w
        if len(cuts) < count and done * count >= total * len(cuts) and total:
            cuts.append(i + 1)
    cuts.append(n)
    return [Span(j, a, b, base[a].min_path if a else "", base[b].min_path if b < n else None)
            for j, (a, b) in enumerate(zip(cuts, cuts[1:], strict=False))]


class _Stop(Exception):
    """Control flow inside `_walk`: the pass stops at `pos` (never escapes it)."""

    def __init__(self, pos: Pos) -> None:
        super().__init__(pos)
        self.pos = pos


AtSync = Callable[[Pos, int, Counts], bool]
"""Told of each position where the writer holds nothing; True stops the pass there."""


@dataclass
class _Writer:
    rule: SplitRule
    sink: RangeSink
    at_sync: AtSync
    pending: list[tuple[str, Entry]]
    out: list[RangeRef] = field(default_factory=list)
    counts: Counts = field(default_factory=Counts)
    step: int = 0
    last: str | None = None

    def __post_init__(self) -> None:
        self.last = self.pending[-1][0] if self.pending else None

    def add(self, path: str, entry: Entry) -> None:
        if self.last is not None and path <= self.last:
            raise ValueError(f"entries out of order: {path!r:.80} after {self.last!r:.80}")
        self.last = path
        self.pending.append((path, entry))
        if self.rule.breaks_after(path, len(self.pending)):
            self.flush()
            self.synced((self.step, path))

    def flush(self) -> None:
        if self.pending:
            self.out.append(self.sink.write(self.pending))
            self.counts += Counts(written=1, entries_written=len(self.pending))
            self.pending = []

    def reuse(self, r: RangeRef) -> None:
        if self.last is not None and r.min_path <= self.last:
            raise ValueError(f"base ranges out of order at {r.min_path!r:.80}")
        self.out.append(r)
        self.last = r.max_path
        self.counts += Counts(reused=1)

    def synced(self, pos: Pos) -> None:
        if self.at_sync(pos, len(self.out), self.counts):
            raise _Stop(pos)


@dataclass(frozen=True, slots=True)
class _Walked:
    ranges: list[RangeRef]
    pending: list[tuple[str, Entry]]
    counts: Counts
    changes: int
    stopped: Pos | None


def _walk(base: Sequence[RangeRef], span: Span, load: Load, changes: Iterable[Record],
          rule: SplitRule, sink: RangeSink, carry: Sequence[tuple[str, Entry]],
          at_sync: AtSync) -> _Walked:
    """`apply_changes`'s pass over `span` (base ranges `base[span.first:span.stop]`),
    the writer holding `carry` at its start; it stops where `at_sync` says so."""
    w = _Writer(rule, sink, at_sync, list(carry))
    seen = ApplyStats()
    stream = ChangeStream((c for c in changes if _inside(span, c)), seen)
    try:
        for i in range(span.first, span.stop):
            r = base[i]
            w.step = i
            for path, entry in stream.take_below(r.min_path):
                if entry is not None:  # a tombstone of a path the base does not have
                    w.add(path, entry)
            if not w.pending:
                w.synced((i, None))
            head = stream.head
            if not w.pending and (head is None or head[0] > r.max_path):
                w.reuse(r)
                continue
            w.counts += Counts(loaded=1)
            for path, entry in apply_records(load(r), stream.take_through(r.max_path)):
                w.add(path, entry)
        w.step = span.stop
        for path, entry in stream.rest():
            if entry is not None:
                w.add(path, entry)
    except _Stop as stop:
        return _Walked(w.out, w.pending, w.counts, seen.changes, stop.pos)
    return _Walked(w.out, w.pending, w.counts, seen.changes, None)


def _inside(span: Span, change: Record) -> bool:
    if not span.holds(change[0]):
        raise ValueError(f"change {change[0]!r:.80} is outside span {span.index}")
    return True


def run_span(base: Sequence[RangeRef], span: Span, load: Load, changes: Iterable[Record],
             rule: SplitRule, sink: RangeSink) -> SpanResult:
    """The pass over `span` from a writer holding nothing, with its sync points.
    `changes`: the span's changes, sorted (ValueError for one outside the span)."""
    syncs: dict[Pos, tuple[int, Counts]] = {}

    def record(pos: Pos, written: int, counts: Counts) -> bool:
        syncs[pos] = (written, counts)
        return False

    walked = _walk(base, span, load, changes, rule, sink, (), record)
    return SpanResult(span.index, tuple(walked.ranges), tuple(walked.pending),
                      walked.counts, syncs, walked.changes)


def _known(syncs: Mapping[Pos, tuple[int, Counts]]) -> AtSync:
    def at(pos: Pos, written: int, counts: Counts) -> bool:
        return pos in syncs
    return at


def stitch(base: Sequence[RangeRef], spans: Sequence[Span], results: Sequence[SpanResult],
           load: Load, changes_of: Callable[[Span], Iterable[Record]], rule: SplitRule,
           sink: RangeSink) -> tuple[list[RangeRef], ApplyStats]:
    """The ranges and stats `apply_changes` gives for the whole input, from the spans'
    results (in span order); `changes_of(span)` reads a span's changes again for the
    spans that must be re-run here from a held state."""
    if [s.index for s in spans] != [r.index for r in results]:
        raise ValueError("span results do not match the spans")
    out: list[RangeRef] = []
    counts = Counts()
    carry: Sequence[tuple[str, Entry]] = ()
    for span, result in zip(spans, results, strict=True):
        if not carry:
            out += result.ranges
            counts += result.counts
            carry = result.pending
            continue
        walked = _walk(base, span, load, changes_of(span), rule, sink, carry,
                       _known(result.syncs))
        out += walked.ranges
        counts += walked.counts
        if walked.stopped is None:
            carry = walked.pending
            continue
        written, there = result.syncs[walked.stopped]
        out += result.ranges[written:]
        counts += result.counts - there
        carry = result.pending
    if carry:
        out.append(sink.write(list(carry)))
        counts += Counts(written=1, entries_written=len(carry))
    changes = sum(r.changes for r in results)
    return out, ApplyStats(changes, counts.reused, counts.loaded, counts.written,
                           counts.entries_written)


__all__ = ["Counts", "Load", "Pos", "Span", "SpanResult", "plan_spans", "run_span", "stitch"]
