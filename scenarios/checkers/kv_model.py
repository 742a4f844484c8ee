"""etcd's KV as a sequential model: what one request returns in a given state.

The same semantics as `actors/kv/store.py` (and etcd's `mvcc`), without SQLite:

- one revision per request that changes something (a txn with several writes gets
  one; a delete matching nothing and a read-only txn get none); results carry the header
  revision (the new one if something changed, else head);
- Range at revision 0 reads head; above head is ErrFutureRev (checked first), below the
  compact revision ErrCompacted; reading AT the compact revision is allowed;
- Compact(r): r <= compact revision is ErrCompacted, r > head ErrFutureRev; otherwise the
  compact revision becomes r (value-only: what reads at or above it return is unchanged);
- Txn compares run against head; the chosen branch's reads at a revision are checked
  before anything is written (a bad one fails the whole txn); reads inside the txn see
  its earlier writes.

Revisions as Sediment numbers them: every request is a raft log entry, and a write's
revision is the index of its entry (so revisions have gaps where reads, no-ops and
compactions sit). `apply(state, request, index)` takes that index when it is known:
the write gets it as its revision, and the state remembers the last index applied, so
requests must come in log order (an index at or below the last one answers
`OUT_OF_ORDER`, which matches nothing a client recorded). Without an index a write takes
the next revision (etcd's numbering, and the best guess for a write whose entry is
unknown).

States are immutable and hashable (the search memoises them). A state keeps, per key,
only the versions a later read can still ask for: the latest one at or below the
`horizon` and everything after it. The horizon is the compact revision, or the lowest
revision any request of the history reads at, whichever is higher (`horizon=None`: no
request reads at a past revision, keep only each key's latest version). Versions below
it can never be observed again, so dropping them keeps the memoisation sound.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from sediment.actors.kv.types import (
    ALL_KEYS,
    Compact,
    CompactResult,
    Compare,
    DeleteRange,
    DeleteResult,
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


EMPTY = KvState(0, 0, (), ())
OUT_OF_ORDER = Failure("OutOfOrder", "a log index at or below one already applied")


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

    def initial(self, head: int = 0, kvs: Sequence[KeyValue] = ()) -> KvState:
        """The state a run starts from (default: an empty store at revision 0)."""
        rows = sorted((kv.key, ((kv.mod_revision, kv.create_revision, kv.version, kv.value),))
                      for kv in kvs)
        return KvState(head, 0, tuple(k for k, _ in rows), tuple(h for _, h in rows))

    # ---- reads ----

    def live(self, s: KvState, key: bytes, range_end: bytes | None, at: int) -> list[KeyValue]:
        """The keys of [key, range_end) alive at revision `at`, by key."""
        return _live(s.names, s.hists, key, range_end, at)

    def _read_rev(self, s: KvState, revision: int) -> int | Failure:
        if revision > s.head:
            return Failure(ERR_FUTURE_REV)
        at = s.head if revision <= 0 else revision
        if at < s.compact:
            return Failure(ERR_COMPACTED, compact_revision=s.compact)
        return at

    def _range(
        self,
        names: Sequence[bytes],
        hists: Sequence[History],
        r: Range,
        at: int,
        header: int,
    ) -> RangeResult:
        kvs = _live(names, hists, r.key, r.range_end, at)
        count = len(kvs)
        if r.count_only:
            return RangeResult([], count, False, header)
        more = bool(r.limit) and count > r.limit
        if more:
            kvs = kvs[: r.limit]
        if r.keys_only:
            kvs = [replace(kv, value=b"") for kv in kvs]
        return RangeResult(kvs, count, more, header)

    # ---- the step ----

    def apply(
        self, s: KvState, req: Request, index: int | None = None
    ) -> tuple[KvState, Result | Failure]:
        """Run one request (at log `index`, when known): the next state and what the
        store answers."""
        if index is not None:
            if index <= s.index or index <= s.head:
                return s, OUT_OF_ORDER
            s = KvState(s.head, s.compact, s.names, s.hists, index)
        rev = index if index is not None else max(s.head, s.index) + 1
        if isinstance(req, Range):
            at = self._read_rev(s, req.revision)
            if isinstance(at, Failure):
                return s, at
            return s, self._range(s.names, s.hists, req, at, s.head)
        if isinstance(req, Compact):
            if req.revision <= s.compact:
                return s, Failure(ERR_COMPACTED, compact_revision=s.compact)
            if req.revision > s.head:
                return s, Failure(ERR_FUTURE_REV)
            trimmed = self._trimmed(s.head, req.revision, s.names, s.hists, s.index)
            return trimmed, CompactResult(s.head)
        if isinstance(req, Txn):
            return self._txn(s, req, rev)
        nxt, responses, _ = self._write(s, (req,), rev)
        return nxt, responses[0]

    def _txn(self, s: KvState, t: Txn, rev: int) -> tuple[KvState, Result | Failure]:
        succeeded = all(self._compare(s, c) for c in t.compare)
        ops = t.success if succeeded else t.failure
        for op in ops:
            if isinstance(op, Range) and op.revision:
                at = self._read_rev(s, op.revision)
                if isinstance(at, Failure):
                    return s, at
        nxt, responses, header = self._write(s, ops, rev)
        return nxt, TxnResult(succeeded, responses, header)

    def _compare(self, s: KvState, c: Compare) -> bool:
        kvs = self.live(s, c.key, c.range_end, s.head)
        if not kvs:
            return False if c.target == "value" else _cmp(0, c.op, c.value)
        return all(_cmp(getattr(kv, c.target), c.op, c.value) for kv in kvs)

    def _write(
        self, s: KvState, ops: Sequence[TxnOp], rev: int
    ) -> tuple[KvState, list[TxnResponse], int]:
        """Apply ops at revision `rev` (store._write): the entry's index when known, else
        the next one; the header is that revision if anything changed, else head, and
        the state is unchanged when nothing did."""
        names, hists = list(s.names), list(s.hists)
        changed = 0
        out: list[TxnResponse] = []
        for op in ops:
            if isinstance(op, Put):
                i = bisect.bisect_left(names, op.key)
                if i == len(names) or names[i] != op.key:
                    names.insert(i, op.key)
                    hists.insert(i, ())
                prev = _visible(hists[i], rev)
                create, version = (prev[1], prev[2] + 1) if prev else (rev, 1)
                hists[i] = (*hists[i], (rev, create, version, op.value))
                changed += 1
                prev_kv = _kv(op.key, prev) if op.prev_kv and prev else None
                out.append(PutResult(rev, prev_kv))
            elif isinstance(op, DeleteRange):
                gone = _live(names, hists, op.key, op.range_end, rev)
                for kv in gone:
                    i = bisect.bisect_left(names, kv.key)
                    hists[i] = (*hists[i], (rev, 0, 0, None))
                changed += len(gone)
                out.append(DeleteResult(rev, len(gone), gone if op.prev_kv else []))
            else:
                at = rev if op.revision == 0 else op.revision
                out.append(self._range(names, hists, op, at, 0))
        header = rev if changed else s.head
        responses = [replace(r, revision=header) for r in out]
        if not changed:
            return s, responses, header
        index = max(s.index, rev)
        return self._trimmed(rev, s.compact, tuple(names), tuple(hists), index), responses, header

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


def _reads(req: Request) -> list[Range]:
    if isinstance(req, Range):
        return [req]
    if isinstance(req, Txn):
        return [op for op in (*req.success, *req.failure) if isinstance(op, Range)]
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


__all__ = ["ALL_KEYS", "EMPTY", "OUT_OF_ORDER", "KvModel", "KvState", "Version", "is_read_only",
           "matches"]
