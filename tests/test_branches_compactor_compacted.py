"""Compaction step 2 when the KV compacted step 1's revision away (found in the
`branch-commit-races-compaction` sweeps: about one compaction in ten there ended with
ErrCompacted, its work wasted). The sealed tokens cannot change while the branch names
them (no write lands on a sealed token, nothing drops a named token), so step 2 reads
them at a later revision at which the branch still names them; if it no longer does,
the compaction ends with CompactionConflict, as its step 3 would."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from branches_helpers import Lake, make_lake

from sediment.actors.branches import compactor
from sediment.actors.branches.errors import CompactionConflict
from sediment.actors.branches.ports import run_sync

R = "repo1"


@pytest.fixture
def lake() -> Iterator[Lake]:
    lk = make_lake()
    lk.api.repo_create(R)
    yield lk
    lk.close()


def content(lake: Lake, ref: str) -> dict[str, str]:
    return {p: e.address for p, e in lake.api.ls(R, ref, amount=1000).entries}


def fill(lake: Lake) -> dict[str, str]:
    for i in range(8):
        lake.api.put(R, "main", f"k{i}", address=f"s3://b/{i}", size=1, checksum=f"c{i}")
    lake.api.rm(R, "main", "k3")
    return content(lake, "main")


def test_step2_reads_the_sealed_tokens_after_the_kv_compacted_step1s_revision(
        lake: Lake) -> None:
    want = fill(lake)

    async def compact_the_kv(step: str) -> None:
        if step == "after_step1":  # a write after step 1, then the KV compacted to it
            lake.store.put(b"/elsewhere", b"x")
            lake.store.compact(lake.store.head)

    done = run_sync(compactor.compact(lake.api.tier, R, "main", force=True,
                                      hook=compact_the_kv))
    assert done.dropped  # steps 2 and 3 ran
    branch = lake.api.branch(R, "main")
    assert branch.compacted_metarange == done.metarange and not branch.sealed_tokens
    assert content(lake, "main") == want


def test_step2_ends_in_a_conflict_when_a_commit_took_the_tokens_meanwhile(
        lake: Lake) -> None:
    want = fill(lake)

    async def commit_then_compact_the_kv(step: str) -> None:
        if step == "after_step1":
            lake.api.commit(R, "main", "took the sealed tokens")
            lake.store.compact(lake.store.head)

    with pytest.raises(CompactionConflict):
        run_sync(compactor.compact(lake.api.tier, R, "main", force=True,
                                   hook=commit_then_compact_the_kv))
    assert content(lake, "main") == want and lake.api.is_staging_empty(R, "main")
    assert lake.api.branch(R, "main").compacted_metarange is None
