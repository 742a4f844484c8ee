"""Deterministic bytes for the catalog log (the catalog machine's raft snapshot).

JSON with sorted keys and no whitespace: the same log gives the same bytes in any
process and under any hash seed, so two replicas' snapshots can be compared byte for
byte and a restore rebuilds exactly the versions that were saved.
"""

from __future__ import annotations

import json
from typing import Any

from sediment.actors.catalog.catalog_log import CatalogLog, from_parts
from sediment.actors.catalog.descriptors import Catalog, Column, Index, IndexStatus, Table, Zone
from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.actors.catalog.updates import (
    PutIndex,
    PutTable,
    PutZone,
    RemoveIndex,
    RemoveTable,
    RemoveZone,
    UpdateEntry,
    VersionedUpdate,
)

FORMAT = 1


def encode_log(log: CatalogLog) -> bytes:
    body = {"format": FORMAT, "snapshot": _catalog(log.snapshot),
            "updates": [_update(u) for u in log.updates]}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def decode_log(data: bytes) -> CatalogLog:
    body = json.loads(data)
    if body.get("format") != FORMAT:
        raise ValueError(f"unknown catalog snapshot format {body.get('format')!r}")
    return from_parts(_catalog_of(body["snapshot"]), [_update_of(u) for u in body["updates"]])


# ---- encode -------------------------------------------------------------------------


def _zone(z: Zone) -> list[Any]:
    return [z.id, z.name, z.partitions, z.replicas]


def _table(t: Table) -> dict[str, Any]:
    return {"id": t.id, "name": t.name, "zone": t.zone_id, "pk": list(t.primary_key),
            "sv": t.schema_version, "cols": [[c.name, c.type, c.nullable] for c in t.columns]}


def _index(i: Index) -> dict[str, Any]:
    return {"id": i.id, "name": i.name, "table": i.table_id, "cols": list(i.columns),
            "unique": i.unique, "status": i.status.value, "created": i.created_version,
            "since": i.status_version}


def _catalog(c: Catalog) -> dict[str, Any]:
    return {"version": c.version, "activation": c.activation.value, "gen": c.object_id_gen,
            "zones": [_zone(z) for z in c.zones.values()],
            "tables": [_table(t) for t in c.tables.values()],
            "indexes": [_index(i) for i in c.indexes.values()]}


def _entry(e: UpdateEntry) -> list[Any]:
    if isinstance(e, PutZone):
        return ["zone", _zone(e.zone)]
    if isinstance(e, RemoveZone):
        return ["drop_zone", e.zone_id]
    if isinstance(e, PutTable):
        return ["table", _table(e.table)]
    if isinstance(e, RemoveTable):
        return ["drop_table", e.table_id]
    if isinstance(e, PutIndex):
        return ["index", _index(e.index)]
    return ["drop_index", e.index_id]


def _update(u: VersionedUpdate) -> dict[str, Any]:
    return {"version": u.version, "activation": u.activation.value,
            "entries": [_entry(e) for e in u.entries]}


# ---- decode -------------------------------------------------------------------------


def _zone_of(v: list[Any]) -> Zone:
    return Zone(int(v[0]), str(v[1]), int(v[2]), int(v[3]))


def _table_of(v: dict[str, Any]) -> Table:
    cols = tuple(Column(str(n), str(t), bool(nullable)) for n, t, nullable in v["cols"])
    return Table(int(v["id"]), str(v["name"]), int(v["zone"]), cols,
                 tuple(str(c) for c in v["pk"]), int(v["sv"]))


def _index_of(v: dict[str, Any]) -> Index:
    return Index(int(v["id"]), str(v["name"]), int(v["table"]),
                 tuple(str(c) for c in v["cols"]), bool(v["unique"]),
                 IndexStatus(v["status"]), int(v["created"]), int(v["since"]))


def _catalog_of(v: dict[str, Any]) -> Catalog:
    zones = {z.id: z for z in map(_zone_of, v["zones"])}
    tables = {t.id: t for t in map(_table_of, v["tables"])}
    indexes = {i.id: i for i in map(_index_of, v["indexes"])}
    return Catalog(int(v["version"]), HybridTimestamp(int(v["activation"])), int(v["gen"]),
                   zones, tables, indexes)


def _entry_of(v: list[Any]) -> UpdateEntry:
    kind, arg = v
    if kind == "zone":
        return PutZone(_zone_of(arg))
    if kind == "drop_zone":
        return RemoveZone(int(arg))
    if kind == "table":
        return PutTable(_table_of(arg))
    if kind == "drop_table":
        return RemoveTable(int(arg))
    if kind == "index":
        return PutIndex(_index_of(arg))
    if kind == "drop_index":
        return RemoveIndex(int(arg))
    raise ValueError(f"unknown catalog update entry {kind!r}")


def _update_of(v: dict[str, Any]) -> VersionedUpdate:
    return VersionedUpdate(int(v["version"]), HybridTimestamp(int(v["activation"])),
                           tuple(_entry_of(e) for e in v["entries"]))


__all__ = ["FORMAT", "decode_log", "encode_log"]
