"""DDL commands and their validation (Ignite's CatalogCommand classes and
CatalogParamsValidationUtils): `plan(catalog, commands, version)` turns a batch of
commands into the update entries of one new catalog version, or raises a typed
`CatalogError` and produces nothing.

A batch is all or nothing: each command is validated against the catalog as the
commands before it in the batch left it (create a zone and a table in it at once), and
the first error rejects the whole batch. Index status changes (`StartBuildingIndex`,
`MakeIndexAvailable`) are commands too: the index build driver issues them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TypeAlias

from sediment.actors.catalog import errors
from sediment.actors.catalog.descriptors import (
    COLUMN_TYPES,
    Catalog,
    Column,
    Index,
    IndexStatus,
    Table,
    Zone,
)
from sediment.actors.catalog.updates import (
    PutIndex,
    PutTable,
    PutZone,
    RemoveIndex,
    RemoveTable,
    RemoveZone,
    UpdateEntry,
    apply_entries,
)

MAX_NAME = 128
MAX_PARTITIONS = 65_000
MAX_REPLICAS = 16
MAX_COLUMNS = 1_000
PK_INDEX_SUFFIX = "_PK"


@dataclass(frozen=True, slots=True)
class CreateZone:
    name: str
    partitions: int = 8
    replicas: int = 3


@dataclass(frozen=True, slots=True)
class AlterZone:
    """Change a zone's replica count (a rebalance follows). Partitions never change."""

    name: str
    replicas: int


@dataclass(frozen=True, slots=True)
class DropZone:
    name: str


@dataclass(frozen=True, slots=True)
class CreateTable:
    """Also creates the table's primary-key index, AVAILABLE at once (nothing to build)."""

    name: str
    zone: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AddColumn:
    table: str
    column: Column


@dataclass(frozen=True, slots=True)
class DropColumn:
    table: str
    column: str


@dataclass(frozen=True, slots=True)
class DropTable:
    name: str


@dataclass(frozen=True, slots=True)
class CreateIndex:
    """A secondary index on a live table: REGISTERED, then built (`index_build.py`)."""

    name: str
    table: str
    columns: tuple[str, ...]
    unique: bool = False


@dataclass(frozen=True, slots=True)
class StartBuildingIndex:
    index_id: int


@dataclass(frozen=True, slots=True)
class MakeIndexAvailable:
    index_id: int


@dataclass(frozen=True, slots=True)
class DropIndex:
    name: str


DdlCommand: TypeAlias = (
    CreateZone | AlterZone | DropZone | CreateTable | AddColumn | DropColumn | DropTable
    | CreateIndex | StartBuildingIndex | MakeIndexAvailable | DropIndex
)
DDL_TYPES = (CreateZone, AlterZone, DropZone, CreateTable, AddColumn, DropColumn, DropTable,
             CreateIndex, StartBuildingIndex, MakeIndexAvailable, DropIndex)


def plan(catalog: Catalog, commands: Sequence[DdlCommand], version: int) -> tuple[UpdateEntry, ...]:
    """The entries of catalog version `version` (= catalog.version + 1) for the batch."""
    if not commands:
        raise errors.InvalidDdl("an empty batch of commands")
    entries: list[UpdateEntry] = []
    scratch = catalog
    for command in commands:
        step = _validate(scratch, command, version)
        entries.extend(step)
        scratch = apply_entries(scratch, step)
    return tuple(entries)


# ---- per command --------------------------------------------------------------------


def _validate(c: Catalog, cmd: DdlCommand, version: int) -> tuple[UpdateEntry, ...]:
    if isinstance(cmd, CreateZone):
        _name(cmd.name)
        _count("partitions", cmd.partitions, MAX_PARTITIONS)
        _count("replicas", cmd.replicas, MAX_REPLICAS)
        if c.zone_named(cmd.name) is not None:
            raise errors.ZoneExists(cmd.name)
        return (PutZone(Zone(c.object_id_gen, cmd.name, cmd.partitions, cmd.replicas)),)
    if isinstance(cmd, AlterZone):
        zone = _zone(c, cmd.name)
        _count("replicas", cmd.replicas, MAX_REPLICAS)
        return (PutZone(replace(zone, replicas=cmd.replicas)),)
    if isinstance(cmd, DropZone):
        zone = _zone(c, cmd.name)
        user = next(c.tables_in_zone(zone.id), None)
        if user is not None:
            raise errors.ZoneInUse(zone.name, user.name)
        return (RemoveZone(zone.id),)
    if isinstance(cmd, CreateTable):
        return _create_table(c, cmd, version)
    if isinstance(cmd, AddColumn):
        table = _table(c, cmd.table)
        _column(cmd.column)
        if table.column(cmd.column.name) is not None:
            raise errors.ColumnExists(f"{table.name}.{cmd.column.name}")
        if len(table.columns) >= MAX_COLUMNS:
            raise errors.InvalidDdl(f"table {table.name} has {MAX_COLUMNS} columns already")
        return (PutTable(replace(table, columns=(*table.columns, cmd.column),
                                 schema_version=table.schema_version + 1)),)
    if isinstance(cmd, DropColumn):
        return _drop_column(c, cmd)
    if isinstance(cmd, DropTable):
        return (RemoveTable(_table(c, cmd.name).id),)
    if isinstance(cmd, CreateIndex):
        _name(cmd.name)
        table = _table(c, cmd.table)
        if c.index_named(cmd.name) is not None:
            raise errors.IndexExists(cmd.name)
        _index_columns(table, cmd.columns)
        return (PutIndex(Index(c.object_id_gen, cmd.name, table.id, tuple(cmd.columns),
                               bool(cmd.unique), IndexStatus.REGISTERED, version, version)),)
    if isinstance(cmd, StartBuildingIndex):
        index = _index_by_id(c, cmd.index_id)
        _status(index, IndexStatus.REGISTERED, "start building")
        return (PutIndex(replace(index, status=IndexStatus.BUILDING, status_version=version)),)
    if isinstance(cmd, MakeIndexAvailable):
        index = _index_by_id(c, cmd.index_id)
        _status(index, IndexStatus.BUILDING, "make available")
        return (PutIndex(replace(index, status=IndexStatus.AVAILABLE, status_version=version)),)
    if isinstance(cmd, DropIndex):
        index = _index(c, cmd.name)
        if index.name == _pk_index_name(_table_by_id(c, index.table_id).name):
            raise errors.InvalidDdl(f"the primary-key index {index.name} goes with its table")
        return (RemoveIndex(index.id),)
    raise errors.InvalidCommand(type(cmd).__name__)


def _create_table(c: Catalog, cmd: CreateTable, version: int) -> tuple[UpdateEntry, ...]:
    _name(cmd.name)
    zone = _zone(c, cmd.zone)
    if c.table_named(cmd.name) is not None:
        raise errors.TableExists(cmd.name)
    if not isinstance(cmd.columns, tuple) or not cmd.columns:
        raise errors.InvalidDdl(f"table {cmd.name} needs at least one column")
    if len(cmd.columns) > MAX_COLUMNS:
        raise errors.InvalidDdl(f"table {cmd.name} has more than {MAX_COLUMNS} columns")
    names = [_column(col).name for col in cmd.columns]
    if len(set(names)) != len(names):
        raise errors.InvalidDdl(f"table {cmd.name} names a column twice")
    pk = cmd.primary_key
    if not isinstance(pk, tuple) or not pk or len(set(pk)) != len(pk):
        raise errors.InvalidDdl(f"table {cmd.name} needs a primary key of distinct columns")
    by_name = {col.name: col for col in cmd.columns}
    for name in pk:
        if name not in by_name:
            raise errors.ColumnNotFound(f"{cmd.name}.{name}")
        if by_name[name].nullable:
            raise errors.InvalidDdl(f"primary-key column {cmd.name}.{name} must be NOT NULL")
    pk_index = _pk_index_name(cmd.name)
    if c.index_named(pk_index) is not None:
        raise errors.IndexExists(pk_index)
    table = Table(c.object_id_gen, cmd.name, zone.id, cmd.columns, pk)
    index = Index(c.object_id_gen + 1, pk_index, table.id, pk, True, IndexStatus.AVAILABLE,
                  version, version)
    return (PutTable(table), PutIndex(index))


def _drop_column(c: Catalog, cmd: DropColumn) -> tuple[UpdateEntry, ...]:
    table = _table(c, cmd.table)
    if table.column(cmd.column) is None:
        raise errors.ColumnNotFound(f"{table.name}.{cmd.column}")
    if cmd.column in table.primary_key:
        raise errors.InvalidDdl(f"{table.name}.{cmd.column} is part of the primary key")
    used = next((i for i in c.indexes_of(table.id) if cmd.column in i.columns), None)
    if used is not None:
        raise errors.InvalidDdl(f"{table.name}.{cmd.column} is used by index {used.name}")
    columns = tuple(col for col in table.columns if col.name != cmd.column)
    return (PutTable(replace(table, columns=columns, schema_version=table.schema_version + 1)),)


# ---- checks -------------------------------------------------------------------------


def _pk_index_name(table: str) -> str:
    return table + PK_INDEX_SUFFIX


def _name(name: object) -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME or not name.isprintable():
        raise errors.InvalidDdl(f"a name must be 1-{MAX_NAME} printable characters: {name!r}")
    return name


def _count(what: str, n: object, most: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= most:
        raise errors.InvalidDdl(f"{what} must be an integer in [1, {most}]: {n!r}")


def _column(col: object) -> Column:
    if not isinstance(col, Column):
        raise errors.InvalidDdl(f"not a column: {col!r}")
    _name(col.name)
    if col.type not in COLUMN_TYPES:
        raise errors.InvalidDdl(f"column {col.name}: type {col.type!r} is not one of "
                                f"{', '.join(COLUMN_TYPES)}")
    return col


def _index_columns(table: Table, columns: object) -> None:
    if not isinstance(columns, tuple) or not columns or len(set(columns)) != len(columns):
        raise errors.InvalidDdl("an index needs distinct columns")
    for name in columns:
        if not isinstance(name, str) or table.column(name) is None:
            raise errors.ColumnNotFound(f"{table.name}.{name}")


def _status(index: Index, expected: IndexStatus, what: str) -> None:
    if index.status is not expected:
        raise errors.InvalidDdl(f"cannot {what} index {index.name}: it is "
                                f"{index.status.value}, not {expected.value}")


def _zone(c: Catalog, name: str) -> Zone:
    zone = c.zone_named(name)
    if zone is None:
        raise errors.ZoneNotFound(str(name))
    return zone


def _table(c: Catalog, name: str) -> Table:
    table = c.table_named(name)
    if table is None:
        raise errors.TableNotFound(str(name))
    return table


def _table_by_id(c: Catalog, table_id: int) -> Table:
    table = c.table(table_id)
    if table is None:
        raise errors.TableNotFound(f"#{table_id}")
    return table


def _index(c: Catalog, name: str) -> Index:
    index = c.index_named(name)
    if index is None:
        raise errors.IndexNotFound(str(name))
    return index


def _index_by_id(c: Catalog, index_id: int) -> Index:
    index = c.index(index_id) if isinstance(index_id, int) else None
    if index is None:
        raise errors.IndexNotFound(f"#{index_id}")
    return index


__all__ = [
    "DDL_TYPES",
    "AddColumn",
    "AlterZone",
    "CreateIndex",
    "CreateTable",
    "CreateZone",
    "DdlCommand",
    "DropColumn",
    "DropIndex",
    "DropTable",
    "DropZone",
    "MakeIndexAvailable",
    "StartBuildingIndex",
    "plan",
]
