"""Reads below the compact revision: compaction is value-only, so every row stays and the
answers are known but for the compacted values (`history.py` fills them in from the
block tier); and the rows the flusher copies into history blocks.
"""

from __future__ import annotations

from sediment.actors.kv import validation as v
from sediment.actors.kv.errors import (
    ErrCompacted,
    ErrFutureRev,
    InvalidRequest,
)
from sediment.actors.kv.history import EventsSkeleton, FlushRows, RangeSkeleton
from sediment.actors.kv.store_base import StoreBase
from sediment.actors.kv.types import (
    Range,
)


class HistoryReads(StoreBase):
    """Range, events and flush rows at any revision up to head."""

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
