"""The KV store's foundation: its SQLite connection, revisions and the SQL every part shares.

`StoreBase` opens the file (migrating it: `actors/schemas/kv_file.py`), keeps the head
and compact revisions in memory, checks read revisions, reads live rows and events,
and owns the write transaction (`transaction`, `batch`) and the `meta` rows. The parts
built on it are `store_history.py`, `store_compaction.py` and `store_snapshot.py`;
`store.py`'s `Store` joins them with the etcd requests.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Self

from sediment.actors.kv import validation as v
from sediment.actors.kv.errors import (
    ErrCompacted,
    ErrFutureRev,
)
from sediment.actors.kv.range_options import shape
from sediment.actors.kv.types import (
    Event,
    KeyValue,
    Range,
    RangeResult,
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


class StoreBase:
    """What every part of the store shares (`Store` is the one to use). Not thread-safe;
    one owner process drives it."""

    def __init__(
        self,
        path: str | Path,
        *,
        limits: Limits = DEFAULT_LIMITS,
        compaction_batch: int = DEFAULT_COMPACTION_BATCH,
        synchronous: str = "FULL",
        any_thread: bool = False,
    ) -> None:
        if not isinstance(limits, Limits):
            raise TypeError(f"limits must be a Limits, got {type(limits).__name__}")
        self.path = str(path)
        self.limits = limits
        self.compaction_batch = compaction_batch
        if synchronous not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {_SYNCHRONOUS}")
        # any_thread: a reader pinned on one thread and read on another (one at a time)
        self._db = sqlite3.connect(self.path, isolation_level=None,
                                   check_same_thread=not any_thread)
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

    def __enter__(self) -> Self:
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

    def meta(self, name: str) -> int | None:
        row = self._db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else int(row[0])

    def set_meta(self, name: str, value: int) -> None:
        """Set one meta row in its own transaction (e.g. `applied` after writeless entries)."""
        self._set_meta(name, value)

    def begin_read(self) -> None:
        """Open a read transaction and load the revisions it sees: every read until
        `end_read` sees this state, whatever other connections commit meanwhile (WAL)."""
        self._db.execute("BEGIN")
        self._load()

    def end_read(self) -> None:
        self._db.execute("COMMIT")

    def checkpoint(self) -> None:
        """Make every committed transaction durable whatever `synchronous` is: a FULL WAL
        checkpoint fsyncs the WAL, copies it into the database and fsyncs that."""
        busy, frames, done = self._db.execute("PRAGMA wal_checkpoint(FULL)").fetchone()
        if busy or (frames >= 0 and done < frames):
            raise sqlite3.OperationalError(f"checkpoint incomplete: {done} of {frames} frames")
