"""Garbage of the branch tier: staging tokens no branch names and range files no
commit or compacted metarange reaches, left by flows killed between their steps, are
collected; live data and files younger than the grace period are not; the branch reads
the same before and after."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from branches_helpers import Lake, make_lake

from sediment.actors.branches import compactor, gc
from sediment.actors.branches import garbage as gb
from sediment.actors.branches import rangefile as rf
from sediment.actors.branches.branch import Branch
from sediment.actors.branches.entry import Entry
from sediment.actors.branches.ports import run_sync
from sediment.scenarios.checkers.branch_reads import check_branch_reads

R = "repo1"


def e(tag: str) -> Entry:
    return Entry(f"s3://{tag}", 1, tag)


@pytest.fixture
def lake() -> Iterator[Lake]:
    lk = make_lake()
    lk.api.repo_create(R)
    for i in range(10):
        lk.api.put(R, "main", f"k{i}", e("v"))
    lk.api.commit(R, "main", "base")
    for i in range(0, 10, 2):
        lk.api.rm(R, "main", f"k{i}")
    yield lk
    result = check_branch_reads(lk.history.events)
    lk.close()
    assert result.ok, result.report()


def files(lake: Lake) -> set[str]:
    root = lake.api.tier.store.root
    return set(rf.list_files(root, R, "range")) | set(rf.list_files(root, R, "metarange"))


class Killed(Exception):
    pass


def kill_compaction_after(lake: Lake, step: str) -> None:
    """Run a compaction and let it die right after `step` (its process killed there)."""
    async def hook(name: str) -> None:
        if name == step:
            raise Killed(step)

    with pytest.raises(Killed):
        run_sync(compactor.compact(lake.api.tier, R, "main", True, hook))


def test_pure_rules() -> None:
    t = [f"{i:032x}" for i in range(5)]
    b = Branch("1" * 64, t[0], (t[1],), "mr")
    assert gb.unnamed_tokens([b], [t[0], t[2], t[3]]) == [t[2], t[3]]
    assert gb.live_metaranges([b], ["c1"]) == {"mr", "c1"}
    old, new = gb.StoredFile("range", "x", 0.0), gb.StoredFile("range", "y", 90.0)
    assert gb.collectable([old, new], set(), set(), now=100.0, grace=50.0) == [old]
    assert gb.collectable([old], set(), {"x"}, now=100.0, grace=0.0) == []


def test_tokens_left_by_a_compaction_killed_after_step_3_are_dropped(lake: Lake) -> None:
    want = lake.api.ls(R, "main").entries
    kill_compaction_after(lake, "after_step3")  # the token drop not done
    b = lake.api.branch(R, "main")
    assert b.compacted_metarange is not None and b.sealed_tokens == ()
    swept = run_sync(gc.sweep(lake.api.tier, R))
    assert len(swept.tokens) == 1 and swept.tokens[0] not in b.tokens
    assert not run_sync(lake.api.tier.staging.has_entries(R, swept.tokens[0], 0))
    assert lake.api.ls(R, "main").entries == want
    assert run_sync(gc.sweep(lake.api.tier, R)).tokens == ()  # idempotent


def test_files_left_by_a_compaction_killed_after_step_2_are_collected_after_grace(
        lake: Lake) -> None:
    live = files(lake)
    want = lake.api.ls(R, "main").entries
    kill_compaction_after(lake, "after_step2")  # ranges written, not published
    assert lake.api.branch(R, "main").compacted_metarange is None
    orphans = files(lake) - live
    assert orphans
    assert run_sync(gc.sweep(lake.api.tier, R, grace=3600.0)).files == ()  # young: kept
    for f in orphans | live:  # age every file
        for kind in ("range", "metarange"):
            path = rf.file_path(lake.api.tier.store.root, R, kind, f)  # type: ignore[arg-type]
            if os.path.exists(path):
                os.utime(path, (0, 0))
    swept = run_sync(gc.sweep(lake.api.tier, R, grace=3600.0))
    assert {f.id for f in swept.files} == orphans
    assert files(lake) == live
    lake.api.tier.store.forget()
    assert lake.api.ls(R, "main").entries == want
    commit_id = lake.api.commit(R, "main", "after gc")  # the branch goes on
    assert lake.api.ls(R, commit_id).entries == want


def test_live_files_of_old_commits_and_compactions_stay(lake: Lake) -> None:
    lake.api.compact(R, "main")
    compacted = lake.api.branch(R, "main").compacted_metarange
    run_sync(gc.sweep(lake.api.tier, R, grace=0.0))
    lake.api.tier.store.forget()
    for cid, commit in lake.api.log(R, "main"):
        lake.api.ls(R, cid)  # every commit still reads
        assert commit.metarange in files(lake)
    assert compacted in files(lake)
