"""etcd's compaction of the KV store: logical first (the compact revision moves at once
and is persisted as scheduled), then a value-only pass in batches, recorded finished.
"""

from __future__ import annotations

from collections.abc import Callable

from sediment.actors.kv import validation as v
from sediment.actors.kv.errors import (
    ErrCompacted,
    ErrFutureRev,
    InvalidRequest,
)
from sediment.actors.kv.store_base import _COMPACTABLE, StoreBase


class Compaction(StoreBase):
    """Schedule a compaction, run its value-only pass, count what it would compact."""

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
                self._db.execute(  # a compacted row's kept value is gone with it
                    "DELETE FROM kept_values WHERE EXISTS (SELECT 1 FROM records r"
                    " WHERE r.revision = kept_values.revision AND r.sub = kept_values.sub"
                    " AND r.compacted_at IS NOT NULL)")
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
