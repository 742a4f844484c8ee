"""The metarange merge cut into spans (`spans.py`): for any base, changes and cut, the
spans run apart and stitched give exactly `apply.apply_changes`'s ranges and stats.
Hypothesis over small split rules (so ranges end often and spans start mid-range),
seeded larger inputs with clustered deletes, the stitch's three cases made to happen
on purpose (a span taken as it is, joined at a sync point, run to its end), and the
planner's cuts."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sediment.actors.branches.apply import ApplyStats, RangeRef, SplitRule, apply_changes
from sediment.actors.branches.entry import Entry, Record
from sediment.actors.branches.spans import Span, SpanResult, plan_spans, run_span, stitch

SMALL = SplitRule(min_entries=2, max_entries=8, raggedness=3)


def e(tag: str) -> Entry:
    return Entry(f"s3://b/{tag}", len(tag), tag)


class MemorySink:
    """Ranges kept in memory, named by a hash of their entries (as files are)."""

    def __init__(self) -> None:
        self.files: dict[str, list[Record]] = {}
        self.writes = 0

    def write(self, entries: Sequence[tuple[str, Entry]]) -> RangeRef:
        records: list[Record] = list(entries)
        rid = hashlib.blake2b(repr(records).encode(), digest_size=8).hexdigest()
        self.files[rid] = records
        self.writes += 1
        return RangeRef(rid, records[0][0], records[-1][0], len(records), 0)

    def load(self, r: RangeRef) -> list[Record]:
        return self.files[r.id]


def build(sink: MemorySink, content: dict[str, Entry], rule: SplitRule) -> list[RangeRef]:
    return apply_changes([], sink.load, sorted(content.items()), rule, sink)[0]


def spans_at(base: Sequence[RangeRef], cuts: Sequence[int]) -> list[Span]:
    points = [0, *sorted(set(cuts)), len(base)]
    return [Span(j, a, b, base[a].min_path if a else "",
                 base[b].min_path if b < len(base) else None)
            for j, (a, b) in enumerate(zip(points, points[1:], strict=False))]


def slice_of(changes: Sequence[Record], span: Span) -> list[Record]:
    return [c for c in changes if span.holds(c[0])]


def by_spans(sink: MemorySink, base: list[RangeRef], changes: list[Record],
             spans: list[Span], rule: SplitRule) -> tuple[list[RangeRef], ApplyStats,
                                                          list[SpanResult]]:
    results = [run_span(base, s, sink.load, slice_of(changes, s), rule, sink) for s in spans]
    ranges, stats = stitch(base, spans, results, sink.load,
                           lambda s: slice_of(changes, s), rule, sink)
    return ranges, stats, results


def check(content: dict[str, Entry], changes: list[Record], cuts: Sequence[int],
          rule: SplitRule) -> list[SpanResult]:
    sink = MemorySink()
    base = build(sink, content, rule)
    want = apply_changes(base, sink.load, changes, rule, sink)
    cuts = [c for c in cuts if 0 < c < len(base)]
    got_ranges, got_stats, results = by_spans(sink, base, changes, spans_at(base, cuts), rule)
    assert got_ranges == want[0]
    assert got_stats == want[1]
    return results


paths = st.text(alphabet="abcdé/", min_size=1, max_size=4)
entries = st.builds(e, st.sampled_from(["x", "y", "z"]))
contents = st.dictionaries(paths, entries, max_size=60)
change_sets = st.dictionaries(paths, st.none() | entries, max_size=40).map(
    lambda d: sorted(d.items()))
rules = st.sampled_from([SMALL, SplitRule(1, 3, 2), SplitRule(3, 5, 1), SplitRule(1, 1, 1),
                         SplitRule(4, 16, 5)])


@settings(max_examples=300, deadline=None)
@given(contents, change_sets, st.lists(st.integers(1, 30), max_size=8), rules)
def test_any_cut_stitches_to_the_sequential_merge(content: dict[str, Entry],
                                                  changes: list[Record], cuts: list[int],
                                                  rule: SplitRule) -> None:
    check(content, changes, cuts, rule)


@settings(max_examples=100, deadline=None)
@given(contents, change_sets, st.integers(1, 12), rules)
def test_planned_spans_stitch_to_the_sequential_merge(content: dict[str, Entry],
                                                      changes: list[Record], count: int,
                                                      rule: SplitRule) -> None:
    sink = MemorySink()
    base = build(sink, content, rule)
    want = apply_changes(base, sink.load, changes, rule, sink)
    spans = plan_spans(base, [p for p, _ in changes], count)
    assert len(spans) <= count and spans[0].first == 0 and spans[-1].stop == len(base)
    assert all(a.stop == b.first and a.hi == b.lo for a, b in zip(spans, spans[1:],
                                                                   strict=False))
    got = by_spans(sink, base, changes, spans, rule)
    assert (got[0], got[1]) == want


@pytest.mark.parametrize("seed", range(12))
def test_seeded_large_inputs_with_clustered_deletes(seed: int) -> None:
    rng = random.Random(seed)
    rule = SplitRule(min_entries=4, max_entries=64, raggedness=16)
    content = {f"{p}/{i:05d}": e(str(i % 7)) for p in ("a", "b", "c") for i in range(700)}
    doomed = rng.choice("abc")
    changes: dict[str, Entry | None] = {p: None for p in content if p.startswith(doomed)}
    for _ in range(rng.randrange(0, 300)):
        path = f"{rng.choice('abcd')}/{rng.randrange(900):05d}"
        changes[path] = rng.choice([None, e("new"), e(str(rng.randrange(3)))])
    sink = MemorySink()
    base = build(sink, content, rule)
    cuts = rng.sample(range(1, len(base)), min(len(base) - 1, rng.randrange(1, 20)))
    check(content, sorted(changes.items()), cuts, rule)


def content_of(n: int, prefix: str = "k") -> dict[str, Entry]:
    return {f"{prefix}{i:04d}": e(str(i)) for i in range(n)}


def test_the_stitch_joins_a_span_at_its_first_sync_point() -> None:
    """A change in the first span leaves its writer holding entries at the cut; the
    second span's early ranges are rewritten here, the rest are taken as they are."""
    rule = SplitRule(min_entries=3, max_entries=6, raggedness=4)
    content = content_of(60)
    sink = MemorySink()
    base = build(sink, content, rule)
    cut = len(base) // 2
    last_of_first = base[cut - 1]
    changes: list[Record] = [(last_of_first.max_path + "x", e("inserted"))]
    results = check(content, changes, [cut], rule)
    assert results[0].pending, "the first span must end holding entries"
    assert results[1].syncs, "the second span must have sync points to join at"


def test_a_span_without_a_common_sync_point_is_run_to_its_end() -> None:
    """With max_entries = 1 every entry closes a range, so a span starting from a held
    entry shifts every range of the span: no shared position with an empty writer
    until the end; what it still holds goes on to the next span."""
    rule = SplitRule(min_entries=2, max_entries=2, raggedness=1 << 30)
    content = content_of(21)
    changes: list[Record] = [("k0000x", e("odd"))]  # one extra entry: every pair shifts
    results = check(content, changes, [1, 4, 7], rule)
    assert results[0].pending


def test_spans_refuse_changes_outside_them() -> None:
    sink = MemorySink()
    base = build(sink, content_of(40), SMALL)
    spans = spans_at(base, [2])
    with pytest.raises(ValueError, match="outside span"):
        run_span(base, spans[1], sink.load, [("a", e("1"))], SMALL, sink)
    with pytest.raises(ValueError, match="do not match"):
        stitch(base, spans, [], sink.load, lambda s: [], SMALL, sink)


def test_plan_spans_weighs_the_ranges_changes_touch() -> None:
    sink = MemorySink()
    rule = SplitRule(min_entries=4, max_entries=10, raggedness=1 << 30)
    base = build(sink, content_of(100), rule)  # ten ranges of ten
    assert len(base) == 10
    assert plan_spans(base, [], 4) == [Span(0, 0, 10, "", None)]  # nothing to spread
    touched = [f"k{i:04d}" for i in range(0, 100, 10)]  # one change in every range
    spans = plan_spans(base, touched, 5)
    assert [(s.first, s.stop) for s in spans] == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]
    # the work is where the changes are: the cuts follow it
    spans = plan_spans(base, touched[5:], 5)
    assert spans[0].stop >= 5 and len(spans) == 5
    assert plan_spans([], ["a", "b"], 3) == [Span(0, 0, 0, "", None)]
    with pytest.raises(ValueError):
        plan_spans(base, touched, 0)
