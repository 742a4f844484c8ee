"""The KV machine's local reads: one frozen dataclass per query (`KvMachine.query`).

Besides a `Range`, these are what a raft server answers from its KV machine between log
steps (sent inside the raft protocol's `Query` / `ReadIndex`): the node and the watchers
read the history, the etcd API its leases, auth and hashes, the block tier the rows it
flushes and the skeletons of cold reads, the scenario observers which revision an entry
took. Each class's doc names its answer; a `KvError` is answered, never raised.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sediment.actors.kv.types import Range


@dataclass(frozen=True, slots=True)
class Events:
    """-> [Event]: the changes of [key, range_end) in revisions [start, end] (end None:
    up to head), with prev values if `prev_kv`; ErrCompacted below the compact revision."""

    start: int
    end: int | None
    key: bytes
    range_end: bytes | None
    prev_kv: bool = False


@dataclass(frozen=True, slots=True)
class WatchHistory:
    """-> [Event]: as `Events` for a watch's replay, which needs revisions above the
    compact revision: ErrCompacted at or below it."""

    start: int
    end: int | None
    key: bytes
    range_end: bytes | None
    prev_kv: bool


@dataclass(frozen=True, slots=True)
class CompactRevisions:
    """-> (compact revision, finished compact revision)."""


@dataclass(frozen=True, slots=True)
class Head:
    """-> the head revision (the last written one)."""


@dataclass(frozen=True, slots=True)
class AppliedSince:
    """-> `AppliedBatch`: the changes of revisions [lo, hi] (hi None: up to head; None
    when a compaction reached lo), the compact revision and the head, in one read."""

    lo: int
    hi: int | None


@dataclass(frozen=True, slots=True)
class Revisions:
    """-> [(revision, raft index)] of the writes applied from entries lo..hi."""

    lo_index: int
    hi_index: int


@dataclass(frozen=True, slots=True)
class AllLeases:
    """-> [LeaseInfo] of every lease."""


@dataclass(frozen=True, slots=True)
class LeaseLookup:
    """-> `LeaseInfo` of one lease, with its keys if `keys`."""

    lease: int
    keys: bool


@dataclass(frozen=True, slots=True)
class TokenUser:
    """-> (user, auth revision) a simple token names (memory only: this member's)."""

    token: str


@dataclass(frozen=True, slots=True)
class AuthRead:
    """-> what the auth read `op` (user_get, role_list, password, ...) answers `user`."""

    op: str
    args: tuple[Any, ...]
    user: str | None


@dataclass(frozen=True, slots=True)
class WriteCheck:
    """-> True: sent inside an auth `Wire`, it asks only the auth check, whether the
    wire's user may write every key of [key, range_end) (a request that is not a KV write
    but stands for writes, such as a branch writer's delete report)."""

    key: bytes
    range_end: bytes | None


@dataclass(frozen=True, slots=True)
class HashKv:
    """-> (hash, compact revision, head): etcd's HashKV at `revision` (0: head)."""

    revision: int


@dataclass(frozen=True, slots=True)
class HistoryRows:
    """-> `FlushRows`: the rows from revision `lo` on, at most about `max_rows` (the
    block tier's flusher)."""

    lo: int
    max_rows: int


@dataclass(frozen=True, slots=True)
class HistoryRange:
    """-> `RangeSkeleton`: `request` at any revision, even below the compact revision."""

    request: Range


@dataclass(frozen=True, slots=True)
class HistoryEvents:
    """-> `EventsSkeleton`: `Events` from any start revision >= 1, without prev values."""

    start: int
    end: int | None
    key: bytes
    range_end: bytes | None


KvQuery = (Events | WatchHistory | CompactRevisions | Head | AppliedSince | Revisions | AllLeases
           | LeaseLookup | TokenUser | AuthRead | HashKv | HistoryRows | HistoryRange
           | HistoryEvents | WriteCheck)

__all__ = ["AllLeases", "AppliedSince", "AuthRead", "CompactRevisions", "Events", "HashKv", "Head",
           "HistoryEvents", "HistoryRange", "HistoryRows", "KvQuery", "LeaseLookup",
           "Revisions", "TokenUser", "WatchHistory", "WriteCheck"]
