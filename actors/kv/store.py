"""The MVCC store of the Netsy KV: etcd semantics, synchronous, over one SQLite file (WAL).

Tables
- `records(revision, key, value, create_revision, mod_revision, version, deleted,
  compacted_at)`: one row per key written in a revision (a tombstone has deleted=1, value
  NULL, version 0, create_revision 0). Rows are never deleted: compaction is value-only.
- `compactions(revision, finished)`: every scheduled compaction revision; `finished` is set
  once its value-only pass is complete (etcd persists scheduledCompact and finishedCompact).
- `meta(name, value)`: the head revision; `applied` too when a caller (the raft-hosted
  machine) passes the raft index it applies, so it commits with the rows it accompanies.
- `txns(revision, succeeded)`: which branch each writing txn ran, so a value can be found
  again in the request that wrote it (a snapshot without values is refilled from the log).

Revisions: one per write request (a txn with several writes gets one revision); a request
that changes nothing (a delete matching no key, a read-only txn) does not consume one. A
write may be given its revision explicitly (the raft index later); it must be above head.

Compaction follows etcd: `compact(rev)` fails with ErrCompacted when rev <= the current
compact revision and ErrFutureRev when rev > head; otherwise the compact revision moves to
rev at once (logical compaction; persisted as `scheduled`) and the value-only pass runs in
batches (`compact_batch`), after which the compaction is recorded `finished`. Reading at
the compact revision is allowed, below it is ErrCompacted. A scheduled but unfinished
compaction found on open is exposed as `pending_compaction`; `run_pending_compaction`
resumes it. On open, head = max(head, compact revision) (etcd's #17780 fix).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from sediment.actors.kv import validation as v
from sediment.actors.kv.errors import (
    ErrCompacted,
    ErrFutureRev,
    ErrRevisionNotAfterHead,
    InvalidRequest,
)
from sediment.actors.kv.history import EventsSkeleton, FlushRows, RangeSkeleton
from sediment.actors.kv.types import (
    Compare,
    DeleteRange,
    DeleteResult,
    Event,
    KeyValue,
    Put,
    PutResult,
    Range,
    RangeResult,
    TxnOp,
    TxnResponse,
    TxnResult,
)
from sediment.actors.kv.validation import DEFAULT_LIMITS, Limits

DEFAULT_COMPACTION_BATCH = 1000  # etcd's CompactionBatchLimit default

ALL_KEYS = v.ALL_KEYS  # range_end meaning "every key >= key" (types.ALL_KEYS)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    revision INTEGER NOT NULL,
    key BLOB NOT NULL,
    value BLOB,
    create_revision INTEGER NOT NULL,
    mod_revision INTEGER NOT NULL,
    version INTEGER NOT NULL,
    deleted INTEGER NOT NULL DEFAULT 0,
    compacted_at INTEGER,
    PRIMARY KEY (key, revision)
);
CREATE INDEX IF NOT EXISTS records_by_revision ON records (revision);
CREATE TABLE IF NOT EXISTS compactions (
    revision INTEGER PRIMARY KEY,
    finished INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS txns (
    revision INTEGER PRIMARY KEY,
    succeeded INTEGER NOT NULL
);
"""

# A row is compactable at R: at or below R, not yet compacted, and a tombstone or
# superseded by a newer row of the same key that is also at or below R.
_COMPACTABLE = """
    r.revision <= :rev AND r.compacted_at IS NULL AND (
        r.deleted = 1 OR EXISTS (
            SELECT 1 FROM records n
            WHERE n.key = r.key AND n.revision > r.revision AND n.revision <= :rev))
"""

_COLS = "key, value, create_revision, mod_revision, version, deleted, revision"
_ROW_COLS = "revision, key, value, create_revision, mod_revision, version, deleted, compacted_at"
_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")


def _bounds(key: bytes, range_end: bytes | None) -> tuple[str, tuple[bytes, ...]]:
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
    )


def prefix_end(prefix: bytes) -> bytes:
    """etcd's GetPrefixRangeEnd: the range_end covering every key with `prefix`."""
    end = bytearray(prefix)
    for i in range(len(end) - 1, -1, -1):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return ALL_KEYS


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
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        self._db.executescript(_SCHEMA)
        self._load()

    # ------------------------------------------------------------------ state --

    def _load(self) -> None:
        q = self._db.execute
        meta_head = q("SELECT value FROM meta WHERE name = 'head'").fetchone()
        rec_head = q("SELECT MAX(revision) FROM records").fetchone()[0] or 0
        self._compact_rev = q("SELECT MAX(revision) FROM compactions").fetchone()[0] or 0
        self._finished_rev = (
            q("SELECT MAX(revision) FROM compactions WHERE finished = 1").fetchone()[0] or 0
        )
        # etcd #17780: the head never goes below the (scheduled) compact revision.
        self._head = max(meta_head[0] if meta_head else 0, rec_head, self._compact_rev)

    @property
    def head(self) -> int:
        """The last applied revision."""
        return self._head

    @property
    def compact_revision(self) -> int:
        """The logical compact revision (the latest scheduled compaction; 0 if none)."""
        return self._compact_rev

    @property
    def finished_compact_revision(self) -> int:
        return self._finished_rev

    @property
    def pending_compaction(self) -> int | None:
        """A scheduled compaction whose value-only pass has not finished, or None."""
        return self._compact_rev if self._compact_rev > self._finished_rev else None

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
        """etcd rangeKeys: future first, then compacted; 0 reads at head."""
        if revision > self._head:
            raise ErrFutureRev()
        if revision <= 0:
            revision = self._head
        if revision < self._compact_rev:
            raise ErrCompacted(self._compact_rev)
        return revision

    def _next_revision(self, revision: int | None) -> int:
        if revision is None:
            return self._head + 1
        v.check_revision(revision)
        if revision <= self._head:
            raise ErrRevisionNotAfterHead(f"revision {revision} is not above head {self._head}")
        return revision

    # ---------------------------------------------------------------- reading --

    def _live_rows(self, key: bytes, range_end: bytes | None, at: int,
                   limit: int = 0) -> list[Any]:
        """Rows of the keys that exist at revision `at`, by key (the first `limit`; 0: all)."""
        where, args = _bounds(key, range_end)
        sql = (
            f"SELECT {_COLS} FROM records r WHERE {where} AND r.deleted = 0 AND r.revision = "
            "(SELECT MAX(m.revision) FROM records m WHERE m.key = r.key AND m.revision <= ?) "
            "ORDER BY r.key" + (" LIMIT ?" if limit else "")
        )
        return self._db.execute(sql, (*args, at, *((limit,) if limit else ()))).fetchall()

    def _count_live(self, key: bytes, range_end: bytes | None, at: int) -> int:
        """How many keys exist at revision `at` (SQLite's MAX() takes `deleted` from the
        row with the greatest revision: one pass over the key index)."""
        where, args = _bounds(key, range_end)
        sql = (
            "SELECT COUNT(*) FROM (SELECT deleted, MAX(revision) FROM records "
            f"WHERE {where} AND revision <= ? GROUP BY key) WHERE deleted = 0"
        )
        return int(self._db.execute(sql, (*args, at)).fetchone()[0])

    def _latest(self, key: bytes, at: int) -> Any | None:
        return self._db.execute(
            f"SELECT {_COLS} FROM records WHERE key = ? AND revision <= ? "
            "ORDER BY revision DESC LIMIT 1",
            (key, at),
        ).fetchone()

    def _range_at(self, r: Range, at: int, header: int) -> RangeResult:
        return self._range_rows(r, at, header)[0]

    def _range_rows(self, r: Range, at: int, header: int) -> tuple[RangeResult, list[Any]]:
        """The Range answer and the rows behind its kvs (a compacted value is NULL there).
        With a limit only limit + 1 rows are read; the count of a range with more is a
        COUNT in SQLite (reading every row here made each page of a large range cost the
        whole range)."""
        if r.count_only:
            return RangeResult([], self._count_live(r.key, r.range_end, at), False, header), []
        rows = self._live_rows(r.key, r.range_end, at, limit=r.limit + 1 if r.limit else 0)
        count = len(rows)
        more = bool(r.limit) and count > r.limit
        if more:
            rows = rows[: r.limit]
            count = self._count_live(r.key, r.range_end, at)
        kvs = [_kv(row) for row in rows]
        if r.keys_only:
            kvs = [replace(kv, value=b"") for kv in kvs]
        return RangeResult(kvs, count, more, header), rows

    def range(
        self,
        key: bytes,
        range_end: bytes | None = None,
        revision: int = 0,
        limit: int = 0,
        count_only: bool = False,
        keys_only: bool = False,
    ) -> RangeResult:
        """etcd Range. range_end None: the single key; b"\\0": every key >= key; otherwise
        [key, range_end). `count` is the number of matching keys before `limit`."""
        r = Range(key, range_end, revision, limit, count_only, keys_only)
        v.check_request(r, self.limits)
        at = self._check_read_rev(revision)
        return self._range_at(r, at, self._head)

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
        head), ordered by revision then key: what a watch replays; start_revision 0 means
        "from now" and replays nothing. start_revision below the
        compact revision is ErrCompacted; AT the compact revision is allowed and includes
        the events of that revision, tombstones too (etcd #18089, #19179)."""
        v.check_range(key, range_end, self.limits)
        v.check_revision(start_revision, "start_revision")
        end = self._head if end_revision is None else end_revision
        v.check_revision(end, "end_revision")
        if start_revision == 0:  # etcd: a watch with start_revision 0 starts "now"
            return []
        if start_revision < self._compact_rev:
            raise ErrCompacted(self._compact_rev)
        return self._events(start_revision, end, key, range_end, prev_kv)[0]

    def _events(self, start: int, end: int, key: bytes, range_end: bytes | None,
                prev_kv: bool) -> tuple[list[Event], list[int]]:
        """The events of [key, range_end) in [start, end] and the indexes of the puts among
        them whose value is compacted (b"" in the event)."""
        where, args = _bounds(key, range_end)
        rows = self._db.execute(
            f"SELECT {_COLS} FROM records WHERE {where} AND revision >= ? AND revision <= ? "
            "ORDER BY revision, key",
            (*args, start, end),
        ).fetchall()
        out: list[Event] = []
        missing: list[int] = []
        for row in rows:
            prev = None
            if prev_kv:
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
        return RangeSkeleton(result, compacted, self._compact_rev)

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
        return EventsSkeleton(tuple(events), tuple(missing), self._head, self._compact_rev)

    def history_rows(self, lo: int, max_rows: int) -> FlushRows:
        """Every row from revision `lo` on, by (revision, key), as (revision, key, value or
        None for a delete): whole revisions, up to `max_rows` rows unless the first
        revision alone holds more. ErrCompacted if lo is below the compact revision
        (values there may be gone: flushing them would write holes)."""
        v.check_revision(lo, "lo")
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
            raise InvalidRequest(f"max_rows must be a positive int, got {max_rows!r}")
        if lo < 1:
            raise InvalidRequest("history rows start at revision 1 or later")
        if lo < self._compact_rev:
            raise ErrCompacted(self._compact_rev)
        q = self._db.execute
        cut = q("SELECT revision FROM records WHERE revision >= ? ORDER BY revision "
                "LIMIT 1 OFFSET ?", (lo, max_rows)).fetchone()
        if cut is None:
            through, more = self._head, False
        else:
            first = q("SELECT MIN(revision) FROM records WHERE revision >= ?", (lo,)).fetchone()
            through, more = max(cut[0] - 1, first[0]), True
        rows = q("SELECT revision, key, value, deleted FROM records WHERE revision >= ? AND "
                 "revision <= ? ORDER BY revision, key", (lo, through)).fetchall()
        if any(val is None and not d for _, _, val, d in rows):
            raise ErrCompacted(self._compact_rev)  # a put without its value: not flushable
        return FlushRows(tuple((r, bytes(k), None if d else bytes(val)) for r, k, val, d in rows),
                         through, more)

    # ---------------------------------------------------------------- writing --

    def _apply_put(self, op: Put, rev: int) -> PutResult:
        prev = self._latest(op.key, rev)
        if prev is not None and not prev[5]:
            create, version = prev[2], prev[4] + 1
        else:
            create, version = rev, 1
        self._db.execute(
            "INSERT INTO records (revision, key, value, create_revision, mod_revision, version,"
            " deleted) VALUES (?, ?, ?, ?, ?, ?, 0)",
            (rev, bytes(op.key), bytes(op.value), create, rev, version),
        )
        prev_kv = _kv(prev) if op.prev_kv and prev is not None and not prev[5] else None
        return PutResult(rev, prev_kv)

    def _apply_delete(self, op: DeleteRange, rev: int) -> DeleteResult:
        rows = self._live_rows(op.key, op.range_end, rev)
        self._db.executemany(
            "INSERT INTO records (revision, key, value, create_revision, mod_revision, version,"
            " deleted) VALUES (?, ?, NULL, 0, ?, 0, 1)",
            [(rev, row[0], rev) for row in rows],
        )
        prev = [_kv(row) for row in rows] if op.prev_kv else []
        return DeleteResult(rev, len(rows), prev)

    def _set_meta(self, name: str, value: int) -> None:
        self._db.execute(
            "INSERT INTO meta (name, value) VALUES (?, ?) "
            "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
            (name, value),
        )

    def _write(
        self,
        ops: Sequence[TxnOp],
        revision: int | None,
        applied: int | None = None,
        succeeded: bool | None = None,
    ) -> tuple[list[TxnResponse], int]:
        """Apply ops in one SQLite transaction at one revision. Returns the responses and
        the header revision (the new revision if anything changed, else head). If anything
        changed, `applied` (when given) and a txn's branch `succeeded` commit with it."""
        rev = self._next_revision(revision)
        changed = 0
        out: list[TxnResponse] = []
        self._db.execute("BEGIN IMMEDIATE")
        try:
            for op in ops:
                if isinstance(op, Put):
                    out.append(self._apply_put(op, rev))
                    changed += 1
                elif isinstance(op, DeleteRange):
                    res = self._apply_delete(op, rev)
                    changed += res.deleted
                    out.append(res)
                else:
                    at = rev if op.revision == 0 else op.revision
                    out.append(self._range_at(op, at, 0))
            if changed:
                self._set_meta("head", rev)
                if applied is not None:
                    self._set_meta("applied", applied)
                if succeeded is not None:
                    self._db.execute(
                        "INSERT INTO txns (revision, succeeded) VALUES (?, ?)", (rev, succeeded)
                    )
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        header = rev if changed else self._head
        if changed:
            self._head = rev
        return [replace(r, revision=header) for r in out], header

    def put(
        self,
        key: bytes,
        value: bytes,
        prev_kv: bool = False,
        *,
        revision: int | None = None,
        applied: int | None = None,
    ) -> PutResult:
        op = Put(key, value, prev_kv)
        v.check_request(op, self.limits)
        res, _ = self._write([op], revision, applied)
        assert isinstance(res[0], PutResult)
        return res[0]

    def delete_range(
        self,
        key: bytes,
        range_end: bytes | None = None,
        prev_kv: bool = False,
        *,
        revision: int | None = None,
        applied: int | None = None,
    ) -> DeleteResult:
        op = DeleteRange(key, range_end, prev_kv)
        v.check_request(op, self.limits)
        res, _ = self._write([op], revision, applied)
        assert isinstance(res[0], DeleteResult)
        return res[0]

    # -------------------------------------------------------------------- txn --

    def _compare(self, c: Compare) -> bool:
        rows = self._live_rows(c.key, c.range_end, self._head)
        if not rows:
            if c.target == "value":
                return False
            return _cmp(0, c.op, c.value)
        for row in rows:
            kv = _kv(row)
            actual: bytes | int = getattr(kv, c.target)
            if not _cmp(actual, c.op, c.value):
                return False
        return True

    def txn(
        self,
        compares: Sequence[Compare] = (),
        success_ops: Sequence[TxnOp] = (),
        failure_ops: Sequence[TxnOp] = (),
        *,
        revision: int | None = None,
        applied: int | None = None,
    ) -> TxnResult:
        """etcd Txn: if every compare holds, apply success_ops, else failure_ops, all at one
        revision. Ranges inside the txn read its earlier writes. Nested txns are not
        supported. Every op of both branches is validated before anything is written."""
        v.check_txn(compares, success_ops, failure_ops, self.limits)
        if revision is not None:
            self._next_revision(revision)
        succeeded = all(self._compare(c) for c in compares)
        ops = success_ops if succeeded else failure_ops
        for op in ops:  # etcd checkTxn: a bad read revision fails the whole txn
            if isinstance(op, Range) and op.revision:
                self._check_read_rev(op.revision)
        responses, header = self._write(ops, revision, applied, succeeded)
        return TxnResult(succeeded, responses, header)

    # ------------------------------------------------------------- compaction --

    def schedule_compaction(self, revision: int, *, applied: int | None = None) -> int:
        """Logical compaction (etcd updateCompactRev): validate, persist `scheduled`, move
        the compact revision. Returns the revision. `applied` (when given) commits with it."""
        v.check_revision(revision)
        if revision <= self._compact_rev:
            raise ErrCompacted(self._compact_rev)
        if revision > self._head:
            raise ErrFutureRev()
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.execute(
                "INSERT INTO compactions (revision, finished) VALUES (?, 0)", (revision,)
            )
            if applied is not None:
                self._set_meta("applied", applied)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._compact_rev = revision
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
        self._db.execute("BEGIN IMMEDIATE")
        try:
            n = self._db.execute(
                "UPDATE records SET value = NULL, compacted_at = :rev WHERE rowid IN ("
                f"SELECT r.rowid FROM records r WHERE {_COMPACTABLE} LIMIT :n)",
                {"rev": target, "n": size},
            ).rowcount
            if n < size:
                self._db.execute(
                    "UPDATE compactions SET finished = 1 WHERE revision <= ?", (target,)
                )
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
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
        header revision."""
        self.schedule_compaction(revision)
        if physical:
            self.run_pending_compaction(batch_size, pause)
        return self._head

    def compactable_count(self, revision: int | None = None) -> int:
        rev = self._compact_rev if revision is None else revision
        n: int = self._db.execute(
            f"SELECT COUNT(*) FROM records r WHERE {_COMPACTABLE}", {"rev": rev}
        ).fetchone()[0]
        return n

    # ------------------------------------------------------------ raft helper --

    def live_indexes(self) -> list[int]:
        """Revisions (raft indexes, once revisions are raft indexes) whose data is still
        needed, sorted: every revision above the compact revision, plus, at or below it,
        each key's latest row if it is a put (the value a read at the compact revision, or
        at head, returns). Compacted rows and tombstones at or below the compact revision
        are not needed. This is "each key's latest put + everything above the compact
        revision", made exact for keys deleted after the compact revision."""
        rev = self._compact_rev
        rows = self._db.execute(
            "SELECT DISTINCT revision FROM records WHERE revision > :rev "
            "UNION SELECT r.revision FROM records r WHERE r.revision <= :rev AND r.deleted = 0 "
            "AND NOT EXISTS (SELECT 1 FROM records n WHERE n.key = r.key "
            "AND n.revision > r.revision AND n.revision <= :rev) ORDER BY 1",
            {"rev": rev},
        ).fetchall()
        return [r[0] for r in rows]

    def rows(self) -> list[tuple[Any, ...]]:
        """Every record row (for tests and debugging), by revision then key."""
        return self._db.execute(
            "SELECT revision, key, value, create_revision, mod_revision, version, deleted,"
            " compacted_at FROM records ORDER BY revision, key"
        ).fetchall()

    def skeleton(self) -> list[tuple[Any, ...]]:
        """Every record row without its value, by key then revision: (revision, key,
        create_revision, mod_revision, version, deleted, compacted_at). A snapshot of the
        raft-hosted machine holds this; values stay in the log."""
        return self._db.execute(
            "SELECT revision, key, create_revision, mod_revision, version, deleted,"
            " compacted_at FROM records ORDER BY key, revision"
        ).fetchall()

    def txn_branches(self) -> dict[int, bool]:
        """revision -> whether the txn that wrote it ran its success branch."""
        return {r: bool(s) for r, s in self._db.execute("SELECT revision, succeeded FROM txns")}

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
        txns: Iterable[tuple[int, bool]] = (),
    ) -> None:
        """Replace every table in one transaction (a snapshot restore): nothing changes if
        `rows` (full rows as `rows()` returns them; may be a generator) raises."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            for table in ("records", "compactions", "meta", "txns"):
                self._db.execute(f"DELETE FROM {table}")
            self._db.executemany(
                f"INSERT INTO records ({_ROW_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows
            )
            self._db.executemany(
                "INSERT INTO compactions (revision, finished) VALUES (?, ?)", compactions
            )
            for name, value in sorted(meta.items()):
                self._set_meta(name, value)
            self._db.executemany("INSERT INTO txns (revision, succeeded) VALUES (?, ?)", txns)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._load()

    def compactions(self) -> list[tuple[int, bool]]:
        return [
            (r, bool(f))
            for r, f in self._db.execute("SELECT revision, finished FROM compactions ORDER BY 1")
        ]


def _cmp(actual: bytes | int, op: str, expected: bytes | int) -> bool:
    if op == "=":
        return actual == expected
    if op == "!=":
        return actual != expected
    if op == "<":
        return actual < expected  # type: ignore[operator]
    return actual > expected  # type: ignore[operator]


def live_indexes(store: Store) -> list[int]:
    return store.live_indexes()


__all__ = ["ALL_KEYS", "Store", "live_indexes", "prefix_end"]
