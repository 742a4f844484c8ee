"""The versioned catalog and its update log (Ignite's CatalogManagerImpl with
UpdateLogImpl), as pure functions over a frozen `CatalogLog`.

The log holds one snapshot (the earliest version still known: version 0, the empty
catalog, until the first compaction) and the incremental updates after it. Every
version is also kept materialized, as Ignite keeps `catalogByVer`/`catalogByTs` in
memory, so `catalog(v)` and `catalog_at(ts)` are lookups.

- `execute`: a DDL batch becomes the next version. Its activation time is the hybrid
  time of its raft command plus the delay (Ignite's DelayDuration: every node's clock
  passes the activation before anyone relies on the version), and always after the
  previous activation (a proposer's clock may lag the last one's).
- `save_snapshot(v)`: compaction, Ignite's conditional `saveSnapshot`: if v is above the
  current snapshot, version v becomes the snapshot and every update up to v goes, in one
  step; otherwise nothing changes and the answer is False (a concurrent or repeated
  compaction to the same or a lower version is harmless, and the snapshot only moves
  forward).
- Asking for a version below the snapshot, or for the version active at a timestamp
  before the snapshot's activation, raises `CatalogVersionCompacted`.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from sediment.actors.catalog import ddl, errors
from sediment.actors.catalog.descriptors import Catalog, empty_catalog
from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.actors.catalog.updates import UpdateEntry, VersionedUpdate, apply_update


@dataclass(frozen=True)
class CatalogLog:
    """`versions[i]` is version `snapshot.version + i`; `updates[i]` produced
    `versions[i + 1]`. Build new logs with the functions below, never by hand."""

    versions: tuple[Catalog, ...]
    updates: tuple[VersionedUpdate, ...]
    activations: tuple[int, ...]  # versions' activation values, for bisection

    @property
    def snapshot(self) -> Catalog:
        return self.versions[0]

    @property
    def earliest_version(self) -> int:
        return self.versions[0].version

    @property
    def latest(self) -> Catalog:
        return self.versions[-1]

    @property
    def latest_version(self) -> int:
        return self.versions[-1].version


def initial() -> CatalogLog:
    empty = empty_catalog()
    return CatalogLog((empty,), (), (empty.activation.value,))


def from_parts(snapshot: Catalog, updates: Sequence[VersionedUpdate]) -> CatalogLog:
    """Rebuild a log from its stored form (a raft snapshot's contents): replay the
    updates on the snapshot."""
    versions = [snapshot]
    for update in updates:
        versions.append(apply_update(versions[-1], update))
    return CatalogLog(tuple(versions), tuple(updates),
                      tuple(c.activation.value for c in versions))


def execute(log: CatalogLog, commands: Sequence[ddl.DdlCommand], ts: HybridTimestamp,
            delay_ms: int) -> tuple[CatalogLog, Catalog]:
    """The log with the batch as its next version, and that version. Raises a
    `CatalogError` (and the log is unchanged) if any command is rejected."""
    if not isinstance(delay_ms, int) or delay_ms < 0:
        raise errors.InvalidDdl(f"the activation delay must be >= 0 ms: {delay_ms!r}")
    version = log.latest_version + 1
    entries = ddl.plan(log.latest, commands, version)
    return append(log, entries, ts, delay_ms)


def append(log: CatalogLog, entries: Sequence[UpdateEntry], ts: HybridTimestamp,
           delay_ms: int) -> tuple[CatalogLog, Catalog]:
    """Append already validated entries as the next version."""
    activation = max(ts.add_physical(delay_ms), log.latest.activation.tick())
    update = VersionedUpdate(log.latest_version + 1, activation, tuple(entries))
    catalog = apply_update(log.latest, update)
    return (CatalogLog((*log.versions, catalog), (*log.updates, update),
                       (*log.activations, activation.value)), catalog)


def save_snapshot(log: CatalogLog, version: int) -> tuple[CatalogLog, bool]:
    """Compact the log up to `version` (it becomes the snapshot). False and no change if
    the snapshot is already at or above it; a version above the latest is an error."""
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise errors.InvalidDdl(f"a catalog version is an integer >= 0: {version!r}")
    if version > log.latest_version:
        raise errors.CatalogVersionNotFound(version, log.latest_version)
    if version <= log.earliest_version:
        return log, False
    cut = version - log.earliest_version
    return CatalogLog(log.versions[cut:], log.updates[cut:], log.activations[cut:]), True


def catalog(log: CatalogLog, version: int) -> Catalog:
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise errors.InvalidDdl(f"a catalog version is an integer >= 0: {version!r}")
    if version > log.latest_version:
        raise errors.CatalogVersionNotFound(version, log.latest_version)
    if version < log.earliest_version:
        raise errors.CatalogVersionCompacted(f"version {version}", log.earliest_version)
    return log.versions[version - log.earliest_version]


def catalog_at(log: CatalogLog, ts: HybridTimestamp) -> Catalog:
    """The version active at `ts`: the latest whose activation is <= ts."""
    i = bisect.bisect_right(log.activations, ts.value) - 1
    if i < 0:
        raise errors.CatalogVersionCompacted(f"at {ts}", log.earliest_version)
    return log.versions[i]


def active_version(log: CatalogLog, ts: HybridTimestamp) -> int:
    return catalog_at(log, ts).version


def catalog_prior_to_version_at(log: CatalogLog, ts: HybridTimestamp) -> Catalog | None:
    """The version just before the one active at `ts`, if the log still has it (Ignite's
    catalogPriorToVersionAtTsNullable): the highest version compaction may keep as its
    snapshot when `ts` is the earliest time anyone needs."""
    try:
        active = catalog_at(log, ts).version
    except errors.CatalogVersionCompacted:
        return None
    if active - 1 < log.earliest_version:
        return None
    return log.versions[active - 1 - log.earliest_version]


def log_size(log: CatalogLog) -> int:
    """Entries in the update log: the snapshot plus the incremental updates."""
    return 1 + len(log.updates)


__all__ = [
    "CatalogLog",
    "active_version",
    "append",
    "catalog",
    "catalog_at",
    "catalog_prior_to_version_at",
    "execute",
    "from_parts",
    "initial",
    "log_size",
    "save_snapshot",
]
