"""The KV's API over a whole cluster: etcd's requests, watches, and reads below the KV's
compaction answered from the block tier.

The client checks every request (`actors/kv/validation.py`, against the cluster's
`Limits`) before it proposes it, so a bad request raises its typed error and never
reaches the raft log; every node's machine checks the same limits again when it applies.
It lives in the wiring layer because a read spans tiers: with a block tier, reads below
the KV's compact revision (`range(..., revision=R)`, `history(...)`) are answered from
the hot store's row skeleton with the compacted values taken from the blocks
(`actors/kv/history.py`), until they fall below the blocks' own compaction (ErrCompacted,
as before), and a Compact above the flushed history is refused before it is proposed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sediment.actors.kv import history as hist
from sediment.actors.kv import metrics as kv_metrics
from sediment.actors.kv import validation
from sediment.actors.kv.errors import ErrCompacted, ErrNotFlushed, KvError
from sediment.actors.kv.names import KV_GROUP
from sediment.actors.kv.queries import HistoryEvents, HistoryRange
from sediment.actors.kv.shell.cluster import open_session
from sediment.actors.kv.shell.watch_session import Watch, WatchSession
from sediment.actors.kv.types import (
    Compact,
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
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Query
from sediment.runtime.errors import CallError

if TYPE_CHECKING:
    from sediment.wiring.cluster import Cluster


@dataclass
class Client:
    """etcd's KV API over the cluster; every call raises the typed KvError it got.
    `last_index` is the raft index of the last request that went through the log: its
    place in the history (a checker matches the answer with the log's entry there)."""

    cluster: Cluster
    timeout: float = 30.0
    last_index: int | None = None
    read_at: int | None = None  # the raft index the last linearizable read was served at

    def _propose(self, command: Any) -> Any:
        """Check the request, then propose it: a bad one never becomes a log entry."""
        with kv_metrics.counted("python", command):
            validation.check_request(command, self.cluster.limits)
            self.last_index = None
            index, result = self.cluster.group.propose(command, timeout=self.timeout)
            self.last_index = index
            if isinstance(result, Exception):
                raise result
            return result

    def _read(self, request: Range) -> Any:
        """A linearizable read by ReadIndex at the leader: no log entry (`last_index` stays
        None; `read_at` is the raft index its machine had applied when it answered, after
        everything committed before the read)."""
        with kv_metrics.counted("python", request):
            validation.check_request(request, self.cluster.limits)
            self.last_index = self.read_at = None
            self.read_at, result = self.cluster.group.read(request, timeout=self.timeout)
            if isinstance(result, Exception):
                raise result
            return result

    def put(self, key: bytes, value: bytes, prev_kv: bool = False) -> PutResult:
        return self._propose(Put(key, value, prev_kv))  # type: ignore[no-any-return]

    def delete(self, key: bytes, range_end: bytes | None = None,
               prev_kv: bool = False) -> DeleteResult:
        return self._propose(DeleteRange(key, range_end, prev_kv))  # type: ignore[no-any-return]

    def range(self, key: bytes, range_end: bytes | None = None, revision: int = 0,
              limit: int = 0, count_only: bool = False, keys_only: bool = False,
              serializable: bool = False, node: str | None = None) -> RangeResult:
        """Linearizable by default (ReadIndex at the leader); `serializable` reads
        one node's applied state (`node`, default the first). With a block tier, a
        revision below the KV's compact revision is answered from the blocks (see
        `_cold_range`) instead of ErrCompacted."""
        request = Range(key, range_end, revision, limit, count_only, keys_only)
        target = node or self.cluster.nodes[0]
        try:
            if not serializable:
                return self._read(request)  # type: ignore[no-any-return]
            validation.check_request(request, self.cluster.limits)
            return self._query_member(request, target)  # type: ignore[no-any-return]
        except ErrCompacted as err:
            if self.cluster.blocks is None or revision <= 0:
                raise
            return self._cold_range(request, err.compact_revision,
                                    target if serializable else None)

    def _cold_range(self, request: Range, compact_revision: int,
                    node: str | None) -> RangeResult:
        """A Range below the KV's compact revision: the member's row skeleton at that
        revision (which keys lived, their create/mod revision and version: value-only
        compaction keeps them), the compacted values from the blocks. Header revision:
        that member's head (the history below its compaction no longer changes)."""
        skeleton: hist.RangeSkeleton = self._query_member(HistoryRange(request), node)
        values = self._block_values(hist.range_needs(skeleton), request.revision,
                                    compact_revision)
        return hist.fill_range(skeleton, values)

    def history(self, key: bytes, range_end: bytes | None = None, start_revision: int = 1,
                end_revision: int | None = None, node: str | None = None) -> list[Event]:
        """Every change of [key, range_end) with start_revision <= revision <=
        end_revision (default head), by revision then key, as watch events (no prev_kv).
        Read from one member's applied state (`node`, default the leader); the part the
        KV compacted comes from the blocks. ErrCompacted below what either tier answers
        for, ErrFutureRev above head."""
        validation.check_range(key, range_end, self.cluster.limits)
        validation.check_revision(start_revision, "start_revision")
        if end_revision is not None:
            validation.check_revision(end_revision, "end_revision")
        request = HistoryEvents(start_revision, end_revision, key, range_end)
        skeleton: hist.EventsSkeleton = self._query_member(request, node)
        if start_revision >= skeleton.compact_revision and not skeleton.missing:
            return list(skeleton.events)
        values = self._block_values(hist.events_need(skeleton), start_revision,
                                    skeleton.compact_revision)
        return hist.fill_events(skeleton, values)

    def _block_values(self, rows: frozenset[hist.RowId], at: int,
                      compact_revision: int) -> dict[hist.RowId, bytes | None]:
        """The values of compacted rows from the blocks; a read at `at` below what the
        blocks answer for is ErrCompacted at the lowest revision either tier answers."""
        if self.cluster.blocks is None:
            raise ErrCompacted(compact_revision)
        try:
            return self.cluster.blocks.client(self.timeout).row_values(rows, at)
        except ErrCompacted as err:
            raise ErrCompacted(min(err.compact_revision, compact_revision)) from None

    def _query_member(self, request: Any, node: str | None) -> Any:
        """A query of one member's machine: `node`, or the leader first and then the
        others while they cannot be reached. Its KvError raised."""
        if node is not None:
            order = [node]
        else:
            leader = self.cluster.leader()
            order = sorted(self.cluster.nodes, key=lambda n: n != leader)
        last: Exception = KvError("no KV member answered")
        for target in order:
            try:
                reply = self.cluster.rt.call(raft_name(KV_GROUP, target), Query(request),
                                             timeout=self.timeout)
            except CallError as err:
                last = err
                continue
            if isinstance(reply, Exception):
                raise reply
            return reply
        raise last

    def get(self, key: bytes, revision: int = 0, serializable: bool = False) -> KeyValue | None:
        result = self.range(key, revision=revision, serializable=serializable)
        return result.kvs[0] if result.kvs else None

    def txn(self, compare: Sequence[Compare], success: Sequence[TxnOp] = (),
            failure: Sequence[TxnOp] = ()) -> TxnResult:
        # lists become tuples; anything else goes as is, for the check to refuse (tuple()
        # of a str or a dict would make it look like a txn)
        parts: list[Any] = [tuple(p) if isinstance(p, list) else p
                            for p in (compare, success, failure)]
        return self._propose(Txn(*parts))  # type: ignore[no-any-return]

    def compact(self, revision: int) -> Any:
        """etcd Compact. With a block tier, a revision above the flushed history is
        refused (ErrNotFlushed) before anything is proposed: the hot store would drop
        values no block holds yet. The cursor only moves forward, so a revision at or
        below it stays safe until the Compact applies."""
        command = Compact(revision)
        if self.cluster.blocks is not None:
            validation.check_request(command, self.cluster.limits)
            through = self.cluster.blocks.client(self.timeout).flush_cursor().through
            if revision > through:
                raise ErrNotFlushed(revision, through)
        return self._propose(command)

    def watch(self, key: bytes, range_end: bytes | None = None, start_revision: int = 0,
              prev_kv: bool = False, no_put: bool = False, no_delete: bool = False,
              progress_notify: bool = False, node: str | None = None,
              session: WatchSession | None = None) -> Watch:
        """A watch in a new session on `node` (default the first), or in `session`."""
        session = session or self.session(node)
        return session.watch(key, range_end, start_revision, prev_kv, no_put, no_delete,
                             progress_notify)

    def session(self, node: str | None = None) -> WatchSession:
        return open_session(self.cluster.rt, node or self.cluster.nodes[0])


__all__ = ["Client"]
