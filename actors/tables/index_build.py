"""Building a secondary index (Ignite's IndexBuildController and the
REGISTERED -> BUILDING -> AVAILABLE lifecycle), as a pure step core per index.

1. REGISTERED (CreateIndex made it): wait until no RW transaction that began under an
   older catalog version is still active on any node (they do not know the index and
   would write rows it misses) - every node answers `active_txs.finished_before`;
2. propose `StartBuildingIndex`: the index is BUILDING from catalog version b;
3. backfill every partition of the table's zone at version b (`index_entries`: each
   row's indexed values -> its key, as of the building time); writes from transactions
   that began at or after b maintain the index themselves;
4. when every partition reported, propose `MakeIndexAvailable`: done.

While it is REGISTERED or BUILDING the index pins catalog compaction: the coordinator
aborts an iteration whose target catalog has such an index (seed 002, restriction 3).
The index being dropped (or its table) cancels the build.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeAlias

from sediment.actors.catalog.ddl import MakeIndexAvailable, StartBuildingIndex
from sediment.actors.catalog.descriptors import Catalog, Index, IndexStatus, ZonePartition
from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.actors.tables import mvcc
from sediment.actors.tables.mvcc import PartitionRows


class Stage(enum.Enum):
    WAITING_TXS = "waiting_txs"
    STARTING = "starting"
    BACKFILLING = "backfilling"
    FINISHING = "finishing"
    DONE = "done"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class IndexBuild:
    index_id: int
    table_id: int
    created_version: int
    partitions: frozenset[ZonePartition]
    stage: Stage = Stage.WAITING_TXS
    building_version: int | None = None
    nodes_finished: frozenset[str] = frozenset()
    built: frozenset[ZonePartition] = frozenset()


# ---- effects and events -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AskTxsFinished:
    """Ask each node whether its RW transactions older than `version` have ended."""

    nodes: frozenset[str]
    version: int


@dataclass(frozen=True, slots=True)
class ProposeDdl:
    command: StartBuildingIndex | MakeIndexAvailable


@dataclass(frozen=True, slots=True)
class Backfill:
    group: ZonePartition
    index_id: int
    catalog_version: int


Effect: TypeAlias = AskTxsFinished | ProposeDdl | Backfill


@dataclass(frozen=True, slots=True)
class TxsFinished:
    node: str
    finished: bool


@dataclass(frozen=True, slots=True)
class CatalogChanged:
    """A catalog version applied (the build follows the index's status through it)."""

    catalog: Catalog


@dataclass(frozen=True, slots=True)
class PartitionBuilt:
    group: ZonePartition
    catalog_version: int


Event: TypeAlias = TxsFinished | CatalogChanged | PartitionBuilt

# ---- steps --------------------------------------------------------------------------


def start(index: Index, catalog: Catalog, nodes: Iterable[str]) -> tuple[IndexBuild, list[Effect]]:
    """Begin driving a REGISTERED index; `nodes`: the topology to ask."""
    table = catalog.table(index.table_id)
    zone = catalog.zone(table.zone_id) if table is not None else None
    if index.status is not IndexStatus.REGISTERED or zone is None:
        raise ValueError(f"index {index.name} is not a REGISTERED index of a live table")
    groups = frozenset(ZonePartition(zone.id, p) for p in range(zone.partitions))
    b = IndexBuild(index.id, index.table_id, index.created_version, groups)
    return b, [AskTxsFinished(frozenset(nodes), index.created_version)]


def step(b: IndexBuild, event: Event, nodes: Iterable[str] = ()) -> tuple[IndexBuild, list[Effect]]:
    """One event; `nodes`: the current topology (a node that answered "not yet" is
    asked again on the next catalog change or by the shell's retry)."""
    if b.stage in (Stage.DONE, Stage.CANCELLED):
        return b, []
    if isinstance(event, CatalogChanged):
        return _on_catalog(b, event.catalog)
    if isinstance(event, TxsFinished) and b.stage is Stage.WAITING_TXS:
        if not event.finished:
            return b, []
        b = replace(b, nodes_finished=b.nodes_finished | {event.node})
        if frozenset(nodes) <= b.nodes_finished:
            return (replace(b, stage=Stage.STARTING),
                    [ProposeDdl(StartBuildingIndex(b.index_id))])
        return b, []
    if (isinstance(event, PartitionBuilt) and b.stage is Stage.BACKFILLING
            and event.group in b.partitions and event.catalog_version == b.building_version):
        b = replace(b, built=b.built | {event.group})
        if b.built == b.partitions:
            return (replace(b, stage=Stage.FINISHING),
                    [ProposeDdl(MakeIndexAvailable(b.index_id))])
    return b, []


def _on_catalog(b: IndexBuild, catalog: Catalog) -> tuple[IndexBuild, list[Effect]]:
    index = catalog.index(b.index_id)
    if index is None:
        return replace(b, stage=Stage.CANCELLED), []
    if index.status is IndexStatus.BUILDING and b.stage in (Stage.WAITING_TXS, Stage.STARTING):
        b = replace(b, stage=Stage.BACKFILLING, building_version=index.status_version)
        return b, [Backfill(g, b.index_id, index.status_version)
                   for g in sorted(b.partitions, key=lambda g: g.partition)]
    if index.status is IndexStatus.AVAILABLE:
        return replace(b, stage=Stage.DONE), []
    return b, []


def index_entries(rows: PartitionRows, table_id: int, columns: tuple[str, ...],
                  ts: HybridTimestamp) -> list[tuple[tuple[Any, ...], tuple[Any, ...]]]:
    """The backfill of one partition: (indexed values, primary key) of every row live
    at `ts`, sorted."""
    out: list[tuple[tuple[Any, ...], tuple[Any, ...]]] = []
    for key in mvcc.keys_of(rows, table_id):
        row = mvcc.committed_at(rows, key, ts)
        if row is not None:
            out.append((tuple(row.get(c) for c in columns), key[1]))
    return sorted(out, key=repr)


def pinned_version(builds: Mapping[int, IndexBuild]) -> int | None:
    """The oldest catalog version a running build needs (created or building)."""
    pins = [b.building_version if b.building_version is not None else b.created_version
            for b in builds.values() if b.stage not in (Stage.DONE, Stage.CANCELLED)]
    return min(pins, default=None)


__all__ = [
    "AskTxsFinished",
    "Backfill",
    "CatalogChanged",
    "Effect",
    "Event",
    "IndexBuild",
    "PartitionBuilt",
    "ProposeDdl",
    "Stage",
    "TxsFinished",
    "index_entries",
    "pinned_version",
    "start",
    "step",
]
