"""The branch-read checker takes what an indeterminate call did from the committed log.

Hand-made histories of the two failures of `branch-kv-leader-killed-mid-compaction` on
Ray (seeds 3 and 2): the tier's record of a committed update, or of a committed write,
is missing because the KV leader was killed before the call answered. Without the log
the checker blames the store; with it the history passes, and a record the log does
not have is reported."""

from __future__ import annotations

from dataclasses import replace

from sediment.actors.branches import names as nm
from sediment.actors.branches.branch import Branch, encode_branch, seal, start_compaction
from sediment.actors.branches.diff import Diff
from sediment.actors.branches.entry import Entry, encode_value
from sediment.actors.branches.history import (
    DiffedPage,
    Event,
    GotEntry,
    Staged,
    Uncertain,
    Updated,
)
from sediment.actors.kv.types import Event as KvEvent
from sediment.actors.kv.types import KeyValue
from sediment.scenarios.checkers.branch_log import infer_kind, logged_updates
from sediment.scenarios.checkers.branch_reads import check_branch_reads

R, B = "scenario", "main"
T1, T2 = "1" * 32, "2" * 32
C0 = "0" * 64
BKEY = nm.branch_key(R, B)


def e(tag: str) -> Entry:
    return Entry(f"s3://{tag}", 1, tag)


def put(key: bytes, value: bytes, revision: int, prev: KeyValue | None = None) -> KvEvent:
    return KvEvent("put", KeyValue(key, value, prev.create_revision if prev else revision,
                                   revision, 1), prev)


CREATED = Branch(C0, T1)
STARTED = start_compaction(CREATED, T2, 100.0, 1.0, staging_has_entries=True)


def _log() -> list[KvEvent]:
    """rev 2: main created (token T1); 3: p/1 staged on T1; 4: compaction step 1 (T2
    staging, T1 sealed); 5: p/0 staged on T2 (the indeterminate write); 6: p/2 on T2."""
    created = put(BKEY, encode_branch(CREATED), 2)
    return [created,
            put(nm.staging_key(R, T1, "p/1"), encode_value(e("1")), 3),
            put(BKEY, encode_branch(STARTED), 4, created.kv),
            put(nm.staging_key(R, T2, "p/0"), encode_value(e("0")), 5),
            put(nm.staging_key(R, T2, "p/2"), encode_value(e("2")), 6)]


def _recorded() -> list[Event]:
    """What the tier recorded: step 1's SetIf answered after the leader kill (no
    record), p/0's write timed out (Uncertain), the rest answered."""
    return [Updated(R, B, "create", None, CREATED, 0, 2),
            Staged(R, B, "p/1", e("1"), T1, 3),
            Uncertain(R, B, "p/0", e("0")),
            Staged(R, B, "p/2", e("2"), T2, 6)]


def test_a_committed_update_with_no_record_is_taken_from_the_log() -> None:
    """Seed 3: a write at revision 6 on the token step 1 started; step 1 has no record."""
    events = [*_recorded(), GotEntry(R, B, "p/2", 6, e("2"))]
    without = check_branch_reads(events)
    assert not without.ok and f"landed on token {T2}" in without.explanation
    result = check_branch_reads(events, _log(), log_complete=True)
    assert result.ok, result.report()


def test_a_committed_indeterminate_write_is_in_the_model_from_the_log() -> None:
    """Seed 2: the uncommitted write p/0 shows in a diff page and pushes p/2 off it."""
    page = DiffedPage(R, B, "", "", 2, 6, (Diff("p/0", "added", None, e("0")),
                                           Diff("p/1", "added", None, e("1"))), True)
    events = [*_recorded(), Updated(R, B, "compaction_start", CREATED, STARTED, 2, 4), page]
    without = check_branch_reads(events)
    assert not without.ok and "diff at revision 6" in without.explanation
    result = check_branch_reads(events, _log(), log_complete=True)
    assert result.ok, result.report()


def test_a_recorded_write_the_log_does_not_have_is_reported() -> None:
    events = [*_recorded(), Staged(R, B, "p/9", e("9"), T2, 5)]
    result = check_branch_reads(events, _log(), log_complete=True)
    assert not result.ok and "'p/9' recorded at revision 5 is not in the committed log" in (
        result.explanation + " ".join(result.details))
    assert check_branch_reads(events, _log(), log_complete=False).ok


def test_records_past_the_logs_end_are_not_called_missing_from_it() -> None:
    """Sweep seed 35 of branch-two-sensors-one-branch: a compaction's two updates
    recorded at revisions past the log's last (the log was read at the run's end, the
    compactor still ran); the log cannot have them, so they are not reported."""
    late = replace(STARTED, sealed_tokens=(), compacted_metarange="m" * 64)
    events = [*_recorded(), Staged(R, B, "p/9", e("9"), T2, 7),
              Updated(R, B, "compaction_finish", STARTED, late, 4, 8)]
    result = check_branch_reads(events, _log(), log_complete=True)
    assert "not in the committed log" not in result.explanation + " ".join(result.details)


def test_the_log_does_not_excuse_a_read_that_differs() -> None:
    events = [*_recorded(), GotEntry(R, B, "p/0", 6, None)]
    result = check_branch_reads(events, _log(), log_complete=True)
    assert not result.ok and "get 'p/0' at revision 6" in result.explanation


def test_logged_updates_chain_their_compared_revisions() -> None:
    ups = logged_updates(_log())
    assert [(u.kind, u.base_revision, u.revision) for u in ups] == [
        ("create", 0, 2), ("compaction_start", 2, 4)]


def test_the_kind_of_each_rule_is_read_from_what_changed() -> None:
    sealed = seal(CREATED, T2)
    assert infer_kind(None, CREATED) == "create"
    assert infer_kind(CREATED, sealed) == "seal"
    assert infer_kind(CREATED, STARTED) == "compaction_start"
    assert infer_kind(STARTED, replace(STARTED, sealed_tokens=(),
                                       compacted_metarange="m1")) == "compaction_finish"
    assert infer_kind(sealed, replace(sealed, commit_id="a" * 64, sealed_tokens=())) == "commit"
    assert infer_kind(sealed, Branch(C0, "3" * 32)) == "reset"
    assert infer_kind(CREATED, CREATED) == "unknown"
