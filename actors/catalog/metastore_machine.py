"""The catalog's metastore group machine: the catalog update log (`machine.py`) plus the
stable assignments of every zone partition, in one raft group.

Ignite keeps the catalog and the partition assignments in the metastorage; so does
this machine. When a DDL batch creates a zone, the machine places the zone's partitions
on the cluster's nodes (`partitioning.assign`, rendezvous hashing) and records them;
every member computes the same placement at the same index, so the record is
replicated state. A dropped zone's assignments go with it. Changing a zone's replicas
does not move anything here: moving replicas is the rebalance driver's job (not built
yet), which would record the new stable assignments by a command of its own.

Queries beside the catalog's: `AssignmentsQuery()` -> {ZonePartition: nodes};
`ViewQuery()` -> (the whole `CatalogLog`, the assignments), what the compaction
coordinator decides on.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sediment.actors.catalog import codec
from sediment.actors.catalog.descriptors import Catalog, ZonePartition
from sediment.actors.catalog.machine import CatalogMachine, DdlApplied, answer_query
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

    def apply(self, entry: Entry) -> Any:
        result = super().apply(entry)
        if isinstance(result, DdlApplied):
            self.assignments = placed(self.log.latest, self.assignments, self.nodes)
        return result

    def snapshot(self) -> tuple[bytes, list[int]]:
        log_bytes, live = super().snapshot()
        rows = sorted([g.zone_id, g.partition, sorted(n)] for g, n in self.assignments.items())
        extra = json.dumps(rows, separators=(",", ":")).encode()
        return struct.pack(">I", len(log_bytes)) + log_bytes + extra, live

    def restore(self, data: bytes, index: int,
                read_entry: Callable[[int], Entry | None]) -> None:
        (size,) = struct.unpack(">I", data[:4])
        self.log = codec.decode_log(data[4:4 + size])
        rows = json.loads(data[4 + size:].decode())
        self.assignments = {ZonePartition(z, p): frozenset(n) for z, p, n in rows}
        self.applied = index

    def query(self, request: Any) -> Any:
        if isinstance(request, AssignmentsQuery):
            return dict(self.assignments)
        if isinstance(request, ViewQuery):
            return self.log, dict(self.assignments)
        return answer_query(self.log, request)

    def status(self) -> dict[str, Any]:
        return {**super().status(), "partitions": len(self.assignments)}


@dataclass(frozen=True)
class MetastoreFactory:
    """Picklable machine factory carrying the cluster's nodes."""

    nodes: tuple[str, ...]

    def __call__(self, group_dir: str) -> HostedMachine:
        return CatalogMetastore(group_dir, self.nodes)


__all__ = ["Assignments", "AssignmentsQuery", "CatalogMetastore", "MetastoreFactory",
           "ViewQuery", "placed"]
