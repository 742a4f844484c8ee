"""Range and prefix lookups on a secondary index (pure): which index values a lookup
takes, which keys of a partition are candidates, and the order rows come back in.

A range has an optional lower and upper bound, each a prefix of the index's columns
(1 to all of them) that is inclusive or exclusive, as Ignite's sorted index scans take
them (`lower`/`upper` `BinaryTuplePrefix` with `GREATER_OR_EQUAL`/`LESS_OR_EQUAL`
flags). A row's index values are compared with a bound on the bound's length, in
lexicographic order, so:

- equality on every column is the range [values, values];
- a prefix lookup (the first k columns equal) is [prefix, prefix];
- `a >= 3 and a < 7` on an index (a, b) is lower (3,) inclusive, upper (7,) exclusive;
  an exclusive bound (5,) leaves out every row whose `a` is 5, whatever its `b`.

A NULL sorts before every value (Ignite's default ASC NULLS FIRST): a lookup without a
lower bound includes rows with a NULL there. Rows come back in index order: by their
index values, then by primary key.

Candidates come from the same sources as an equality lookup (`index_entries.py`: the
backfill, the maintained entries, keys with an intent): the reader re-reads each at
its timestamp and keeps the row only if its values are in the range then.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sediment.actors.catalog.descriptors import Catalog, IndexStatus, Table
from sediment.actors.catalog.errors import IndexNotFound, InvalidCommand
from sediment.actors.tables.errors import IndexNotAvailable
from sediment.actors.tables.index_entries import Entry, MaintainedIndex, values_of
from sediment.actors.tables.mvcc import PartitionRows
from sediment.actors.tables.transactions import PYTHON_TYPES


@dataclass(frozen=True, slots=True)
class IndexRange:
    """Bounds on an index's values (None: unbounded), each a prefix of its columns."""

    lower: tuple[Any, ...] | None = None
    upper: tuple[Any, ...] | None = None
    lower_inclusive: bool = True
    upper_inclusive: bool = True


def between(lower: Sequence[Any] | None, upper: Sequence[Any] | None,
            lower_inclusive: bool = True, upper_inclusive: bool = True) -> IndexRange:
    """The range of a lookup call's arguments (sequences as tuples; None: unbounded)."""
    return IndexRange(None if lower is None else tuple(lower),
                      None if upper is None else tuple(upper), lower_inclusive,
                      upper_inclusive)


def exactly(prefix: Sequence[Any]) -> IndexRange:
    """The rows whose first len(prefix) index values equal `prefix`."""
    return IndexRange(tuple(prefix), tuple(prefix), True, True)


@dataclass(frozen=True, slots=True)
class IndexRangeLookup:
    """A partition query: the primary keys whose row may be in the range (the reader
    re-reads each at its timestamp)."""

    index_id: int
    table_id: int
    columns: tuple[str, ...]
    range: IndexRange

    def matches(self, row: Any) -> bool:
        return row is not None and in_range(values_of(row, self.columns), self.range)


def order_key(values: Iterable[Any]) -> tuple[tuple[Any, ...], ...]:
    """Index order of a value tuple: NULL first, then the values."""
    return tuple((0,) if v is None else (1, v) for v in values)


def in_range(values: tuple[Any, ...], rng: IndexRange) -> bool:
    if rng.lower is not None:
        head, bound = order_key(values[:len(rng.lower)]), order_key(rng.lower)
        if head < bound or (head == bound and not rng.lower_inclusive):
            return False
    if rng.upper is not None:
        head, bound = order_key(values[:len(rng.upper)]), order_key(rng.upper)
        if head > bound or (head == bound and not rng.upper_inclusive):
            return False
    return True


def candidates(backfill: Iterable[Entry], idx: MaintainedIndex | None, rows: PartitionRows,
               lookup: IndexRangeLookup) -> list[tuple[Any, ...]]:
    """Primary keys whose row may be in the range, in a stable order."""
    keys = {pk for vals, pk in backfill if in_range(vals, lookup.range)}
    if idx is not None:
        keys |= {pk for vals, pk in idx.entries if in_range(vals, lookup.range)}
    keys |= {key[1] for key, intent in rows.intents.items()
             if key[0] == lookup.table_id and intent.row is not None
             and lookup.matches(intent.row)}
    return sorted(keys, key=repr)


def in_index_order(rows: Iterable[tuple[Any, Any]],
                   columns: tuple[str, ...]) -> list[tuple[Any, Any]]:
    """(primary key, row) pairs by index values, then primary key."""
    return sorted(rows, key=lambda r: (order_key(values_of(r[1], columns)),
                                       order_key(tuple(r[0]))))


def _check_bound(bound: Any, what: str, table: Table, columns: tuple[str, ...],
                 index: str) -> tuple[Any, ...] | None:
    if bound is None:
        return None
    if not isinstance(bound, tuple) or not 1 <= len(bound) <= len(columns):
        raise InvalidCommand(f"the {what} bound of index {index} is a tuple of 1 to "
                             f"{len(columns)} values: {bound!r}")
    for name, value in zip(columns, bound, strict=False):
        column = table.column(name)
        types = PYTHON_TYPES[column.type] if column is not None else ()
        if value is None or not isinstance(value, types) or (
                column is not None and column.type != "bool" and isinstance(value, bool)):
            raise InvalidCommand(f"the {what} bound of index {index}: {name} takes "
                                 f"{column.type if column else '?'} values, not {value!r}")
    return tuple(bound)


def plan(cat: Catalog, index_name: Any, rng: Any) -> tuple[IndexRangeLookup, str]:
    """The partitions' query and the table's name, for a lookup in the catalog version
    of the read's timestamp. Typed errors: `IndexNotFound`, `IndexNotAvailable`,
    `InvalidCommand` (a bound of the wrong length or type)."""
    index = cat.index_named(index_name) if isinstance(index_name, str) else None
    if index is None:
        raise IndexNotFound(str(index_name))
    if index.status is not IndexStatus.AVAILABLE:
        raise IndexNotAvailable(index.name, index.status.value)
    if not isinstance(rng, IndexRange):
        raise InvalidCommand(f"a range lookup takes an IndexRange: {rng!r}")
    table = cat.table(index.table_id)
    assert table is not None  # an index goes with its table
    checked = IndexRange(_check_bound(rng.lower, "lower", table, index.columns, index.name),
                         _check_bound(rng.upper, "upper", table, index.columns, index.name),
                         bool(rng.lower_inclusive), bool(rng.upper_inclusive))
    return IndexRangeLookup(index.id, table.id, index.columns, checked), table.name


__all__ = ["IndexRange", "IndexRangeLookup", "between", "candidates", "exactly", "in_index_order",
           "in_range", "order_key", "plan"]
