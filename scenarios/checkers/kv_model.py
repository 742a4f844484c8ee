"""etcd's KV as a sequential model: what one request returns in a given state.

The same semantics as `actors/kv/store.py` + `store_txn.py` (etcd 3.4's mvcc and
applier), without SQLite:

- an empty store is at revision 1 with compact revision -1 (so Compact 0 is accepted);
  one revision per request that changes something (a txn with several writes gets
  one; a delete matching nothing and a read-only txn get none);
- a txn's sub-responses carry the revision at their point of the txn (a Range the old
  head before the first change and the new revision after it, a Put the new revision,
  a DeleteRange the new revision once anything changed); a nested txn answers 0;
- Range: above head is ErrFutureRev (checked first), a revision <= 0 reads head, below
  the compact revision ErrCompacted; reading AT the compact revision is allowed; every
  option (sort, filters, limit, count/keys only) as `actors/kv/range_options.py`;
- Compact(r): r <= compact revision is ErrCompacted, r > head ErrFutureRev; otherwise the
  compact revision becomes r (value-only: what reads at or above it return is unchanged);
- Txn: every compare of the tree (nested ones too) is judged against the state before
  the txn; the Ranges of the chosen path are checked before anything is written (above
  head ErrFutureRev, below the compact revision, a negative one too, ErrCompacted: the
  whole txn fails); reads inside the txn see its earlier writes.

Revisions are etcd's. A request may also carry the raft `index` of its log entry
(Sediment's histories know it): `apply(state, request, index)` then takes requests in
log order only (an index at or below the last one answers `OUT_OF_ORDER`, which matches
nothing a client recorded); the index never gives the revision.

States are immutable and hashable (the search memoises them). A state keeps, per key,
only the versions a later read can still ask for: the latest one at or below the
`horizon` and everything after it. The horizon is the compact revision, or the lowest
revision any request of the history reads at, whichever is higher (`horizon=None`: no
request reads at a past revision, keep only each key's latest version). Versions below
it can never be observed again, so dropping them keeps the memoisation sound.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from sediment.actors.kv.range_options import shape
from sediment.actors.kv.store_txn import Plan
from sediment.actors.kv.types import (
    ALL_KEYS,
    Compact,
    CompactResult,
    Compare,
    DeleteRange,
    DeleteResult,
    Event,
    KeyValue,
    Put,
    PutResult,
    Range,
    RangeResult,
    Txn,
    TxnOp,
    TxnResponse,
    TxnResult,
    key_in_range,
)
from sediment.scenarios.history import (
    ERR_COMPACTED,
    ERR_FUTURE_REV,
    Failure,
    Request,
    Result,
)

# (mod_revision, create_revision, version, value); value None is a tombstone
Version = tuple[int, int, int, bytes | None]
History = tuple[Version, ...]


class KvState:
    """Head, compact revision and each key's versions (oldest first), keys sorted;
    `index`: the last log index applied (0 when no request carried one)."""

    __slots__ = ("_hash", "compact", "head", "hists", "index", "names")

    def __init__(
        self, head: int, compact: int, names: tuple[bytes, ...], hists: tuple[History, ...],
        index: int = 0,
    ) -> None:
        self.head = head
        self.compact = compact
        self.names = names
        self.hists = hists
        self.index = index
        self._hash = hash((head, compact, names, hists, index))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, KvState)
            and self._hash == other._hash
            and self.head == other.head
            and self.index == other.index
            and self.compact == other.compact
            and self.names == other.names
            and self.hists == other.hists
        )

    def __repr__(self) -> str:
        return f"KvState(head={self.head}, compact={self.compact}, keys={len(self.names)})"


FIRST_REVISION = 1  # etcd: an empty store
NO_COMPACTION = -1  # etcd's compact revision before any compaction
EMPTY = KvState(FIRST_REVISION, NO_COMPACTION, (), ())


@dataclass(frozen=True)
class UnknownWrite:
    """A committed request whose content is unknown but that is known to have taken one
    revision (a log entry no member still held, mapped to its revision): the model
    moves the head on so later writes keep their numbers, and changes no key."""

OUT_OF_ORDER = Failure("OutOfOrder", "a log index at or below one already applied")
UNKNOWN = Failure("Unknown", "the request is not known (only the revision it took)")


def _visible(hist: History, at: int) -> Version | None:
    """The key's live version at revision `at` (None: absent or deleted)."""
    for v in reversed(hist):
        if v[0] <= at:
            return v if v[3] is not None else None
    return None


def _live(
    names: Sequence[bytes], hists: Sequence[History], key: bytes, range_end: bytes | None, at: int
) -> list[KeyValue]:
    out = []
    i = bisect.bisect_left(names, key)
    while i < len(names) and key_in_range(names[i], key, range_end):
        v = _visible(hists[i], at)
        if v is not None:
            out.append(_kv(names[i], v))
        i += 1
    return out


def _kv(name: bytes, v: Version) -> KeyValue:
    return KeyValue(name, v[3] or b"", v[1], v[0], v[2])


def _cmp(actual: bytes | int, op: str, expected: bytes | int) -> bool:
    if op == "=":
        return actual == expected
    if op == "!=":
        return actual != expected
    if type(actual) is not type(expected):
        return False
    if op == "<":
        return actual < expected  # type: ignore[operator]
    return actual > expected  # type: ignore[operator]


@dataclass(frozen=True)
class KvModel:
    """The model with its history horizon (see the module doc)."""

    horizon: int | None = None

    @classmethod
    def for_requests(cls, requests: Iterable[Request]) -> KvModel:
        """The model keeping exactly the history `requests` can read."""
        revs = [r.revision for req in requests for r in _reads(req) if r.revision > 0]
        return cls(min(revs) if revs else None)

    def initial(self, head: int = FIRST_REVISION, kvs: Sequence[KeyValue] = (),
                compact: int = NO_COMPACTION) -> KvState:
        """The state a run starts from (default: an empty store at revision 1)."""
        rows = sorted((kv.key, ((kv.mod_revision, kv.create_revision, kv.version, kv.value),))
                      for kv in kvs)
        return KvState(head, compact, tuple(k for k, _ in rows), tuple(h for _, h in rows))

    # ---- reads ----

    def live(self, s: KvState, key: bytes, range_end: bytes | None, at: int) -> list[KeyValue]:
        """The keys of [key, range_end) alive at revision `at`, by key."""
        return _live(s.names, s.hists, key, range_end, at)

    def _read_rev(self, s: KvState, revision: int) -> int | Failure:
        if revision > s.head:
            return Failure(ERR_FUTURE_REV)
        at = s.head if revision <= 0 else revision
        if at < s.compact:
            return _compacted(s)
        return at

    def _range(self, names: Sequence[bytes], hists: Sequence[History], r: Range, at: int,
               header: int) -> RangeResult:
        return shape(_live(names, hists, r.key, r.range_end, at), r, header)[0]

    # ---- the step ----

    def apply(
        self, s: KvState, req: Request, index: int | None = None
    ) -> tuple[KvState, Result | Failure]:
        """Run one request (its log entry at `index`, when known): the next state and
        what the store answers."""
        nxt, out, _ = self.step(s, req, index)
        return nxt, out

    def step(
        self, s: KvState, req: Request | UnknownWrite, index: int | None = None
    ) -> tuple[KvState, Result | Failure, list[Event]]:
        """`apply`, and the events the request made (what a watch of everything sees
        at its revision, in etcd's order, with prev_kv)."""
        if index is not None:
            if index <= s.index:
                return s, OUT_OF_ORDER, []
            s = KvState(s.head, s.compact, s.names, s.hists, index)
        if isinstance(req, UnknownWrite):
            return KvState(s.head + 1, s.compact, s.names, s.hists, s.index), UNKNOWN, []
        if isinstance(req, Range):
            at = self._read_rev(s, req.revision)
            if isinstance(at, Failure):
                return s, at, []
            return s, self._range(s.names, s.hists, req, at, s.head), []
        if isinstance(req, Compact):
            if req.revision <= s.compact:
                return s, _compacted(s), []
            if req.revision > s.head:
                return s, Failure(ERR_FUTURE_REV), []
            trimmed = self._trimmed(s.head, req.revision, s.names, s.hists, s.index)
            return trimmed, CompactResult(s.head), []
        if isinstance(req, Txn):
            return self._txn(s, req)
        run = _Run(s, list(s.names), list(s.hists))
        self._ops(run, (req,), iter(()))
        return self._done(run), run.out[0], run.events

    def _txn(self, s: KvState, t: Txn) -> tuple[KvState, Result | Failure, list[Event]]:
        path = self._plan(s, t)
        ops = _branch(t, path)
        bad = self._check_reads(s, ops, path)
        if bad is not None:
            return s, bad, []
        run = _Run(s, list(s.names), list(s.hists))
        self._ops(run, ops, iter(path.nested))
        return self._done(run), TxnResult(path.succeeded, run.out, run.now()), run.events

    def _plan(self, s: KvState, t: Txn) -> Plan:
        ok = all(self._compare(s, c) for c in t.compare)
        return Plan(ok, tuple(self._plan(s, op) for op in (t.success if ok else t.failure)
                              if isinstance(op, Txn)))

    def _check_reads(self, s: KvState, ops: Sequence[TxnOp], path: Plan) -> Failure | None:
        nested = iter(path.nested)
        for op in ops:
            if isinstance(op, Range) and op.revision != 0:
                if op.revision > s.head:
                    return Failure(ERR_FUTURE_REV)
                if op.revision < s.compact:
                    return _compacted(s)
            elif isinstance(op, Txn):
                child = next(nested)
                bad = self._check_reads(s, _branch(op, child), child)
                if bad is not None:
                    return bad
        return None

    def _compare(self, s: KvState, c: Compare) -> bool:
        kvs = self.live(s, c.key, c.range_end, s.head)
        if not kvs:
            return False if c.target == "value" else _cmp(0, c.op, c.value)
        return all(_cmp(getattr(kv, c.target), c.op, c.value) for kv in kvs)

    def _ops(self, run: _Run, ops: Sequence[TxnOp], nested: Iterator[Plan]) -> None:
        """Apply ops at the next revision (store_txn's rules)."""
        rev = run.state.head + 1
        names, hists = run.names, run.hists
        for op in ops:
            if isinstance(op, Put):
                i = bisect.bisect_left(names, op.key)
                if i == len(names) or names[i] != op.key:
                    names.insert(i, op.key)
                    hists.insert(i, ())
                prev = _visible(hists[i], rev)
                create, version = (prev[1], prev[2] + 1) if prev else (rev, 1)
                # a watch's prev_kv (etcd): the key at the revision before, none for a put
                # that creates it
                before = _visible(hists[i], rev - 1) if create != rev else None
                hists[i] = (*hists[i], (rev, create, version, op.value))
                run.events.append(Event("put", _kv(op.key, hists[i][-1]),
                                        _kv(op.key, before) if before else None))
                run.changes += 1
                run.out.append(PutResult(rev, _kv(op.key, prev) if op.prev_kv and prev else None))
            elif isinstance(op, DeleteRange):
                gone = _live(names, hists, op.key, op.range_end, rev)
                for kv in gone:
                    i = bisect.bisect_left(names, kv.key)
                    before = _visible(hists[i], rev - 1)
                    hists[i] = (*hists[i], (rev, 0, 0, None))
                    run.events.append(Event("delete", KeyValue(kv.key, b"", 0, rev, 0),
                                            _kv(kv.key, before) if before else None))
                run.changes += len(gone)
                run.out.append(DeleteResult(run.now(), len(gone), gone if op.prev_kv else []))
            elif isinstance(op, Range):
                now = run.now()
                at = op.revision if op.revision > 0 else now
                run.out.append(self._range(names, hists, op, at, now))
            else:
                child = next(nested)
                outer, run.out = run.out, []
                self._ops(run, _branch(op, child), iter(child.nested))
                outer.append(TxnResult(child.succeeded, run.out, 0))
                run.out = outer

    def _done(self, run: _Run) -> KvState:
        s = run.state
        if not run.changes:
            return s
        return self._trimmed(s.head + 1, s.compact, tuple(run.names), tuple(run.hists), s.index)

    def _trimmed(
        self, head: int, compact: int, names: tuple[bytes, ...], hists: tuple[History, ...],
        index: int,
    ) -> KvState:
        keep_from = max(compact, self.horizon) if self.horizon is not None else None
        new_names: list[bytes] = []
        new_hists: list[History] = []
        for name, hist in zip(names, hists, strict=True):
            h = _trim(hist, keep_from)
            if h:
                new_names.append(name)
                new_hists.append(h)
        return KvState(head, compact, tuple(new_names), tuple(new_hists), index)


@dataclass
class _Run:
    """One write request being applied: the state before it, the keys as they change."""

    state: KvState
    names: list[bytes]
    hists: list[History]
    changes: int = 0
    out: list[TxnResponse] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)  # in change order (etcd's sub)

    def now(self) -> int:
        return self.state.head + 1 if self.changes else self.state.head


def _branch(t: Txn, path: Plan) -> tuple[TxnOp, ...]:
    return t.success if path.succeeded else t.failure


def _compacted(s: KvState) -> Failure:
    return Failure(ERR_COMPACTED, compact_revision=max(0, s.compact))


def _trim(hist: History, keep_from: int | None) -> History:
    """The versions a read at or above keep_from can see (None: only the latest); a key
    whose only remaining version is a tombstone is dropped (absent reads the same)."""
    if keep_from is None:
        h = hist[-1:]
    else:
        i = len(hist) - 1
        while i > 0 and hist[i][0] > keep_from:
            i -= 1
        h = hist[i:]
    if len(h) == 1 and h[0][3] is None:
        return ()
    return h


def _reads(req: Request | TxnOp) -> list[Range]:
    """Every Range of a request, nested txns' too."""
    if isinstance(req, Range):
        return [req]
    if isinstance(req, Txn):
        return [r for op in (*req.success, *req.failure) for r in _reads(op)]
    return []


def matches(expected: Result | Failure, recorded: Result | Failure) -> bool:
    """Does the model's answer match what the client recorded? A recorded ErrCompacted
    without its compact revision (0) matches any."""
    if isinstance(expected, Failure) or isinstance(recorded, Failure):
        if not (isinstance(expected, Failure) and isinstance(recorded, Failure)):
            return False
        if expected.error != recorded.error:
            return False
        return recorded.compact_revision in (0, expected.compact_revision)
    return expected == recorded


def is_read_only(req: Request) -> bool:
    return isinstance(req, Range)


__all__ = ["ALL_KEYS", "EMPTY", "FIRST_REVISION", "NO_COMPACTION", "OUT_OF_ORDER", "UNKNOWN",
           "KvModel", "KvState", "UnknownWrite", "Version", "is_read_only", "matches"]
