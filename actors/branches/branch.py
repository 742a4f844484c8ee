"""The branch entity of the seed and every rule that changes it (pure).

`Branch{CommitID, StagingToken, SealedTokens (newest first), CompactedMetaRange,
CompactionStartTime}`. Writes go to `staging_token`; sealed tokens are older staging
tokens waiting to be committed or compacted; `compacted_metarange`, when set, holds the
branch's committed content plus every change of the tokens compacted into it, and
replaces the commit's metarange as the bottom layer of reads.

Each rule takes the branch as read and returns the branch to write with SetIf, or
raises a typed error meaning "write nothing": the shell reads, applies a rule, and
writes only if the branch's key is still at the revision it read (lakeFS's
`BranchUpdate`). The rules never look at clocks or storage; time and "is the staging
token empty" come in as arguments.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

from sediment.actors.branches.errors import (
    CompactionConflict,
    CompactionThrottled,
    CorruptRecord,
    NothingToCompact,
)
from sediment.actors.branches.names import check_token, is_commit_id


@dataclass(frozen=True, slots=True)
class Branch:
    commit_id: str
    staging_token: str
    sealed_tokens: tuple[str, ...] = ()
    compacted_metarange: str | None = None
    compaction_start_time: float | None = None

    @property
    def tokens(self) -> tuple[str, ...]:
        """Every token reads go through, newest first: staging, then sealed in order."""
        return (self.staging_token, *self.sealed_tokens)


# ---- update rules -------------------------------------------------------------------------


def seal(branch: Branch, new_token: str) -> Branch:
    """A commit's first step (and every HEAD-changing operation's): the staging token
    joins the front of the sealed tokens and writes go to a new token."""
    return replace(branch, staging_token=new_token,
                   sealed_tokens=(branch.staging_token, *branch.sealed_tokens))


def committed(branch: Branch, commit_id: str) -> Branch:
    """A commit's last step: the branch points at the new commit, which holds every
    sealed token and the compacted metarange; both are cleared. The staging token
    (sealed by step one, or newer) stays: its writes are not in the commit."""
    return replace(branch, commit_id=commit_id, sealed_tokens=(), compacted_metarange=None)


def reset(branch: Branch, new_token: str) -> Branch:
    """Drop every uncommitted change: a new empty staging token, no sealed tokens, no
    compacted metarange."""
    return replace(branch, staging_token=new_token, sealed_tokens=(),
                   compacted_metarange=None)


def start_compaction(branch: Branch, new_token: str, now: float, interval: float,
                     staging_has_entries: bool, force: bool = False) -> Branch:
    """Compactor step 1, in one SetIf: push a new staging token, prepend the old one to
    the sealed tokens, set CompactionStartTime. CompactionThrottled if a compaction
    started less than `interval` seconds ago (unless `force`); the sensor's claim is this
    SetIf, so two claims race and one wins. NothingToCompact if there are no sealed
    tokens and the staging token is empty."""
    start = branch.compaction_start_time
    if not force and start is not None and now - start < interval:
        raise CompactionThrottled(f"a compaction started {now - start:.3f} s ago "
                                  f"(interval {interval} s)")
    if not branch.sealed_tokens and not staging_has_entries:
        raise NothingToCompact("no sealed tokens and an empty staging token")
    return replace(seal(branch, new_token), compaction_start_time=now)


def finish_compaction(current: Branch, started: Branch, metarange_id: str) -> Branch:
    """Compactor step 3, in one SetIf: set the compacted metarange and drop exactly the
    sealed tokens compacted into it. `started` is the branch step 1 wrote. The step
    fails (CompactionConflict, nothing written) if the sealed tokens, the commit or the
    compacted metarange changed meanwhile: a commit, a reset or another compaction
    won the branch, and this metarange no longer describes it."""
    if current.sealed_tokens != started.sealed_tokens:
        raise CompactionConflict(f"sealed tokens changed since step 1: "
                                 f"{started.sealed_tokens} -> {current.sealed_tokens}")
    if current.commit_id != started.commit_id:
        raise CompactionConflict(f"the branch moved to commit {current.commit_id}")
    if current.compacted_metarange != started.compacted_metarange:
        raise CompactionConflict("the compacted metarange changed since step 1")
    return replace(current, compacted_metarange=metarange_id, sealed_tokens=())


def released_tokens(before: Branch, after: Branch) -> tuple[str, ...]:
    """Tokens `before` referenced and `after` does not: their staged entries can be
    dropped once `after` is written (no read at a later revision goes through them)."""
    kept = set(after.tokens)
    return tuple(t for t in before.tokens if t not in kept)


# ---- codec ------------------------------------------------------------------------------


def encode_branch(branch: Branch) -> bytes:
    doc = {"commit": branch.commit_id, "token": branch.staging_token,
           "sealed": list(branch.sealed_tokens), "compacted": branch.compacted_metarange,
           "compaction_start": branch.compaction_start_time}
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def decode_branch(value: bytes) -> Branch:
    """A branch record back; CorruptRecord if it is not one `encode_branch` wrote."""
    try:
        doc = json.loads(value.decode())
        if not isinstance(doc, dict) or set(doc) != {"commit", "token", "sealed", "compacted",
                                                      "compaction_start"}:
            raise ValueError("unexpected fields")
        commit, token, sealed = doc["commit"], doc["token"], doc["sealed"]
        compacted, start = doc["compacted"], doc["compaction_start"]
        if not isinstance(commit, str) or not is_commit_id(commit):
            raise ValueError(f"bad commit id {commit!r}")
        if not isinstance(sealed, list):
            raise ValueError("sealed is not a list")
        for t in (token, *sealed):
            check_token(t)
        if compacted is not None and (not isinstance(compacted, str) or not compacted):
            raise ValueError("bad compacted metarange")
        if start is not None and (not isinstance(start, int | float) or isinstance(start, bool)
                                  or not math.isfinite(start)):
            raise ValueError("bad compaction start time")
        return Branch(commit, token, tuple(sealed), compacted,
                      None if start is None else float(start))
    except (ValueError, UnicodeDecodeError) as err:
        raise CorruptRecord(f"branch record does not decode: {err}") from None


__all__ = [
    "Branch",
    "committed",
    "decode_branch",
    "encode_branch",
    "finish_compaction",
    "released_tokens",
    "reset",
    "seal",
    "start_compaction",
]
