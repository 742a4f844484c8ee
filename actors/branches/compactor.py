"""The staging compactor (seed "Compactor"; lakeFS issue #7503, never shipped there).

Step 1, one SetIf (`branch.start_compaction`): a new staging token, the old one
prepended to the sealed tokens, CompactionStartTime set; refused while another
compaction started within the interval (the sensor's claim), or when there is
nothing to compact.
Step 2: read the sealed tokens at the revision step 1 wrote (writes to them stopped
there) and apply them, newest first, onto the compacted metarange if the branch has
one, else onto its commit's metarange: a new metarange in the block store. If the KV
compacted that revision away, the tokens are read at a later one at which the branch
still names them (they hold the same entries: no write lands on a sealed token and
nothing drops a token a branch names); if it names them no more, CompactionConflict
(step 3 would refuse).
Step 3, one SetIf (`branch.finish_compaction`): set the compacted metarange and drop
exactly the compacted sealed tokens; CompactionConflict, and the branch as it was, if
the sealed tokens, commit or compacted metarange changed meanwhile.
Then the compacted tokens' entries are dropped from the KV.

Killed at any point the branch reads the same: after step 1 its sealed tokens are
read through as before; after step 2 the new ranges are files no branch names yet
(orphans for `gc.py`); after step 3 the tokens not yet dropped are named by no branch
(garbage for `gc.py` too). `hook(name)` runs after each step: the process shell puts
its failpoints there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sediment.actors.branches import branch as br
from sediment.actors.branches import metrics, reads
from sediment.actors.branches import names as nm
from sediment.actors.branches.apply import ApplyStats
from sediment.actors.branches.branch import Branch
from sediment.actors.branches.entry import Record
from sediment.actors.branches.errors import CompactionConflict
from sediment.actors.branches.refs import BranchRead, BranchUpdate
from sediment.actors.branches.tier import Tier
from sediment.actors.kv.errors import ErrCompacted

STEPS = ("after_step1", "after_step2", "after_step3")
Hook = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Compaction:
    repo: str
    branch: str
    started: Branch  # the branch step 1 wrote
    metarange: str
    stats: ApplyStats
    seconds: float
    dropped: tuple[str, ...]


async def _no_hook(name: str) -> None:
    pass


async def step1(tier: Tier, repo: str, branch: str, force: bool = False) -> BranchUpdate:
    async def rule(read: BranchRead) -> Branch:
        b = read.branch
        has = await tier.staging.has_entries(repo, b.staging_token, read.revision)
        return br.start_compaction(b, tier.env.new_token(), tier.env.now(),
                                   tier.config.compaction_interval, has, force)

    return await tier.refs.update_branch(repo, branch, "compaction_start", rule)


async def step2(tier: Tier, repo: str, started: Branch, at: int,
                branch: str | None = None) -> tuple[str, ApplyStats]:
    """The merge; `branch` (its name) lets it read the tokens later when the KV
    compacted `at` away (without it ErrCompacted is raised)."""
    if started.compacted_metarange is not None:
        base = started.compacted_metarange
    else:
        base = (await tier.refs.get_commit(repo, started.commit_id)).metarange
    try:
        changes = await tier.staging.changes(repo, started.sealed_tokens, at)
    except ErrCompacted:
        if branch is None:
            raise
        changes = await reads.pinned(tier, lambda: _changes_later(tier, repo, branch, started))
    return await tier.merge(repo, base, changes)


async def _changes_later(tier: Tier, repo: str, branch: str, started: Branch) -> list[Record]:
    """The sealed tokens' records at the branch's current revision, if it still names
    them unchanged under the same commit and compacted metarange."""
    now = await tier.refs.get_branch(repo, branch)
    b, tokens = now.branch, started.sealed_tokens
    if (b.sealed_tokens[len(b.sealed_tokens) - len(tokens):] != tokens
            or b.commit_id != started.commit_id
            or b.compacted_metarange != started.compacted_metarange):
        raise CompactionConflict("the branch's sealed tokens, commit or compacted metarange "
                                 "changed after step 1")
    return await tier.staging.changes(repo, tokens, now.revision)


async def step3(tier: Tier, repo: str, branch: str, started: Branch,
                metarange: str) -> BranchUpdate:
    async def rule(read: BranchRead) -> Branch:
        return br.finish_compaction(read.branch, started, metarange)

    return await tier.refs.update_branch(repo, branch, "compaction_finish", rule)


async def compact(tier: Tier, repo: str, branch: str, force: bool = False,
                  hook: Hook = _no_hook) -> Compaction:
    """Run the three steps; the typed error of the step that refused, if one did
    (CompactionThrottled, NothingToCompact, CompactionConflict, TooManyTries)."""
    nm.check_repo(repo)
    nm.check_branch(branch)
    t0 = tier.env.now()
    outcome = "failed"
    try:
        first = await step1(tier, repo, branch, force)
        await hook(STEPS[0])
        metarange, stats = await step2(tier, repo, first.after, first.revision, branch)
        await hook(STEPS[1])
        third = await step3(tier, repo, branch, first.after, metarange)
        await hook(STEPS[2])
        dropped = br.released_tokens(third.before, third.after)
        await tier.staging.drop(repo, dropped)
        outcome = "done"
    except Exception as err:
        outcome = type(err).__name__
        raise
    finally:
        metrics.COMPACTIONS.inc(1, {"repo": repo, "outcome": outcome})
    seconds = tier.env.now() - t0
    metrics.COMPACTION_SECONDS.observe(seconds, {"repo": repo})
    return Compaction(repo, branch, first.after, metarange, stats, seconds, dropped)


__all__ = ["STEPS", "Compaction", "Hook", "compact", "step1", "step2", "step3"]
