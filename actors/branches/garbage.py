"""What the branch tier leaves behind and when it may go (pure).

Two kinds of garbage, both left by a flow that died or finished:
- **staging tokens** a commit, reset, compaction or branch deletion stopped naming but
  did not drop (killed after its SetIf). A token named by no branch at KV revision H
  is garbage for good: new tokens are fresh, a token is only ever removed from a
  branch, and a staged write lands only while its branch (unchanged since the write
  read it) names its token. Dropping it at H does not disturb a read pinned below H
  (the KV keeps history until it compacts).
- **range and metarange files** no commit and no branch's compacted metarange reaches.
  Commits are never deleted, so every commit's metarange stays live. A file written by
  a flow still in flight (a compaction between steps 2 and 3, a commit before its
  SetIf) is unreferenced too; nothing in its name tells, so files are only collected
  once they are older than `grace`, and a write that finds its file already there
  refreshes its time (`rangefile.write_file`), so a flow reusing an old orphan keeps
  it. The rule assumes no flow takes longer than `grace` from writing a file to
  publishing it (the default is an hour; a compaction takes seconds to minutes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sediment.actors.branches.apply import RangeRef
from sediment.actors.branches.branch import Branch
from sediment.actors.branches.rangefile import Kind

DEFAULT_GRACE = 3600.0


def unnamed_tokens(branches: Iterable[Branch], tokens: Iterable[str]) -> list[str]:
    """The tokens (with entries) that no branch names, in order."""
    named = {t for b in branches for t in b.tokens}
    return sorted(t for t in set(tokens) if t not in named)


def live_metaranges(branches: Iterable[Branch], commit_metaranges: Iterable[str]) -> set[str]:
    return set(commit_metaranges) | {b.compacted_metarange for b in branches
                                     if b.compacted_metarange is not None}


def live_ranges(metaranges: Mapping[str, Sequence[RangeRef]]) -> set[str]:
    return {r.id for ranges in metaranges.values() for r in ranges}


@dataclass(frozen=True, slots=True)
class StoredFile:
    kind: Kind
    id: str
    mtime: float


def collectable(files: Iterable[StoredFile], metaranges: set[str], ranges: set[str],
                now: float, grace: float) -> list[StoredFile]:
    """The files no live metarange reaches that are older than `grace`."""
    out = []
    for f in files:
        live = f.id in (metaranges if f.kind == "metarange" else ranges)
        if not live and now - f.mtime >= grace:
            out.append(f)
    return out


__all__ = ["DEFAULT_GRACE", "StoredFile", "collectable", "live_metaranges", "live_ranges",
           "unnamed_tokens"]
