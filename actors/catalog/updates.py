"""The incremental updates the update log stores, and how one applies to a catalog
(Ignite's UpdateEntry classes and VersionedUpdate).

A DDL command is validated once, when it is applied as a raft command (`ddl.py`), and
turned into these entries: plain facts ("zone 3 is now this") that apply to the previous
version without any further check. Replaying the log from a snapshot therefore rebuilds
exactly the same versions, whatever the validation rules were when it was written.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TypeAlias

from sediment.actors.catalog.descriptors import Catalog, Index, Table, Zone
from sediment.actors.catalog.hlc import HybridTimestamp


@dataclass(frozen=True, slots=True)
class PutZone:
    """A new zone, or a new definition of an existing one (same id)."""

    zone: Zone


@dataclass(frozen=True, slots=True)
class RemoveZone:
    zone_id: int


@dataclass(frozen=True, slots=True)
class PutTable:
    table: Table


@dataclass(frozen=True, slots=True)
class RemoveTable:
    """Removes the table and every index on it."""

    table_id: int


@dataclass(frozen=True, slots=True)
class PutIndex:
    index: Index


@dataclass(frozen=True, slots=True)
class RemoveIndex:
    index_id: int


UpdateEntry: TypeAlias = PutZone | RemoveZone | PutTable | RemoveTable | PutIndex | RemoveIndex


@dataclass(frozen=True, slots=True)
class VersionedUpdate:
    """One catalog version's worth of entries, with the activation time it got when its
    raft command applied."""

    version: int
    activation: HybridTimestamp
    entries: tuple[UpdateEntry, ...]


def apply_entries(catalog: Catalog, entries: Iterable[UpdateEntry]) -> Catalog:
    """The catalog with the entries applied; version and activation unchanged. A new
    object's id moves the id counter past it."""
    zones = dict(catalog.zones)
    tables = dict(catalog.tables)
    indexes = dict(catalog.indexes)
    next_id = catalog.object_id_gen
    for entry in entries:
        if isinstance(entry, PutZone):
            zones[entry.zone.id] = entry.zone
            next_id = max(next_id, entry.zone.id + 1)
        elif isinstance(entry, RemoveZone):
            zones.pop(entry.zone_id, None)
        elif isinstance(entry, PutTable):
            tables[entry.table.id] = entry.table
            next_id = max(next_id, entry.table.id + 1)
        elif isinstance(entry, RemoveTable):
            tables.pop(entry.table_id, None)
            for index_id in [i.id for i in indexes.values() if i.table_id == entry.table_id]:
                del indexes[index_id]
        elif isinstance(entry, PutIndex):
            indexes[entry.index.id] = entry.index
            next_id = max(next_id, entry.index.id + 1)
        else:
            indexes.pop(entry.index_id, None)
    return replace(catalog, object_id_gen=next_id, zones=zones, tables=tables, indexes=indexes)


def apply_update(catalog: Catalog, update: VersionedUpdate) -> Catalog:
    """The next version: `catalog` must be version `update.version - 1`."""
    if update.version != catalog.version + 1:
        raise ValueError(f"update {update.version} does not follow version {catalog.version}")
    if update.activation <= catalog.activation:
        raise ValueError(f"activation {update.activation} of version {update.version} is not "
                         f"after {catalog.activation}")
    nxt = apply_entries(catalog, update.entries)
    return replace(nxt, version=update.version, activation=update.activation)


__all__ = [
    "PutIndex",
    "PutTable",
    "PutZone",
    "RemoveIndex",
    "RemoveTable",
    "RemoveZone",
    "UpdateEntry",
    "VersionedUpdate",
    "apply_entries",
    "apply_update",
]
