"""What every node computes for catalog compaction (the node side of Ignite's
CatalogCompactionRunner: getMinLocalTime, handleMinimumTimesRequest,
propagateTimeToLocalReplicas), as pure functions.

- `local_min_time`: the node's minimum required time = min(low watermark, the minimum
  tx time each local partition published, the oldest rebalance pin), and the
  partitions it covers. Any local partition that has not published yet makes it
  NOT_AVAILABLE, and so does a node with no low watermark yet.
- `reply`: the answer to the coordinator's request.
- `replicas_to_update`: on the coordinator's global active-tx minimum, the partitions
  this node must store it in: every partition of every zone in the catalog versions
  active between that time and now, where this node is the primary (a partition with
  no primary yet is skipped; the next iteration will reach it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sediment.actors.catalog.compaction_messages import NOT_AVAILABLE, MinTimesReply
from sediment.actors.catalog.descriptors import Catalog, ZonePartition
from sediment.actors.catalog.hlc import HybridTimestamp


@dataclass(frozen=True, slots=True)
class LocalMinTime:
    time: HybridTimestamp
    partitions: frozenset[ZonePartition]


UNAVAILABLE = LocalMinTime(NOT_AVAILABLE, frozenset())


def local_min_time(lwm: HybridTimestamp | None,
                   partition_times: Mapping[ZonePartition, HybridTimestamp | None],
                   rebalance_min: HybridTimestamp | None) -> LocalMinTime:
    if lwm is None or any(t is None for t in partition_times.values()):
        return UNAVAILABLE
    candidates = [lwm, *(t for t in partition_times.values() if t is not None)]
    if rebalance_min is not None:
        candidates.append(rebalance_min)
    return LocalMinTime(min(candidates), frozenset(partition_times))


def reply(iteration: int, node: str, local: LocalMinTime,
          active_tx_min_time: HybridTimestamp) -> MinTimesReply:
    return MinTimesReply(iteration, node, local.time, active_tx_min_time, local.partitions)


def replicas_to_update(versions: Iterable[Catalog], node: str,
                       primary_of: Mapping[ZonePartition, str | None]) -> list[ZonePartition]:
    """`versions`: the catalog versions active from the tx time to now."""
    groups: set[ZonePartition] = set()
    for catalog in versions:
        groups.update(catalog.partitions())
    return sorted((g for g in groups if primary_of.get(g) == node),
                  key=lambda g: (g.zone_id, g.partition))


__all__ = ["UNAVAILABLE", "LocalMinTime", "local_min_time", "replicas_to_update", "reply"]
