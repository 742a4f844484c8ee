"""Changing a repository: repositories and branches, staged writes, commit, reset.

Commit (seed "Commit Flow", lakeFS `Graveler.Commit`):
1. seal, one SetIf: the staging token joins the front of the sealed tokens, writes go
   to a new token (with a source metarange, refused first if the branch is dirty);
2. one SetIf with retry (`Refs.update_branch`): on the branch as read, apply every
   sealed token, newest first, onto the compacted metarange if the branch has one,
   else onto its commit's metarange; write the commit; set CommitID, clear the sealed
   tokens and the compacted metarange. A lost race (a compaction or a write of the
   branch record meanwhile) runs the step again on the fresh branch, so the commit
   takes whatever was sealed by then; the competing compaction's step 3 then fails;
3. drop the committed tokens' entries from the KV.
A commit whose metarange reads the same as its parent's is NoChanges (unless
`allow_empty`), as lakeFS; the sealed tokens stay sealed, which changes nothing a
read sees.

Killed between steps, a commit leaves a branch that reads the same: after 1 the
sealed token is still read through; after 2 the commit holds it; tokens not dropped
are garbage no branch names (`gc.py`).
"""

from __future__ import annotations

from collections.abc import Mapping

from sediment.actors.branches import branch as br
from sediment.actors.branches import names as nm
from sediment.actors.branches.branch import Branch
from sediment.actors.branches.entry import Entry
from sediment.actors.branches.errors import (
    CommitMetaRangeDirtyBranch,
    InvalidInput,
    NoChanges,
    TooManyTries,
)
from sediment.actors.branches.reads import is_staging_empty, resolve_commit
from sediment.actors.branches.records import Commit, Repository, check_commit_fields
from sediment.actors.branches.refs import BranchRead
from sediment.actors.branches.staging import StagedWrite
from sediment.actors.branches.tier import Tier

FIRST_COMMIT_MESSAGE = "Repository created"


async def create_repo(tier: Tier, repo: str, default_branch: str = "main") -> str:
    """A repository with its first (empty) commit and default branch; the commit id."""
    nm.check_repo(repo)
    nm.check_branch(default_branch)
    now = tier.env.now()
    empty = await tier.env.blocking(tier.store.empty, repo)
    first = Commit((), FIRST_COMMIT_MESSAGE, empty, "", now)
    await tier.refs.create_repo(repo, Repository(default_branch, now), first,
                                Branch(first.id, tier.env.new_token()))
    return first.id


async def create_branch(tier: Tier, repo: str, name: str, source: str) -> str:
    """A branch at the commit `source` names (a branch's HEAD, uncommitted changes not
    included, as lakeFS); the commit id."""
    nm.check_branch(name)
    nm.check_ref(source)
    commit_id = await resolve_commit(tier, repo, source)
    await tier.refs.create_branch(repo, name, Branch(commit_id, tier.env.new_token()))
    return commit_id


async def delete_branch(tier: Tier, repo: str, name: str) -> None:
    nm.check_branch(name)
    record = await tier.refs.get_repo(repo)
    if name == record.default_branch:
        raise InvalidInput(f"{name!r} is the default branch of {repo!r}")

    for _ in range(tier.config.branch_update.max_tries):
        read = await tier.refs.get_branch(repo, name)
        if await tier.refs.delete_branch(repo, name, read):
            await tier.staging.drop(repo, read.branch.tokens)
            return
    raise TooManyTries(f"delete of {repo}/{name}: the branch kept changing")


async def stage(tier: Tier, repo: str, branch: str, path: str,
                entry: Entry | None) -> StagedWrite:
    """Put an entry (None: delete, a tombstone) on the branch's staging token."""
    nm.check_path(path)
    written = await tier.staging.write(repo, branch, path, entry)
    if entry is None and tier.on_delete is not None:
        tier.on_delete(repo, branch, written.token, written.sealed)
    return written


async def commit(tier: Tier, repo: str, branch: str, message: str,
                 metadata: Mapping[str, str] | None = None, committer: str = "",
                 allow_empty: bool = False, source_metarange: str | None = None) -> str:
    """Commit the branch's uncommitted changes; the new commit's id."""
    message, meta, committer = check_commit_fields(message, metadata, committer)
    nm.check_branch(branch)
    if source_metarange is not None:
        tier.store.ranges(repo, source_metarange)  # MissingRange / CorruptRange up front

    async def seal(read: BranchRead) -> Branch:
        if source_metarange is not None and not await is_staging_empty(tier, repo, branch):
            raise CommitMetaRangeDirtyBranch(f"{repo}/{branch} has uncommitted changes")
        return br.seal(read.branch, tier.env.new_token())

    await tier.refs.update_branch(repo, branch, "seal", seal)
    made: list[str] = []

    async def apply(read: BranchRead) -> Branch:
        b = read.branch
        parent = await tier.refs.get_commit(repo, b.commit_id)
        if source_metarange is not None:
            if b.compacted_metarange is not None or await _sealed_dirty(tier, repo, read):
                raise CommitMetaRangeDirtyBranch(f"{repo}/{branch} has uncommitted changes")
            metarange = source_metarange
        else:
            base = b.compacted_metarange or parent.metarange
            changes = await tier.staging.changes(repo, b.sealed_tokens, read.revision)
            metarange, _ = await tier.merge(repo, base, changes)
        if not allow_empty and next(tier.store.diff(repo, parent.metarange, metarange),
                                    None) is None:
            raise NoChanges(f"nothing to commit on {repo}/{branch}")
        new = Commit((b.commit_id,), message, metarange, committer, tier.env.now(), meta,
                     parent.generation + 1)
        await tier.refs.put_commit(repo, new)
        made[:] = [new.id]
        return br.committed(b, new.id)

    done = await tier.refs.update_branch(repo, branch, "commit", apply)
    await tier.staging.drop(repo, br.released_tokens(done.before, done.after))
    return made[0]


async def _sealed_dirty(tier: Tier, repo: str, read: BranchRead) -> bool:
    """Whether the sealed tokens change anything against the commit (lakeFS
    isSealedEmpty)."""
    b = read.branch
    if not b.sealed_tokens:
        return False
    committed = (await tier.refs.get_commit(repo, b.commit_id)).metarange
    lookup = tier.store.lookup(repo, committed)
    for path, entry in await tier.staging.changes(repo, b.sealed_tokens, read.revision):
        if lookup(path) != entry:
            return True
    return False


async def reset(tier: Tier, repo: str, branch: str) -> None:
    """Drop every uncommitted change of the branch (staging, sealed, compacted)."""
    nm.check_branch(branch)

    async def rule(read: BranchRead) -> Branch:
        return br.reset(read.branch, tier.env.new_token())

    done = await tier.refs.update_branch(repo, branch, "reset", rule)
    await tier.staging.drop(repo, br.released_tokens(done.before, done.after))


__all__ = ["FIRST_COMMIT_MESSAGE", "commit", "create_branch", "create_repo", "delete_branch",
           "reset", "stage"]
