"""Reads of history the hot store compacted: the skeleton from the KV, values from blocks.

Value-only compaction keeps every record row (key, revision, create/mod revision,
version, tombstone) and drops only the values of rows superseded at or below the
compact revision. The blocks keep those values (the flusher wrote every committed row
before the KV was allowed to compact it) but not the bookkeeping etcd's answers carry
(create_revision, version), which a merged block can no longer recompute. So a read
below the compact revision is the hot store's answer with holes (`RangeSkeleton`,
`EventsSkeleton`: which entries lack their value), and the holes are filled from the
blocks by (key, revision): the same result types and values the KV returned before it
compacted. Pure: no I/O here; the KV machine builds skeletons, the client fills them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from sediment.actors.kv.errors import ErrHistoryUnavailable
from sediment.actors.kv.types import Event, KeyValue, RangeResult

RowId = tuple[bytes, int]  # (key, revision): one row of history
HistoryRow = tuple[int, bytes, bytes | None]  # (revision, key, value; None: a delete)


@dataclass(frozen=True)
class RangeSkeleton:
    """A Range answer at `result.revision`'s point of history; the kvs at the indexes in
    `missing` have their value compacted (b"" placeholder)."""

    result: RangeResult
    missing: tuple[int, ...]
    compact_revision: int


@dataclass(frozen=True)
class EventsSkeleton:
    """The events of a history read; the put events at the indexes in `missing` have
    their value compacted. `head` and `compact_revision` are the store's at the read."""

    events: tuple[Event, ...]
    missing: tuple[int, ...]
    head: int
    compact_revision: int


@dataclass(frozen=True)
class FlushRows:
    """The machine's answer to `HistoryRows(lo, max_rows)`: every row with lo <=
    revision <= through, by (revision, key), whole revisions only; `more`: rows above
    `through` may exist already (read again at once)."""

    rows: tuple[HistoryRow, ...]
    through: int
    more: bool


def range_needs(skeleton: RangeSkeleton) -> frozenset[RowId]:
    kvs = skeleton.result.kvs
    return frozenset((kvs[i].key, kvs[i].mod_revision) for i in skeleton.missing)


def events_need(skeleton: EventsSkeleton) -> frozenset[RowId]:
    events = skeleton.events
    return frozenset((events[i].kv.key, events[i].kv.mod_revision) for i in skeleton.missing)


def _value(values: Mapping[RowId, bytes | None], kv: KeyValue) -> bytes:
    value = values.get((kv.key, kv.mod_revision))
    if value is None:
        raise ErrHistoryUnavailable(
            f"the value of {kv.key!r} at revision {kv.mod_revision} is in no block")
    return value


def fill_range(skeleton: RangeSkeleton, values: Mapping[RowId, bytes | None]) -> RangeResult:
    """The skeleton's result with every compacted value taken from `values`;
    ErrHistoryUnavailable if one is not there (or is a tombstone)."""
    kvs = list(skeleton.result.kvs)
    for i in skeleton.missing:
        kvs[i] = replace(kvs[i], value=_value(values, kvs[i]))
    return replace(skeleton.result, kvs=kvs)


def fill_events(skeleton: EventsSkeleton, values: Mapping[RowId, bytes | None]) -> list[Event]:
    """The skeleton's events with every compacted value taken from `values`."""
    events = list(skeleton.events)
    for i in skeleton.missing:
        kv = events[i].kv
        events[i] = replace(events[i], kv=replace(kv, value=_value(values, kv)))
    return events


__all__ = [
    "EventsSkeleton",
    "FlushRows",
    "HistoryRow",
    "RangeSkeleton",
    "RowId",
    "events_need",
    "fill_events",
    "fill_range",
    "range_needs",
]
