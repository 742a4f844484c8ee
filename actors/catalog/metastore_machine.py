"""The catalog's metastore group machine: the catalog update log (`machine.py`) plus the
stable assignments of every zone partition, in one raft group.

Ignite keeps the catalog and the partition assignments in the metastorage; so does
this machine. When a DDL batch creates a zone, the machine places the zone's partitions
on the cluster's nodes (`partitioning.assign`, rendezvous hashing) and records them;
every member computes the same placement at the same index, so the record is
replicated state. A dropped zone's assignments go with it. Changing a zone's replicas
does not move anything here: moving replicas is the rebalance driver's job
(`tables/shell/rebalance_driver.py`). Its commands, as Ignite's pending and stable
assignment keys:

- `SetPending(group, target, catalog_version, pin)`: a rebalance of the partition
  started, pinned to that catalog version (whose activation is `pin`); refused
  (`Rejected`) for a partition with no stable assignment (its zone dropped);
- `RecordStable(group, nodes)`: it ended, the target is the stable assignment now;
- `CancelPending(group)`: it failed, the stable assignment stays.

Every node reads the pending ones (`RebalancesQuery()`) and folds the oldest pin into
its local minimum for catalog compaction (Ignite's RebalanceMinimumRequiredTimeProvider).

The cluster's low watermark (`catalog/cluster_lwm.py`): `AdvanceLowWatermark(ts)` from
the leader's table node sets it only if `ts` is above it (so it never moves back and a
late duplicate is harmless) and answers `LowWatermarkAdvanced(lwm, advanced)`;
`LowWatermarkQuery()` -> the committed value (None: never set).

Queries beside the catalog's: `AssignmentsQuery()` -> {ZonePartition: nodes};
`RebalancesQuery()` -> {ZonePartition: Pending}; `ViewQuery()` -> (the whole
`CatalogLog`, the assignments), what the compaction coordinator decides on.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sediment.actors.catalog import codec
from sediment.actors.catalog.descriptors import Catalog, ZonePartition
from sediment.actors.catalog.errors import InvalidCommand, ZoneNotFound
from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.actors.catalog.machine import CatalogMachine, DdlApplied, Rejected, answer_query
from sediment.actors.log.raft.types import Entry
from sediment.actors.log.shell.hosted import HostedMachine
from sediment.actors.tables import partitioning

Assignments = Mapping[ZonePartition, frozenset[str]]


@dataclass(frozen=True, slots=True)
class AssignmentsQuery:
    pass


@dataclass(frozen=True, slots=True)
class ViewQuery:
    pass


@dataclass(frozen=True, slots=True)
class RebalancesQuery:
    pass


@dataclass(frozen=True, slots=True)
class Pending:
    target: frozenset[str]
    catalog_version: int
    pin: HybridTimestamp


@dataclass(frozen=True, slots=True)
class SetPending:
    group: ZonePartition
    target: frozenset[str]
    catalog_version: int
    pin: HybridTimestamp


@dataclass(frozen=True, slots=True)
class RecordStable:
    group: ZonePartition
    nodes: frozenset[str]


@dataclass(frozen=True, slots=True)
class CancelPending:
    group: ZonePartition


@dataclass(frozen=True, slots=True)
class AdvanceLowWatermark:
    lwm: HybridTimestamp


@dataclass(frozen=True, slots=True)
class LowWatermarkAdvanced:
    lwm: HybridTimestamp  # the committed value after the command
    advanced: bool


@dataclass(frozen=True, slots=True)
class LowWatermarkQuery:
    pass


@dataclass(frozen=True, slots=True)
class AssignmentChanged:
    group: ZonePartition
    nodes: frozenset[str] | None  # the stable assignment now


def placed(catalog: Catalog, old: Assignments, nodes: tuple[str, ...]) -> dict[ZonePartition,
                                                                              frozenset[str]]:
    """The assignments after `catalog` applied: existing ones kept, new zones placed,
    dropped zones' partitions gone."""
    out: dict[ZonePartition, frozenset[str]] = {}
    for zone in catalog.zones.values():
        fresh = partitioning.assign(zone, nodes)
        for group, members in fresh.items():
            out[group] = old.get(group, members)
    return out


class CatalogMetastore(CatalogMachine):
    """The hosted machine: the catalog log and the assignments."""

    def __init__(self, group_dir: str = "", nodes: tuple[str, ...] = ()) -> None:
        super().__init__(group_dir)
        self.nodes = tuple(nodes)
        self.assignments: dict[ZonePartition, frozenset[str]] = {}
        self.pending: dict[ZonePartition, Pending] = {}
        self.lwm: HybridTimestamp | None = None

    def apply(self, entry: Entry) -> Any:
        cmd = entry.command
        if isinstance(cmd, SetPending | RecordStable | CancelPending):
            self.applied = entry.index
            return self._rebalance(cmd)
        if isinstance(cmd, AdvanceLowWatermark):
            self.applied = entry.index
            proposed: Any = cmd.lwm  # a bad command is refused, nothing changed
            if not isinstance(proposed, HybridTimestamp):
                return Rejected(InvalidCommand(f"low watermark {proposed!r}"))
            advanced = self.lwm is None or proposed > self.lwm
            if advanced:
                self.lwm = proposed
            assert self.lwm is not None
            return LowWatermarkAdvanced(self.lwm, advanced)
        result = super().apply(entry)
        if isinstance(result, DdlApplied):
            self.assignments = placed(self.log.latest, self.assignments, self.nodes)
            self.pending = {g: p for g, p in self.pending.items() if g in self.assignments}
        return result

    def _rebalance(self, cmd: SetPending | RecordStable | CancelPending) -> Any:
        if cmd.group not in self.assignments:
            return Rejected(ZoneNotFound(f"no partition {cmd.group}"))
        if isinstance(cmd, SetPending):
            if not cmd.target:
                return Rejected(InvalidCommand(f"a rebalance of {cmd.group} to no replicas"))
            self.pending[cmd.group] = Pending(frozenset(cmd.target), cmd.catalog_version,
                                              cmd.pin)
        elif isinstance(cmd, RecordStable):
            if not cmd.nodes:
                return Rejected(InvalidCommand(f"no replicas for {cmd.group}"))
            self.assignments[cmd.group] = frozenset(cmd.nodes)
            self.pending.pop(cmd.group, None)
        else:
            self.pending.pop(cmd.group, None)
        return AssignmentChanged(cmd.group, self.assignments.get(cmd.group))

    def snapshot(self) -> tuple[bytes, list[int]]:
        log_bytes, live = super().snapshot()
        rows = sorted([g.zone_id, g.partition, sorted(n)] for g, n in self.assignments.items())
        pending = sorted([g.zone_id, g.partition, sorted(p.target), p.catalog_version,
                          p.pin.value] for g, p in self.pending.items())
        lwm = None if self.lwm is None else self.lwm.value
        extra = json.dumps({"assignments": rows, "pending": pending, "lwm": lwm},
                           separators=(",", ":")).encode()
        return struct.pack(">I", len(log_bytes)) + log_bytes + extra, live

    def restore(self, data: bytes, index: int,
                read_entry: Callable[[int], Entry | None]) -> None:
        (size,) = struct.unpack(">I", data[:4])
        self.log = codec.decode_log(data[4:4 + size])
        extra = json.loads(data[4 + size:].decode())
        if isinstance(extra, list):  # the format before rebalances
            extra = {"assignments": extra, "pending": []}
        self.assignments = {ZonePartition(z, p): frozenset(n)
                            for z, p, n in extra["assignments"]}
        self.pending = {ZonePartition(z, p): Pending(frozenset(n), v, HybridTimestamp(pin))
                        for z, p, n, v, pin in extra["pending"]}
        lwm = extra.get("lwm")  # absent in snapshots from before the cluster watermark
        self.lwm = None if lwm is None else HybridTimestamp(lwm)
        self.applied = index

    def query(self, request: Any) -> Any:
        if isinstance(request, AssignmentsQuery):
            return dict(self.assignments)
        if isinstance(request, RebalancesQuery):
            return dict(self.pending)
        if isinstance(request, LowWatermarkQuery):
            return self.lwm
        if isinstance(request, ViewQuery):
            return self.log, dict(self.assignments)
        return answer_query(self.log, request)

    def status(self) -> dict[str, Any]:
        return {**super().status(), "partitions": len(self.assignments),
                "rebalances": len(self.pending),
                "lwm": None if self.lwm is None else self.lwm.value}


@dataclass(frozen=True)
class MetastoreFactory:
    """Picklable machine factory carrying the cluster's nodes."""

    nodes: tuple[str, ...]

    def __call__(self, group_dir: str) -> HostedMachine:
        return CatalogMetastore(group_dir, self.nodes)


__all__ = ["AdvanceLowWatermark", "AssignmentChanged", "Assignments", "AssignmentsQuery",
           "CancelPending", "CatalogMetastore", "LowWatermarkAdvanced", "LowWatermarkQuery",
           "MetastoreFactory", "Pending", "RebalancesQuery", "RecordStable", "SetPending",
           "ViewQuery", "placed"]
