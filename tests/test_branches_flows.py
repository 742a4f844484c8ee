"""The branch tier's flows over one KV Store (no raft): every row of the feature
checklist (`reference/real_systems.md` §6.3), lakeFS's own cases by name
(`graveler_test.go`, `graveler_v2_test.go`), races interleaved at every KV request
(commit vs compaction, two compactors, writes while sealing, a compactor killed at
each step), bad input; each run's history goes through the branch checker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from branches_helpers import Flows, Lake, make_lake

from sediment.actors.branches import commits, compactor
from sediment.actors.branches import rangefile as rf
from sediment.actors.branches.entry import Entry
from sediment.actors.branches.errors import (
    BranchExists,
    BranchNotFound,
    CommitMetaRangeDirtyBranch,
    CommitNotFound,
    CompactionConflict,
    CompactionThrottled,
    CorruptRange,
    InvalidEntry,
    InvalidInput,
    InvalidName,
    InvalidPath,
    NoChanges,
    NothingToCompact,
    ObjectNotFound,
    RepositoryExists,
    RepositoryNotFound,
    TooManyTries,
)
from sediment.actors.branches.history import Lost, Updated
from sediment.actors.branches.ports import run_sync
from sediment.actors.branches.reads import get_entry, list_entries
from sediment.actors.branches.retry import RetryPolicy
from sediment.actors.branches.tier import TierConfig
from sediment.scenarios.checkers.branch_reads import check_branch_reads

R = "repo1"


def e(tag: str) -> Entry:
    return Entry(f"s3://bucket/{tag}", len(tag), f"etag-{tag}")


@pytest.fixture
def lake() -> Iterator[Lake]:
    lk = make_lake()
    lk.api.repo_create(R)
    yield lk
    result = check_branch_reads(lk.history.events)
    lk.close()
    assert result.ok, result.report()


def put(lake: Lake, branch: str, path: str, tag: str) -> None:
    lake.api.put(R, branch, path, e(tag))


def content(lake: Lake, ref: str, prefix: str = "") -> dict[str, str]:
    page = lake.api.ls(R, ref, prefix=prefix, amount=100_000)
    assert not page.has_more
    return {p: entry.checksum.removeprefix("etag-") for p, entry in page.entries}


def diff(lake: Lake, branch: str) -> list[tuple[str, str]]:
    return [(d.path, d.kind) for d in lake.api.diff(R, branch, amount=100_000).diffs]


# ---- §6.3 rows 1, 7: the entity and the read layers ----------------------------------------


def test_row1_branch_entity_has_the_seed_fields(lake: Lake) -> None:
    b = lake.api.branch(R, "main")
    assert b.sealed_tokens == () and b.compacted_metarange is None
    assert b.compaction_start_time is None and len(b.staging_token) == 32


def test_row7_reads_go_staging_then_sealed_in_order_then_compacted(lake: Lake) -> None:
    put(lake, "main", "a", "committed")
    put(lake, "main", "b", "committed")
    put(lake, "main", "c", "committed")
    lake.api.commit(R, "main", "base")
    put(lake, "main", "a", "compacted")
    lake.api.compact(R, "main")  # "a" now comes from the compacted metarange
    put(lake, "main", "b", "sealed-old")
    run_sync(compactor.step1(lake.api.tier, R, "main", force=True))  # sealed, not compacted
    put(lake, "main", "b", "sealed-new")
    run_sync(compactor.step1(lake.api.tier, R, "main", force=True))
    put(lake, "main", "c", "staged")
    b = lake.api.branch(R, "main")
    assert len(b.sealed_tokens) == 2 and b.compacted_metarange is not None
    assert content(lake, "main") == {"a": "compacted", "b": "sealed-new", "c": "staged"}
    for path, want in [("a", "compacted"), ("b", "sealed-new"), ("c", "staged")]:
        assert lake.api.get(R, "main", path).checksum == f"etag-{want}"
    assert content(lake, b.commit_id) == {"a": "committed", "b": "committed", "c": "committed"}


# lakeFS graveler_v2_test.go TestGravelerGet, the compaction cases, by name


def test_get_from_branch_compacted(lake: Lake) -> None:
    put(lake, "main", "some/key/1", "v1")
    lake.api.compact(R, "main")
    assert lake.api.get(R, "main", "some/key/1") == e("v1")


def test_get_from_branch_not_found_in_compacted(lake: Lake) -> None:
    put(lake, "main", "some/key/2", "v1")
    lake.api.compact(R, "main")
    with pytest.raises(ObjectNotFound):
        lake.api.get(R, "main", "some/key/1")


def test_branch_deleted_from_staged_exists_in_compaction(lake: Lake) -> None:
    put(lake, "main", "k", "v1")
    lake.api.compact(R, "main")
    lake.api.rm(R, "main", "k")
    with pytest.raises(ObjectNotFound):
        lake.api.get(R, "main", "k")
    assert content(lake, "main") == {} and diff(lake, "main") == []


def test_branch_exists_in_staging_and_not_in_compaction(lake: Lake) -> None:
    put(lake, "main", "other", "v0")
    lake.api.compact(R, "main")
    put(lake, "main", "k", "staged")
    assert lake.api.get(R, "main", "k") == e("staged")
    assert content(lake, "main") == {"other": "v0", "k": "staged"}


@pytest.mark.parametrize("case,committed,staged,compact,expected", [
    ("compacted with staging only flag when get object committed", "v1", "v1", True, None),
    ("compacted with staging only flag when get object different in commit", "v2", "v1", True,
     "v1"),
    ("compacted with staging only flag when object is not committed", None, "v1", True, "v1"),
    ("staging only flag", "v1", None, False, None),
    ("staging only flag different in commit", "v2", "v1", False, "v1"),
    ("staging only flag same in staging and in commit", "v1", "v1", False, None),
])
def test_get_from_branch_staging_only(lake: Lake, case: str, committed: str | None,
                                      staged: str | None, compact: bool,
                                      expected: str | None) -> None:
    if committed is not None:
        put(lake, "main", "k", committed)
        lake.api.commit(R, "main", "c")
    if staged is not None:
        put(lake, "main", "k", staged)
    if compact:
        lake.api.compact(R, "main")
    if expected is None:
        with pytest.raises(ObjectNotFound):
            lake.api.get(R, "main", "k", staged_only=True)
    else:
        assert lake.api.get(R, "main", "k", staged_only=True) == e(expected)


# ---- row 8: DiffUncommitted and "is staging empty" -------------------------------------------


def test_row8_diff_uncommitted_is_the_same_before_and_after_compaction(lake: Lake) -> None:
    for i in range(6):
        put(lake, "main", f"p/{i}", "base")
    lake.api.commit(R, "main", "base")
    put(lake, "main", "p/1", "changed")
    lake.api.rm(R, "main", "p/2")
    put(lake, "main", "p/9", "added")
    lake.api.rm(R, "main", "never-existed")
    before = diff(lake, "main")
    assert before == [("p/1", "changed"), ("p/2", "removed"), ("p/9", "added")]
    lake.api.compact(R, "main")
    assert diff(lake, "main") == before
    put(lake, "main", "p/2", "base")  # back to the committed entry: no longer a change
    assert diff(lake, "main") == [("p/1", "changed"), ("p/9", "added")]
    assert not lake.api.is_staging_empty(R, "main")


def test_merge_dirty_compacted_staging_not_empty_through_compaction_alone(lake: Lake) -> None:
    """lakeFS "merge dirty compacted": only the compacted metarange differs."""
    put(lake, "main", "k", "v")
    lake.api.compact(R, "main")
    b = lake.api.branch(R, "main")
    assert b.sealed_tokens == () and b.compacted_metarange is not None
    assert not lake.api.is_staging_empty(R, "main")
    lake.api.reset(R, "main")
    assert lake.api.is_staging_empty(R, "main") and content(lake, "main") == {}


def test_diff_pages(lake: Lake) -> None:
    for i in range(25):
        put(lake, "main", f"d/{i:02d}", "x")
    lake.api.compact(R, "main")
    for i in range(25, 30):
        put(lake, "main", f"d/{i:02d}", "x")
    seen: list[str] = []
    after = ""
    while True:
        page = lake.api.diff(R, "main", prefix="d/", after=after, amount=7)
        seen += [d.path for d in page.diffs]
        if not page.has_more:
            break
        after = page.diffs[-1].path
    assert seen == [f"d/{i:02d}" for i in range(30)]


# ---- row 9: commit with and after compaction ---------------------------------------------


def test_row9_commit_applies_onto_the_compacted_metarange_and_resets_it(lake: Lake) -> None:
    put(lake, "main", "a", "1")
    lake.api.compact(R, "main")
    put(lake, "main", "b", "2")
    commit_id = lake.api.commit(R, "main", "both")
    b = lake.api.branch(R, "main")
    assert b.commit_id == commit_id and b.compacted_metarange is None and b.sealed_tokens == ()
    assert content(lake, commit_id) == {"a": "1", "b": "2"}
    assert lake.api.is_staging_empty(R, "main")


def test_commit_with_source_metarange_and_non_empty_compaction(lake: Lake) -> None:
    put(lake, "main", "a", "1")
    c1 = lake.api.commit(R, "main", "c1")
    metarange = lake.api.log(R, c1)[0][1].metarange
    lake.api.branch_create(R, "b2", "main")
    put(lake, "b2", "x", "y")
    lake.api.compact(R, "b2")
    before = lake.api.branch(R, "b2")
    with pytest.raises(CommitMetaRangeDirtyBranch):
        lake.api.commit(R, "b2", "from metarange", source_metarange=metarange)
    assert lake.api.branch(R, "b2").commit_id == before.commit_id
    lake.api.reset(R, "b2")
    c2 = lake.api.commit(R, "b2", "from metarange", source_metarange=metarange,
                         allow_empty=True)
    assert content(lake, c2) == {"a": "1"}


def test_commit_no_changes(lake: Lake) -> None:
    with pytest.raises(NoChanges):
        lake.api.commit(R, "main", "empty")
    put(lake, "main", "a", "1")
    lake.api.rm(R, "main", "a")
    with pytest.raises(NoChanges):
        lake.api.commit(R, "main", "added and removed")
    assert lake.api.commit(R, "main", "allowed", allow_empty=True)


def test_commit_log_and_committed_reads(lake: Lake) -> None:
    put(lake, "main", "a", "1")
    c1 = lake.api.commit(R, "main", "one", {"k": "v"}, committer="me")
    put(lake, "main", "a", "2")
    c2 = lake.api.commit(R, "main", "two")
    log = lake.api.log(R, "main")
    assert [cid for cid, _ in log][:2] == [c2, c1] and log[1][1].metadata == (("k", "v"),)
    assert log[0][1].generation == 3 and log[-1][1].parents == ()
    assert lake.api.get(R, c1, "a") == e("1") and lake.api.get(R, c2, "a") == e("2")


# ---- rows 2-6: the compactor --------------------------------------------------------------


def test_rows4_to_6_compaction_replaces_sealed_tokens_with_an_equivalent_metarange(
        lake: Lake) -> None:
    for i in range(20):
        put(lake, "main", f"x/{i:02d}", "v")
    lake.api.commit(R, "main", "base")
    for i in range(0, 20, 2):
        lake.api.rm(R, "main", f"x/{i:02d}")
    before = (content(lake, "main"), diff(lake, "main"))
    done = lake.api.compact(R, "main")
    b = lake.api.branch(R, "main")
    assert b.compacted_metarange == done.metarange and b.sealed_tokens == ()
    assert b.staging_token == done.started.staging_token
    assert (content(lake, "main"), diff(lake, "main")) == before
    # the compacted tokens' entries are gone from the KV
    token = done.started.sealed_tokens[0]
    assert not run_sync(lake.api.tier.staging.has_entries(R, token, 0))


def test_row3_throttle_compaction_start_time_interval(lake: Lake) -> None:
    put(lake, "main", "a", "1")
    lake.api.compact(R, "main", force=False)
    put(lake, "main", "b", "1")
    with pytest.raises(CompactionThrottled):
        lake.api.compact(R, "main", force=False)
    lake.clock.advance(60.0)
    lake.api.compact(R, "main", force=False)


def test_nothing_to_compact(lake: Lake) -> None:
    with pytest.raises(NothingToCompact):
        lake.api.compact(R, "main")
    assert lake.api.branch(R, "main").compaction_start_time is None


def test_a_second_compaction_applies_onto_the_first(lake: Lake) -> None:
    put(lake, "main", "a", "1")
    first = lake.api.compact(R, "main")
    put(lake, "main", "b", "2")
    lake.api.rm(R, "main", "a")
    second = lake.api.compact(R, "main")
    assert second.started.compacted_metarange == first.metarange
    assert content(lake, "main") == {"b": "2"}


# ---- races, interleaved at every KV request --------------------------------------------------


def interleave(lake: Lake, coros: dict[str, Any], order: list[str]) -> Flows:
    flows = Flows()
    started = {label: flows.start(label, coro) for label, coro in coros.items()}
    for label in order:
        if started[label] in flows.running:
            flows.step(started[label])
    flows.drain()
    return flows


def outcome(flows: Flows, label: str) -> Any:
    flow = next(f for f in flows.finished if f.label == label)
    return flow.error if flow.error is not None else flow.result


@pytest.mark.parametrize("order", [
    ["compact"] * 30 + ["commit"] * 30,
    ["commit"] * 30 + ["compact"] * 30,
    ["compact", "compact", "commit", "commit", "commit"] + ["compact", "commit"] * 20,
    ["commit", "commit", "compact", "compact", "compact", "compact"] + ["commit"] * 40,
    ["compact"] * 4 + ["commit"] * 3 + ["compact"] * 10 + ["commit"] * 30,
])
def test_a_commit_racing_a_compaction_one_wins_and_nothing_is_lost(lake: Lake,
                                                                   order: list[str]) -> None:
    for i in range(10):
        put(lake, "main", f"k{i}", "v")
    lake.api.rm(R, "main", "k3")
    want = content(lake, "main")
    t = lake.stepped
    flows = interleave(lake, {
        "compact": compactor.compact(t, R, "main", force=True),
        "commit": commits.commit(t, R, "main", "racing"),
    }, order)
    results = {label: outcome(flows, label) for label in ("compact", "commit")}
    assert isinstance(results["commit"], str), results  # a commit retries its race
    assert not isinstance(results["compact"], Exception) or isinstance(
        results["compact"], CompactionConflict | NothingToCompact), results
    assert content(lake, "main") == want and content(lake, results["commit"]) == want
    assert lake.api.is_staging_empty(R, "main")


@pytest.mark.parametrize("order", [
    ["a"] * 40 + ["b"] * 40, ["a", "b"] * 40, ["a", "a", "b", "b", "b"] + ["a", "b"] * 40,
    ["b"] * 3 + ["a"] * 6 + ["b"] * 40 + ["a"] * 40,
])
def test_two_compactors_racing(lake: Lake, order: list[str]) -> None:
    for i in range(8):
        put(lake, "main", f"k{i}", "v")
    lake.api.commit(R, "main", "base")
    for i in range(0, 8, 2):
        lake.api.rm(R, "main", f"k{i}")
    want = content(lake, "main"), diff(lake, "main")
    t = lake.stepped
    flows = interleave(lake, {"a": compactor.compact(t, R, "main", force=True),
                              "b": compactor.compact(t, R, "main", force=True)}, order)
    results = [outcome(flows, x) for x in ("a", "b")]
    assert any(not isinstance(r, Exception) for r in results), results
    for r in results:
        assert not isinstance(r, Exception) or isinstance(
            r, CompactionConflict | NothingToCompact), results
    assert (content(lake, "main"), diff(lake, "main")) == want


def test_two_sensor_claims_race_and_one_wins(lake: Lake) -> None:
    put(lake, "main", "k", "v")
    t = lake.stepped
    flows = interleave(lake, {"a": compactor.compact(t, R, "main", force=False),
                              "b": compactor.compact(t, R, "main", force=False)},
                       ["a", "b"] * 40)
    results = sorted(type(outcome(flows, x)).__name__ for x in ("a", "b"))
    assert results == ["Compaction", "CompactionThrottled"]
    assert any(isinstance(ev, Lost) and ev.kind == "compaction_start"
               for ev in lake.history.events)


@pytest.mark.parametrize("order", [
    ["seal"] * 3 + ["write"] * 10 + ["seal"] * 40,  # the seal first
    ["write"] + ["seal"] * 40 + ["write"] * 10,  # read the branch, then the seal, then put
    ["write", "seal"] * 30,
])
def test_writes_during_sealing_land_on_the_new_token_or_before_the_seal(
        lake: Lake, order: list[str]) -> None:
    put(lake, "main", "a", "1")
    t = lake.stepped
    coros = {"write": commits.stage(t, R, "main", "b", e("2")),
             "seal": compactor.compact(t, R, "main", force=True)}
    flows = interleave(lake, coros, order)
    assert outcome(flows, "write").token  # acknowledged
    assert not isinstance(outcome(flows, "seal"), Exception)
    assert content(lake, "main") == {"a": "1", "b": "2"}


@pytest.mark.parametrize("order", [
    # compaction step 1, a write to the new token, the whole commit, then step 3
    ["compact"] * 3 + ["write"] * 5 + ["commit"] * 40 + ["compact"] * 40,
    ["compact"] * 5 + ["write"] * 5 + ["commit"] * 40 + ["compact"] * 40,
    ["commit"] * 2 + ["compact"] * 3 + ["write"] * 5 + ["commit"] * 40 + ["compact"] * 40,
    ["compact", "write", "commit"] * 30,
])
def test_a_commit_and_writes_racing_a_compaction(lake: Lake, order: list[str]) -> None:
    for i in range(4):
        put(lake, "main", f"k{i}", "v")
    t = lake.stepped
    flows = interleave(lake, {"compact": compactor.compact(t, R, "main", force=True),
                              "write": commits.stage(t, R, "main", "late", e("w")),
                              "commit": commits.commit(t, R, "main", "racing")}, order)
    assert isinstance(outcome(flows, "commit"), str)
    want = {f"k{i}": "v" for i in range(4)} | {"late": "w"}
    assert content(lake, "main") == want
    committed = content(lake, outcome(flows, "commit"))
    assert committed in ({f"k{i}": "v" for i in range(4)}, want)
    assert diff(lake, "main") == ([] if committed == want else [("late", "added")])


@pytest.mark.parametrize("kill_after", range(0, 14))
def test_a_compactor_killed_at_any_request_leaves_the_branch_readable_and_equal(
        lake: Lake, kill_after: int) -> None:
    for i in range(6):
        put(lake, "main", f"k{i}", "v")
    lake.api.commit(R, "main", "base")
    lake.api.rm(R, "main", "k1")
    put(lake, "main", "k9", "new")
    want = content(lake, "main"), diff(lake, "main")
    flows = Flows()
    flow = flows.start("compact", compactor.compact(lake.stepped, R, "main", force=True))
    for _ in range(kill_after):
        if flow in flows.running:
            flows.step(flow)
    if flow in flows.running:
        flows.kill(flow)
    assert (content(lake, "main"), diff(lake, "main")) == want
    put(lake, "main", "after", "kill")  # the branch goes on: writes, compaction, commit
    lake.clock.advance(600)
    lake.api.compact(R, "main", force=False)
    commit_id = lake.api.commit(R, "main", "after the kill")
    assert content(lake, commit_id) == {**want[0], "after": "kill"}


@pytest.mark.parametrize("kill_after", range(0, 12))
def test_a_commit_killed_at_any_request_leaves_the_branch_readable_and_equal(
        lake: Lake, kill_after: int) -> None:
    put(lake, "main", "a", "1")
    lake.api.compact(R, "main")
    put(lake, "main", "b", "2")
    want = content(lake, "main")
    flows = Flows()
    flow = flows.start("commit", commits.commit(lake.stepped, R, "main", "killed"))
    for _ in range(kill_after):
        if flow in flows.running:
            flows.step(flow)
    if flow in flows.running:
        flows.kill(flow)
    assert content(lake, "main") == want
    lake.api.commit(R, "main", "again", allow_empty=True)
    assert content(lake, "main") == want and lake.api.is_staging_empty(R, "main")


def test_setif_retries_are_bounded() -> None:
    lk = make_lake(config=TierConfig(branch_update=RetryPolicy(max_tries=3)))
    lk.api.repo_create(R)
    lk.api.put(R, "main", "a", e("1"))
    t = lk.api.tier

    async def always_loses(read: Any) -> Any:
        # another writer moves the branch between this read and its SetIf
        await t.refs.update_branch(R, "main", "seal", _seal_rule(t))
        return read.branch

    with pytest.raises(TooManyTries):
        run_sync(t.refs.update_branch(R, "main", "seal", always_loses))
    losses = [ev for ev in lk.history.events if isinstance(ev, Lost) and ev.kind == "seal"]
    assert len(losses) == 3
    result = check_branch_reads(lk.history.events)
    assert result.ok, result.report()
    lk.close()


def _seal_rule(t: Any) -> Any:
    from sediment.actors.branches import branch as br

    async def rule(read: Any) -> Any:
        return br.seal(read.branch, t.env.new_token())

    return rule


# ---- bad input: typed errors, nothing changed ----------------------------------------------


def kv_state(lake: Lake) -> list[tuple[Any, ...]]:
    return lake.store.rows()


@pytest.mark.parametrize("call,error", [
    (lambda a: a.put(R, "main", "", e("x")), InvalidPath),
    (lambda a: a.put(R, "main", "a" * 1025, e("x")), InvalidPath),
    (lambda a: a.put(R, "main", b"\xff\xfe", e("x")), InvalidPath),
    (lambda a: a.rm(R, "main", b"\xc3"), InvalidPath),
    (lambda a: a.get(R, "main", ""), InvalidPath),
    (lambda a: a.put(R, "main", "p", address="", size=1), InvalidEntry),
    (lambda a: a.put(R, "main", "p", address="s3://x", size=-1), InvalidEntry),
    (lambda a: a.put(R, "bad/name", "p", e("x")), InvalidName),
    (lambda a: a.put(R, "missing", "p", e("x")), BranchNotFound),
    (lambda a: a.put("nosuchrepo", "main", "p", e("x")), RepositoryNotFound),
    (lambda a: a.commit(R, "missing", "m"), BranchNotFound),
    (lambda a: a.commit(R, "main", 5), InvalidInput),
    (lambda a: a.commit(R, "main", "m", {"k": 1}), InvalidInput),
    (lambda a: a.branch_create(R, "main", "main"), BranchExists),
    (lambda a: a.branch_create(R, "new", "nope"), BranchNotFound),
    (lambda a: a.branch_create(R, "new", "f" * 64), CommitNotFound),
    (lambda a: a.get(R, "f" * 64, "existing"), CommitNotFound),
    (lambda a: a.repo_create(R), RepositoryExists),
    (lambda a: a.repo_create("X"), InvalidName),
    (lambda a: a.ls(R, "main", amount=0), InvalidInput),
    (lambda a: a.ls(R, "main", prefix=b"\xff"), InvalidPath),
    (lambda a: a.branch_delete(R, "main"), InvalidInput),
    (lambda a: a.compact(R, "missing"), BranchNotFound),
])
def test_bad_input_is_a_typed_error_and_changes_nothing(lake: Lake, call: Any,
                                                        error: type[Exception]) -> None:
    put(lake, "main", "existing", "1")
    before = kv_state(lake)
    with pytest.raises(error):
        call(lake.api)
    assert kv_state(lake) == before


def test_a_corrupt_range_file_is_a_typed_error_and_changes_nothing(lake: Lake) -> None:
    for i in range(5):
        put(lake, "main", f"k{i}", "v")
    lake.api.commit(R, "main", "c")
    commit_mr = lake.api.log(R, "main")[0][1].metarange
    tier = lake.api.tier
    r = tier.store.ranges(R, commit_mr)[0]
    path = rf.file_path(tier.store.root, R, "range", r.id)
    with open(path, "r+b") as f:
        f.seek(30)
        f.write(b"garbage")
    tier.store.forget()
    put(lake, "main", "k0", "new")
    before = kv_state(lake)
    with pytest.raises(CorruptRange):
        lake.api.ls(R, "main")
    with pytest.raises(CorruptRange):
        lake.api.compact(R, "main")
    with pytest.raises(CorruptRange):
        lake.api.commit(R, "main", "over a corrupt range")
    # the failed compaction and commit sealed tokens (step 1 / the seal), nothing else:
    # the branch still reads the same from the KV's side
    after = lake.api.branch(R, "main")
    assert after.compacted_metarange is None
    assert before != kv_state(lake)  # sealing is a change of the branch record only
    assert lake.api.get(R, "main", "k0") == e("new")


def test_updates_form_one_chain_per_branch(lake: Lake) -> None:
    put(lake, "main", "a", "1")
    lake.api.compact(R, "main")
    lake.api.commit(R, "main", "c")
    lake.api.reset(R, "main")
    updates = [ev for ev in lake.history.events
               if isinstance(ev, Updated) and ev.branch == "main"]
    assert [u.kind for u in updates] == ["create", "compaction_start", "compaction_finish",
                                         "seal", "commit", "reset"]
    assert all(b.base_revision == a.revision for a, b in zip(updates, updates[1:], strict=False))


def test_committed_and_branch_listing_pages(lake: Lake) -> None:
    for i in range(30):
        put(lake, "main", f"dir/{i:02d}", "v")
    c = lake.api.commit(R, "main", "c")
    for i in range(0, 30, 3):
        lake.api.rm(R, "main", f"dir/{i:02d}")
    for ref, want in [("main", [f"dir/{i:02d}" for i in range(30) if i % 3]),
                      (c, [f"dir/{i:02d}" for i in range(30)])]:
        got: list[str] = []
        after = ""
        while True:
            entries, more = run_sync(list_entries(lake.api.tier, R, ref, "dir/", after, 4))
            got += [p for p, _ in entries]
            if not more:
                break
            after = entries[-1][0]
        assert got == want
    with pytest.raises(ObjectNotFound):
        run_sync(get_entry(lake.api.tier, R, "main", "dir/00"))


def test_metrics_record_compaction_time_sealed_tokens_and_setif_conflicts(
        lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    from sediment import metrics as m

    # the local registry, also when an earlier test left the session's Ray running
    monkeypatch.setattr(m, "_in_ray", lambda: False)
    m.reset()
    put(lake, "main", "a", "1")
    run_sync(compactor.step1(lake.api.tier, R, "main", force=True))
    put(lake, "main", "b", "1")
    run_sync(compactor.step1(lake.api.tier, R, "main", force=True))
    sealed = m.snapshot()["sediment_branch_sealed_tokens"]
    assert sealed[(("branch", "main"), ("repo", R))] == 2.0
    lake.api.compact(R, "main")
    put(lake, "main", "c", "1")
    lake.clock.advance(100)
    t = lake.stepped
    interleave(lake, {"a": compactor.compact(t, R, "main"),
                      "b": compactor.compact(t, R, "main")}, ["a", "b"] * 40)
    snap = m.snapshot()
    assert snap["sediment_branch_compaction_seconds_count"][(("repo", R),)] >= 1
    assert sum(snap["sediment_branch_compactions"].values()) >= 2
    assert sum(snap["sediment_branch_setif_conflicts"].values()) >= 1


def test_a_write_without_an_answer_is_recorded_uncertain(lake: Lake) -> None:
    from sediment.actors.branches.history import Uncertain

    class Silent:
        def __init__(self, kv: Any) -> None:
            self.kv, self.calls = kv, 0

        async def range(self, request: Any) -> Any:
            return await self.kv.range(request)

        async def txn(self, request: Any) -> Any:
            await self.kv.txn(request)  # it lands, but the answer is lost
            raise TimeoutError("no answer")

    tier = lake.api.tier
    silent = Silent(tier.kv)
    tier.staging.kv = silent
    try:
        with pytest.raises(TimeoutError):
            lake.api.put(R, "main", "maybe", e("1"))
    finally:
        tier.staging.kv = silent.kv
    assert any(isinstance(ev, Uncertain) and ev.path == "maybe" for ev in lake.history.events)
    assert lake.api.get(R, "main", "maybe") == e("1")  # the checker accepts either


@pytest.mark.parametrize("prefix,after,want", [
    ("a/", "b", []), ("a/", "a/1", ["a/2"]), ("", "c", []), ("a/", "0", ["a/1", "a/2"]),
    ("c", "", ["c"]), ("z", "", [])])
def test_listing_bounds(lake: Lake, prefix: str, after: str, want: list[str]) -> None:
    for path in ("a/1", "a/2", "c"):
        put(lake, "main", path, "v")
    assert lake.api.ls(R, "main", prefix=prefix, after=after).paths == want
    assert [d.path for d in lake.api.diff(R, "main", prefix=prefix, after=after).diffs] == want
    c = lake.api.commit(R, "main", "c")
    assert lake.api.ls(R, c, prefix=prefix, after=after).paths == want
