"""Typed errors of the catalog. Raising one changes nothing: a DDL command is validated
against the catalog in full before any update is produced, and a rejected command leaves
the update log, the versions and the object-id counter as they were.

Errors travel as a raft machine's result or a query's answer: pickling rebuilds them
without calling the subclasses' constructors (as `actors/kv/errors.py` does)."""

from __future__ import annotations


def _rebuild(cls: type[CatalogError], args: tuple[object, ...],
             state: dict[str, object]) -> CatalogError:
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


class CatalogError(Exception):
    """Base class of every catalog error."""

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))

    def __eq__(self, other: object) -> bool:
        return (type(self) is type(other) and self.args == other.args
                and self.__dict__ == other.__dict__)

    def __hash__(self) -> int:
        return hash((type(self), self.args))


# ---- objects that are not there / already there ------------------------------------


class ObjectNotFound(CatalogError):
    kind = "object"

    def __init__(self, name: str) -> None:
        super().__init__(f"{self.kind} not found: {name}")
        self.name = name


class ZoneNotFound(ObjectNotFound):
    kind = "zone"


class TableNotFound(ObjectNotFound):
    kind = "table"


class IndexNotFound(ObjectNotFound):
    kind = "index"


class ColumnNotFound(ObjectNotFound):
    kind = "column"


class DuplicateName(CatalogError):
    kind = "object"

    def __init__(self, name: str) -> None:
        super().__init__(f"{self.kind} already exists: {name}")
        self.name = name


class ZoneExists(DuplicateName):
    kind = "zone"


class TableExists(DuplicateName):
    kind = "table"


class IndexExists(DuplicateName):
    kind = "index"


class ColumnExists(DuplicateName):
    kind = "column"


class ZoneInUse(CatalogError):
    """A zone cannot be dropped while a table lives in it (Ignite's
    DistributionZoneBindTableException)."""

    def __init__(self, zone: str, table: str) -> None:
        super().__init__(f"zone {zone} is in use by table {table}")
        self.zone = zone
        self.table = table


class InvalidDdl(CatalogError):
    """A command whose parameters make no sense whatever the catalog holds (no columns, a
    primary key over a missing column, zero partitions...) or a step the object's state
    does not allow (making a REGISTERED index AVAILABLE)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"invalid DDL: {reason}")
        self.reason = reason


class InvalidCommand(CatalogError):
    """The catalog machine was handed something that is not one of its commands."""

    def __init__(self, what: str) -> None:
        super().__init__(f"not a catalog command: {what}")
        self.what = what


# ---- versions -----------------------------------------------------------------------


class CatalogVersionCompacted(CatalogError):
    """The version (or the version active at a timestamp) lies below the snapshot: its
    history was compacted away."""

    def __init__(self, requested: str, earliest_version: int) -> None:
        super().__init__(f"catalog {requested} was compacted; earliest version is "
                         f"{earliest_version}")
        self.requested = requested
        self.earliest_version = earliest_version


class CatalogVersionNotFound(CatalogError):
    """A version above the latest one."""

    def __init__(self, version: int, latest_version: int) -> None:
        super().__init__(f"catalog version {version} does not exist yet; latest is "
                         f"{latest_version}")
        self.version = version
        self.latest_version = latest_version


__all__ = [
    "CatalogError",
    "CatalogVersionCompacted",
    "CatalogVersionNotFound",
    "ColumnExists",
    "ColumnNotFound",
    "DuplicateName",
    "IndexExists",
    "IndexNotFound",
    "InvalidCommand",
    "InvalidDdl",
    "ObjectNotFound",
    "TableExists",
    "TableNotFound",
    "ZoneExists",
    "ZoneInUse",
    "ZoneNotFound",
]
