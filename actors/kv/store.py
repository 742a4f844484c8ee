"""The MVCC store of the Netsy KV: etcd 3.4 semantics, synchronous, over one SQLite file (WAL).

Tables (declared, with their migrations, in `actors/schemas/kv_file.py`; opening a file
of an earlier release migrates it; reads and writes here are plain `sqlite3`)
- `records(revision, sub, key, value, create_revision, mod_revision, version, deleted,
  compacted_at)`: one row per change, etcd's (main, sub) revision: `sub` numbers the
  changes of one request in the order it made them (a txn's ops in op order, a
  DeleteRange's keys in key order), so a key may change twice in one revision (a txn
  that deletes [a, "\\0") then puts b: etcd accepts it). A tombstone has deleted=1, value
  NULL, version 0, create_revision 0. Rows are never deleted: compaction is value-only.
- `compactions(revision, finished)`: every scheduled compaction revision; `finished` is set
  once its value-only pass is complete (etcd persists scheduledCompact and finishedCompact).
- `meta(name, value)`: the head revision; `applied` too when a caller (the raft-hosted
  machine) passes the raft index it applies, so it commits with the rows it accompanies.
- `entries(revision, raft_index, path)`: for a write applied from a raft entry, that
  entry's index and, for a txn, which branch each (nested) txn ran ("1"/"0" in etcd's
  compareToPath order): a value can be found again in the request that wrote it (a
  snapshot without values is refilled from the log).

Revisions as etcd numbers them: an empty store is at revision 1, and every request that
changes something takes the next one (a txn with several writes takes one); a request
that changes nothing (a delete matching no key, a read-only txn), a read, a failed
request and a Compact take none. Sub-responses are stamped as etcd stamps them (see
`types.TxnResult`).

Compaction follows etcd: before any compaction the compact revision is -1 (so Compact 0
and Compact 1 are accepted on a fresh store); `compact(rev)` fails with ErrCompacted when
rev <= the compact revision and ErrFutureRev when rev > head; otherwise the compact
revision moves to rev at once (logical compaction; persisted as `scheduled`) and the
value-only pass runs in batches (`compact_batch`), after which the compaction is recorded
`finished`. Reading at the compact revision is allowed, below it is ErrCompacted. A
scheduled but unfinished compaction found on open is exposed as `pending_compaction`;
`run_pending_compaction` resumes it. On open, head = max(head, compact revision) (etcd's
#17780 fix). The request logic of a write lives in `store_txn.py`.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from sediment.actors.kv import validation as v
from sediment.actors.kv.errors import (
    ErrCompacted,
    ErrFutureRev,
    InvalidRequest,
)
from sediment.actors.kv.history import EventsSkeleton, FlushRows, RangeSkeleton
from sediment.actors.kv.range_options import shape
from sediment.actors.kv.types import (
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
    TxnResult,
)
from sediment.actors.kv.validation import DEFAULT_LIMITS, Limits
from sediment.actors.schemas import KV_FILE, migrate

DEFAULT_COMPACTION_BATCH = 1000  # etcd's CompactionBatchLimit default
FIRST_REVISION = 1  # etcd: an empty store is at revision 1, its first write is 2
NO_COMPACTION = -1  # etcd's compactMainRev before any compaction

ALL_KEYS = v.ALL_KEYS  # range_end meaning "every key >= key" (types.ALL_KEYS)

# A later change of the same key: a higher revision, or the same one and a higher sub.
_LATER = "(n.revision > r.revision OR (n.revision = r.revision AND n.sub > r.sub))"

# A row is compactable at R: at or below R, not yet compacted, and a tombstone or
# superseded by a later row of the same key that is also at or below R.
_COMPACTABLE = f"""
    r.revision <= :rev AND r.compacted_at IS NULL AND (
        r.deleted = 1 OR EXISTS (
            SELECT 1 FROM records n
            WHERE n.key = r.key AND {_LATER} AND n.revision <= :rev))
"""

# key, value, create, mod, version, deleted, revision, sub, lease
_COLS = "key, value, create_revision, mod_revision, version, deleted, revision, sub, lease"
_ROW_COLS = ("revision, sub, key, value, create_revision, mod_revision, version, deleted,"
             " compacted_at, lease")
_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")


def _bounds(key: bytes, range_end: bytes | None) -> tuple[str, tuple[bytes, ...]]:
    """SQL for etcd's [key, range_end): an end at or before key selects nothing."""
    if range_end is None:
        return "key = ?", (key,)
    if range_end == ALL_KEYS:
        return "key >= ?", (key,)
    return "key >= ? AND key < ?", (key, range_end)


def _kv(row: Sequence[Any]) -> KeyValue:
    value = row[1]
    return KeyValue(
        key=bytes(row[0]),
        value=b"" if value is None else bytes(value),
        create_revision=row[2],
        mod_revision=row[3],
        version=row[4],
        lease=row[8] if len(row) > 8 else 0,
    )


def prefix_end(prefix: bytes) -> bytes:
    """etcd's GetPrefixRangeEnd: the range_end covering every key with `prefix`."""
    end = bytearray(prefix)
    for i in range(len(end) - 1, -1, -1):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return ALL_KEYS


def read_revisions(db: sqlite3.Connection) -> tuple[int, int, int]:
    """(head, compact revision, finished compact revision) of a KV file, the last two
    NO_COMPACTION before any; read only (`sediment inspect` reads a file with it too)."""
    q = db.execute
    meta_head = q("SELECT value FROM meta WHERE name = 'head'").fetchone()
    rec_head = q("SELECT MAX(revision) FROM records").fetchone()[0] or 0
    compact = q("SELECT MAX(revision) FROM compactions").fetchone()[0]
    compact_main = NO_COMPACTION if compact is None else compact
    finished = q("SELECT MAX(revision) FROM compactions WHERE finished = 1").fetchone()[0]
    finished_rev = NO_COMPACTION if finished is None else finished
    # etcd #17780: the head never goes below the (scheduled) compact revision.
    head = max(meta_head[0] if meta_head else FIRST_REVISION, rec_head, compact_main)
    return head, compact_main, finished_rev


class Store:
    """One node's MVCC store. Not thread-safe; one owner process drives it.

    Every request is checked against `limits` by `validation.py` (the same checks the
    client runs before proposing) before anything is read or written."""

    def __init__(
        self,
        path: str | Path,
        *,
        limits: Limits = DEFAULT_LIMITS,
        compaction_batch: int = DEFAULT_COMPACTION_BATCH,
        synchronous: str = "FULL",
    ) -> None:
        if not isinstance(limits, Limits):
            raise TypeError(f"limits must be a Limits, got {type(limits).__name__}")
        self.path = str(path)
        self.limits = limits
        self.compaction_batch = compaction_batch
        if synchronous not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {_SYNCHRONOUS}")
        self._db = sqlite3.connect(self.path, isolation_level=None)
        self._batching = False  # inside batch(): writes are savepoints of its transaction
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        migrate(self._db, KV_FILE)  # the tables: actors/schemas/kv_file.py
        self._load()

    # ------------------------------------------------------------------ state --

    def _load(self) -> None:
        self._head, self._compact_main, self._finished_rev = read_revisions(self._db)

    @property
    def head(self) -> int:
        """The store's revision: the last write's, FIRST_REVISION before any."""
        return self._head

    @property
    def compact_revision(self) -> int:
        """The logical compact revision (the latest scheduled compaction; 0 if none)."""
        return max(0, self._compact_main)

    @property
    def finished_compact_revision(self) -> int:
        return max(0, self._finished_rev)

    @property
    def pending_compaction(self) -> int | None:
        """A scheduled compaction whose value-only pass has not finished, or None."""
        return self._compact_main if self._compact_main > self._finished_rev else None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------- validation --
    # The state-free checks live in validation.py (shared with the client); the ones
    # that depend on head and the compact revision are here.

    def _check_read_rev(self, revision: int) -> int:
        """etcd rangeKeys: future first, then compacted; a revision <= 0 reads at head."""
        if revision > self._head:
            raise ErrFutureRev()
        if revision <= 0:
            revision = self._head
        if revision < self._compact_main:
            raise ErrCompacted(self.compact_revision)
        return revision

    def _check_txn_read_rev(self, revision: int) -> None:
        """etcd's checkRange for a Range of the txn's path, against the state before the
        txn: 0 is fine, above head is ErrFutureRev, below the compact revision (a
        negative revision too, once anything was compacted) ErrCompacted."""
        if revision == 0:
            return
        if revision > self._head:
            raise ErrFutureRev()
        if revision < self._compact_main:
            raise ErrCompacted(self.compact_revision)

    # ---------------------------------------------------------------- reading --

    def _live_rows(self, key: bytes, range_end: bytes | None, at: int, limit: int = 0,
                   columns: str = _COLS) -> list[Any]:
        """Rows of the keys that exist at revision `at` (their latest change at or below
        it is not a delete), by key; the first `limit` (0: all)."""
        where, args = _bounds(key, range_end)
        sql = (
            f"SELECT {columns} FROM records r WHERE {where} AND r.deleted = 0 AND r.rowid = "
            "(SELECT m.rowid FROM records m WHERE m.key = r.key AND m.revision <= ? "
            "ORDER BY m.revision DESC, m.sub DESC LIMIT 1) ORDER BY r.key"
            + (" LIMIT ?" if limit else "")
        )
        return self._db.execute(sql, (*args, at, *((limit,) if limit else ()))).fetchall()

    def _latest(self, key: bytes, at: int) -> Any | None:
        """The key's last change at or below revision `at` (None: never changed)."""
        return self._db.execute(
            f"SELECT {_COLS} FROM records WHERE key = ? AND revision <= ? "
            "ORDER BY revision DESC, sub DESC LIMIT 1",
            (key, at),
        ).fetchone()

    def _range_rows(self, r: Range, at: int, header: int) -> tuple[RangeResult, list[Any]]:
        """The Range answer and the rows behind its kvs (a compacted value is NULL there).
        Where etcd reads only limit + 1 keys (no sort order, no filter: `shape`), so
        does this, and counts the rest in SQLite (reading every row made each page of a
        large range cost the whole range)."""
        if r.count_only:
            count = self._live_rows(r.key, r.range_end, at, columns="COUNT(*)")[0][0]
            return RangeResult([], count, False, header), []
        first = r.limit > 0 and r.sort_order == "none" and not (
            r.min_mod_revision or r.max_mod_revision or r.min_create_revision
            or r.max_create_revision)
        rows = self._live_rows(r.key, r.range_end, at, limit=r.limit + 1 if first else 0)
        result, picked = shape([_kv(row) for row in rows], r, header)
        if first and len(rows) > r.limit:
            count = self._live_rows(r.key, r.range_end, at, columns="COUNT(*)")[0][0]
            result = replace(result, count=count)
        return result, [rows[i] for i in picked]

    def range(self, key: bytes, range_end: bytes | None = None, revision: int = 0,
              limit: int = 0, count_only: bool = False, keys_only: bool = False,
              **options: Any) -> RangeResult:
        """etcd Range. range_end None: the single key; b"\\0": every key >= key; otherwise
        [key, range_end). `count` is the number of matching keys before the filters and
        `limit`. `options`: the other fields of `types.Range` (sort, min/max filters)."""
        return self.read(Range(key, range_end, revision, limit, count_only, keys_only,
                               **options))

    def read(self, r: Range) -> RangeResult:
        """etcd Range of a `types.Range` request."""
        v.check_request(r, self.limits)
        at = self._check_read_rev(r.revision)
        return self._range_rows(r, at, self._head)[0]

    def get(self, key: bytes, revision: int = 0) -> KeyValue | None:
        res = self.range(key, revision=revision)
        return res.kvs[0] if res.kvs else None

    def events(
        self,
        start_revision: int,
        key: bytes,
        range_end: bytes | None = None,
        end_revision: int | None = None,
        prev_kv: bool = False,
    ) -> list[Event]:
        """The history of [key, range_end) from start_revision to end_revision (default
        head), ordered by revision and then as the request made the changes (etcd's
        sub-revision: a txn's op order): what a watch replays; start_revision 0 means
        "from now" and replays nothing. start_revision below the
        compact revision is ErrCompacted; AT the compact revision is allowed and includes
        the events of that revision, tombstones too (etcd #18089, #19179)."""
        v.check_range(key, range_end, self.limits)
        v.check_revision(start_revision, "start_revision")
        end = self._head if end_revision is None else end_revision
        v.check_revision(end, "end_revision")
        if start_revision == 0:  # etcd: a watch with start_revision 0 starts "now"
            return []
        if start_revision < self._compact_main:
            raise ErrCompacted(self.compact_revision)
        return self._events(start_revision, end, key, range_end, prev_kv)[0]

    def _events(self, start: int, end: int, key: bytes, range_end: bytes | None,
                prev_kv: bool) -> tuple[list[Event], list[int]]:
        """The events of [key, range_end) in [start, end] and the indexes of the puts among
        them whose value is compacted (b"" in the event)."""
        where, args = _bounds(key, range_end)
        rows = self._db.execute(
            f"SELECT {_COLS} FROM records WHERE {where} AND revision >= ? AND revision <= ? "
            "ORDER BY revision, sub",
            (*args, start, end),
        ).fetchall()
        out: list[Event] = []
        missing: list[int] = []
        for row in rows:
            prev = None
            # etcd's prev_kv: the key at the revision before (a change earlier in the same
            # request does not count), and none for a put that creates the key
            if prev_kv and not (not row[5] and row[2] == row[6]):
                p = self._latest(row[0], row[6] - 1)
                if p is not None and not p[5] and p[1] is not None:
                    prev = _kv(p)
            if row[5]:
                out.append(Event("delete", KeyValue(bytes(row[0]), b"", 0, row[6], 0), prev))
            else:
                if row[1] is None:
                    missing.append(len(out))
                out.append(Event("put", _kv(row), prev))
        return out, missing

    # ------------------------------------------------- history below the compaction --
    # Compaction is value-only: every row stays, so the answers below the compact
    # revision are known but for the compacted values (`history.py` fills them in).

    def range_skeleton(self, r: Range) -> RangeSkeleton:
        """Range `r` at any revision up to head, even below the compact revision: the
        kvs whose value is compacted are listed in `missing`. ErrFutureRev above head."""
        v.check_request(r, self.limits)
        if r.revision > self._head:
            raise ErrFutureRev()
        at = self._head if r.revision <= 0 else r.revision
        result, rows = self._range_rows(r, at, self._head)
        compacted = () if r.keys_only else tuple(
            i for i, row in enumerate(rows) if row[1] is None)
        return RangeSkeleton(result, compacted, self.compact_revision)

    def events_skeleton(self, start_revision: int, key: bytes, range_end: bytes | None = None,
                        end_revision: int | None = None) -> EventsSkeleton:
        """`events` from any start_revision >= 1 (no prev_kv), even below the compact
        revision: the puts whose value is compacted are listed in `missing`. A start or
        end above head is ErrFutureRev; end before start answers nothing."""
        v.check_range(key, range_end, self.limits)
        v.check_revision(start_revision, "start_revision")
        end = self._head if end_revision is None else end_revision
        v.check_revision(end, "end_revision")
        if start_revision < 1:
            raise InvalidRequest("a history read starts at revision 1 or later")
        if start_revision > self._head or end > self._head:
            raise ErrFutureRev()
        events, missing = self._events(start_revision, end, key, range_end, False)
        return EventsSkeleton(tuple(events), tuple(missing), self._head, self.compact_revision)

    def history_rows(self, lo: int, max_rows: int) -> FlushRows:
        """Every (key, revision) from revision `lo` on, by (revision, key), as (revision,
        key, value or None for a delete): the key's last change in that revision (a txn
        that deleted and put one key leaves its put; a read at any revision sees only
        that), whole revisions, up to `max_rows` rows unless the first revision alone
        holds more. ErrCompacted if lo is below the compact revision (values there may
        be gone: flushing them would write holes)."""
        v.check_revision(lo, "lo")
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
            raise InvalidRequest(f"max_rows must be a positive int, got {max_rows!r}")
        if lo < 1:
            raise InvalidRequest("history rows start at revision 1 or later")
        if lo < self._compact_main:
            raise ErrCompacted(self.compact_revision)
        q = self._db.execute
        cut = q("SELECT revision FROM records WHERE revision >= ? ORDER BY revision "
                "LIMIT 1 OFFSET ?", (lo, max_rows)).fetchone()
        if cut is None:
            through, more = self._head, False
        else:
            first = q("SELECT MIN(revision) FROM records WHERE revision >= ?", (lo,)).fetchone()
            through, more = max(cut[0] - 1, first[0]), True
        rows = q("SELECT r.revision, r.key, r.value, r.deleted FROM records r WHERE "
                 "r.revision >= ? AND r.revision <= ? AND NOT EXISTS (SELECT 1 FROM records n "
                 "WHERE n.key = r.key AND n.revision = r.revision AND n.sub > r.sub) "
                 "ORDER BY r.revision, r.key", (lo, through)).fetchall()
        if any(val is None and not d for _, _, val, d in rows):
            raise ErrCompacted(self.compact_revision)  # a put without its value
        return FlushRows(tuple((r, bytes(k), None if d else bytes(val)) for r, k, val, d in rows),
                         through, more)

    # ---------------------------------------------------------------- writing --
    # The request logic is store_txn.py's; these are the entry points and the rows.

    def _insert(self, key: bytes, value: bytes | None, revision: int, sub: int,
                create: int, version: int, lease: int = 0) -> None:
        self._db.execute(
            "INSERT INTO records (revision, sub, key, value, create_revision, mod_revision,"
            " version, deleted, lease) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (revision, sub, bytes(key), None if value is None else bytes(value), create,
             revision, version, int(value is None), lease),
        )

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One SQLite transaction for a write; inside `batch()`, a savepoint of the batch's
        transaction instead (a write that fails rolls back alone, the batch goes on)."""
        db = self._db
        if self._batching:
            db.execute("SAVEPOINT write")
            try:
                yield
            except BaseException:
                db.execute("ROLLBACK TO write")
                db.execute("RELEASE write")
                raise
            db.execute("RELEASE write")
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Every write inside commits in one SQLite transaction: a raft batch of puts costs
        one commit instead of one each. If the batch itself fails (the disk), nothing of
        it stays and the in-memory view is read back from the file."""
        if self._batching:
            yield
            return
        self._db.execute("BEGIN IMMEDIATE")
        self._batching = True
        try:
            yield
        except BaseException:
            self._batching = False
            self._db.execute("ROLLBACK")
            self._load()
            raise
        self._batching = False
        self._db.execute("COMMIT")

    def _set_meta(self, name: str, value: int) -> None:
        self._db.execute(
            "INSERT INTO meta (name, value) VALUES (?, ?) "
            "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
            (name, value),
        )

    def put(self, key: bytes, value: bytes, prev_kv: bool = False, *,
            applied: int | None = None) -> PutResult:
        """etcd Put. `applied`: the raft index of the entry it comes from (kept with it)."""

        return self.put_op(Put(key, value, prev_kv), applied=applied)

    def put_op(self, op: Put, *, applied: int | None = None) -> PutResult:
        """etcd Put with every field (lease, ignore_value, ignore_lease)."""
        from sediment.actors.kv import store_txn

        v.check_request(op, self.limits)
        res = store_txn.write(self, [op], applied)[0][0]
        assert isinstance(res, PutResult)
        return res

    def delete_range(self, key: bytes, range_end: bytes | None = None, prev_kv: bool = False,
                     *, applied: int | None = None) -> DeleteResult:
        from sediment.actors.kv import store_txn

        op = DeleteRange(key, range_end, prev_kv)
        v.check_request(op, self.limits)
        res = store_txn.write(self, [op], applied)[0][0]
        assert isinstance(res, DeleteResult)
        return res

    def txn(self, compares: Sequence[Compare] = (), success_ops: Sequence[TxnOp] = (),
            failure_ops: Sequence[TxnOp] = (), *, applied: int | None = None) -> TxnResult:
        """etcd Txn (store_txn.py): if every compare holds, apply success_ops, else
        failure_ops, all at one revision; nested txns as etcd 3.4 runs them."""
        from sediment.actors.kv import store_txn

        v.check_txn(compares, success_ops, failure_ops, self.limits)
        return store_txn.txn(self, tuple(compares), tuple(success_ops), tuple(failure_ops),
                             applied)

    def request(self, request: object, *, applied: int | None = None) -> Any:
        """Any KV request (`validation.Request`): its result, its typed error raised.
        A Compact answers CompactResult(head) once logically compacted (the value-only
        pass is left to `compact_batch` unless the request is `physical`)."""
        if isinstance(request, Put):
            return self.put_op(request, applied=applied)
        if isinstance(request, DeleteRange):
            return self.delete_range(request.key, request.range_end, request.prev_kv,
                                     applied=applied)
        if isinstance(request, Range):
            return self.read(request)
        if isinstance(request, Txn):
            return self.txn(request.compare, request.success, request.failure,
                            applied=applied)
        if isinstance(request, Compact):
            v.check_request(request, self.limits)
            self.schedule_compaction(request.revision, applied=applied)
            if request.physical:
                self.run_pending_compaction()
            return CompactResult(self._head)
        raise InvalidRequest(f"not a KV request: {type(request).__name__}")

    # ------------------------------------------------------------- compaction --

    def schedule_compaction(self, revision: int, *, applied: int | None = None) -> int:
        """Logical compaction (etcd updateCompactRev): validate, persist `scheduled`, move
        the compact revision. Returns the revision. `applied` (when given) commits with it.
        A revision at or below the compact revision (any negative one too) is
        ErrCompacted, above head ErrFutureRev."""
        v.check_int(revision, "revision")
        if revision <= self._compact_main:
            raise ErrCompacted(self.compact_revision)
        if revision > self._head:
            raise ErrFutureRev()
        with self.transaction():
            self._db.execute(
                "INSERT INTO compactions (revision, finished) VALUES (?, 0)", (revision,)
            )
            if applied is not None:
                self._set_meta("applied", applied)
        self._compact_main = revision
        return revision

    def compact_batch(self, batch_size: int | None = None) -> int:
        """One batch of the value-only pass of the pending compaction; returns the rows
        compacted. When a batch finds fewer rows than batch_size the compaction is recorded
        finished (so `pending_compaction` becomes None). Idempotent."""
        target = self.pending_compaction
        if target is None:
            return 0
        size = batch_size or self.compaction_batch
        if size <= 0:
            raise InvalidRequest("batch_size must be positive")
        with self.transaction():
            n = self._db.execute(
                "UPDATE records SET value = NULL, compacted_at = :rev WHERE rowid IN ("
                f"SELECT r.rowid FROM records r WHERE {_COMPACTABLE} LIMIT :n)",
                {"rev": target, "n": size},
            ).rowcount
            if n < size:
                self._db.execute(
                    "UPDATE compactions SET finished = 1 WHERE revision <= ?", (target,)
                )
        if n < size:
            self._finished_rev = target
        return n

    def run_pending_compaction(
        self, batch_size: int | None = None, pause: Callable[[], object] | None = None
    ) -> int:
        """Run batches until the pending compaction (if any) is finished; `pause` is called
        between batches (etcd sleeps CompactionSleepInterval). Returns rows compacted."""
        total = 0
        while self.pending_compaction is not None:
            total += self.compact_batch(batch_size)
            if pause is not None and self.pending_compaction is not None:
                pause()
        return total

    def compact(
        self,
        revision: int,
        *,
        physical: bool = True,
        batch_size: int | None = None,
        pause: Callable[[], object] | None = None,
    ) -> int:
        """etcd Compact. physical=True waits for the value-only pass (etcd's `physical`
        flag); otherwise call `compact_batch` / `run_pending_compaction` later. Returns the
        header revision (the head: a Compact takes no revision)."""
        self.schedule_compaction(revision)
        if physical:
            self.run_pending_compaction(batch_size, pause)
        return self._head

    def compactable_count(self, revision: int | None = None) -> int:
        rev = self._compact_main if revision is None else revision
        n: int = self._db.execute(
            f"SELECT COUNT(*) FROM records r WHERE {_COMPACTABLE}", {"rev": rev}
        ).fetchone()[0]
        return n

    # ------------------------------------------------------------ raft helper --

    def live_revisions(self) -> list[int]:
        """Revisions whose data is still needed, sorted: every revision above the compact
        revision, plus, at or below it, each key's last change if it is a put (the value
        a read at the compact revision, or at head, returns). Compacted rows and
        tombstones at or below the compact revision are not needed. This is "each key's
        latest put + everything above the compact revision", made exact for keys deleted
        after the compact revision."""
        rows = self._db.execute(
            "SELECT DISTINCT revision FROM records WHERE revision > :rev "
            "UNION SELECT r.revision FROM records r WHERE r.revision <= :rev AND r.deleted = 0 "
            f"AND NOT EXISTS (SELECT 1 FROM records n WHERE n.key = r.key AND {_LATER} "
            "AND n.revision <= :rev) ORDER BY 1",
            {"rev": self._compact_main},
        ).fetchall()
        return [r[0] for r in rows]

    def live_indexes(self) -> list[int]:
        """The raft indexes of the entries behind `live_revisions` (writes applied with
        an `applied` index; others are not in any log), sorted."""
        live = self.live_revisions()
        index = self.entry_indexes()
        return sorted(index[r] for r in live if r in index)

    def entry_indexes(self) -> dict[int, int]:
        """revision -> the raft index of the entry that wrote it."""
        return dict(self._db.execute("SELECT revision, raft_index FROM entries"))

    def entries(self) -> list[tuple[int, int, str | None]]:
        """(revision, raft index, txn path or None) of every write applied from the log."""
        return list(self._db.execute(
            "SELECT revision, raft_index, path FROM entries ORDER BY revision"))

    def rows(self) -> list[tuple[Any, ...]]:
        """Every record row (for tests and debugging), in change order: (revision, key,
        value, create_revision, mod_revision, version, deleted, compacted_at)."""
        return self._db.execute(
            "SELECT revision, key, value, create_revision, mod_revision, version, deleted,"
            " compacted_at FROM records ORDER BY revision, sub"
        ).fetchall()

    def skeleton(self) -> list[tuple[Any, ...]]:
        """Every record row without its value, by key then change: (revision, sub, key,
        create_revision, mod_revision, version, deleted, compacted_at, lease). A snapshot
        of the raft-hosted machine holds this; values stay in the log."""
        return self._db.execute(
            "SELECT revision, sub, key, create_revision, mod_revision, version, deleted,"
            " compacted_at, lease FROM records ORDER BY key, revision, sub"
        ).fetchall()

    def hash_kv(self, revision: int) -> tuple[int, int, int]:
        """etcd's HashKV: (a CRC-32 of every record at or below `revision`, 0: head, with
        its key, value, revisions and lease; the compact revision; the head). Members that
        applied the same entries answer the same hash once their compaction passes end."""
        import zlib

        at = revision if revision > 0 else self.head
        if at > self.head:
            raise ErrFutureRev()
        if 0 < revision < self.compact_revision:
            raise ErrCompacted(self.compact_revision)
        digest = 0
        for row in self._db.execute(
                "SELECT revision, sub, key, value, create_revision, version, deleted, lease "
                "FROM records WHERE revision <= ? ORDER BY revision, sub", (at,)):
            digest = zlib.crc32(repr(row).encode(), digest)
        return digest, self.compact_revision, self.head

    def meta(self, name: str) -> int | None:
        row = self._db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else int(row[0])

    def set_meta(self, name: str, value: int) -> None:
        """Set one meta row in its own transaction (e.g. `applied` after writeless entries)."""
        self._set_meta(name, value)

    def checkpoint(self) -> None:
        """Make every committed transaction durable whatever `synchronous` is: a FULL WAL
        checkpoint fsyncs the WAL, copies it into the database and fsyncs that."""
        busy, frames, done = self._db.execute("PRAGMA wal_checkpoint(FULL)").fetchone()
        if busy or (frames >= 0 and done < frames):
            raise sqlite3.OperationalError(f"checkpoint incomplete: {done} of {frames} frames")

    def replace_all(
        self,
        rows: Iterable[Sequence[Any]],
        compactions: Iterable[tuple[int, bool]],
        meta: Mapping[str, int],
        entries: Iterable[tuple[int, int, str | None]] = (),
        leases: Iterable[tuple[int, int, int]] = (),
    ) -> None:
        """Replace every table in one transaction (a snapshot restore): nothing changes if
        `rows` ((revision, sub, key, value, create_revision, mod_revision, version,
        deleted, compacted_at, lease); may be a generator) raises. `leases`: (id, ttl,
        remaining) of every lease."""
        with self.transaction():
            for table in ("records", "compactions", "meta", "entries", "leases"):
                self._db.execute(f"DELETE FROM {table}")
            self._db.executemany(
                f"INSERT INTO records ({_ROW_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows
            )
            self._db.executemany("INSERT INTO leases (id, ttl, remaining) VALUES (?, ?, ?)",
                                 leases)
            self._db.executemany(
                "INSERT INTO compactions (revision, finished) VALUES (?, ?)", compactions
            )
            for name, value in sorted(meta.items()):
                self._set_meta(name, value)
            self._db.executemany(
                "INSERT INTO entries (revision, raft_index, path) VALUES (?, ?, ?)", entries)
        self._load()

    def compactions(self) -> list[tuple[int, bool]]:
        return [
            (r, bool(f))
            for r, f in self._db.execute("SELECT revision, finished FROM compactions ORDER BY 1")
        ]


def live_indexes(store: Store) -> list[int]:
    return store.live_indexes()


__all__ = ["ALL_KEYS", "FIRST_REVISION", "NO_COMPACTION", "Store", "live_indexes",
           "prefix_end", "read_revisions"]
