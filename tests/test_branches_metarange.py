"""Metaranges (pure merge and diff cores, Parquet range files, the store): the merge
rule against a model, unchanged ranges shared between metaranges (Graveler's
content-defined boundaries), diffs that skip shared ranges, DiffUncommitted as a join,
and corrupt or missing range files as typed errors."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sediment.actors.branches import rangefile as rf
from sediment.actors.branches.apply import RangeRef, SplitRule, apply_changes, apply_records
from sediment.actors.branches.diff import Diff, classify, diff_ranges, join_uncommitted
from sediment.actors.branches.entry import Entry, Record
from sediment.actors.branches.errors import CorruptRange, MissingRange
from sediment.actors.branches.merge import (
    in_prefix,
    merge_layers,
    page,
    split_at,
    start_after,
    visible,
    window_bound,
)
from sediment.actors.branches.metarange import MetaRangeStore

SMALL = SplitRule(min_entries=2, max_entries=8, raggedness=3)


def e(tag: str) -> Entry:
    return Entry(f"s3://b/{tag}", len(tag), tag)


def model_apply(base: dict[str, Entry], changes: Sequence[Record]) -> dict[str, Entry]:
    out = dict(base)
    for path, entry in changes:
        if entry is None:
            out.pop(path, None)
        else:
            out[path] = entry
    return out


def model_diff(left: dict[str, Entry], right: dict[str, Entry]) -> list[Diff]:
    out = []
    for p in sorted(set(left) | set(right)):
        d = classify(p, left.get(p), right.get(p))
        if d is not None:
            out.append(d)
    return out


paths = st.text(alphabet="abcdé/", min_size=1, max_size=4)
entries = st.builds(e, st.sampled_from(["x", "y", "z"]))
contents = st.dictionaries(paths, entries, max_size=40)
change_sets = st.dictionaries(paths, st.none() | entries, max_size=25).map(
    lambda d: sorted(d.items()))


def store(tmp: Path, rule: SplitRule = SMALL) -> MetaRangeStore:
    return MetaRangeStore(str(tmp), rule)


def build(s: MetaRangeStore, content: dict[str, Entry]) -> str:
    return s.apply("repo", s.empty("repo"), sorted(content.items()))[0]


def read_all(s: MetaRangeStore, mr: str) -> dict[str, Entry]:
    out = {}
    for p, entry in s.iterate("repo", mr):
        assert entry is not None  # a snapshot metarange holds no tombstones
        out[p] = entry
    return out


# ---- the merge of layers ----------------------------------------------------------------


def test_merge_layers_newest_first_with_tombstones() -> None:
    staging: list[Record] = [("a", e("1")), ("c", None)]
    sealed: list[Record] = [("a", e("old")), ("b", None), ("c", e("2"))]
    committed: list[Record] = [("b", e("3")), ("d", e("4"))]
    merged = list(merge_layers([staging, sealed, committed]))
    assert merged == [("a", e("1")), ("b", None), ("c", None), ("d", e("4"))]
    assert list(visible(merged)) == [("a", e("1")), ("d", e("4"))]


def test_paging_helpers() -> None:
    recs: list[Record] = [("a/1", e("1")), ("a/2", e("2")), ("b", e("3"))]
    assert list(in_prefix(recs, "a/")) == recs[:2]
    assert start_after("a/", "a/1") == "a/1\0" and start_after("b", "a") == "b"
    assert page(visible(recs), 2) == ([("a/1", e("1")), ("a/2", e("2"))], True)
    assert window_bound([(recs[:2], True), (recs, False)]) == "a/2"
    assert window_bound([(recs, False)]) is None
    assert split_at(recs, "a/2") == (recs[:2], recs[2:])


# ---- apply: the merge rule and range sharing ----------------------------------------------


@settings(max_examples=60, deadline=None)
@given(contents, change_sets)
def test_apply_equals_the_model(tmp_path_factory: pytest.TempPathFactory,
                                base: dict[str, Entry], changes: list[Record]) -> None:
    s = store(tmp_path_factory.mktemp("mr"))
    mr = build(s, base)
    assert read_all(s, mr) == base
    new, _ = s.apply("repo", mr, changes)
    expected = model_apply(base, changes)
    assert read_all(s, new) == expected
    assert dict(apply_records(sorted(base.items()), changes)) == expected
    for path in {p for p, _ in changes} | set(base):
        assert s.get("repo", new, path) == expected.get(path)


def test_unchanged_ranges_are_shared_and_not_read(tmp_path: Path) -> None:
    s = store(tmp_path, SplitRule(min_entries=16, max_entries=256, raggedness=16))
    base = {f"k{i:05d}": e(str(i)) for i in range(5000)}
    mr = build(s, base)
    ranges = s.ranges("repo", mr)
    assert len(ranges) > 50
    new, stats = s.apply("repo", mr, [("k02500", None), ("k02500x", e("new"))])
    after = s.ranges("repo", new)
    shared = {r.id for r in ranges} & {r.id for r in after}
    assert len(shared) >= len(ranges) - 3  # the boundaries realign right after the change
    assert stats.loaded <= 3 and stats.reused >= len(ranges) - 3
    assert read_all(s, new) == model_apply(base, [("k02500", None), ("k02500x", e("new"))])
    same, stats = s.apply("repo", mr, [])
    assert same == mr and stats.loaded == 0  # no change: the very same metarange


def test_same_entries_give_the_same_ids(tmp_path: Path) -> None:
    s = store(tmp_path)
    content = {f"p{i}": e(str(i)) for i in range(30)}
    first = build(s, content)
    again = build(s, content)
    assert first == again
    other = store(tmp_path / "elsewhere")
    assert build(other, content) == first


def test_apply_refuses_unsorted_changes(tmp_path: Path) -> None:
    s = store(tmp_path)
    with pytest.raises(ValueError):
        s.apply("repo", s.empty("repo"), [("b", e("1")), ("a", e("2"))])


# ---- diffs ----------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(contents, change_sets)
def test_diff_ranges_equals_the_model(tmp_path_factory: pytest.TempPathFactory,
                                      base: dict[str, Entry], changes: list[Record]) -> None:
    s = store(tmp_path_factory.mktemp("mr"))
    left = build(s, base)
    right, _ = s.apply("repo", left, changes)
    expected = model_diff(base, model_apply(base, changes))
    assert list(s.diff("repo", left, right)) == expected
    assert list(diff_ranges(s.ranges("repo", left), s.ranges("repo", right),
                            lambda r: s.load("repo", r), "b")) == [
        d for d in expected if d.path >= "b"]


def test_diff_skips_shared_ranges_unread(tmp_path: Path) -> None:
    s = store(tmp_path, SplitRule(min_entries=16, max_entries=256, raggedness=16))
    left = build(s, {f"k{i:05d}": e(str(i)) for i in range(3000)})
    right, _ = s.apply("repo", left, [("k01000", e("changed"))])
    s.forget()
    s.reads = 0
    diffs = list(diff_ranges(s.ranges("repo", left), s.ranges("repo", right),
                             lambda r: s.load("repo", r)))
    assert diffs == [Diff("k01000", "changed", e("1000"), e("changed"))]
    assert s.reads <= 4


@settings(max_examples=60, deadline=None)
@given(contents, change_sets, change_sets)
def test_join_uncommitted_is_the_branch_minus_its_commit(
        tmp_path_factory: pytest.TempPathFactory, committed: dict[str, Entry],
        compacted_changes: list[Record], staged: list[Record]) -> None:
    s = store(tmp_path_factory.mktemp("mr"))
    k = build(s, committed)
    c, _ = s.apply("repo", k, compacted_changes)
    view = model_apply(model_apply(committed, compacted_changes), staged)
    got = list(join_uncommitted(staged, s.diff("repo", k, c), s.lookup("repo", k)))
    assert got == model_diff(committed, view)


# ---- range files ------------------------------------------------------------------------------


def test_a_damaged_range_file_is_a_typed_error(tmp_path: Path) -> None:
    s = store(tmp_path)
    mr = build(s, {"a": e("1"), "b": e("2"), "c": e("3")})
    r = s.ranges("repo", mr)[0]
    path = rf.file_path(str(tmp_path), "repo", "range", r.id)
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:-10] + bytes(10))
    s.forget()
    with pytest.raises(CorruptRange) as info:
        s.get("repo", mr, "a")
    assert info.value.range_id == r.id
    os.unlink(path)
    with pytest.raises(MissingRange):
        s.get("repo", mr, "a")


def test_a_file_that_hashes_right_but_is_not_a_range_is_corrupt(tmp_path: Path) -> None:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"x": [1]}), sink)
    file_id, _ = rf.write_file(str(tmp_path), "repo", "range", sink.getvalue().to_pybytes())
    with pytest.raises(CorruptRange, match="schema"):
        rf.read_range(str(tmp_path), "repo", file_id)
    not_parquet, _ = rf.write_file(str(tmp_path), "repo", "metarange", b"hello")
    with pytest.raises(CorruptRange):
        rf.read_metarange(str(tmp_path), "repo", not_parquet)


def test_unsorted_or_overlapping_inputs_are_refused() -> None:
    with pytest.raises(ValueError):
        rf.encode_range([("b", e("1")), ("a", e("1"))])
    with pytest.raises(ValueError):
        rf.encode_metarange([RangeRef("x", "a", "c", 1, 1), RangeRef("y", "b", "d", 1, 1)])
    with pytest.raises(ValueError):
        apply_changes([], lambda r: [], [("b", e("1")), ("b", e("2"))], SMALL,
                      _NoSink())


class _NoSink:
    def write(self, entries: Sequence[tuple[str, Entry]]) -> RangeRef:
        return RangeRef("x", entries[0][0], entries[-1][0], len(entries), 0)
