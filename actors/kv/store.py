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

Modules: `store_base.py` (the connection, revisions, row reads, the write transaction),
`store_history.py` (reads below the compact revision), `store_compaction.py`,
`store_snapshot.py` (live revisions, skeleton, hash, restore); `Store` here joins them
with etcd's requests, and every name is importable from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sediment.actors.kv import validation as v
from sediment.actors.kv.errors import (
    ErrCompacted,
    InvalidRequest,
)
from sediment.actors.kv.store_base import (
    ALL_KEYS,
    DEFAULT_COMPACTION_BATCH,
    FIRST_REVISION,
    NO_COMPACTION,
    prefix_end,
    read_revisions,
)
from sediment.actors.kv.store_compaction import Compaction
from sediment.actors.kv.store_history import HistoryReads
from sediment.actors.kv.store_snapshot import SnapshotRows
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


class Store(HistoryReads, Compaction, SnapshotRows):
    """One node's MVCC store. Not thread-safe; one owner process drives it.

    Every request is checked against `limits` by `validation.py` (the same checks the
    client runs before proposing) before anything is read or written."""

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


def live_indexes(store: Store) -> list[int]:
    return store.live_indexes()


__all__ = ["ALL_KEYS", "DEFAULT_COMPACTION_BATCH", "FIRST_REVISION", "NO_COMPACTION", "Store",
           "live_indexes", "prefix_end", "read_revisions"]
