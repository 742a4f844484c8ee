"""The branch-read checker is proven by planted violations: a real history passes;
the same history with one fact changed (a write that was not acknowledged, a second
winner of a SetIf race, a lost race nobody won, a write on a sealed token, an update
that breaks its rule, a read that differs) fails with a message that names it."""

from __future__ import annotations

from dataclasses import replace

from branches_helpers import make_lake

from sediment.actors.branches.entry import Entry
from sediment.actors.branches.history import (
    Event,
    GotEntry,
    ListedPage,
    Lost,
    Staged,
    Uncertain,
    Updated,
)
from sediment.scenarios.checkers.branch_reads import check_branch_reads

R = "repo1"


def e(tag: str) -> Entry:
    return Entry(f"s3://{tag}", 1, tag)


def history() -> list[Event]:
    lake = make_lake()
    api = lake.api
    api.repo_create(R)
    api.put(R, "main", "a", e("1"))
    api.put(R, "main", "b", e("2"))
    api.commit(R, "main", "c1")
    api.rm(R, "main", "a")
    api.compact(R, "main")
    api.put(R, "main", "c", e("3"))
    api.get(R, "main", "b")
    api.ls(R, "main")
    api.diff(R, "main")
    api.commit(R, "main", "c2")
    api.ls(R, "main")
    lake.close()
    return list(lake.history.events)


def test_a_real_history_passes() -> None:
    result = check_branch_reads(history())
    assert result.ok, result.report()


def _index(events: list[Event], kind: type, nth: int = 0) -> int:
    return [i for i, ev in enumerate(events) if isinstance(ev, kind)][nth]


def test_an_unacknowledged_write_that_reads_show_is_caught() -> None:
    events = history()
    i = next(i for i, ev in enumerate(events) if isinstance(ev, Staged) and ev.path == "c")
    del events[i]
    result = check_branch_reads(events)
    assert not result.ok and "extra ['c']" in result.explanation + " ".join(result.details)


def test_a_lost_acknowledged_write_is_caught() -> None:
    events = history()
    i = next(i for i, ev in enumerate(events) if isinstance(ev, ListedPage))
    page = events[i]
    assert isinstance(page, ListedPage)
    events[i] = replace(page, entries=page.entries[1:])
    result = check_branch_reads(events)
    assert not result.ok and "missing" in result.explanation


def test_two_winners_of_one_setif_race_are_caught() -> None:
    events = history()
    i = next(i for i, ev in enumerate(events) if isinstance(ev, Updated) and ev.kind == "commit")
    up = events[i]
    assert isinstance(up, Updated)
    events[i] = replace(up, base_revision=up.base_revision - 1)
    result = check_branch_reads(events)
    assert not result.ok and "two winners" in result.explanation


def test_a_lost_race_nobody_won_is_caught() -> None:
    events = [*history(), Lost(R, "main", "compaction_finish", 10**9)]
    result = check_branch_reads(events)
    assert not result.ok and "no update replaced" in result.explanation


def test_a_write_on_a_sealed_token_is_caught() -> None:
    events = history()
    seal = next(ev for ev in events if isinstance(ev, Updated) and ev.kind == "seal")
    assert isinstance(seal, Updated)
    sealed_token = seal.after.sealed_tokens[0]
    events.insert(events.index(seal) + 1,
                  Staged(R, "main", "z", e("9"), sealed_token, seal.revision + 0))
    result = check_branch_reads(events)
    assert not result.ok and "will lose" in result.explanation


def test_an_update_that_breaks_its_rule_is_caught() -> None:
    events = history()
    i = next(i for i, ev in enumerate(events)
             if isinstance(ev, Updated) and ev.kind == "compaction_finish")
    up = events[i]
    assert isinstance(up, Updated)
    events[i] = replace(up, after=replace(up.after, sealed_tokens=("f" * 32,)))
    result = check_branch_reads(events)
    assert not result.ok and "step 3 must clear" in result.explanation


def test_a_wrong_get_is_caught_and_an_uncertain_write_excuses_it() -> None:
    events = history()
    i = _index(events, GotEntry)
    got = events[i]
    assert isinstance(got, GotEntry)
    events[i] = replace(got, entry=e("other"))
    assert not check_branch_reads(events).ok
    excused = check_branch_reads([*events, Uncertain(R, "main", got.path, e("other"))])
    assert excused.ok, excused.report()


def test_a_reused_staging_token_is_caught() -> None:
    events = history()
    i = next(i for i, ev in enumerate(events) if isinstance(ev, Updated) and ev.kind == "seal")
    up = events[i]
    assert isinstance(up, Updated) and up.before is not None
    events[i] = replace(up, after=replace(up.after, staging_token=up.before.staging_token))
    assert not check_branch_reads(events).ok
