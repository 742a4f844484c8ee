"""The compaction coordinator's decision (Ignite's tryCompactCatalog, validatePartitions,
collectRequiredNodes and missingNodes), as one pure function.

Given the global minimum required time, the catalog version to trim to is the one just
before the version active at that time (kept as the snapshot; everything older goes).
The iteration is aborted, and nothing is compacted, when:

1. `nothing_to_compact`: there is no such version above the current snapshot (or a node
   could not say: NOT_AVAILABLE);
2. `index_building`: that version has an index REGISTERED or BUILDING (its build pins
   the version it started at);
3. `assignments_unavailable`: a live table's partition has no known assignment (Ignite
   fails the iteration with an IllegalStateException);
4. `nodes_missing`: a node that holds a partition of a table in that version (by the
   assignments now) is not in the logical topology the iteration started with;
5. `partitions_missing`: such a node did not report that partition among the ones its
   minimum covers (it may not have published its minimum tx time yet, so its raft log
   may still need older versions to replay);
6. `dropped_table_in_use`: a table of that version is gone from the current catalog but
   still existed at the low watermark (its data may still be read and replayed). A
   table dropped below the low watermark is skipped, also when its whole zone was
   dropped with it (IGNITE-25867: the dropped zone has no assignments any more and must
   not block compaction forever).

Rebalances are not checked here: each node folds the oldest rebalance pin into its local
minimum (IGNITE-23059), so an active rebalance holds the target below its version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from sediment.actors.catalog import catalog_log
from sediment.actors.catalog.catalog_log import CatalogLog
from sediment.actors.catalog.descriptors import IndexStatus, ZonePartition
from sediment.actors.catalog.hlc import HybridTimestamp

AbortReason = Literal[
    "nothing_to_compact",
    "index_building",
    "assignments_unavailable",
    "nodes_missing",
    "partitions_missing",
    "dropped_table_in_use",
]


@dataclass(frozen=True)
class CompactionView:
    """What the coordinator reads locally when it decides: its replica of the catalog,
    the current hybrid time and the partitions' assignments now (placement driver)."""

    log: CatalogLog
    now: HybridTimestamp
    assignments: Mapping[ZonePartition, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Compact:
    version: int


@dataclass(frozen=True, slots=True)
class Abort:
    reason: AbortReason
    detail: str = ""


Decision: TypeAlias = Compact | Abort


def target_version(log: CatalogLog, min_required_time: HybridTimestamp) -> int | None:
    """The version compaction may keep as its snapshot, if above the current one."""
    prior = catalog_log.catalog_prior_to_version_at(log, min_required_time)
    if prior is None or prior.version <= log.earliest_version:
        return None
    return prior.version


def decide(view: CompactionView, min_required_time: HybridTimestamp, lwm: HybridTimestamp,
           reported: Mapping[str, frozenset[ZonePartition]],
           topology: frozenset[str]) -> Decision:
    """`reported`: each answering node's covered partitions (the coordinator's own too);
    `topology`: the logical topology the iteration started with."""
    log = view.log
    version = target_version(log, min_required_time)
    if version is None:
        return Abort("nothing_to_compact", f"min required time {min_required_time}")
    target = catalog_log.catalog(log, version)
    for index in target.indexes.values():
        if index.status in (IndexStatus.REGISTERED, IndexStatus.BUILDING):
            return Abort("index_building", f"index {index.name} is {index.status.value}")
    current = catalog_log.catalog_at(log, view.now)
    required: dict[str, set[ZonePartition]] = {}
    dropped: list[int] = []
    for table in target.tables.values():
        if current.table(table.id) is None:
            dropped.append(table.id)
            continue
        zone = target.zone(table.zone_id)
        assert zone is not None, f"table {table.name} without zone in version {version}"
        for p in range(zone.partitions):
            group = ZonePartition(zone.id, p)
            nodes = view.assignments.get(group)
            if nodes is None:
                return Abort("assignments_unavailable", f"no assignment for {group}")
            for node in nodes:
                required.setdefault(node, set()).add(group)
    missing = sorted(set(required) - topology)
    if missing:
        return Abort("nodes_missing", f"not in the topology: {missing}")
    for node in sorted(required):
        have = reported.get(node)
        lacking = required[node] - (have or frozenset())
        if have is None or lacking:
            shown = sorted(str(g) for g in lacking)
            return Abort("partitions_missing", f"{node} did not cover {shown[:5]}")
    at_lwm = catalog_log.catalog_at(log, max(lwm, log.snapshot.activation))
    for table_id in dropped:
        if at_lwm.table(table_id) is not None:
            return Abort("dropped_table_in_use",
                         f"table #{table_id} dropped above the low watermark {lwm}")
    return Compact(version)


__all__ = ["Abort", "AbortReason", "Compact", "CompactionView", "Decision", "decide",
           "target_version"]
