"""Pure cores of the branch tier: the branch entity's update rules (seed 004, checklist
§6.3 rows 1, 3, 4, 6, 9, 11), the delete sensor (lakeFS `delete_sensor_test.go`, by
name, and row 2), the SetIf retry policy (row 11), names and codecs (bad input)."""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sediment.actors.branches import branch as br
from sediment.actors.branches import names
from sediment.actors.branches import sensor as sn
from sediment.actors.branches.branch import Branch
from sediment.actors.branches.entry import decode_value, encode_value, make_entry
from sediment.actors.branches.errors import (
    CompactionConflict,
    CompactionThrottled,
    CorruptRecord,
    InvalidEntry,
    InvalidName,
    InvalidPath,
    NothingToCompact,
)
from sediment.actors.branches.records import Commit, decode_commit, encode_commit
from sediment.actors.branches.retry import BRANCH_UPDATE, RetryPolicy

C1, C2 = "1" * 64, "2" * 64
T = [f"{i:032x}" for i in range(10)]


def base(**kw: object) -> Branch:
    b = Branch(C1, T[1], (T[2], T[3]))
    return replace(b, **kw)  # type: ignore[arg-type]


# ---- the branch entity (§6.3 rows 1, 4, 6, 9) ---------------------------------------------


def test_seal_prepends_the_staging_token_newest_first() -> None:
    b = br.seal(base(), T[4])
    assert b.staging_token == T[4] and b.sealed_tokens == (T[1], T[2], T[3])
    assert b.tokens == (T[4], T[1], T[2], T[3])
    assert b.commit_id == C1


def test_commit_clears_sealed_and_compacted_and_keeps_the_staging_token() -> None:
    b = br.committed(br.seal(base(compacted_metarange="m1"), T[4]), C2)
    assert b == Branch(C2, T[4], (), None, None)


def test_reset_drops_every_uncommitted_layer() -> None:
    b = br.reset(base(compacted_metarange="m1", compaction_start_time=5.0), T[5])
    assert b.staging_token == T[5] and b.sealed_tokens == () and b.compacted_metarange is None
    assert b.compaction_start_time == 5.0  # the throttle outlives a reset


def test_compaction_step_1_seals_and_stamps_the_start_time() -> None:
    b = br.start_compaction(base(), T[4], now=100.0, interval=60.0, staging_has_entries=True)
    assert b.sealed_tokens == (T[1], T[2], T[3]) and b.staging_token == T[4]
    assert b.compaction_start_time == 100.0


@pytest.mark.parametrize("start,now,force,throttled", [
    (None, 0.0, False, False),
    (100.0, 159.9, False, True),
    (100.0, 160.0, False, False),
    (100.0, 99.0, False, True),  # a clock behind the stamp: still within the interval
    (100.0, 101.0, True, False),  # a manual compaction may force
])
def test_compaction_start_time_interval_rule(start: float | None, now: float, force: bool,
                                             throttled: bool) -> None:
    b = base(compaction_start_time=start)
    if throttled:
        with pytest.raises(CompactionThrottled):
            br.start_compaction(b, T[4], now, 60.0, True, force=force)
    else:
        assert br.start_compaction(b, T[4], now, 60.0, True, force=force).compaction_start_time \
            == now


def test_nothing_to_compact_without_sealed_tokens_and_staged_entries() -> None:
    with pytest.raises(NothingToCompact):
        br.start_compaction(base(sealed_tokens=()), T[4], 0.0, 60.0, staging_has_entries=False)
    # sealed tokens alone are enough
    br.start_compaction(base(), T[4], 0.0, 60.0, staging_has_entries=False)


def test_compaction_step_3_sets_the_metarange_and_drops_exactly_the_sealed_tokens() -> None:
    started = br.start_compaction(base(), T[4], 0.0, 60.0, True)
    done = br.finish_compaction(started, started, "mr")
    assert done.compacted_metarange == "mr" and done.sealed_tokens == ()
    assert done.staging_token == T[4] and done.compaction_start_time == 0.0
    assert br.released_tokens(started, done) == (T[1], T[2], T[3])


@pytest.mark.parametrize("change", [
    "commit_sealed",  # a commit sealed the staging token meanwhile
    "compaction_sealed",  # another compaction's step 1
    "committed",  # a commit finished: new commit id, sealed cleared
    "reset",
    "compacted",  # another compaction's step 3
])
def test_compaction_step_3_fails_if_the_branch_changed_meanwhile(change: str) -> None:
    started = br.start_compaction(base(), T[4], 0.0, 60.0, True)
    current = {
        "commit_sealed": br.seal(started, T[5]),
        "compaction_sealed": br.start_compaction(started, T[5], 0.0, 0.0, True),
        "committed": br.committed(br.seal(started, T[5]), C2),
        "reset": br.reset(started, T[5]),
        "compacted": br.finish_compaction(started, started, "other"),
    }[change]
    with pytest.raises(CompactionConflict):
        br.finish_compaction(current, started, "mr")


def test_a_commit_after_a_compaction_takes_the_compacted_metarange_along() -> None:
    """Row 9: a commit applies onto the compacted metarange and its success resets it."""
    started = br.start_compaction(base(), T[4], 0.0, 60.0, True)
    compacted = br.finish_compaction(started, started, "mr")
    sealed = br.seal(compacted, T[5])
    assert sealed.compacted_metarange == "mr"  # still the base the commit applies onto
    assert br.committed(sealed, C2).compacted_metarange is None


def test_branch_codec_round_trips_and_refuses_garbage() -> None:
    b = base(compacted_metarange="mr", compaction_start_time=1.5)
    assert br.decode_branch(br.encode_branch(b)) == b
    for bad in (b"", b"{}", b"[1]", b"\xff", br.encode_branch(b).replace(b"\"mr\"", b"3"),
                br.encode_branch(replace(b, staging_token="nothex"))):
        with pytest.raises(CorruptRecord):
            br.decode_branch(bad)


@given(st.lists(st.sampled_from(["seal", "commit", "reset", "start", "finish"]), max_size=30))
def test_rules_keep_tokens_unique_and_staging_never_sealed(ops: list[str]) -> None:
    b = Branch(C1, T[0])
    fresh = iter(f"{i:032x}" for i in range(100, 200))
    started: Branch | None = None
    for op in ops:
        try:
            if op == "seal":
                b = br.seal(b, next(fresh))
            elif op == "commit":
                b = br.committed(b, C2)
            elif op == "reset":
                b = br.reset(b, next(fresh))
            elif op == "start":
                b = started = br.start_compaction(b, next(fresh), 0.0, 0.0, True)
            elif started is not None:
                b = br.finish_compaction(b, started, "mr")
        except CompactionConflict:
            pass
        assert len(set(b.tokens)) == len(b.tokens)


# ---- the delete sensor: lakeFS delete_sensor_test.go, case by case -------------------------

Flow = tuple[str, str, str, int]  # repo, branch, staging token, deletes


def run_sensor(threshold: int, flows: list[Flow], queue_size: int = 1000) -> dict[str, int]:
    state = sn.initial(sn.SensorConfig(threshold, queue_size))
    for repo, branch, token, count in flows:
        for _ in range(count):
            state, _ = sn.step(state, sn.CountDelete(repo, branch, token))
    state, _ = sn.step(state, sn.Close())
    triggered: dict[str, int] = {}
    while True:
        state, effects = sn.step(state, sn.Take())
        (taken,) = effects
        assert isinstance(taken, sn.Taken)
        if taken.trigger is None:
            return triggered
        name = f"{taken.trigger.repo}-{taken.trigger.branch}"
        triggered[name] = triggered.get(name, 0) + 1


UUID = "100-example-uuid"
SENSOR_CASES: list[tuple[str, int, list[Flow], dict[str, int]]] = [
    ("trigger after 10", 10,
     [("repo1", "branch1", UUID, 2), ("repo1", "branch2", UUID, 10)], {"repo1-branch2": 1}),
    ("trigger two", 10,
     [("repo1", "branch1", "555-example-uuid", 10), ("repo1", "branch2", "555-example-uuid", 11)],
     {"repo1-branch1": 1, "repo1-branch2": 1}),
    ("trigger twice after 20", 10, [("repo1", "branch1", UUID, 20)], {"repo1-branch1": 2}),
    ("trigger once before 20", 10, [("repo1", "branch1", "444-example-uuid", 19)],
     {"repo1-branch1": 1}),
    ("different repos no trigger", 10,
     [("repo1", "branch1", UUID, 9), ("repo2", "branch1", UUID, 9), ("repo3", "branch1", UUID, 9)],
     {}),
    ("different repos trigger once", 10,
     [("repo1", "branch1", UUID, 8), ("repo2", "branch1", UUID, 8), ("repo3", "branch1", UUID, 8),
      ("repo2", "branch1", UUID, 8)], {"repo2-branch1": 1}),
    ("different staging token id trigger once", 10,
     [("repo1", "branch1", "uuid-token-1", 8), ("repo1", "branch1", "uuid-token-2", 8),
      ("repo1", "branch1", "uuid-token-3", 8), ("repo1", "branch1", "uuid-token-3", 8)],
     {"repo1-branch1": 1}),
    ("different staging token id no trigger", 10,
     [("repo1", "branch1", "uuid-token-1", 8), ("repo1", "branch1", "uuid-token-2", 8),
      ("repo1", "branch1", "uuid-token-3", 8), ("repo1", "branch1", "uuid-token-4", 8)], {}),
]


@pytest.mark.parametrize("name,threshold,flows,expected", SENSOR_CASES,
                         ids=[c[0] for c in SENSOR_CASES])
def test_deleted_sensor(name: str, threshold: int, flows: list[Flow],
                        expected: dict[str, int]) -> None:
    assert run_sensor(threshold, flows) == expected


def test_deleted_sensor_close_and_close_twice() -> None:
    state = sn.initial(sn.SensorConfig(10))
    state, _ = sn.step(state, sn.Close())
    again, effects = sn.step(state, sn.Close())
    assert again.closed and effects == []


def test_deleted_sensor_count_after_close() -> None:
    state, _ = sn.step(sn.initial(sn.SensorConfig(1)), sn.Close())
    for _ in range(5):
        state, effects = sn.step(state, sn.CountDelete("repo1", "branch1", "uuid"))
        assert effects == []
    assert state.queue == () and state.counters == {}


def test_deleted_sensor_check_non_blocking() -> None:
    """A full queue drops the trigger (and keeps the count) instead of blocking: 11
    deletes with threshold 1 and a queue of 1 each return at once."""
    state = sn.initial(sn.SensorConfig(1, queue_size=1))
    kinds = []
    for _ in range(11):
        state, effects = sn.step(state, sn.CountDelete("repo1", "branch1", "uuid"))
        kinds += [type(e).__name__ for e in effects]
    assert kinds == ["Queued"] + ["Dropped"] * 9
    assert len(state.queue) == 1 and state.dropped == 9
    state, (taken,) = sn.step(state, sn.Take())
    assert isinstance(taken, sn.Taken) and taken.trigger is not None
    state, effects = sn.step(state, sn.CountDelete("repo1", "branch1", "uuid"))
    assert [type(e).__name__ for e in effects] == ["Queued"]  # the count was kept


def test_sealed_token_count_triggers_once_per_staging_token() -> None:
    state = sn.initial(sn.SensorConfig(1000, sealed_threshold=3))
    fired = []
    for token, sealed in [("t1", 2), ("t1", 3), ("t1", 4), ("t2", 5), ("t2", 5)]:
        state, effects = sn.step(state, sn.CountDelete("r", "b", token, sealed))
        fired += [e.trigger.reason for e in effects if isinstance(e, sn.Queued)]
    assert fired == ["sealed", "sealed"]


@pytest.mark.parametrize("bad", [
    dict(threshold=0), dict(threshold=True), dict(threshold=1, queue_size=0),
    dict(threshold=1, sealed_threshold=0)])
def test_sensor_config_refuses_bad_values(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        sn.SensorConfig(**bad)  # type: ignore[arg-type]


# ---- the SetIf retry policy (row 11) -------------------------------------------------------


def test_branch_update_policy_is_lakefs_10_tries_up_to_5_s() -> None:
    delays = [BRANCH_UPDATE.delay(n, 0.5) for n in range(1, 11)]
    assert delays[-1] is None and all(d is not None for d in delays[:-1])
    assert delays[0] == 0.5 and max(d for d in delays if d is not None) == 5.0
    assert all(a <= b for a, b in zip(delays[:-2], delays[1:-1], strict=True))  # type: ignore[operator]
    assert BRANCH_UPDATE.delay(1, 0.0) == 0.25 and BRANCH_UPDATE.delay(1, 1.0) == 0.75


@pytest.mark.parametrize("bad", [dict(max_tries=0), dict(multiplier=0.5),
                                 dict(randomization=2.0), dict(initial_interval=float("nan"))])
def test_retry_policy_refuses_bad_values(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**bad)  # type: ignore[arg-type]


# ---- names, entries, records ---------------------------------------------------------------


@pytest.mark.parametrize("path", ["", b"", "a" * 1025, "é" * 513, b"\xff\xfe", "a\0b",
                                  "\udc80", 3, None])
def test_bad_paths_are_refused(path: object) -> None:
    with pytest.raises(InvalidPath):
        names.check_path(path)


def test_good_paths_pass_as_str() -> None:
    assert names.check_path(b"dir/\xc3\xa9") == "dir/é"
    assert names.check_path("a" * 1024) == "a" * 1024


@pytest.mark.parametrize("check,value", [
    (names.check_repo, "ab"), (names.check_repo, "Repo"), (names.check_repo, "-repo"),
    (names.check_branch, ""), (names.check_branch, "-b"), (names.check_branch, "a/b"),
    (names.check_branch, "é"), (names.check_branch, "a" * 257), (names.check_ref, "x y"),
    (names.check_token, "T")])
def test_bad_names_are_refused(check: object, value: str) -> None:
    with pytest.raises(InvalidName):
        check(value)  # type: ignore[operator]


def test_entry_codec_and_limits() -> None:
    e = make_entry("s3://b/k", 5, "etag", {"b": "2", "a": "1"})
    assert e.metadata == (("a", "1"), ("b", "2"))
    assert decode_value(encode_value(e)) == e and decode_value(encode_value(None)) is None
    for bad in (("", 1, "c"), ("a", -1, "c"), ("a", True, "c"), ("a", 1, 5)):
        with pytest.raises(InvalidEntry):
            make_entry(*bad)
    with pytest.raises(InvalidEntry):
        make_entry("a", 1, "c", {"k": "v" * 9000})
    with pytest.raises(CorruptRecord):
        decode_value(b"{not json")


def test_commit_ids_are_content_addresses() -> None:
    c = Commit((C1,), "msg", "mr", "me", 1.0, (("k", "v"),), 2)
    assert decode_commit(encode_commit(c), c.id) == c
    assert replace(c, message="other").id != c.id
    with pytest.raises(CorruptRecord):
        decode_commit(encode_commit(c), C2)


def test_errors_pickle() -> None:
    err = CompactionConflict("x")
    assert pickle.loads(pickle.dumps(err)) == err
