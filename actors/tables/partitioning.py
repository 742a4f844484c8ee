"""Which partition a row lives in, and which nodes hold a partition.

`partition_of` hashes the primary-key values into the zone's partitions. The hash is
BLAKE2b over a canonical encoding of the values (type-tagged JSON), never Python's
`hash`, so every process and every run agree.

`assign` places a zone's replicas the way Ignite's rendezvous distribution does: for
each partition every node gets a score hash(zone, partition, node) and the `replicas`
best-scoring nodes hold it. A node leaving moves only the partitions it held; a node
joining takes only the partitions it now scores best on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sediment.actors.catalog.descriptors import Catalog, Table, Zone, ZonePartition

Assignments = Mapping[ZonePartition, frozenset[str]]


class InvalidKey(ValueError):
    """A primary key that does not match its table (wrong arity, unsupported value)."""


def _canonical(value: Any) -> Any:
    if isinstance(value, bool):
        return ["b", value]
    if isinstance(value, int):
        return ["i", str(value)]
    if isinstance(value, float):
        return ["f", value.hex()]
    if isinstance(value, str):
        return ["s", value]
    if isinstance(value, bytes):
        return ["y", value.hex()]
    raise InvalidKey(f"unsupported key value {value!r}")


def _digest(*parts: Any) -> int:
    raw = json.dumps([_canonical(p) for p in parts], separators=(",", ":")).encode()
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big")


def partition_of(key: Sequence[Any], partitions: int) -> int:
    """The partition (0 <= p < partitions) of a primary key given as its values."""
    if partitions < 1:
        raise ValueError(f"a zone has at least one partition: {partitions}")
    if not isinstance(key, tuple) or not key:
        raise InvalidKey(f"a primary key is a non-empty tuple: {key!r}")
    return _digest(*key) % partitions


def key_of(table: Table, row: Mapping[str, Any]) -> tuple[Any, ...]:
    """The primary-key values of a row of `table` (each must be present and not None)."""
    missing = [c for c in table.primary_key if row.get(c) is None]
    if missing:
        raise InvalidKey(f"row of {table.name} lacks primary-key column(s) {missing}")
    return tuple(row[c] for c in table.primary_key)


def group_of(catalog: Catalog, table: Table, key: tuple[Any, ...]) -> ZonePartition:
    zone = catalog.zone(table.zone_id)
    if zone is None:
        raise InvalidKey(f"table {table.name} has no zone #{table.zone_id}")
    return ZonePartition(zone.id, partition_of(key, zone.partitions))


def assign(zone: Zone, nodes: Iterable[str]) -> dict[ZonePartition, frozenset[str]]:
    """Rendezvous placement of every partition of `zone` on `nodes` (fewer replicas than
    asked when there are fewer nodes)."""
    names = sorted(set(nodes))
    out: dict[ZonePartition, frozenset[str]] = {}
    for p in range(zone.partitions):
        ranked = sorted(names, key=lambda n: (-_digest(zone.id, p, n), n))  # noqa: B023
        out[ZonePartition(zone.id, p)] = frozenset(ranked[: zone.replicas])
    return out


__all__ = ["Assignments", "InvalidKey", "assign", "group_of", "key_of", "partition_of"]
