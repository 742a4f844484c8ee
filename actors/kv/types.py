"""Request and response types of the KV store (etcd's rpc.proto, trimmed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Target = Literal["value", "version", "create_revision", "mod_revision", "lease"]
SortOrder = Literal["none", "ascend", "descend"]
SortTarget = Literal["key", "version", "create", "mod", "value"]

ALL_KEYS = b"\0"  # a range_end meaning "every key >= key" (etcd's "\x00")


def key_in_range(k: bytes, key: bytes, range_end: bytes | None) -> bool:
    """Whether `k` is in etcd's [key, range_end): None is `key` alone, ALL_KEYS every
    key >= key. The one definition the store's checks, the watchers and the checkers use."""
    if range_end is None:
        return k == key
    if range_end == ALL_KEYS:
        return k >= key
    return key <= k < range_end
Op = Literal["=", "!=", "<", ">"]


@dataclass(frozen=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0  # the lease the key is attached to (0: none)


@dataclass(frozen=True)
class RangeResult:
    kvs: list[KeyValue]
    count: int
    more: bool
    revision: int  # header revision: the store's head when the request was served


@dataclass(frozen=True)
class PutResult:
    revision: int
    prev_kv: KeyValue | None = None


@dataclass(frozen=True)
class DeleteResult:
    revision: int
    deleted: int
    prev_kvs: list[KeyValue] = field(default_factory=list)


@dataclass(frozen=True)
class Put:
    """etcd PutRequest. `lease`: attach the key to that lease (0: none; it must exist);
    `ignore_value` / `ignore_lease`: keep the key's current value / lease (it must
    exist)."""

    key: bytes
    value: bytes
    prev_kv: bool = False
    lease: int = 0
    ignore_value: bool = False
    ignore_lease: bool = False


@dataclass(frozen=True)
class DeleteRange:
    key: bytes
    range_end: bytes | None = None
    prev_kv: bool = False


@dataclass(frozen=True)
class Range:
    """etcd RangeRequest. A revision <= 0 reads at head; a limit <= 0 is no limit;
    range_end before key is an empty range; the min/max filters are off at 0; a
    sort_target other than "key" with sort_order "none" sorts ascending (etcd's rules).
    `serializable` only says where a cluster may answer it (one member's state)."""

    key: bytes
    range_end: bytes | None = None
    revision: int = 0
    limit: int = 0
    count_only: bool = False
    keys_only: bool = False
    sort_order: SortOrder = "none"
    sort_target: SortTarget = "key"
    min_mod_revision: int = 0
    max_mod_revision: int = 0
    min_create_revision: int = 0
    max_create_revision: int = 0
    serializable: bool = False


@dataclass(frozen=True)
class Compare:
    """etcd Compare: `target` of every key in [key, range_end) `op` `value`.

    A missing key compares as version/create_revision/mod_revision 0; a value compare on a
    missing key is false (etcd's applyCompare)."""

    key: bytes
    target: Target
    op: Op
    value: bytes | int
    range_end: bytes | None = None


@dataclass(frozen=True)
class Txn:
    """etcd Txn as one request: if every compare holds, `success` runs, else `failure`,
    all at one revision. An op may be a Txn itself (etcd 3.3+): every compare of the
    whole tree is judged against the state before the request (etcd's compareToPath),
    and a nested txn's result carries revision 0 (its header is empty in etcd)."""

    compare: tuple[Compare, ...] = ()
    success: tuple[TxnOp, ...] = ()
    failure: tuple[TxnOp, ...] = ()


TxnOp = Put | DeleteRange | Range | Txn


@dataclass(frozen=True)
class TxnResult:
    """Each response carries the revision at its point of the txn, as etcd stamps it:
    a Range the store's revision then (head, or head + 1 once the txn wrote), a Put the
    txn's revision, a DeleteRange the txn's revision if it or an earlier op wrote."""

    succeeded: bool
    responses: list[TxnResponse]
    revision: int


TxnResponse = PutResult | DeleteResult | RangeResult | TxnResult


__all__ = [
    "Compare",
    "DeleteRange",
    "DeleteResult",
    "Event",
    "KeyValue",
    "Op",
    "Put",
    "SortOrder",
    "SortTarget",
    "PutResult",
    "Range",
    "RangeResult",
    "Target",
    "Txn",
    "TxnOp",
    "TxnResponse",
    "TxnResult",
]


@dataclass(frozen=True)
class Event:
    """One change in the history: a put (kv is the new row) or a delete (kv holds the key,
    mod_revision = the delete's revision, version 0). prev_kv is None when the key did not
    exist before or its previous value has been compacted."""

    kind: Literal["put", "delete"]
    kv: KeyValue
    prev_kv: KeyValue | None = None


# ---- requests as raft commands (the raft-hosted machine, actors/kv/machine.py) ---------


@dataclass(frozen=True)
class Compact:
    """etcd Compact: compact the history at and below `revision` (value-only).
    `physical`: etcd answers only once the compaction pass is done."""

    revision: int
    physical: bool = False


@dataclass(frozen=True)
class CompactResult:
    revision: int  # header revision: the head when the compaction was scheduled


__all__ += ["Compact", "CompactResult"]


@dataclass(frozen=True)
class AppliedBatch:
    """The machine's answer to `AppliedSince(lo, hi)`, one read after each applied
    batch: the changes of revisions [lo, hi] (None when a compaction reached lo: the
    watchers catch up from history instead), the compact revision and the head revision."""

    events: tuple[Event, ...] | None
    compact_revision: int
    head: int


__all__ += ["AppliedBatch"]


# ---- leases (etcd's Lease service, as raft commands) ------------------------------------


@dataclass(frozen=True)
class LeaseGrant:
    """Grant lease `id` (chosen by the proposer, never 0) with `ttl` seconds."""

    id: int
    ttl: int


@dataclass(frozen=True)
class LeaseRevoke:
    """Revoke lease `id`: every key attached to it is deleted, in one revision."""

    id: int


@dataclass(frozen=True)
class LeaseCheckpoint:
    """etcd's LeaseCheckpoint: the leader records each lease's remaining TTL (seconds;
    0: the full TTL), so a new leader or a restart does not give it its whole TTL again."""

    checkpoints: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class LeaseGrantResult:
    revision: int
    id: int
    ttl: int


@dataclass(frozen=True)
class LeaseRevokeResult:
    revision: int


@dataclass(frozen=True)
class LeaseInfo:
    """One lease as the machine keeps it: granted TTL, checkpointed remaining TTL (0:
    none), the keys attached to it now (`LeaseLookup(id, keys=True)` only)."""

    id: int
    ttl: int
    remaining: int
    keys: tuple[bytes, ...] = ()


__all__ += ["LeaseCheckpoint", "LeaseGrant", "LeaseGrantResult", "LeaseInfo", "LeaseRevoke",
            "LeaseRevokeResult"]
