"""Collecting the branch tier's garbage for one repository (`garbage.py` decides).

Order matters: the block store is listed first, then the KV is read once (branches at
head, commits and staging tokens at that read's revision), so a metarange published
before the KV read is seen live, and a file written after the listing is not a
candidate. Staging tokens named by no branch are dropped; files unreachable from every
commit and every compacted metarange, older than the grace period, are removed; so are
the change files of Spark merges (`scratch/`) older than the grace period.

A sweep does bounded work: at most `max_tokens` tokens dropped and `max_files` files
removed (the rest wait for the next sweep; the verdicts do not go stale). Marking
reads every commit of the repository (paged), as any mark and sweep must.

Only the repository's own directory (`<root>/branches/<repo>/`) is listed or touched:
the block store's files (`<root>/shard-<n>/`) are never candidates, and the block
store's garbage rules list only `shard-<n>` directories (`blocks/gc.py`), never this
one.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from sediment.actors.branches import garbage as gb
from sediment.actors.branches import names as nm
from sediment.actors.branches import rangefile as rf
from sediment.actors.branches import span_merge
from sediment.actors.branches.apply import RangeRef
from sediment.actors.branches.branch import decode_branch
from sediment.actors.branches.records import decode_commit
from sediment.actors.branches.tier import Tier
from sediment.actors.kv.types import Range

PAGE = 1000


MAX_TOKENS = 256  # staging tokens dropped per sweep
MAX_FILES = 1000  # files removed per sweep


@dataclass(frozen=True, slots=True)
class Swept:
    tokens: tuple[str, ...]
    files: tuple[gb.StoredFile, ...]
    scratch: tuple[str, ...] = ()
    more: bool = False  # garbage left for the next sweep (a budget ran out)


KINDS: tuple[rf.Kind, ...] = ("range", "metarange")


def _stored(root: str, repo: str) -> list[gb.StoredFile]:
    out = []
    for kind in KINDS:
        for file_id in rf.list_files(root, repo, kind):
            try:
                mtime = os.stat(rf.file_path(root, repo, kind, file_id)).st_mtime
            except FileNotFoundError:
                continue
            out.append(gb.StoredFile(kind, file_id, mtime))
    return out


async def _prefix_values(tier: Tier, prefix: bytes, at: int) -> list[tuple[bytes, bytes]]:
    out: list[tuple[bytes, bytes]] = []
    key, end = prefix, nm.prefix_end(prefix)
    while True:
        got = await tier.kv.range(Range(key, end, revision=at, limit=PAGE))
        out += [(kv.key, kv.value) for kv in got.kvs]
        if not got.more:
            return out
        key = got.kvs[-1].key + b"\0"


async def _tokens(tier: Tier, repo: str, at: int) -> list[str]:
    """The tokens with entries, one Range per token (it jumps over each token's keys)."""
    prefix = nm.staging_repo_prefix(repo)
    key, end = prefix, nm.prefix_end(prefix)
    out: list[str] = []
    while True:
        got = await tier.kv.range(Range(key, end, revision=at, limit=1, keys_only=True))
        if not got.kvs:
            return out
        token = nm.token_of(repo, got.kvs[0].key)
        if token is None:  # not ours: step over the key
            key = got.kvs[0].key + b"\0"
            continue
        out.append(token)
        key = nm.prefix_end(nm.staging_prefix(repo, token))


def _old_scratch(root: str, repo: str, now: float, grace: float) -> list[str]:
    directory = span_merge.scratch_dir(root, repo)
    if not os.path.isdir(directory):
        return []
    out = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        try:
            if os.path.isfile(path) and now - os.stat(path).st_mtime >= grace:
                out.append(path)
        except FileNotFoundError:
            continue
    return out


async def sweep(tier: Tier, repo: str, grace: float = gb.DEFAULT_GRACE,
                now: float | None = None, max_tokens: int = MAX_TOKENS,
                max_files: int = MAX_FILES) -> Swept:
    """Collect the repository's garbage, at most `max_tokens` tokens and `max_files`
    files (scratch files included). File ages are wall-clock (`now`, default
    time.time()): they are compared with the files' modification times."""
    nm.check_repo(repo)
    root = tier.store.root
    files = await tier.env.blocking(_stored, root, repo)
    now = time.time() if now is None else now
    head = await tier.kv.range(Range(nm.branches_prefix(repo),
                                     nm.prefix_end(nm.branches_prefix(repo)), limit=1))
    at = head.revision
    branches = [decode_branch(v) for _, v in await _prefix_values(
        tier, nm.branches_prefix(repo), at)]
    commit_prefix = nm.commit_key(repo, "")
    commits = [decode_commit(v, k[len(commit_prefix):].decode())
               for k, v in await _prefix_values(tier, commit_prefix, at)]
    unnamed = gb.unnamed_tokens(branches, await _tokens(tier, repo, at))
    tokens = unnamed[:max_tokens]
    await tier.staging.drop(repo, tokens)
    live = gb.live_metaranges(branches, (c.metarange for c in commits))
    metaranges: dict[str, list[RangeRef]] = {mr: tier.store.ranges(repo, mr) for mr in live}
    doomed = gb.collectable(files, live, gb.live_ranges(metaranges), now, grace)
    removed = [f for f in doomed[:max_files] if rf.remove_file(root, repo, f.kind, f.id)]
    room = max_files - min(len(doomed), max_files)
    scratch = (await tier.env.blocking(_old_scratch, root, repo, now, grace))
    gone = [p for p in scratch[:room] if _unlink(p)]
    more = len(unnamed) > max_tokens or len(doomed) > max_files or len(scratch) > room
    return Swept(tuple(tokens), tuple(removed), tuple(gone), more)


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


__all__ = ["MAX_FILES", "MAX_TOKENS", "PAGE", "Swept", "sweep"]
