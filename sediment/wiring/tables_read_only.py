"""A read-only transaction (`TablesCluster.read_only`): reads of rows and indexes at one
timestamp, as Ignite's read-only transactions read at their read timestamp.

Given no timestamp, the first read takes the node's clock then, and every later read
of the handle uses the timestamp that read answered with, so the handle sees one
snapshot of every table however many reads it makes. Nothing is held on the nodes: a
read below the low watermark is refused (`errors.py`), as any read at a timestamp the
watermark passed; with Ignite's defaults a handle stays readable for 10 minutes.
`TablesCluster.get`/`scan`/`lookup` are one read of a fresh handle each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.actors.tables.index_range import between
from sediment.actors.tables.shell import node_protocol as p

if TYPE_CHECKING:
    from sediment.wiring.tables import TablesCluster

Request = Callable[[HybridTimestamp | None], p.ReadRequest]


@dataclass
class ReadOnlyTransaction:
    """Reads at `ts` through the table node of `node` (None until the first read when
    not given: that read fixes it)."""

    cluster: TablesCluster
    node: str
    ts: HybridTimestamp | None = None

    def get(self, table: str, key: tuple[Any, ...]) -> dict[str, Any] | None:
        """The row of `key` in `table` at the handle's timestamp (None: none then)."""
        rows, read_ts = self._read(lambda ts: p.RoGet(table, key, ts))
        value = rows[0][1] if rows else None
        t = self.cluster.catalog_at(read_ts, self.node).table_named(table)
        if t is not None:
            self.cluster.recorder.read(read_ts, (t.id, key), value, self.cluster.now())
        return value

    def scan(self, table: str) -> list[dict[str, Any]]:
        """Every row of `table` at the handle's timestamp, by primary key."""
        rows, _ = self._read(lambda ts: p.RoScan(table, ts))
        return [row for _, row in sorted(rows, key=lambda r: repr(r[0]))]

    def lookup(self, index: str, values: Sequence[Any]) -> list[dict[str, Any]]:
        """The rows whose indexed columns equal `values`, by primary key. The index must
        be AVAILABLE at the handle's timestamp (`IndexNotAvailable`)."""
        rows = self._index_read(index, lambda ts: p.RoLookup(index, tuple(values), ts))
        return [row for _, row in sorted(rows, key=lambda r: repr(r[0]))]

    def range_lookup(self, index: str, lower: Sequence[Any] | None = None,
                     upper: Sequence[Any] | None = None, *, lower_inclusive: bool = True,
                     upper_inclusive: bool = True) -> list[dict[str, Any]]:
        """The rows in index order whose indexed columns fall between the bounds, each
        a prefix of the index's columns (`index_range.py`; None: unbounded)."""
        rng = between(lower, upper, lower_inclusive, upper_inclusive)
        return [row for _, row in self._index_read(index, lambda ts: p.RoRange(index, rng, ts))]

    def prefix_lookup(self, index: str, prefix: Sequence[Any]) -> list[dict[str, Any]]:
        """The rows whose first len(prefix) indexed columns equal `prefix`, in index
        order."""
        return self.range_lookup(index, prefix, prefix)

    def _read(self, request: Request) -> tuple[list[Any], HybridTimestamp]:
        rows, read_ts = self.cluster.read(self.node, request(self.ts))
        if self.ts is None:
            self.ts = read_ts
        return rows, read_ts

    def _index_read(self, index: str, request: Request) -> list[Any]:
        """An index lookup's rows [(key, row)], each recorded as read at the lookup's
        timestamp, as a get is."""
        rows, read_ts = self._read(request)
        found = self.cluster.catalog_at(read_ts, self.node).index_named(index)
        if found is not None:
            for pk, row in rows:
                self.cluster.recorder.read(read_ts, (found.table_id, tuple(pk)), row,
                                           self.cluster.now())
        return rows


__all__ = ["ReadOnlyTransaction"]
