"""Repositories, branches and commits in the replicated KV (lakeFS's ref manager).

Branches change only by SetIf: `update_branch` reads the branch and its key's mod
revision, lets a rule compute the new branch (or refuse: nothing is written), and
writes it in a Txn comparing the mod revision with the one it read. A lost race is
retried with the rule run again on the fresh branch, under the retry policy
(lakeFS's `BranchUpdate` + `retryBranchUpdate`: 10 tries, back-off up to 5 s), then
TooManyTries. Every won and lost race is recorded for the history checker and counted
(`branch_setif_conflicts`).

Commits are immutable and content-addressed: writing one is create-if-absent, and a
commit read once is cached for good. Creating a repository writes its record, its
first commit (the empty metarange) and its default branch in one Txn, refused if the
repository exists.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sediment.actors.branches import metrics
from sediment.actors.branches import names as nm
from sediment.actors.branches.branch import Branch, decode_branch, encode_branch
from sediment.actors.branches.errors import (
    BranchExists,
    BranchNotFound,
    CommitNotFound,
    RepositoryExists,
    RepositoryNotFound,
    TooManyTries,
)
from sediment.actors.branches.history import Lost, Recorder, Updated
from sediment.actors.branches.ports import Env, KvPort
from sediment.actors.branches.records import (
    Commit,
    Repository,
    decode_commit,
    decode_repository,
    encode_commit,
    encode_repository,
)
from sediment.actors.branches.retry import BRANCH_UPDATE, RetryPolicy
from sediment.actors.kv.errors import ErrCompacted
from sediment.actors.kv.types import Compare, DeleteRange, Put, Range, Txn

MAX_LISTED = 10_000  # branches or repositories one listing returns


@dataclass(frozen=True, slots=True)
class BranchRead:
    """A branch as read: its key's mod revision (what SetIf compares) and the read's
    header revision (the snapshot later reads of its tokens are pinned at)."""

    branch: Branch
    mod_revision: int
    revision: int


@dataclass(frozen=True, slots=True)
class BranchUpdate:
    before: Branch
    after: Branch
    base_revision: int
    revision: int
    read_revision: int  # the header revision of the read the rule saw


Rule = Callable[[BranchRead], Awaitable[Branch]]


class Refs:
    def __init__(self, kv: KvPort, env: Env, recorder: Recorder,
                 policy: RetryPolicy = BRANCH_UPDATE, commit_cache: int = 4096) -> None:
        self.kv = kv
        self.env = env
        self.recorder = recorder
        self.policy = policy
        self._commits: OrderedDict[tuple[str, str], Commit] = OrderedDict()
        self._commit_cache = commit_cache

    # ---- repositories -----------------------------------------------------------------

    async def get_repo(self, repo: str) -> Repository:
        got = await self.kv.range(Range(nm.repo_key(repo)))
        if not got.kvs:
            raise RepositoryNotFound(f"repository {repo!r} does not exist")
        return decode_repository(got.kvs[0].value)

    async def list_repos(self) -> list[str]:
        prefix = nm.repos_prefix()
        got = await self.kv.range(Range(prefix, nm.prefix_end(prefix), limit=MAX_LISTED,
                                        keys_only=True))
        return [kv.key[len(prefix):].decode() for kv in got.kvs]

    async def create_repo(self, repo: str, record: Repository, first: Commit,
                          branch: Branch) -> int:
        """The repository, its first commit and default branch, or RepositoryExists."""
        key = nm.repo_key(repo)
        bkey = nm.branch_key(repo, record.default_branch)
        res = await self.kv.txn(Txn(
            (Compare(key, "create_revision", "=", 0),),
            (Put(key, encode_repository(record)),
             Put(nm.commit_key(repo, first.id), encode_commit(first)),
             Put(bkey, encode_branch(branch)))))
        if not res.succeeded:
            raise RepositoryExists(f"repository {repo!r} exists")
        self.recorder.record(Updated(repo, record.default_branch, "create", None, branch, 0,
                                     res.revision))
        return res.revision

    # ---- commits ----------------------------------------------------------------------

    async def get_commit(self, repo: str, commit_id: str) -> Commit:
        key = (repo, commit_id)
        cached = self._commits.get(key)
        if cached is not None:
            self._commits.move_to_end(key)
            return cached
        got = await self.kv.range(Range(nm.commit_key(repo, commit_id)))
        if not got.kvs:
            raise CommitNotFound(f"commit {commit_id} does not exist in {repo!r}")
        commit = decode_commit(got.kvs[0].value, commit_id)
        self._remember(key, commit)
        return commit

    async def put_commit(self, repo: str, commit: Commit) -> str:
        """Write a commit (create-if-absent: the same id is the same content)."""
        key = nm.commit_key(repo, commit.id)
        await self.kv.txn(Txn((Compare(key, "create_revision", "=", 0),),
                              (Put(key, encode_commit(commit)),)))
        self._remember((repo, commit.id), commit)
        return commit.id

    def _remember(self, key: tuple[str, str], commit: Commit) -> None:
        self._commits[key] = commit
        while len(self._commits) > self._commit_cache:
            self._commits.popitem(last=False)

    # ---- branches ---------------------------------------------------------------------

    async def get_branch(self, repo: str, name: str) -> BranchRead:
        got = await self.kv.range(Range(nm.branch_key(repo, name)))
        if not got.kvs:
            await self.get_repo(repo)  # RepositoryNotFound first, as lakeFS answers
            raise BranchNotFound(f"branch {name!r} does not exist in {repo!r}")
        kv = got.kvs[0]
        return BranchRead(decode_branch(kv.value), kv.mod_revision, got.revision)

    async def list_branches(self, repo: str) -> list[tuple[str, Branch]]:
        await self.get_repo(repo)
        prefix = nm.branches_prefix(repo)
        got = await self.kv.range(Range(prefix, nm.prefix_end(prefix), limit=MAX_LISTED))
        return [(kv.key[len(prefix):].decode(), decode_branch(kv.value)) for kv in got.kvs]

    async def create_branch(self, repo: str, name: str, branch: Branch) -> int:
        """A new branch, or BranchExists; RepositoryNotFound if the repository is gone."""
        key = nm.branch_key(repo, name)
        res = await self.kv.txn(Txn(
            (Compare(key, "create_revision", "=", 0),
             Compare(nm.repo_key(repo), "create_revision", ">", 0)),
            (Put(key, encode_branch(branch)),)))
        if not res.succeeded:
            await self.get_repo(repo)
            raise BranchExists(f"branch {name!r} exists in {repo!r}")
        self.recorder.record(Updated(repo, name, "create", None, branch, 0, res.revision))
        return res.revision

    async def delete_branch(self, repo: str, name: str, read: BranchRead) -> bool:
        """Delete the branch if it is still as read; whether it was."""
        key = nm.branch_key(repo, name)
        res = await self.kv.txn(Txn((Compare(key, "mod_revision", "=", read.mod_revision),),
                                    (DeleteRange(key),)))
        return res.succeeded

    async def update_branch(self, repo: str, name: str, kind: str, rule: Rule,
                            policy: RetryPolicy | None = None) -> BranchUpdate:
        """lakeFS BranchUpdate with bounded retry: read, rule, SetIf; again on a lost
        race (or a snapshot the KV compacted under the rule); TooManyTries at the end.
        A rule that raises writes nothing and ends the update with its error."""
        policy = policy or self.policy
        key = nm.branch_key(repo, name)
        failed = 0
        while True:
            read = await self.get_branch(repo, name)
            try:
                after = await rule(read)
            except ErrCompacted:
                after = None
            if after is not None:
                res = await self.kv.txn(Txn(
                    (Compare(key, "mod_revision", "=", read.mod_revision),),
                    (Put(key, encode_branch(after)),)))
                if res.succeeded:
                    self.recorder.record(Updated(repo, name, kind, read.branch, after,
                                                 read.mod_revision, res.revision))
                    metrics.SEALED_TOKENS.set(len(after.sealed_tokens),
                                              {"repo": repo, "branch": name})
                    return BranchUpdate(read.branch, after, read.mod_revision, res.revision,
                                        read.revision)
                self.recorder.record(Lost(repo, name, kind, read.mod_revision))
                metrics.SETIF_CONFLICTS.inc(1, {"kind": kind})
            failed += 1
            delay = policy.delay(failed, self.env.jitter())
            if delay is None:
                raise TooManyTries(f"{kind} of {repo}/{name}: lost {failed} races")
            await self.env.sleep(delay)


__all__ = ["MAX_LISTED", "BranchRead", "BranchUpdate", "Refs", "Rule"]
