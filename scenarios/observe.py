"""What a scenario run sees of the cluster from outside (pure): a `ClusterView` is built
from the status answers of each member's raft server and KV node (`member`), for the
timeline's samples, the settle check and the leader a fault means. The protocol moments
faults wait for are held at breakpoints in the code, not read from here (`holds.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MemberView:
    """One member as its raft server and KV node answered (zeros when down)."""

    node: str
    up: bool = False  # the raft server answered
    kv_up: bool = False  # the KV node answered
    role: str | None = None
    leader: str | None = None
    term: int = 0
    commit: int = 0
    applied: int = 0
    last_index: int = 0
    head: int = 0
    compact_revision: int = 0  # applied by the member's store
    finished_compact_revision: int = 0  # its value-only pass done up to here
    snapshot_index: int = 0
    segments: int = 0
    installs: int = 0
    floor: int = 0  # the KV node's watch-admission floor
    kv_compact_revision: int = 0  # the compaction the KV node has seen applied
    watches: int = 0


@dataclass(frozen=True)
class ClusterView:
    """Every member as it answered, each at or after time `t` (when the answers were
    asked for)."""

    t: float
    members: tuple[MemberView, ...]

    def leader(self) -> MemberView | None:
        """The live member that says it leads, in the highest term."""
        leading = [m for m in self.members if m.up and m.role == "leader"]
        return max(leading, key=lambda m: m.term) if leading else None

    def compact_revision(self) -> int:
        """The highest compact revision any member applied."""
        return max((m.compact_revision for m in self.members if m.up), default=0)


def _int(d: Mapping[str, Any] | None, key: str) -> int:
    v = d.get(key, 0) if d is not None else 0
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def member(node: str, raft: Mapping[str, Any] | None,
           kv: Mapping[str, Any] | None) -> MemberView:
    """A member from its raft server's `Status()` answer and its KV node's."""
    role = raft.get("role") if raft is not None else None
    leader = raft.get("leader") if raft is not None else None
    segments = raft.get("segments", ()) if raft is not None else ()
    return MemberView(
        node=node, up=raft is not None, kv_up=kv is not None,
        role=role if isinstance(role, str) else None,
        leader=leader if isinstance(leader, str) else None,
        term=_int(raft, "term"), commit=_int(raft, "commit"), applied=_int(raft, "applied"),
        last_index=_int(raft, "last_index"), head=_int(raft, "head"),
        compact_revision=_int(raft, "compact_revision"),
        finished_compact_revision=_int(raft, "finished_compact_revision"),
        snapshot_index=_int(raft, "snapshot_index"),
        segments=len(segments) if isinstance(segments, list | tuple) else 0,
        installs=_int(raft, "installs"), floor=_int(kv, "floor"),
        kv_compact_revision=_int(kv, "compact_revision"), watches=_int(kv, "watches"),
    )


def describe(view: ClusterView) -> str:
    """One line: each member's role and leader, term, log positions, head, compact
    revision and floor (everything the settle check compares, so a cluster that did not
    settle shows why)."""
    parts = []
    for m in view.members:
        if not m.up:
            parts.append(f"{m.node} down")
            continue
        role = {"leader": "L", "follower": "F"}.get(m.role or "", "?")
        kv = f"floor {m.floor}" if m.kv_up else "kv silent"
        parts.append(f"{m.node} {role} (leader {m.leader} term {m.term}) commit {m.commit}"
                     f" applied {m.applied} last {m.last_index} head {m.head} compact "
                     f"{m.compact_revision}/{m.finished_compact_revision} {kv}")
    return ", ".join(parts)


def leaders(views: Sequence[ClusterView]) -> list[tuple[float, str | None]]:
    """(time, leader) at every change of leader, from samples in time order."""
    out: list[tuple[float, str | None]] = []
    for v in views:
        lead = v.leader()
        name = lead.node if lead is not None else None
        if not out or out[-1][1] != name:
            out.append((v.t, name))
    return out


__all__ = ["ClusterView", "MemberView", "describe", "leaders", "member"]
