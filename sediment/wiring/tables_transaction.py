"""A read-write transaction as users drive it from Python (`TablesCluster.begin`): each
step a call to the table node that coordinates it, recorded for the checkers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.actors.tables.index_range import between
from sediment.actors.tables.shell import node_protocol as p

if TYPE_CHECKING:
    from sediment.wiring.tables import TablesCluster


@dataclass
class Transaction:
    """A read-write transaction coordinated by the table node it began on."""

    cluster: TablesCluster
    node: str
    id: str
    begin_ts: HybridTimestamp
    catalog_version: int
    outcome: str = "active"
    commit_ts: HybridTimestamp | None = None

    def insert(self, table: str, row: dict[str, Any]) -> None:
        """Upsert the row (an intent until commit); WriteConflict aborts the transaction."""
        self.cluster.call(self.node, p.Write(self.id, table, row))
        self.cluster.recorder.write(self.id, self._cell(table, row), row)

    def delete(self, table: str, key: tuple[Any, ...]) -> None:
        self.cluster.call(self.node, p.Delete(self.id, table, key))
        self.cluster.recorder.write(self.id, self._cell(table, None, key), None)

    def get(self, table: str, key: tuple[Any, ...]) -> dict[str, Any] | None:
        rows, _ = self.cluster.read(self.node, p.Get(self.id, table, key))
        return rows[0][1] if rows else None

    def scan(self, table: str) -> list[dict[str, Any]]:
        rows, _ = self.cluster.read(self.node, p.Scan(self.id, table))
        return [row for _, row in sorted(rows, key=lambda r: repr(r[0]))]

    def lookup(self, index: str, values: Sequence[Any]) -> list[dict[str, Any]]:
        """The rows whose indexed columns equal `values` as this transaction sees them
        (its own writes included), by primary key. `IndexNotAvailable` while the index
        is not AVAILABLE in the transaction's catalog version; another transaction's
        intent met is a `WriteConflict`."""
        rows, _ = self.cluster.read(self.node, p.TxLookup(self.id, index, tuple(values)))
        return [row for _, row in sorted(rows, key=lambda r: repr(r[0]))]

    def range_lookup(self, index: str, lower: Sequence[Any] | None = None,
                     upper: Sequence[Any] | None = None, *, lower_inclusive: bool = True,
                     upper_inclusive: bool = True) -> list[dict[str, Any]]:
        """A range lookup as this transaction sees the rows, in index order (bounds as
        `TablesCluster.range_lookup`)."""
        rng = between(lower, upper, lower_inclusive, upper_inclusive)
        rows, _ = self.cluster.read(self.node, p.TxRange(self.id, index, rng))
        return [row for _, row in rows]

    def prefix_lookup(self, index: str, prefix: Sequence[Any]) -> list[dict[str, Any]]:
        """The rows whose first len(prefix) indexed columns equal `prefix`, in index
        order, as this transaction sees them."""
        return self.range_lookup(index, prefix, prefix)

    def commit(self) -> bool:
        """True if committed; False if it aborted (a failed write, a dropped table)."""
        return self._finish(p.Commit(self.id))

    def rollback(self) -> None:
        self._finish(p.Rollback(self.id))

    def _finish(self, request: p.Commit | p.Rollback) -> bool:
        ended: p.Ended = self.cluster.call(self.node, request)
        self.outcome = "committed" if ended.committed else "aborted"
        self.commit_ts = ended.commit_ts
        self.cluster.recorder.end(self.id, self.outcome, ended.commit_ts, self.cluster.now())
        return bool(ended.committed)

    def _cell(self, table: str, row: dict[str, Any] | None,
              key: tuple[Any, ...] | None = None) -> tuple[int, tuple[Any, ...]] | None:
        """(table id, key) for the recorder (the write succeeded, so both exist)."""
        cat = self.cluster.catalog_at(self.begin_ts, self.node)
        t = cat.table_named(table)
        if t is None:
            return None
        if key is None:
            assert isinstance(row, dict)
            key = tuple(row[c] for c in t.primary_key)
        return (t.id, key)


__all__ = ["Transaction"]
