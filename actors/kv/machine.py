"""The Netsy KV as a raft-hosted machine (`HostedMachine`): a `Store` in
`<group_dir>/kv.sqlite`, numbering revisions as etcd does (one per request that changes
something), and keeping the raft index of the entry behind each written revision.

Commands (`entry.command`): `Put`, `DeleteRange`, `Txn`, `Compact`, and `Range` (a
linearizable read answered at the entry's point in history); None is the leader's no-op.
`apply` returns the result or the typed error (`actors/kv/errors.py`), never raises one:
the same state and entry give the same outcome on every member. Only a failure of the disk
(sqlite3.Error, OSError) raises, since turning it into a result would let members diverge.

`applied` commits in the same SQLite transaction as the write it accompanies, so after a
crash it is consistent with the rows. An entry that writes nothing moves `applied` in memory
only: replayed after a restart it changes nothing and answers the same.

Durability: the raft log is durable before an entry commits, so applies run with
synchronous=NORMAL (no fsync per transaction). A crash may lose the last transactions, but
`applied` rolls back with them (WAL recovery keeps a prefix of the commits) and the server
re-applies them from the log. The log below a snapshot may be deleted once the snapshot is
taken, so `snapshot()` persists `applied` and runs a FULL WAL checkpoint before returning.

Two numbers: `applied` is the raft index of the last entry applied (what the raft
server and the log's compaction count), `store.head` the etcd revision clients see. The
store records which entry wrote each revision (`Store.entries`). Snapshots hold no
values (Ra's `ra_kv`): every record row without its value, the compaction revisions,
head, applied, and for each written revision its entry's index and the txn's path (every
member keeps the whole revision <-> index map, as it keeps every row). `restore` refills
each live value from that entry. `live_indexes` is `Store.live_indexes()`: the entries of
each key's latest put at or below the compact revision plus of every revision above it,
so a compaction lets the log free segments.

The value-only compaction pass runs in `background()`, one bounded batch per call, never
inside `apply`. Members finish it at different times, so a snapshot describes compaction
logically (every scheduled compaction as finished, `compacted_at` as if each ran to the end
before the next): identical bytes for the same applied entries on every member.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sediment.actors.kv import auth_store, lease_store, store_txn
from sediment.actors.kv import queries as q
from sediment.actors.kv.auth_machine import AuthKeeper
from sediment.actors.kv.errors import (
    ErrCompacted,
    ErrRevisionNotAfterHead,
    InvalidRequest,
    KvError,
)
from sediment.actors.kv.snapshot_encoding import (
    SNAPSHOT_MAGIC,
    PinnedReader,
    SnapshotJob,
    encode,
)
from sediment.actors.kv.store import ALL_KEYS, Store
from sediment.actors.kv.types import (
    AppliedBatch,
    Compact,
    CompactResult,
    DeleteRange,
    Event,
    LeaseCheckpoint,
    LeaseGrant,
    LeaseRevoke,
    Put,
    Range,
    Txn,
)
from sediment.actors.log.raft.types import Entry

DB_FILE = "kv.sqlite"
FIRST_KEY = b"\0"  # the smallest non-empty key: [FIRST_KEY, ALL_KEYS) is every key

ReadEntry = Callable[[int], Entry | None]


class ErrUnknownCommand(InvalidRequest):
    """A command or query this machine does not know; nothing changes."""


class ErrMalformedCommand(InvalidRequest):
    """A command that broke the Store in a way its checks (validation.py) did not foresee:
    answered as an error, so a poison entry cannot crash every member in turn."""


class RestoreError(RuntimeError):
    """A snapshot cannot be restored: it is malformed, or a live entry is missing or does
    not hold the value its row needs."""


@dataclass(frozen=True)
class _Snapshot:
    applied: int
    head: int
    compactions: list[int]
    # (revision, sub, key, create, mod, version, deleted, compacted_at, lease)
    rows: list[tuple[Any, ...]]
    entries: dict[int, tuple[int, str | None]]  # revision -> (raft index, txn path)
    leases: list[tuple[int, int, int]]  # (id, ttl, remaining)
    auth: str | None  # the auth store's JSON
    kept: dict[tuple[int, int], bytes]  # (revision, sub) -> a value no entry holds


class NetsyMachine:
    """One member's KV. `options` go to `Store` (limits, compaction_batch, synchronous)."""

    def __init__(self, group_dir: str, **options: Any) -> None:
        os.makedirs(group_dir, exist_ok=True)
        self.path = os.path.join(group_dir, DB_FILE)
        options.setdefault("synchronous", "NORMAL")
        self.store = Store(self.path, **options)
        self.applied = self.store.meta("applied") or 0
        self._noticed = self.store.head  # the last revision an applied notice covered
        self._closed = False
        self.auth = AuthKeeper(self.store)
        self.rows_compacted = 0  # by background(), since open (the raft metrics read it)
        self._reader = PinnedReader(self.path)  # snapshots encoded off the loop read here

    # ------------------------------------------------------------------ apply --

    def apply(self, entry: Entry) -> Any:
        """Execute one committed entry; returns result or error."""
        if entry.index <= self.applied:
            return ErrRevisionNotAfterHead(f"entry {entry.index} is not above {self.applied}")
        try:
            result = self._execute(entry.command, entry.index)
        except KvError as err:
            result = err
        except (sqlite3.Error, OSError, MemoryError):
            raise  # the disk, not the request: a result would differ between members
        except Exception as err:  # a malformed request: the same on every member
            name = type(entry.command).__name__
            result = ErrMalformedCommand(f"malformed {name}: {type(err).__name__}")
        self.applied = entry.index
        return result

    def _execute(self, cmd: Any, index: int) -> Any:
        s = self.store
        if cmd is None:
            return None
        if isinstance(cmd, auth_store.Wire):  # a client's request off the etcd API
            self.auth.check(cmd)
            cmd = cmd.request
        if isinstance(cmd, auth_store.AuthChange):
            return self.auth.change(cmd, index)
        if isinstance(cmd, Put):
            return s.put_op(cmd, applied=index)
        if isinstance(cmd, DeleteRange):
            return s.delete_range(cmd.key, cmd.range_end, cmd.prev_kv, applied=index)
        if isinstance(cmd, Txn):
            return s.txn(cmd.compare, cmd.success, cmd.failure, applied=index)
        if isinstance(cmd, Compact):
            s.schedule_compaction(cmd.revision, applied=index)
            return CompactResult(s.head)
        if isinstance(cmd, Range):
            return s.read(cmd)
        if isinstance(cmd, LeaseGrant):
            return lease_store.grant(s, cmd.id, cmd.ttl, applied=index)
        if isinstance(cmd, LeaseRevoke):
            return lease_store.revoke(s, cmd.id, applied=index)
        if isinstance(cmd, LeaseCheckpoint):
            lease_store.checkpoint(s, cmd.checkpoints, applied=index)
            return None
        # the type name only: a repr may hold addresses that differ between members
        raise ErrUnknownCommand(f"unknown command {type(cmd).__name__}")

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """Apply a raft batch of entries in one SQLite transaction (`Store.batch`)."""
        return self.store.batch()

    def background(self) -> bool:
        """One bounded batch of the pending value-only compaction; True while more remains."""
        if self.store.pending_compaction is None:
            return False
        self.rows_compacted += self.store.compact_batch()
        return self.store.pending_compaction is not None

    def has_background(self) -> bool:
        """A compaction is scheduled and its value-only pass has not finished."""
        return self.store.pending_compaction is not None

    # --------------------------------------------------------------- snapshot --

    def snapshot(self) -> tuple[bytes, list[int]]:
        """(bytes, live indexes) of the state at `applied`, durable before return."""
        self._make_durable()
        auth = self.auth.state.to_json()
        return encode(self.store, self.applied, auth), self.store.live_indexes()

    def begin_snapshot(self) -> SnapshotJob:
        """`snapshot()` in two parts: the state at `applied` made durable and pinned now
        (cheap), and a job that encodes it from any thread (the costly part, off the
        raft host's loop: `snapshot_encoding.py`). The job runs once; the next
        `begin_snapshot` waits for it."""
        self._reader.wait()
        self._make_durable()
        return self._reader.pin(self.applied, self.auth.state.to_json())

    def _make_durable(self) -> None:
        if self.store.meta("applied") != self.applied:
            self.store.set_meta("applied", self.applied)
        self.store.checkpoint()

    def restore(self, data: bytes, index: int, live: ReadEntry | Sequence[Entry]) -> None:
        """Replace the whole state by the snapshot at `index`, refilling every value that is
        not compacted from the entry `live(raft index)` that wrote it (a sequence of
        entries also works).
        One SQLite transaction: if an entry is missing, nothing changes. `applied` becomes
        the snapshot's own (== index unless it was labelled below the state it holds)."""
        snap = _decode(data)
        if snap.applied < index:
            raise RestoreError(f"snapshot at {snap.applied} cannot stand for index {index}")
        read = live if callable(live) else {e.index: e for e in live}.get
        rows = _refill(snap, read)
        meta = {"head": snap.head, "applied": snap.applied}
        finished = [(rev, True) for rev in snap.compactions]
        entries = [(r, i, p) for r, (i, p) in sorted(snap.entries.items())]
        self._reader.wait()  # a FULL checkpoint follows: no snapshot may be reading
        self.store.replace_all(rows, finished, meta, entries, snap.leases, list(snap.kept))
        self.auth.save(auth_store.AuthState.from_json(snap.auth), None)
        self.store.checkpoint()
        self.applied = snap.applied

    # ------------------------------------------------------------------ reads --

    def query(self, request: Any) -> Any:
        """A local (serializable) read: a `Range` or one of `queries.py`'s (each names its
        answer), possibly wrapped in an auth `Wire`. Errors are returned, not raised."""
        try:
            return self._query(request)
        except KvError as err:
            return err

    def _query(self, request: Any) -> Any:
        s = self.store
        if isinstance(request, auth_store.Wire):
            self.auth.check(request)
            request = request.request
        match request:
            case Range():
                return s.read(request)
            case q.Events(start, end, key, range_end, prev_kv):
                return s.events(start, key, range_end, end_revision=end, prev_kv=bool(prev_kv))
            case q.CompactRevisions():
                return (s.compact_revision, s.finished_compact_revision)
            case q.Head():
                return s.head
            case q.WatchHistory(start, end, key, range_end, prev_kv):
                if start <= s.compact_revision:
                    raise ErrCompacted(s.compact_revision)
                return s.events(start, key, range_end, end_revision=end, prev_kv=bool(prev_kv))
            case q.AppliedSince(lo, hi):
                return self._applied_batch(lo, hi)
            case q.Revisions(lo_index, hi_index):
                return self._revisions(lo_index, hi_index)
            case q.AllLeases():
                return lease_store.leases(s)
            case q.LeaseLookup(lease, keys):
                return lease_store.lease(s, int(lease), bool(keys))
            case q.TokenUser(token):
                return self.auth.token_user(str(token))
            case q.AuthRead(op, args, user):
                return self.auth.read(op, tuple(args), user)
            case q.WriteCheck():
                return True  # the auth check above is the whole answer
            case q.HashKv(revision):
                return s.hash_kv(int(revision))
            case q.HistoryRows(lo, max_rows):
                return s.history_rows(lo, max_rows)
            case q.HistoryRange(Range() as r):
                return s.range_skeleton(r)
            case q.HistoryEvents(start, end, key, range_end):
                return s.events_skeleton(start, key, range_end, end_revision=end)
        raise ErrUnknownCommand(f"unknown query {type(request).__name__}")

    # A watch only ever reads revisions ABOVE the compact revision: admission refuses a
    # start at the floor, and the history a watch replays (`WatchHistory`) or is fed
    # (`AppliedSince`) follows the same rule, stricter than a plain read at the compact
    # revision (allowed, as in etcd). Compaction at C leaves revision C's events without
    # their prev values, so a watch that still needs C is canceled as compacted instead
    # of being served them. Found by the sim fault history: a lagging node caught up on a
    # batch holding revision C and a client's Compact(C), and served C to a watch that its
    # admission had already dropped as compacted (a compaction passed a live watch).

    def _applied_batch(self, lo: int, hi: int | None) -> AppliedBatch:
        """What the node needs after each applied batch, read in one step (so the three
        parts describe the same state): every change in revisions [lo, hi] (hi None:
        up to head) with prev_kv, or None when a compaction reached lo, plus the compact
        revision and the head. The node asks from the first revision it has not fanned
        out, whatever raft index it was told of: revisions are not indexes."""
        s = self.store
        hi = s.head if hi is None else hi
        changes: tuple[Event, ...] | None = None
        if lo > s.head:
            return AppliedBatch((), s.compact_revision, s.head)
        # lo <= C only on a lagging node whose batch holds a client's Compact(C >= lo):
        # None makes its watchers catch up from history, which cancels the ones that
        # still needed C as compacted.
        if lo > s.compact_revision:
            changes = tuple(s.events(lo, FIRST_KEY, ALL_KEYS, end_revision=hi, prev_kv=True))
        return AppliedBatch(changes, s.compact_revision, s.head)

    def _revisions(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """(revision, raft index) of every write applied from entries lo..hi: which
        entries took a revision, and which one (the scenario history's two numbers)."""
        return [(r, i) for r, i, _ in self.store.entries() if lo <= i <= hi]

    def applied_notice(self) -> tuple[int, AppliedBatch]:
        """What the raft server sends its subscribers (the KV node) with the news of what
        it applied, so they need not ask: (the first revision it covers, the batch). It
        covers every revision since the last notice."""
        first = self._noticed + 1
        batch = self._applied_batch(first, None)
        self._noticed = batch.head
        return first, batch

    def status(self) -> dict[str, Any]:
        s = self.store
        return {
            "head": s.head,
            "compact_revision": s.compact_revision,
            "finished_compact_revision": s.finished_compact_revision,
            "applied": self.applied,
            "keys": s.range(FIRST_KEY, ALL_KEYS, count_only=True).count,
        }

    def close(self) -> None:
        """Persist `applied` (it may be ahead after writeless entries) and close. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._reader.close()
        if self.store.meta("applied") != self.applied:
            self.store.set_meta("applied", self.applied)
        self.store.close()


def netsy(group_dir: str, **options: Any) -> NetsyMachine:
    """The machine factory; picklable, and so is functools.partial(netsy, **options)."""
    return NetsyMachine(group_dir, **options)


# ---------------------------------------------------------------- helpers --


def _decode(data: bytes) -> _Snapshot:
    if not data.startswith(SNAPSHOT_MAGIC):
        raise RestoreError("not a netsy snapshot")
    try:
        doc = json.loads(data[len(SNAPSHOT_MAGIC) :])
        keys = [bytes.fromhex(k) for k in doc["keys"]]
        rows = [(r[0], r[1], keys[r[2]], *r[3:]) for r in doc["rows"]]
        entries = {int(r): (int(i), p) for r, i, p in doc["entries"]}
        leases = [(int(i), int(t), int(r)) for i, t, r in doc.get("leases", [])]
        if rows and len(rows[0]) == 8:  # written before leases: no key had one
            rows = [(*r, 0) for r in rows]
        kept = {(int(r), int(u)): bytes.fromhex(v) for r, u, v in doc.get("kept", [])}
        return _Snapshot(doc["applied"], doc["head"], doc["compactions"], rows, entries,
                         leases, doc.get("auth"), kept)
    except (ValueError, KeyError, IndexError, TypeError) as err:
        raise RestoreError(f"malformed netsy snapshot: {err}") from err


def _refill(snap: _Snapshot, read: ReadEntry) -> Iterator[tuple[Any, ...]]:
    """Full rows (value included) in change order; reads each live entry once."""
    values: dict[bytes, bytes] = {}
    current = 0
    for rev, sub, key, create, mod, version, deleted, compacted_at, lease in snap.rows:
        value = snap.kept.get((rev, sub))
        if value is None and not deleted and compacted_at is None:
            if rev != current:
                values, current = _values_at(rev, snap.entries.get(rev), read), rev
            if key not in values:
                raise RestoreError(f"the entry of revision {rev} does not put key {key!r}")
            value = values[key]
        yield (rev, sub, key, value, create, mod, version, deleted, compacted_at, lease)


def _values_at(rev: int, entry_of: tuple[int, str | None] | None,
               read: ReadEntry) -> dict[bytes, bytes]:
    """key -> value of every put the entry behind revision `rev` made."""
    if entry_of is None:
        raise RestoreError(f"the snapshot names no entry for revision {rev}")
    index, path = entry_of
    entry = read(index)
    if entry is None:
        raise RestoreError(f"live entry {index} (revision {rev}) is missing from the log")
    if entry.index != index:
        raise RestoreError(f"asked for entry {index}, got {entry.index}")
    cmd = entry.command
    if isinstance(cmd, auth_store.Wire):  # a client's request off the etcd API
        cmd = cmd.request
    if isinstance(cmd, Put):
        return {bytes(cmd.key): bytes(cmd.value)}
    if isinstance(cmd, Txn) and path is not None:
        try:
            plan = store_txn.parse_path(cmd, path)
        except ValueError as err:
            raise RestoreError(f"entry {index}: {err}") from None
        return dict(_puts(cmd, plan))
    raise RestoreError(f"entry {index} ({type(cmd).__name__}) holds no value for its row")


def _puts(txn: Txn, plan: store_txn.Plan) -> Iterator[tuple[bytes, bytes]]:
    nested = iter(plan.nested)
    for op in store_txn.branch(txn, plan):
        if isinstance(op, Put):
            yield bytes(op.key), bytes(op.value)
        elif isinstance(op, Txn):
            yield from _puts(op, next(nested))


__all__ = [
    "DB_FILE",
    "ErrMalformedCommand",
    "ErrUnknownCommand",
    "NetsyMachine",
    "RestoreError",
    "netsy",
]
