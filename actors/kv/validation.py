"""Checking KV requests: one pure module that the client and the Store both use.

The client runs `check_request` before it proposes, so a bad request never becomes a raft
log entry; the Store runs the same checks again when it applies (its methods are public,
and a member must refuse what a buggy or foreign proposer wrote into the log). Both sides
take their `Limits` from one place (`Cluster.start(limits=...)` hands them to every
node's machine and to the client), so they never disagree on what is too large.

Only what the request alone decides is checked here, and only what etcd 3.4 refuses
(its v3rpc `key.go` checks, in its order): an empty key, more than max_txn_ops ops in
a txn part (a nested txn gets what its parent leaves), a key put twice or put and
deleted in one txn branch (etcd's checkIntervals, quirks included: a delete whose
range_end is b"\0" or before its key covers no key there), and then the request's size
("request is too large"). What etcd accepts the store accepts too: range_end before key
is an empty range, a negative revision reads at head, a negative limit is no limit, a
negative Compact is ErrCompacted (a state error, the Store's). Beyond etcd: the Python
types (bytes keys, int revisions, known enums), since no wire format enforces them here.
What depends on the store's state (ErrCompacted, ErrFutureRev) stays in the Store. Every
check raises a typed `InvalidRequest` (etcd's InvalidArgument family) and has no effect.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import get_args

from sediment.actors.kv.errors import (
    ErrDuplicateKey,
    ErrEmptyKey,
    ErrKeyTooLarge,
    ErrLeaseProvided,
    ErrNegativeRevision,
    ErrRequestTooLarge,
    ErrTooManyOps,
    ErrValueProvided,
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
    SortOrder,
    SortTarget,
    Target,
    Txn,
)

DEFAULT_MAX_REQUEST_BYTES = 1536 * 1024  # etcd's --max-request-bytes default (1.5 MiB)
DEFAULT_MAX_TXN_OPS = 128  # etcd's --max-txn-ops default

OPS: tuple[str, ...] = get_args(Op)
TARGETS: tuple[str, ...] = get_args(Target)
INT_TARGETS = tuple(t for t in TARGETS if t != "value")
SORT_ORDERS: tuple[str, ...] = get_args(SortOrder)
SORT_TARGETS: tuple[str, ...] = get_args(SortTarget)


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
        check_int(request.revision, "revision")
        check_flag(request.physical, "physical")
    else:
        raise InvalidRequest(f"not a KV request: {type(request).__name__}")


def check_txn(
    compare: object, success: object, failure: object, limits: Limits = DEFAULT_LIMITS
) -> None:
    """etcd's checkTxnRequest (ops of BOTH branches, nested txns within what is left of
    max_txn_ops), then checkIntervals of each branch, then the request's size."""
    size = _check_txn_shape(compare, success, failure, limits, limits.max_txn_ops)
    assert isinstance(success, tuple | list) and isinstance(failure, tuple | list)
    branch_intervals(success)
    branch_intervals(failure)
    check_size(size, limits)


def _check_txn_shape(compare: object, success: object, failure: object, limits: Limits,
                     budget: int) -> int:
    parts: list[Sequence[object]] = []
    for name, part in (("compare", compare), ("success", success), ("failure", failure)):
        if not isinstance(part, tuple | list):
            raise InvalidRequest(f"txn {name} must be a tuple or list")
        parts.append(part)
    ops = max(len(p) for p in parts)
    if ops > budget:
        raise ErrTooManyOps(ops, budget)
    size = sum(check_compare(c, limits) for c in parts[0])
    for op in (*parts[1], *parts[2]):
        if isinstance(op, Txn):
            size += _check_txn_shape(op.compare, op.success, op.failure, limits, budget - ops)
        else:
            size += check_op(op, limits)
    return size


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
    """[key, range_end): range_end None is the key alone, ALL_KEYS every key >= key, a
    range_end at or before key an empty range (etcd). Returns the bytes the two take."""
    size = check_key(key, limits)
    if range_end is None:
        return size
    if not isinstance(range_end, bytes):
        raise InvalidRequest(f"range_end must be bytes or None, got {type(range_end).__name__}")
    if len(range_end) > limits.max_key_bytes:
        raise ErrKeyTooLarge(f"range_end of {len(range_end)} bytes exceeds {limits.max_key_bytes}")
    return size + len(range_end)


def check_value(value: object, limits: Limits = DEFAULT_LIMITS) -> int:
    if not isinstance(value, bytes):
        raise InvalidRequest(f"value must be bytes, got {type(value).__name__}")
    if len(value) > limits.max_value_bytes:
        raise ErrValueTooLarge(f"value of {len(value)} bytes exceeds {limits.max_value_bytes}")
    return len(value)


def check_int(value: object, what: str) -> int:
    """An int (bool is not one), of any sign; returns it."""
    if not _is_int(value):
        raise InvalidRequest(f"{what} must be an int, got {type(value).__name__}")
    assert isinstance(value, int)
    return value


def check_revision(revision: object, what: str = "revision") -> int:
    """A non-negative int, where a negative revision means nothing (a watch's start, a
    history read; not a Range, which reads a negative revision at head); returns it."""
    check_int(revision, what)
    assert isinstance(revision, int)
    if revision < 0:
        raise ErrNegativeRevision(f"{what} {revision} is negative")
    return revision


def check_flag(value: object, what: str) -> None:
    if not isinstance(value, bool):
        raise InvalidRequest(f"{what} must be a bool, got {type(value).__name__}")


def check_op(op: object, limits: Limits = DEFAULT_LIMITS) -> int:
    """One Put, DeleteRange or Range (alone or in a txn); returns the bytes it takes.
    A nested Txn is checked by `check_txn` (it needs the op budget of its parent)."""
    if isinstance(op, Put):
        for name in ("prev_kv", "ignore_value", "ignore_lease"):
            check_flag(getattr(op, name), name)
        check_int(op.lease, "lease")
        size = check_key(op.key, limits) + check_value(op.value, limits)
        if op.ignore_value and op.value:
            raise ErrValueProvided()
        if op.ignore_lease and op.lease:
            raise ErrLeaseProvided()
        return size
    if isinstance(op, DeleteRange):
        check_flag(op.prev_kv, "prev_kv")
        return check_range(op.key, op.range_end, limits)
    if isinstance(op, Range):
        size = check_range(op.key, op.range_end, limits)
        for name in ("revision", "limit", "min_mod_revision", "max_mod_revision",
                     "min_create_revision", "max_create_revision"):
            check_int(getattr(op, name), name)
        for name in ("count_only", "keys_only", "serializable"):
            check_flag(getattr(op, name), name)
        if op.sort_order not in SORT_ORDERS:
            raise InvalidRequest(f"unknown sort_order {op.sort_order!r}")
        if op.sort_target not in SORT_TARGETS:
            raise InvalidRequest(f"unknown sort_target {op.sort_target!r}")
        return size
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


Interval = tuple[bytes, bytes | None]  # a DeleteRange's [key, range_end)


def _hits(dels: Sequence[Interval], key: bytes) -> bool:
    """etcd's interval tree: a point delete covers its key, [k, end) the keys in it with
    end taken literally (b"\0", "every key >= k" elsewhere, is an empty interval here,
    and so is an end at or before k)."""
    return any(key == k if end is None else k <= key < end for k, end in dels)


def branch_intervals(ops: Sequence[object]) -> tuple[set[bytes], list[Interval]]:
    """etcd 3.4's checkIntervals over one txn branch: a key is put at most once and
    never inside a delete of the same branch; a nested txn's two branches may put the
    same key (only one runs). Returns the branch's puts and deletes (for its parent)."""
    dels: list[Interval] = [(op.key, op.range_end) for op in ops if isinstance(op, DeleteRange)]
    puts: set[bytes] = set()
    for op in ops:
        if not isinstance(op, Txn):
            continue
        then_puts, then_dels = branch_intervals(op.success)
        else_puts, else_dels = branch_intervals(op.failure)
        for k in then_puts:
            if k in puts or _hits(dels, k):
                raise ErrDuplicateKey()
            puts.add(k)
        for k in else_puts:
            if (k in puts and k not in then_puts) or _hits(dels, k):
                raise ErrDuplicateKey()
            puts.add(k)
        dels += then_dels + else_dels
    for op in ops:
        if isinstance(op, Put):
            if op.key in puts or _hits(dels, op.key):
                raise ErrDuplicateKey()
            puts.add(op.key)
    return puts, dels


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
    "branch_intervals",
    "check_compare",
    "check_flag",
    "check_int",
    "check_key",
    "check_op",
    "check_range",
    "check_request",
    "check_revision",
    "check_size",
    "check_txn",
    "check_value",
]
