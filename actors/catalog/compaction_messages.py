"""The messages of catalog compaction between the coordinator and the nodes (Ignite's
CatalogCompactionMinimumTimesRequest/Response and
CatalogCompactionPrepareUpdateTxBeginTimeMessage). One round trip serves both processes
(IGNITE-22951): the reply carries the node's minimum required time for compaction and
its active-transaction minimum for the replicas update."""

from __future__ import annotations

from dataclasses import dataclass

from sediment.actors.catalog.descriptors import ZonePartition
from sediment.actors.catalog.hlc import HybridTimestamp

NOT_AVAILABLE = HybridTimestamp(0)  # Ignite's HybridTimestamp.MIN_VALUE: "cannot say yet"


@dataclass(frozen=True, slots=True)
class MinTimesRequest:
    iteration: int
    coordinator: str


@dataclass(frozen=True, slots=True)
class MinTimesReply:
    """`min_required_time`: min(low watermark, published partition minimums, rebalance
    pin) over the node's partitions, NOT_AVAILABLE if any partition has none yet;
    `partitions`: the local partitions that minimum covers; `active_tx_min_time`: the
    activation of the oldest catalog version a local RW transaction runs under (the
    node's current time with none)."""

    iteration: int
    node: str
    min_required_time: HybridTimestamp
    active_tx_min_time: HybridTimestamp
    partitions: frozenset[ZonePartition]


@dataclass(frozen=True, slots=True)
class PrepareUpdateTxBeginTime:
    """The global active-tx minimum: store it in the partitions you lead."""

    ts: HybridTimestamp


__all__ = ["NOT_AVAILABLE", "MinTimesReply", "MinTimesRequest", "PrepareUpdateTxBeginTime"]
