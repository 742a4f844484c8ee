"""The span merge over files (`span_merge.py`, no Spark): for seeded inputs it writes
the very files the in-process merge writes (same metarange id, same range bytes, same
stats) for every span count; the size measure the threshold compares; `SizedMerge`'s
choice; bad requests and damaged inputs as typed errors that publish nothing."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from sediment.actors.branches import rangefile as rf
from sediment.actors.branches import span_merge as sm
from sediment.actors.branches.apply import ApplyStats, SplitRule
from sediment.actors.branches.entry import Entry, Record
from sediment.actors.branches.errors import CorruptRange, MergeFailed, MissingRange
from sediment.actors.branches.metarange import InProcessMerge, MetaRangeStore, SizedMerge
from sediment.actors.branches.span_merge import RangeMergeRequest, SpanMerge

R = "repo1"
RULE = SplitRule(min_entries=8, max_entries=128, raggedness=32)


def e(tag: str, meta: int = 0) -> Entry:
    return Entry(f"s3://b/{tag}", len(tag), tag, tuple((f"k{i}", "v") for i in range(meta)))


def workload(seed: int) -> tuple[dict[str, Entry], list[Record]]:
    rng = random.Random(seed)
    content = {f"{d}/{i:05d}.csv": e(f"{d}{i}", i % 3) for d in ("a", "b", "c", "d")
               for i in range(rng.randrange(300, 900))}
    changes: dict[str, Entry | None] = {}
    doomed = rng.choice("abcd")
    for p in content:
        if p.startswith(doomed) and rng.random() < 0.9:
            changes[p] = None
    for _ in range(rng.randrange(50, 400)):
        p = f"{rng.choice('abcde')}/{rng.randrange(1000):05d}.csv"
        changes[p] = rng.choice([None, e("new", 2), e(f"v{rng.randrange(9)}")])
    return content, sorted(changes.items())


def files_of(root: Path) -> dict[str, bytes]:
    base = root / "branches" / R
    return {str(p.relative_to(base)): p.read_bytes() for p in base.rglob("*.parquet")}


def merged(root: Path, backend: object, seed: int) -> tuple[str, ApplyStats, MetaRangeStore]:
    store = MetaRangeStore(str(root), RULE)
    content, changes = workload(seed)
    base, _ = store.apply(R, store.empty(R), sorted(content.items()))
    store.merge = backend  # type: ignore[assignment]
    mr, stats = store.apply(R, base, changes)
    return mr, stats, store


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("spans", [1, 2, 3, 7, 64])
def test_the_span_merge_writes_the_in_process_merge_files(tmp_path: Path, seed: int,
                                                          spans: int) -> None:
    mine, stats, store = merged(tmp_path / "spans", SpanMerge(spans=spans), seed)
    want, want_stats, other = merged(tmp_path / "here", InProcessMerge(), seed)
    assert mine == want and stats == want_stats
    live = {r.id for r in store.ranges(R, mine)}
    theirs = files_of(tmp_path / "here")
    for rid in live:  # every range of the result, byte for byte
        key = f"ranges/{rid}.parquet"
        assert files_of(tmp_path / "spans")[key] == theirs[key]
    assert files_of(tmp_path / "spans")[f"metaranges/{mine}.parquet"] == \
        theirs[f"metaranges/{want}.parquet"]
    assert not os.listdir(sm.scratch_dir(str(tmp_path / "spans"), R))  # change file removed
    assert list(store.iterate(R, mine)) == list(other.iterate(R, want))


def test_merge_size_and_the_spark_rule_count_the_ranges_changes_touch(tmp_path: Path) -> None:
    store = MetaRangeStore(str(tmp_path), SplitRule(4, 10, 1 << 30))
    content = {f"k{i:03d}": e(str(i)) for i in range(100)}
    base = store.ranges(R, store.apply(R, store.empty(R), sorted(content.items()))[0])
    assert [r.count for r in base] == [10] * 10
    assert sm.merge_size(base, []) == 0
    assert sm.merge_size(base, ["a", "z"]) == 2  # outside every range: no range read
    assert sm.merge_size(base, ["k000", "k001", "k055"]) == 3 + 10 + 10
    assert sm.merge_size(base, ["k009x"]) == 1  # between two ranges
    assert sm.base_read(base, ["k000", "k001", "k055"]) == 20
    assert sm.spark_pays(base, ["k000", "k055"], threshold=20)
    assert not sm.spark_pays(base, ["k000", "k055"], threshold=21)  # reads too little
    many = [f"k{i:03d}" for i in range(0, 20)] + ["k019x"]  # 21 changes for 20 read
    assert not sm.spark_pays(base, many, threshold=1)  # more changes than half the read
    assert sm.spark_pays(base, many[::3], threshold=1)  # 7 changes for 20 read
    assert sm.span_count(0, 2) == 2 and sm.span_count(10 * sm.SPAN_WORK, 1) == 10
    assert sm.span_count(10**12, 4) == sm.MAX_SPANS


class Counting:
    def __init__(self) -> None:
        self.calls = 0

    def apply(self, store: MetaRangeStore, repo: str, base_id: str,
              changes: object) -> tuple[str, ApplyStats]:
        self.calls += 1
        return InProcessMerge().apply(store, repo, base_id, changes)  # type: ignore[arg-type]


def test_sized_merge_picks_by_the_work(tmp_path: Path) -> None:
    store = MetaRangeStore(str(tmp_path), SplitRule(4, 10, 1 << 30))
    content = {f"k{i:03d}": e(str(i)) for i in range(100)}
    base, _ = store.apply(R, store.empty(R), sorted(content.items()))
    large, small = Counting(), Counting()
    store.merge = SizedMerge(large, threshold=20, small=small)
    store.apply(R, base, [("k000", None), ("k055", None)])  # reads 20: large
    store.apply(R, base, [("k000", None)])  # reads 10: small
    assert (large.calls, small.calls) == (1, 1)
    with pytest.raises(ValueError):
        SizedMerge(large, threshold=-1)


def test_damaged_inputs_are_typed_errors_and_publish_nothing(tmp_path: Path) -> None:
    store = MetaRangeStore(str(tmp_path), RULE)
    content, changes = workload(1)
    base, _ = store.apply(R, store.empty(R), sorted(content.items()))
    ranges = store.ranges(R, base)
    victim = rf.file_path(str(tmp_path), R, "range", ranges[len(ranges) // 2].id)
    metaranges = set(rf.list_files(str(tmp_path), R, "metarange"))
    data = Path(victim).read_bytes()
    Path(victim).write_bytes(data[:-10] + b"0123456789")
    backend = SpanMerge(spans=3)
    everything = [(p, None) for p in sorted(content)]  # touches every range
    with pytest.raises(CorruptRange):
        backend.apply(store, R, base, everything)
    os.unlink(victim)
    with pytest.raises(MissingRange):
        backend.apply(store, R, base, everything)
    assert set(rf.list_files(str(tmp_path), R, "metarange")) == metaranges
    assert not os.listdir(sm.scratch_dir(str(tmp_path), R))


def test_bad_requests_and_a_missing_change_file(tmp_path: Path) -> None:
    store = MetaRangeStore(str(tmp_path), RULE)
    base = store.empty(R)
    path = sm.write_changes(str(tmp_path), R, [("a", e("1"))])
    good = RangeMergeRequest(str(tmp_path), R, base, path, RULE)
    assert sm.check_range_request(good) is None
    bad = [
        ("not a request", "not a RangeMergeRequest"),
        (RangeMergeRequest("relative", R, base, path, RULE), "root"),
        (RangeMergeRequest(str(tmp_path), "Bad Repo!", base, path, RULE), "repo"),
        (RangeMergeRequest(str(tmp_path), R, "nope", path, RULE), "base metarange"),
        (RangeMergeRequest(str(tmp_path), R, base, "/tmp/x.parquet", RULE), "scratch"),
        (RangeMergeRequest(str(tmp_path), R, base, path, "rule"), "SplitRule"),  # type: ignore[arg-type]
        (RangeMergeRequest(str(tmp_path), R, base, path, RULE, spans=0), "spans"),
        (RangeMergeRequest(str(tmp_path), R, base, path, RULE, spans=True), "spans"),
    ]
    for request, why in bad:
        problem = sm.check_range_request(request)
        assert problem is not None and why.lower() in problem.lower(), (request, problem)
        with pytest.raises(MergeFailed, match="bad merge request"):
            sm.merge_by_spans(request, sm.run_here)  # type: ignore[arg-type]
    sm.remove_changes(path)
    with pytest.raises(MergeFailed, match="gone"):
        sm.merge_by_spans(good, sm.run_here)
    empty = sm.write_changes(str(tmp_path), R, [])
    result = sm.merge_by_spans(RangeMergeRequest(str(tmp_path), R, base, empty, RULE),
                               sm.run_here)
    assert result.metarange_id == base and result.stats == ApplyStats()
