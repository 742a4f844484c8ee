"""The minimum active-transaction begin time partitions store for catalog compaction
(Ignite's UpdateMinimumActiveTxBeginTimeCommand, MinimumActiveTxTimeCommandHandler and
MinimumRequiredTimeCollectorService), pure.

The compaction coordinator sends every node the cluster's minimum begin time of active
RW transactions; each node proposes it as a raft command to the partitions it leads. A
partition applies it once (a command at or below the last applied index is a replay and
skipped), but the value is *published* to the node's collector only after the
partition's data is flushed: until then a crash could replay raft entries written by
transactions older than it, which need older catalog versions.

The node's collector holds one time per local partition: UNDEFINED (None) from the
moment the partition starts on the node until its first published time, and then only
ever growing. Any UNDEFINED partition makes the node's local minimum "not available"
(`compaction_participant.local_min_time`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sediment.actors.catalog.descriptors import ZonePartition
from sediment.actors.catalog.hlc import HybridTimestamp

# ---- in the partition's raft machine ------------------------------------------------


@dataclass(frozen=True, slots=True)
class MinTxTimeState:
    stored: HybridTimestamp | None = None  # applied, in storage, not yet flushed
    durable: HybridTimestamp | None = None  # flushed: safe to publish
    applied_index: int = 0  # the last UpdateMinimumActiveTxBeginTime command applied


def apply_update(state: MinTxTimeState, index: int, ts: HybridTimestamp) -> MinTxTimeState:
    """The raft command at `index` carries `ts`. Nothing is published yet."""
    if index <= state.applied_index:
        return state
    return MinTxTimeState(stored=ts, durable=state.durable, applied_index=index)


def on_flush(state: MinTxTimeState) -> tuple[MinTxTimeState, HybridTimestamp | None]:
    """The partition's data is durable: what it stored is, too. Returns the time to
    publish (None: nothing new since the last flush)."""
    if state.stored is None or state.stored == state.durable:
        return state, None
    return MinTxTimeState(state.stored, state.stored, state.applied_index), state.stored


# ---- on the node --------------------------------------------------------------------


@dataclass(frozen=True)
class MinTimeCollector:
    """Local partition -> its published minimum time, None while undefined."""

    times: Mapping[ZonePartition, HybridTimestamp | None] = field(default_factory=dict)


def add_partition(c: MinTimeCollector, group: ZonePartition) -> MinTimeCollector:
    """The partition (re)started on this node: undefined until it publishes."""
    return MinTimeCollector({**c.times, group: None})


def remove_partition(c: MinTimeCollector, group: ZonePartition) -> MinTimeCollector:
    return MinTimeCollector({g: t for g, t in c.times.items() if g != group})


def record(c: MinTimeCollector, group: ZonePartition, ts: HybridTimestamp) -> MinTimeCollector:
    """A published time: only for a partition the node holds, and only forward."""
    if group not in c.times:
        return c
    old = c.times[group]
    if old is not None and old >= ts:
        return c
    return MinTimeCollector({**c.times, group: ts})


__all__ = [
    "MinTimeCollector",
    "MinTxTimeState",
    "add_partition",
    "apply_update",
    "on_flush",
    "record",
    "remove_partition",
]
