"""How a write request runs in the Store: etcd 3.4's applier for Put, DeleteRange and Txn.

One request is one SQLite transaction and at most one revision (`begin + 1`, taken only
if something changed). Inside it, as etcd's storeTxnWrite does:
- a Put writes the next change of its key at the new revision and answers that
  revision; its prev_kv sees the request's own earlier changes;
- a DeleteRange deletes the keys alive now (the request's changes included), in key
  order, and answers the new revision if it or an earlier op changed something, else
  the old head;
- a Range reads at its revision (<= 0: the request's current state, its own writes
  included) and answers the current revision: the old head before the first change,
  the new revision after it;
- a Txn's compares, nested ones too, are all judged first, against the state before the
  request (etcd's compareToPath): the "path" of branches taken. The Ranges on that path
  are checked next, after its Puts (a lease that does not exist, a missing key for
  ignore_value/ignore_lease: etcd's checkPut comes before its checkRange), ErrFutureRev
  above head, ErrCompacted below the compact revision: the whole request fails and
  nothing is written. A nested txn answers revision 0 (an
  empty header in etcd).
Every change gets the next `sub`, so watchers see one revision's events in the order
the request made them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sediment.actors.kv.errors import ErrKeyNotFound, ErrLeaseNotFound
from sediment.actors.kv.types import (
    Compare,
    DeleteRange,
    DeleteResult,
    Put,
    PutResult,
    Range,
    RangeResult,
    Txn,
    TxnOp,
    TxnResponse,
    TxnResult,
)

if TYPE_CHECKING:
    from sediment.actors.kv.store import Store


@dataclass(frozen=True)
class Plan:
    """Which branch a txn runs, and the plans of the nested txns of that branch (in op
    order): decided before anything is written."""

    succeeded: bool
    nested: tuple[Plan, ...] = ()

    def path(self) -> str:
        """etcd's txnPath, flattened in order: "1" success, "0" failure."""
        return ("1" if self.succeeded else "0") + "".join(p.path() for p in self.nested)


def parse_path(txn: Txn, path: str) -> Plan:
    """The plan `path` (as `Plan.path` wrote it) describes for `txn`; ValueError if it
    does not fit the txn."""
    plan, rest = _parse(txn, path)
    if rest:
        raise ValueError(f"txn path {path!r} is longer than the txn")
    return plan


def _parse(txn: Txn, path: str) -> tuple[Plan, str]:
    if not path or path[0] not in "01":
        raise ValueError(f"txn path {path!r} does not fit the txn")
    succeeded, rest = path[0] == "1", path[1:]
    nested = []
    for op in txn.success if succeeded else txn.failure:
        if isinstance(op, Txn):
            child, rest = _parse(op, rest)
            nested.append(child)
    return Plan(succeeded, tuple(nested)), rest


def branch(txn: Txn, plan: Plan) -> tuple[TxnOp, ...]:
    return txn.success if plan.succeeded else txn.failure


@dataclass
class _Run:
    store: Store
    begin: int
    changes: int = 0
    sub: int = 0
    out: list[TxnResponse] = field(default_factory=list)

    @property
    def rev(self) -> int:
        """The revision this request writes at."""
        return self.begin + 1

    def now(self) -> int:
        """The store's revision at this point of the request."""
        return self.begin + 1 if self.changes else self.begin


def plan(store: Store, txn: Txn) -> Plan:
    """Judge every compare of the txn tree against the store as it is (before the txn)."""
    ok = all(_compare(store, c) for c in txn.compare)
    nested = tuple(plan(store, op) for op in (txn.success if ok else txn.failure)
                   if isinstance(op, Txn))
    return Plan(ok, nested)


def _compare(store: Store, c: Compare) -> bool:
    """etcd's applyCompare: every key of the range must pass; no key at all compares as
    a missing key (version, revisions and lease 0; a value compare is false)."""
    rows = store._live_rows(c.key, c.range_end, store.head)
    if not rows:
        return False if c.target == "value" else _cmp(0, c.op, c.value)
    for row in rows:
        actual: bytes | int
        if c.target == "value":
            actual = bytes(row[1]) if row[1] is not None else b""
        elif c.target == "lease":
            actual = row[8]
        else:
            actual = {"version": row[4], "create_revision": row[2],
                      "mod_revision": row[3]}[c.target]
        if not _cmp(actual, c.op, c.value):
            return False
    return True


def _cmp(actual: bytes | int, op: str, expected: bytes | int) -> bool:
    if op == "=":
        return actual == expected
    if op == "!=":
        return actual != expected
    if op == "<":
        return actual < expected  # type: ignore[operator]
    return actual > expected  # type: ignore[operator]


def _check_puts(store: Store, ops: Sequence[TxnOp], p: Plan) -> None:
    """etcd's checkRequests(checkPut) along the path, before its checkRange: a put's
    lease must exist, an ignore_value/ignore_lease put's key must be alive before the
    request. So a txn with both a put naming a missing lease and a compacted read is
    ErrLeaseNotFound, whatever their order (found by the differential test, seed 0)."""
    nested = iter(p.nested)
    for op in ops:
        if isinstance(op, Put):
            if op.ignore_value or op.ignore_lease:
                prev = store._latest(op.key, store.head)
                if prev is None or prev[5]:
                    raise ErrKeyNotFound()
            if op.lease != 0 and not store._db.execute(
                    "SELECT 1 FROM leases WHERE id = ?", (op.lease,)).fetchone():
                raise ErrLeaseNotFound()
        elif isinstance(op, Txn):
            child = next(nested)
            _check_puts(store, branch(op, child), child)


def _check_reads(store: Store, ops: Sequence[TxnOp], p: Plan) -> None:
    """etcd's checkRequests(checkRange) along the path, before anything is written."""
    nested = iter(p.nested)
    for op in ops:
        if isinstance(op, Range):
            store._check_txn_read_rev(op.revision)
        elif isinstance(op, Txn):
            child = next(nested)
            _check_reads(store, branch(op, child), child)


def txn(store: Store, compares: tuple[Compare, ...], success: tuple[TxnOp, ...],
        failure: tuple[TxnOp, ...], applied: int | None) -> TxnResult:
    """Run a (checked) txn: decide the path, check its reads, apply its branch."""
    t = Txn(compares, success, failure)
    p = plan(store, t)
    ops = branch(t, p)
    _check_puts(store, ops, p)
    _check_reads(store, ops, p)
    responses, header = write(store, ops, applied, p)
    return TxnResult(p.succeeded, responses, header)


def write(store: Store, ops: Sequence[TxnOp], applied: int | None,
          p: Plan | None = None,
          also: Callable[[], None] | None = None) -> tuple[list[TxnResponse], int]:
    """Apply ops (a Put, a DeleteRange, or a txn branch whose plan is `p`) in one SQLite
    transaction. Returns the responses and the header revision. If anything changed,
    the head moves by one and `applied` (when given) commits with it, recorded as the
    raft index of this revision's entry (with the txn's path). `also` runs inside the
    same transaction (a lease revoke drops the lease with its keys)."""
    run = _Run(store, store.head)
    db = store._db
    with store.transaction():
        _apply(run, ops, iter(p.nested) if p is not None else iter(()))
        if also is not None:
            also()
            if applied is not None and not run.changes:
                store._set_meta("applied", applied)
        if run.changes:
            store._set_meta("head", run.rev)
            if applied is not None:
                store._set_meta("applied", applied)
                db.execute("INSERT INTO entries (revision, raft_index, path) VALUES (?, ?, ?)",
                           (run.rev, applied, None if p is None else p.path()))
    if run.changes:
        store._head = run.rev
    return run.out, run.now()


def _apply(run: _Run, ops: Sequence[TxnOp], nested: Iterator[Plan]) -> None:
    for op in ops:
        if isinstance(op, Put):
            run.out.append(_put(run, op))
        elif isinstance(op, DeleteRange):
            run.out.append(_delete(run, op))
        elif isinstance(op, Range):
            run.out.append(_range(run, op))
        else:
            child = next(nested)
            outer, run.out = run.out, []
            _apply(run, branch(op, child), iter(child.nested))
            outer.append(TxnResult(child.succeeded, run.out, 0))
            run.out = outer


def _put(run: _Run, op: Put) -> PutResult:
    from sediment.actors.kv.store_base import _kv

    s, rev = run.store, run.rev
    prev = s._latest(op.key, rev)
    if prev is not None and prev[5]:
        prev = None  # deleted: the put starts a new generation
    create, version = (prev[2], prev[4] + 1) if prev is not None else (rev, 1)
    value, lease = op.value, op.lease
    if op.ignore_value or op.ignore_lease:  # etcd: the key must exist to keep its own
        if prev is None:
            raise ErrKeyNotFound()
        if op.ignore_value:
            value = bytes(prev[1]) if prev[1] is not None else b""
        if op.ignore_lease:
            lease = prev[8]
    if lease != 0 and not s._db.execute("SELECT 1 FROM leases WHERE id = ?",
                                        (lease,)).fetchone():
        raise ErrLeaseNotFound()
    s._insert(op.key, value, rev, run.sub, create, version, lease)
    if op.ignore_value:  # the entry holds no value: a snapshot must carry this one
        s._db.execute("INSERT OR REPLACE INTO kept_values (revision, sub) VALUES (?, ?)",
                      (rev, run.sub))
    run.sub += 1
    run.changes += 1
    return PutResult(rev, _kv(prev) if op.prev_kv and prev is not None else None)


def _delete(run: _Run, op: DeleteRange) -> DeleteResult:
    from sediment.actors.kv.store_base import _kv

    s, rev = run.store, run.rev
    rows = s._live_rows(op.key, op.range_end, rev)
    for row in rows:
        s._insert(row[0], None, rev, run.sub, 0, 0)
        run.sub += 1
    run.changes += len(rows)
    return DeleteResult(run.now(), len(rows), [_kv(row) for row in rows] if op.prev_kv else [])


def _range(run: _Run, op: Range) -> RangeResult:
    now = run.now()
    at = op.revision if op.revision > 0 else now
    return run.store._range_rows(op, at, now)[0]


__all__ = ["Plan", "branch", "parse_path", "plan", "txn", "write"]
