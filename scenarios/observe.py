"""What a scenario run sees of the cluster from outside, and the protocol moments it waits
for (etcd robustness's failpoint triggers).

Pure: a `ClusterView` is built from the status answers of each member's raft server and
KV node (`member`), and `holds(trigger, view)` says whether a moment of the compaction
protocols is under way. The moments, named in the scenario file (`schema.TRIGGERS`):

- notice: the coordinator's compaction notice is out (a KV node's admission floor is
  above the compact revision the leader applied) and its Compact is not yet in the
  leader's unapplied log: between Netsy's notice and the proposal;
- compact_entry: a Compact entry sits in the leader's log, not yet applied there;
- physical_compaction: the leader's store scheduled a compaction whose value-only pass
  has not finished;
- snapshot_install: a live follower is behind the leader's snapshot, so it is, or is
  about to be, installing it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sediment.scenarios.schema import Trigger


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
    asked for); `pending_compacts`: revisions of the Compact entries in the leader's log
    that it has not applied yet (when they were read)."""

    t: float
    members: tuple[MemberView, ...]
    pending_compacts: tuple[int, ...] = ()

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
    """A member from its raft server's ("status",) answer and its KV node's."""
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


def holds(trigger: Trigger, view: ClusterView) -> bool:
    """Is the protocol moment `trigger` under way in `view`? (See the module doc.)"""
    leader = view.leader()
    if leader is None:
        return False
    applied = leader.compact_revision
    if trigger == "notice":
        raised = any(m.kv_up and m.floor > applied for m in view.members)
        return raised and not any(c > applied for c in view.pending_compacts)
    if trigger == "compact_entry":
        return any(c > applied for c in view.pending_compacts)
    if trigger == "physical_compaction":
        return leader.compact_revision > leader.finished_compact_revision
    # snapshot_install
    return leader.snapshot_index > 0 and any(
        m.up and m.node != leader.node and m.last_index < leader.snapshot_index
        for m in view.members)


def needs_log(trigger: Trigger) -> bool:
    """Whether deciding `trigger` needs the leader's unapplied entries read."""
    return trigger in ("notice", "compact_entry")


def needs_kv(trigger: Trigger) -> bool:
    """Whether deciding `trigger` needs the KV nodes' answers (their floors); a waiter
    that asks only the raft members sees a short moment sooner."""
    return trigger == "notice"


def describe(view: ClusterView) -> str:
    """One line: each member's role, head, compact revision and floor."""
    parts = []
    for m in view.members:
        if not m.up:
            parts.append(f"{m.node} down")
            continue
        role = {"leader": "L", "follower": "F"}.get(m.role or "", "?")
        parts.append(f"{m.node} {role} head {m.head} compact {m.compact_revision}"
                     f"/{m.finished_compact_revision} floor {m.floor}")
    pending = f"; pending Compact {list(view.pending_compacts)}" if view.pending_compacts else ""
    return ", ".join(parts) + pending


def leaders(views: Sequence[ClusterView]) -> list[tuple[float, str | None]]:
    """(time, leader) at every change of leader, from samples in time order."""
    out: list[tuple[float, str | None]] = []
    for v in views:
        lead = v.leader()
        name = lead.node if lead is not None else None
        if not out or out[-1][1] != name:
            out.append((v.t, name))
    return out


__all__ = ["ClusterView", "MemberView", "describe", "holds", "leaders", "member", "needs_kv",
           "needs_log"]
