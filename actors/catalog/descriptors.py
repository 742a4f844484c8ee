"""What one catalog version holds: zones, tables, indexes (Ignite's Catalog and its
Catalog*Descriptor classes), all frozen values.

A catalog version is immutable. Its maps are keyed by object id in creation order and
must be treated as read-only: every update builds new maps (`updates.py`). Ids come from
the catalog's own counter (`object_id_gen`), never reused, so an id names one object
across all versions even after a drop and a re-create under the same name.

Tables of a zone share the zone's partitions (Ignite's colocation): one replication
group per `ZonePartition`, and a table's rows are hashed into its zone's partitions.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from sediment.actors.catalog.hlc import MIN, HybridTimestamp

COLUMN_TYPES = ("int", "str", "float", "bytes", "bool")


class IndexStatus(enum.Enum):
    """Ignite's CatalogIndexStatus, without STOPPING (a dropped index goes at once)."""

    REGISTERED = "registered"  # created on a live table; waits for older RW txs to end
    BUILDING = "building"  # backfill of every partition at the BUILDING version
    AVAILABLE = "available"  # built; readers may use it


@dataclass(frozen=True, slots=True)
class ZonePartition:
    """One replication group: partition `partition` of zone `zone_id`."""

    zone_id: int
    partition: int

    def __str__(self) -> str:
        return f"z{self.zone_id}p{self.partition}"


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str
    nullable: bool = True


@dataclass(frozen=True, slots=True)
class Zone:
    id: int
    name: str
    partitions: int
    replicas: int


@dataclass(frozen=True, slots=True)
class Table:
    """`schema_version` counts this table's own changes (1 at creation, +1 per column
    added or dropped): a row records the one it was written under."""

    id: int
    name: str
    zone_id: int
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    schema_version: int = 1

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)


@dataclass(frozen=True, slots=True)
class Index:
    """`created_version`: the catalog version that registered it; `status_version`: the
    one that moved it into its current status (the BUILDING version is the one its
    backfill reads the schema at)."""

    id: int
    name: str
    table_id: int
    columns: tuple[str, ...]
    unique: bool
    status: IndexStatus
    created_version: int
    status_version: int


@dataclass(frozen=True)
class Catalog:
    """One version of the catalog, active from `activation` on (hybrid time)."""

    version: int
    activation: HybridTimestamp
    object_id_gen: int = 0  # the next object id to hand out
    zones: Mapping[int, Zone] = field(default_factory=dict)
    tables: Mapping[int, Table] = field(default_factory=dict)
    indexes: Mapping[int, Index] = field(default_factory=dict)

    def zone(self, zone_id: int) -> Zone | None:
        return self.zones.get(zone_id)

    def table(self, table_id: int) -> Table | None:
        return self.tables.get(table_id)

    def index(self, index_id: int) -> Index | None:
        return self.indexes.get(index_id)

    def zone_named(self, name: str) -> Zone | None:
        return next((z for z in self.zones.values() if z.name == name), None)

    def table_named(self, name: str) -> Table | None:
        return next((t for t in self.tables.values() if t.name == name), None)

    def index_named(self, name: str) -> Index | None:
        return next((i for i in self.indexes.values() if i.name == name), None)

    def tables_in_zone(self, zone_id: int) -> Iterator[Table]:
        return (t for t in self.tables.values() if t.zone_id == zone_id)

    def indexes_of(self, table_id: int) -> Iterator[Index]:
        return (i for i in self.indexes.values() if i.table_id == table_id)

    def partitions(self) -> Iterator[ZonePartition]:
        """Every replication group of every zone of this version."""
        for zone in self.zones.values():
            for p in range(zone.partitions):
                yield ZonePartition(zone.id, p)


def empty_catalog() -> Catalog:
    """Version 0: nothing in it, active since the beginning of time (Ignite's empty
    catalog before initialisation)."""
    return Catalog(version=0, activation=MIN)


__all__ = [
    "COLUMN_TYPES",
    "Catalog",
    "Column",
    "Index",
    "IndexStatus",
    "Table",
    "Zone",
    "ZonePartition",
    "empty_catalog",
]
