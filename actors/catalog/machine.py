"""The catalog as a raft state machine for the metastore group (the `HostedMachine`
of `actors/log/shell/hosted.py`): the update log lives in the group's replicated state,
as Ignite keeps it in the metastorage.

Commands (a raft entry's `command`):
- `ExecuteDdl(commands, ts, delay_ms)`: the proposer (the metastore leader's shell)
  stamps `ts` from its hybrid clock; the version activates at ts + delay. Answer
  `DdlApplied(version, activation)` or `Rejected(error)` (nothing changed).
- `CompactCatalog(version)`: Ignite's saveSnapshot, one conditional step. Answer
  `SnapshotSaved(saved, earliest_version)`: saved False when the snapshot was already at
  or past `version` (harmless: a repeated or concurrent compaction).

Queries (local reads): `CatalogAtQuery(ts)`, `CatalogVersionQuery(version)`,
`VersionsQuery()`; a compacted version answers `Rejected(CatalogVersionCompacted)`.

The machine lives in memory: its raft snapshot is the whole log (`codec.py`, byte-for-
byte deterministic) and it needs no live entries below it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from sediment.actors.catalog import catalog_log, codec, ddl, errors
from sediment.actors.catalog.catalog_log import CatalogLog
from sediment.actors.catalog.descriptors import Catalog
from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.actors.log.raft.types import Entry
from sediment.actors.log.shell.hosted import HostedMachine

# ---- commands and answers -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExecuteDdl:
    commands: tuple[ddl.DdlCommand, ...]
    ts: HybridTimestamp
    delay_ms: int = 0


@dataclass(frozen=True, slots=True)
class CompactCatalog:
    version: int


CatalogCommand: TypeAlias = ExecuteDdl | CompactCatalog


@dataclass(frozen=True, slots=True)
class DdlApplied:
    version: int
    activation: HybridTimestamp


@dataclass(frozen=True, slots=True)
class SnapshotSaved:
    saved: bool
    earliest_version: int


@dataclass(frozen=True, slots=True)
class Rejected:
    error: errors.CatalogError


CommandResult: TypeAlias = DdlApplied | SnapshotSaved | Rejected


@dataclass(frozen=True, slots=True)
class CatalogAtQuery:
    ts: HybridTimestamp


@dataclass(frozen=True, slots=True)
class CatalogVersionQuery:
    version: int


@dataclass(frozen=True, slots=True)
class VersionsQuery:
    pass


@dataclass(frozen=True, slots=True)
class Versions:
    earliest_version: int
    earliest_activation: HybridTimestamp
    latest_version: int
    latest_activation: HybridTimestamp
    log_size: int


# ---- the pure transition ------------------------------------------------------------


def apply_command(log: CatalogLog, command: object) -> tuple[CatalogLog, CommandResult]:
    """One command against the log. Every rejection leaves the log as it was."""
    try:
        if isinstance(command, ExecuteDdl):
            if not isinstance(command.ts, HybridTimestamp):
                raise errors.InvalidCommand(f"ExecuteDdl.ts {command.ts!r}")
            if not isinstance(command.commands, tuple) or not all(
                    isinstance(c, ddl.DDL_TYPES) for c in command.commands):
                raise errors.InvalidCommand(f"ExecuteDdl.commands {command.commands!r}")
            log2, cat = catalog_log.execute(log, command.commands, command.ts, command.delay_ms)
            return log2, DdlApplied(cat.version, cat.activation)
        if isinstance(command, CompactCatalog):
            log2, saved = catalog_log.save_snapshot(log, command.version)
            return log2, SnapshotSaved(saved, log2.earliest_version)
        raise errors.InvalidCommand(type(command).__name__)
    except errors.CatalogError as err:
        return log, Rejected(err)


def answer_query(log: CatalogLog, request: object) -> Catalog | Versions | Rejected:
    try:
        if isinstance(request, CatalogAtQuery):
            return catalog_log.catalog_at(log, request.ts)
        if isinstance(request, CatalogVersionQuery):
            return catalog_log.catalog(log, request.version)
        if isinstance(request, VersionsQuery):
            return Versions(log.earliest_version, log.snapshot.activation, log.latest_version,
                            log.latest.activation, catalog_log.log_size(log))
        raise errors.InvalidCommand(f"query {type(request).__name__}")
    except errors.CatalogError as err:
        return Rejected(err)


# ---- the hosted machine -------------------------------------------------------------


class CatalogMachine:
    """The object the raft server hosts: owns the log and the applied index."""

    def __init__(self, group_dir: str = "") -> None:
        self.log = catalog_log.initial()
        self.applied = 0

    def apply(self, entry: Entry) -> Any:
        self.applied = entry.index
        if entry.command is None:
            return None
        self.log, result = apply_command(self.log, entry.command)
        return result

    def snapshot(self) -> tuple[bytes, list[int]]:
        return codec.encode_log(self.log), []

    def restore(self, data: bytes, index: int,
                read_entry: Callable[[int], Entry | None]) -> None:
        self.log = codec.decode_log(data)
        self.applied = index

    def query(self, request: Any) -> Any:
        return answer_query(self.log, request)

    def status(self) -> dict[str, Any]:
        return {"earliest_version": self.log.earliest_version,
                "latest_version": self.log.latest_version,
                "log_size": catalog_log.log_size(self.log)}

    def background(self) -> bool:
        return False

    def has_background(self) -> bool:
        return False

    def close(self) -> None:
        pass


def catalog_machine(group_dir: str) -> HostedMachine:
    """The machine factory for the metastore group's spec."""
    return CatalogMachine(group_dir)


__all__ = [
    "CatalogAtQuery",
    "CatalogCommand",
    "CatalogMachine",
    "CatalogVersionQuery",
    "CommandResult",
    "CompactCatalog",
    "DdlApplied",
    "ExecuteDdl",
    "Rejected",
    "SnapshotSaved",
    "Versions",
    "VersionsQuery",
    "answer_query",
    "apply_command",
    "catalog_machine",
]
