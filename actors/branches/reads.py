"""Reading a branch or a commit: one entry, a page of a prefix, the uncommitted diff,
the log. The seed's read flow:

1. the staging token, 2. the sealed tokens in order, 3. the compacted metarange if the
branch has one, else its commit's metarange. Committed reads (a commit id as the ref)
read the commit's metarange only.

A branch read takes one snapshot: the branch record is read (linearizably, through
the KV's log), and every staging token is read at that read's header revision, so a
commit or a compaction finishing meanwhile (and dropping the tokens it folded in)
changes nothing the read sees; ranges are immutable. If the KV compacted that
revision away the whole read starts over (ErrCompacted, bounded by the snapshot
policy).

Pages (`list_entries`, `diff_uncommitted`) merge the staging layers window by window
(`merge.window_bound`): each token is scanned in batches and a window is exact up to
the smallest last path among the tokens with more, so a page costs the staged records
up to its last entry, not the whole staging area (lakeFS PR #10061's complaint), and
tombstones hiding a prefix are skipped batch by batch (issue #2092's workload, which
compaction removes).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from sediment.actors.branches import names as nm
from sediment.actors.branches.diff import Diff, join_uncommitted
from sediment.actors.branches.entry import Entry, Record
from sediment.actors.branches.errors import InvalidInput, ObjectNotFound, TooManyTries
from sediment.actors.branches.history import DiffedPage, GotEntry, ListedPage
from sediment.actors.branches.merge import (
    in_prefix,
    merge_layers,
    split_at,
    start_after,
    visible,
    window_bound,
)
from sediment.actors.branches.records import Commit
from sediment.actors.branches.refs import BranchRead
from sediment.actors.branches.tier import LISTING_MAX_AMOUNT, Tier
from sediment.actors.kv.errors import ErrCompacted

T = TypeVar("T")
X = TypeVar("X")


async def pinned(tier: Tier, read: Callable[[], Awaitable[T]]) -> T:
    """`read()`, started over while the KV compacts its snapshot away."""
    failed = 0
    while True:
        try:
            return await read()
        except ErrCompacted:
            failed += 1
            delay = tier.config.snapshot_read.delay(failed, tier.env.jitter())
            if delay is None:
                raise TooManyTries(f"the KV compacted {failed} snapshots under a read") from None
            await tier.env.sleep(delay)


async def resolve_commit(tier: Tier, repo: str, ref: str) -> str:
    """The commit a ref names: a commit id as is (it must exist), a branch's HEAD."""
    if nm.is_commit_id(ref):
        await tier.refs.get_commit(repo, ref)
        return ref
    return (await tier.refs.get_branch(repo, ref)).branch.commit_id


async def base_metarange(tier: Tier, repo: str, read: BranchRead) -> str:
    """The bottom layer of a branch: its compacted metarange, else its commit's."""
    if read.branch.compacted_metarange is not None:
        return read.branch.compacted_metarange
    return (await tier.refs.get_commit(repo, read.branch.commit_id)).metarange


# ---- one entry ------------------------------------------------------------------------------


async def get_entry(tier: Tier, repo: str, ref: str, path: str,
                    staged_only: bool = False) -> Entry:
    """The entry at `path` on `ref`, or ObjectNotFound. `staged_only` (lakeFS's
    WithStageOnly): only an uncommitted entry, one that differs from the commit's."""
    if nm.is_commit_id(ref):
        commit = await tier.refs.get_commit(repo, ref)
        found = tier.store.get(repo, commit.metarange, path)
        if found is None:
            raise ObjectNotFound(f"{path!r:.200} not found in commit {ref}")
        return found

    async def read() -> Entry | None:
        branch = await tier.refs.get_branch(repo, ref)
        entry = await _branch_entry(tier, repo, branch, path, staged_only)
        if not staged_only:  # a staged-only read is not the branch's view
            tier.recorder.record(GotEntry(repo, ref, path, branch.revision, entry))
        return entry

    entry = await pinned(tier, read)
    if entry is None:
        raise ObjectNotFound(f"{path!r:.200} not found on branch {ref!r}")
    return entry


async def _branch_entry(tier: Tier, repo: str, read: BranchRead, path: str,
                        staged_only: bool) -> Entry | None:
    b = read.branch
    found, entry = await tier.staging.get(repo, b.tokens, path, read.revision)
    if found and (entry is None or not staged_only):
        return entry
    if not found and staged_only and b.compacted_metarange is None:
        return None
    if not found:
        entry = tier.store.get(repo, await base_metarange(tier, repo, read), path)
        if not staged_only:
            return entry
    commit = await tier.refs.get_commit(repo, b.commit_id)
    committed = tier.store.get(repo, commit.metarange, path)
    return None if entry == committed else entry


# ---- pages ----------------------------------------------------------------------------------


@dataclass
class _Layer:
    token: str
    cursor: str
    buffer: list[Record] = field(default_factory=list)
    more: bool = True


async def staged_windows(tier: Tier, repo: str, tokens: tuple[str, ...], start: str,
                         prefix: str, at: int) -> AsyncIterator[tuple[list[Record], str | None]]:
    """(merged staged records of the window, the window's last path or None for "to
    the end of the prefix"), window after window from `start`."""
    layers = [_Layer(t, start) for t in tokens]
    while True:
        for layer in layers:
            if not layer.buffer and layer.more:
                layer.buffer, layer.more = await tier.staging.scan(
                    repo, layer.token, layer.cursor, prefix, at, tier.config.scan_batch)
                if layer.buffer:
                    layer.cursor = layer.buffer[-1][0] + "\0"
        bound = window_bound([(layer.buffer, layer.more) for layer in layers])
        parts = []
        for layer in layers:
            part, layer.buffer = split_at(layer.buffer, bound)
            parts.append(part)
        yield list(merge_layers(parts)), bound
        if bound is None:
            return


class _Peek(Generic[X]):
    """A sorted stream that hands out its items up to a bound, lazily."""

    def __init__(self, items: Iterable[X], key: Callable[[X], str]) -> None:
        self._it: Iterator[X] = iter(items)
        self._key = key
        self._head: X | None = next(self._it, None)

    def through(self, bound: str | None) -> Iterator[X]:
        while self._head is not None and (bound is None or self._key(self._head) <= bound):
            item = self._head
            self._head = next(self._it, None)
            yield item


def check_page(prefix: object, after: object, amount: object) -> tuple[str, str, int]:
    prefix = nm.check_prefix(prefix)
    after = nm.check_prefix(after)
    if isinstance(amount, bool) or not isinstance(amount, int) or not (
            0 < amount <= LISTING_MAX_AMOUNT):
        raise InvalidInput(f"amount must be an int in [1, {LISTING_MAX_AMOUNT}]: {amount!r}")
    return prefix, after, amount


async def list_entries(tier: Tier, repo: str, ref: str, prefix: str = "", after: str = "",
                       amount: int = 1000) -> tuple[list[tuple[str, Entry]], bool]:
    """The first `amount` entries under `prefix` after path `after` on `ref` (a branch
    or a commit), and whether there are more."""
    start = start_after(prefix, after)
    if nm.is_commit_id(ref):
        commit = await tier.refs.get_commit(repo, ref)
        base = in_prefix(tier.store.iterate(repo, commit.metarange, start), prefix)
        return _take(visible(base), amount)

    async def read() -> tuple[list[tuple[str, Entry]], bool]:
        branch = await tier.refs.get_branch(repo, ref)
        mr = await base_metarange(tier, repo, branch)
        base = _Peek(in_prefix(tier.store.iterate(repo, mr, start), prefix), _path)
        out: list[tuple[str, Entry]] = []
        async for staged, bound in staged_windows(tier, repo, branch.branch.tokens, start,
                                                  prefix, branch.revision):
            for item in visible(merge_layers([staged, base.through(bound)])):
                out.append(item)
                if len(out) > amount:
                    return _recorded(tier, repo, ref, prefix, after, amount, branch,
                                     out[:amount], True)
        return _recorded(tier, repo, ref, prefix, after, amount, branch, out, False)

    return await pinned(tier, read)


def _recorded(tier: Tier, repo: str, ref: str, prefix: str, after: str, amount: int,
              branch: BranchRead, out: list[tuple[str, Entry]],
              more: bool) -> tuple[list[tuple[str, Entry]], bool]:
    tier.recorder.record(ListedPage(repo, ref, prefix, after, amount, branch.revision,
                                    tuple(out), more))
    return out, more


def _take(items: Iterable[T], amount: int) -> tuple[list[T], bool]:
    out: list[T] = []
    for item in items:
        if len(out) == amount:
            return out, True
        out.append(item)
    return out, False


def _path(rec: Record) -> str:
    return rec[0]


def _diffs_in_prefix(diffs: Iterable[Diff], prefix: str) -> Iterator[Diff]:
    for d in diffs:
        if d.path.startswith(prefix):
            yield d
        elif d.path > prefix:
            return


def _diff_path(d: Diff) -> str:
    return d.path


async def diff_uncommitted(tier: Tier, repo: str, branch: str, prefix: str = "",
                           after: str = "", amount: int = 1000) -> tuple[list[Diff], bool]:
    """DiffUncommitted: the branch's changes against its commit, a page at a time:
    staging + sealed tokens joined with diff(commit metarange, compacted metarange)."""
    start = start_after(prefix, after)

    async def read() -> tuple[list[Diff], bool]:
        b = await tier.refs.get_branch(repo, branch)
        committed = (await tier.refs.get_commit(repo, b.branch.commit_id)).metarange
        compacted = b.branch.compacted_metarange
        comp = tier.store.diff(repo, committed, compacted, start) if compacted else iter(())
        comp_peek = _Peek(_diffs_in_prefix(comp, prefix), _diff_path)
        lookup = tier.store.lookup(repo, committed)
        out: list[Diff] = []
        async for staged, bound in staged_windows(tier, repo, b.branch.tokens, start, prefix,
                                                  b.revision):
            for d in join_uncommitted(staged, comp_peek.through(bound), lookup):
                out.append(d)
                if len(out) > amount:
                    tier.recorder.record(DiffedPage(repo, branch, prefix, after, amount,
                                                    b.revision, tuple(out[:amount]), True))
                    return out[:amount], True
        tier.recorder.record(DiffedPage(repo, branch, prefix, after, amount, b.revision,
                                        tuple(out), False))
        return out, False

    return await pinned(tier, read)


async def is_staging_empty(tier: Tier, repo: str, branch: str) -> bool:
    """Whether the branch reads exactly as its commit (staging, sealed tokens and the
    compacted metarange together)."""
    diffs, _ = await diff_uncommitted(tier, repo, branch, amount=1)
    return not diffs


async def log(tier: Tier, repo: str, ref: str, amount: int = 100) -> list[tuple[str, Commit]]:
    """Up to `amount` commits from `ref`'s commit back along first parents."""
    commit_id: str | None = await resolve_commit(tier, repo, ref)
    out: list[tuple[str, Commit]] = []
    while commit_id is not None and len(out) < amount:
        commit = await tier.refs.get_commit(repo, commit_id)
        out.append((commit_id, commit))
        commit_id = commit.parents[0] if commit.parents else None
    return out


__all__ = ["base_metarange", "check_page", "diff_uncommitted", "get_entry", "is_staging_empty",
           "list_entries", "log", "pinned", "resolve_commit", "staged_windows"]
