"""Collecting the branch tier's garbage for one repository (`garbage.py` decides).

Order matters: the block store is listed first, then the KV is read once (branches at
head, commits and staging tokens at that read's revision), so a metarange published
before the KV read is seen live, and a file written after the listing is not a
candidate. Staging tokens named by no branch are dropped; files unreachable from every
commit and every compacted metarange, older than the grace period, are removed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from sediment.actors.branches import garbage as gb
from sediment.actors.branches import names as nm
from sediment.actors.branches import rangefile as rf
from sediment.actors.branches.apply import RangeRef
from sediment.actors.branches.branch import decode_branch
from sediment.actors.branches.records import decode_commit
from sediment.actors.branches.tier import Tier
from sediment.actors.kv.types import Range

PAGE = 1000


@dataclass(frozen=True, slots=True)
class Swept:
    tokens: tuple[str, ...]
    files: tuple[gb.StoredFile, ...]


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


async def sweep(tier: Tier, repo: str, grace: float = gb.DEFAULT_GRACE,
                now: float | None = None) -> Swept:
    """Collect the repository's garbage. File ages are wall-clock (`now`, default
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
    tokens = gb.unnamed_tokens(branches, await _tokens(tier, repo, at))
    await tier.staging.drop(repo, tokens)
    live = gb.live_metaranges(branches, (c.metarange for c in commits))
    metaranges: dict[str, list[RangeRef]] = {mr: tier.store.ranges(repo, mr) for mr in live}
    doomed = gb.collectable(files, live, gb.live_ranges(metaranges), now, grace)
    removed = [f for f in doomed if rf.remove_file(root, repo, f.kind, f.id)]
    return Swept(tuple(tokens), tuple(removed))


__all__ = ["PAGE", "Swept", "sweep"]
