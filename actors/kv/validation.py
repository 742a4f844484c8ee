"""Checking KV requests: one pure module that the client and the Store both use.

The client runs `check_request` before it proposes, so a bad request never becomes a raft
log entry; the Store runs the same checks again when it applies (its methods are public,
and a member must refuse what a buggy or foreign proposer wrote into the log). Both sides
take their `Limits` from one place (`Cluster.start(limits=...)` hands them to every
node's machine and to the client), so they never disagree on what is too large.

Only what the request alone decides is checked here: types, empty keys, sizes, range
order, negative revisions, txn shape. What depends on the store's state (ErrCompacted,
ErrFutureRev, a revision not above head) stays in the Store. Every check raises a typed
`InvalidRequest` (etcd's InvalidArgument family) and has no effect.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import get_args

from sediment.actors.kv.errors import (
    ErrDuplicateKey,
    ErrEmptyKey,
    ErrInvalidRangeEnd,
    ErrKeyTooLarge,
    ErrNegativeRevision,
    ErrRequestTooLarge,
    ErrTooManyOps,
    ErrValueTooLarge,
    InvalidRequest,
)
from sediment.actors.kv.types import (
    ALL_KEYS,
    Compact,
    Compare,
    DeleteRange,
    Op,
    Put,
    Range,
    Target,
    Txn,
    key_in_range,
)

DEFAULT_MAX_REQUEST_BYTES = 1536 * 1024  # etcd's --max-request-bytes default (1.5 MiB)
DEFAULT_MAX_TXN_OPS = 128  # etcd's --max-txn-ops default

OPS: tuple[str, ...] = get_args(Op)
TARGETS: tuple[str, ...] = get_args(Target)
INT_TARGETS = tuple(t for t in TARGETS if t != "value")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class Limits:
    """Request limits. etcd has no key or value limit of its own beyond the request size,
    so both default to it; set them lower to be stricter than etcd."""

    max_key_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_value_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_txn_ops: int = DEFAULT_MAX_TXN_OPS

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not _is_int(value) or value < 1:
                raise ValueError(f"Limits.{f.name} must be a positive int, got {value!r}")


DEFAULT_LIMITS = Limits()

Request = Put | DeleteRange | Range | Txn | Compact


# ---- the whole request --------------------------------------------------------------


def check_request(request: object, limits: Limits = DEFAULT_LIMITS) -> None:
    """Every state-free check of one client request (what the client may propose)."""
    if isinstance(request, Put | DeleteRange | Range):
        check_size(check_op(request, limits), limits)
    elif isinstance(request, Txn):
        check_txn(request.compare, request.success, request.failure, limits)
    elif isinstance(request, Compact):
        check_revision(request.revision)
    else:
        raise InvalidRequest(f"not a KV request: {type(request).__name__}")


def check_txn(
    compare: object, success: object, failure: object, limits: Limits = DEFAULT_LIMITS
) -> None:
    """etcd's checkTxnRequest: each part a sequence of at most max_txn_ops items, every
    compare and op of BOTH branches valid (the branch not taken too), no key put twice or
    put and deleted in one branch, and the whole request within max_request_bytes."""
    parts: list[Sequence[object]] = []
    for name, part in (("compare", compare), ("success", success), ("failure", failure)):
        if not isinstance(part, tuple | list):
            raise InvalidRequest(f"txn {name} must be a tuple or list")
        if len(part) > limits.max_txn_ops:
            raise ErrTooManyOps(len(part), limits.max_txn_ops)
        parts.append(part)
    size = sum(check_compare(c, limits) for c in parts[0])
    size += check_branch(parts[1], limits) + check_branch(parts[2], limits)
    check_size(size, limits)


# ---- pieces ---------------------------------------------------------------------------


def check_key(key: object, limits: Limits = DEFAULT_LIMITS, what: str = "key") -> int:
    """A non-empty bytes key within max_key_bytes; returns its size."""
    if not isinstance(key, bytes):
        raise InvalidRequest(f"{what} must be bytes, got {type(key).__name__}")
    if not key:
        raise ErrEmptyKey()
    if len(key) > limits.max_key_bytes:
        raise ErrKeyTooLarge(f"{what} of {len(key)} bytes exceeds {limits.max_key_bytes}")
    return len(key)


def check_range(key: object, range_end: object, limits: Limits = DEFAULT_LIMITS) -> int:
    """[key, range_end): range_end None is the key alone, ALL_KEYS every key >= key, else
    it must not be before key. Returns the bytes the two take."""
    size = check_key(key, limits)
    if range_end is None:
        return size
    if not isinstance(range_end, bytes):
        raise InvalidRequest(f"range_end must be bytes or None, got {type(range_end).__name__}")
    if len(range_end) > limits.max_key_bytes:
        raise ErrKeyTooLarge(f"range_end of {len(range_end)} bytes exceeds {limits.max_key_bytes}")
    assert isinstance(key, bytes)
    if range_end != ALL_KEYS and range_end < key:
        raise ErrInvalidRangeEnd("range_end is before key")
    return size + len(range_end)


def check_value(value: object, limits: Limits = DEFAULT_LIMITS) -> int:
    if not isinstance(value, bytes):
        raise InvalidRequest(f"value must be bytes, got {type(value).__name__}")
    if len(value) > limits.max_value_bytes:
        raise ErrValueTooLarge(f"value of {len(value)} bytes exceeds {limits.max_value_bytes}")
    return len(value)


def check_revision(revision: object, what: str = "revision") -> int:
    """A non-negative int (bool is not one); returns it."""
    if not _is_int(revision):
        raise InvalidRequest(f"{what} must be an int, got {type(revision).__name__}")
    assert isinstance(revision, int)
    if revision < 0:
        raise ErrNegativeRevision(f"{what} {revision} is negative")
    return revision


def check_flag(value: object, what: str) -> None:
    if not isinstance(value, bool):
        raise InvalidRequest(f"{what} must be a bool, got {type(value).__name__}")


def check_op(op: object, limits: Limits = DEFAULT_LIMITS) -> int:
    """One Put, DeleteRange or Range (alone or in a txn); returns the bytes it takes."""
    if isinstance(op, Put):
        check_flag(op.prev_kv, "prev_kv")
        return check_key(op.key, limits) + check_value(op.value, limits)
    if isinstance(op, DeleteRange):
        check_flag(op.prev_kv, "prev_kv")
        return check_range(op.key, op.range_end, limits)
    if isinstance(op, Range):
        check_revision(op.revision)
        check_revision(op.limit, "limit")
        check_flag(op.count_only, "count_only")
        check_flag(op.keys_only, "keys_only")
        return check_range(op.key, op.range_end, limits)
    raise InvalidRequest(f"not a txn op: {type(op).__name__}")


def check_compare(c: object, limits: Limits = DEFAULT_LIMITS) -> int:
    """A Compare with a known target and op, and a value of the target's type."""
    if not isinstance(c, Compare):
        raise InvalidRequest(f"not a Compare: {type(c).__name__}")
    size = check_range(c.key, c.range_end, limits)
    if c.op not in OPS:
        raise InvalidRequest(f"unknown compare op {c.op!r}")
    if c.target == "value":
        return size + check_value(c.value, limits)
    if c.target not in INT_TARGETS:
        raise InvalidRequest(f"unknown compare target {c.target!r}")
    if not _is_int(c.value):
        raise InvalidRequest(f"a {c.target} compare needs an int")
    return size


def check_branch(ops: Sequence[object], limits: Limits = DEFAULT_LIMITS) -> int:
    """Every op of one txn branch, and etcd's checkIntervals: a key is put at most once
    and never both put and deleted. Returns the bytes the branch takes."""
    size = sum(check_op(op, limits) for op in ops)
    puts = [op.key for op in ops if isinstance(op, Put)]
    if len(set(puts)) != len(puts):
        raise ErrDuplicateKey()
    for d in ops:
        if isinstance(d, DeleteRange) and any(key_in_range(k, d.key, d.range_end) for k in puts):
            raise ErrDuplicateKey()
    return size


def check_size(size: int, limits: Limits = DEFAULT_LIMITS) -> None:
    if size > limits.max_request_bytes:
        raise ErrRequestTooLarge(f"request of {size} bytes exceeds {limits.max_request_bytes}")


__all__ = [
    "ALL_KEYS",
    "DEFAULT_LIMITS",
    "DEFAULT_MAX_REQUEST_BYTES",
    "DEFAULT_MAX_TXN_OPS",
    "Limits",
    "Request",
    "check_branch",
    "check_compare",
    "check_flag",
    "check_key",
    "check_op",
    "check_range",
    "check_request",
    "check_revision",
    "check_size",
    "check_txn",
    "check_value",
]
