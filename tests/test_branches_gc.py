"""Garbage of the branch tier: staging tokens no branch names and range files no
commit or compacted metarange reaches, left by flows killed between their steps, are
collected; live data and files younger than the grace period are not; the branch reads
the same before and after."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from branches_helpers import Lake, make_lake

from sediment.actors.blocks import block as blk
from sediment.actors.blocks import gc as blocks_gc
from sediment.actors.blocks.block import Row
from sediment.actors.blocks.meta import level0_block_id
from sediment.actors.branches import compactor, gc, span_merge
from sediment.actors.branches import garbage as gb
from sediment.actors.branches import rangefile as rf
from sediment.actors.branches.branch import Branch
from sediment.actors.branches.entry import Entry
from sediment.actors.branches.ports import run_sync
from sediment.actors.spark import merge_job as mj
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


def age_everything(root: str) -> None:
    for dirpath, _, names in os.walk(root):
        for name in names:
            os.utime(os.path.join(dirpath, name), (0, 0))


def test_a_sweep_does_bounded_work_and_the_next_goes_on(lake: Lake) -> None:
    for step in ("after_step2", "after_step2", "after_step3", "after_step3", "after_step3"):
        kill_compaction_after(lake, step)  # orphan ranges, then unnamed tokens
        lake.api.put(R, "main", f"more-{lake.clock.t}", e("x"))
    want = lake.api.ls(R, "main").entries
    b = lake.api.branch(R, "main")
    live = {b.compacted_metarange} | {r.id for r in lake.api.tier.store.ranges(
        R, b.compacted_metarange or "")} | {c.metarange for _, c in lake.api.log(R, "main")}
    age_everything(lake.api.tier.store.root)
    passes, tokens, removed = 0, 0, 0
    while True:
        swept = run_sync(gc.sweep(lake.api.tier, R, max_tokens=1, max_files=2))
        passes += 1
        assert len(swept.tokens) <= 1 and len(swept.files) <= 2
        tokens += len(swept.tokens)
        removed += len(swept.files)
        if not swept.more:
            break
        assert passes < 50
    assert tokens == 5 and removed >= 2 and passes >= 5  # every compaction's token
    assert live <= files(lake)
    lake.api.tier.store.forget()
    assert lake.api.ls(R, "main").entries == want


def test_old_change_files_of_spark_merges_are_collected(lake: Lake) -> None:
    root = lake.api.tier.store.root
    old = span_merge.write_changes(root, R, [("a", e("1"))])
    os.utime(old, (0, 0))
    young = span_merge.write_changes(root, R, [("b", e("2"))])
    swept = run_sync(gc.sweep(lake.api.tier, R, grace=3600.0))
    assert swept.scratch == (old,) and not os.path.exists(old) and os.path.exists(young)


def listing(root: str, under: str) -> dict[str, bytes]:
    top = os.path.join(root, under)
    out = {}
    for dirpath, _, names in os.walk(top):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out


def test_block_garbage_rules_never_touch_range_files_and_branch_gc_never_blocks(
        lake: Lake) -> None:
    """One directory, both stores: the block store's cleanup (temporary files, Spark
    scratch directories, and every file its orphan rules could judge garbage: all it
    lists, deleted) leaves every branch file; the branch sweep (grace 0: everything
    unreferenced) leaves every block-store file. A repository named like a shard
    directory changes nothing."""
    root = lake.api.tier.store.root
    lake.api.repo_create("shard-0")
    lake.api.put("shard-0", "main", "x", e("y"))
    lake.api.commit("shard-0", "main", "named like a shard")
    kill_compaction_after(lake, "after_step2")  # orphan ranges of repo1
    span_merge.write_changes(root, R, [("a", e("1"))])  # a scratch change file
    for shard in (0, 1):
        rows = [Row(r, b"k%d" % r, b"v") for r in range(1 + shard * 10, 4 + shard * 10)]
        blk.write_block(root, blk.rows_to_table(rows),
                        block_id=level0_block_id(shard, rows[0].revision, rows[-1].revision),
                        shard=shard, level=0, created_at=1.0)
    blocks_before = listing(root, "shard-0") | listing(root, "shard-1")
    branches_before = listing(root, "branches")
    # the branch sweep, grace 0: only branch files go
    age_everything(root)
    for repo in (R, "shard-0"):
        run_sync(gc.sweep(lake.api.tier, repo, grace=0.0))
    assert listing(root, "shard-0") | listing(root, "shard-1") == blocks_before
    branches_kept = listing(root, "branches")
    assert set(branches_kept) < set(branches_before)  # orphans and the scratch file went
    # the block store's cleanup, at its worst: everything it lists is deleted
    (Path(root) / "shard-0" / ".S0-L1-x.abc.tmp").write_bytes(b"partial")
    (Path(root) / "shard-0" / f".S0-L1-y.abc{mj.TEMP_SUFFIX}").mkdir()
    blk.remove_temp_files(root)
    mj.remove_scratch_dirs(root)
    listed = blocks_gc.list_store(root)
    assert listed and all(f.name.startswith("S") for f in listed)
    blocks_gc.remove(root, listed)
    assert listing(root, "shard-0") == {} and listing(root, "branches") == branches_kept
    lake.api.tier.store.forget()
    assert [p for p, _ in lake.api.ls("shard-0", "main").entries] == ["x"]
    assert len(lake.api.ls(R, "main").entries) == 5
