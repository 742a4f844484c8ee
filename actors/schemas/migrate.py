"""Forward-only schema migrations of one SQLite file kind, through sqlite-utils.

Each file kind (`kv_file.py`, `partition_file.py`) declares its tables as an ordered
list of named steps in a `sqlite_utils.Migrations` set; the file records the steps it
has run in sqlite-utils' version table (`_sqlite_migrations`: set, step name, when).
Opening a file runs the steps it has not run yet, each in one transaction with its
record, so a file from an earlier release (even one written before the version table
existed: every step is written to be a no-op on tables that already have its shape)
reaches today's schema, and a failed step leaves the file as it was. Steps are never
undone or rewritten: a change of schema is a new step at the end. A file that ran a
step this release does not know is from a later release: it is refused
(`SchemaTooNew`) before anything is written.

Only opening goes through sqlite-utils, and only when a step must run (a file whose
version table lists every step is recognised with plain `sqlite3`); the reads and
writes of a running node stay on plain `sqlite3` (its hot paths).
"""

from __future__ import annotations

import importlib
import sqlite3
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database
    from sqlite_utils.migrations import Migrations

VERSION_TABLE = "_sqlite_migrations"  # sqlite-utils' Migrations.migrations_table (tested)

Step = Callable[["Database"], None]

# sqlite-utils imports pandas and numpy when it is imported, only to map their column
# types; no schema here uses them, and they cost about 1.5 s and 80 MB in a process
# that has not loaded them (every node host opens a store).
_OPTIONAL_HEAVY = ("pandas", "numpy")


def load_sqlite_utils() -> ModuleType:
    """The `sqlite_utils` module, imported without pandas and numpy unless the process
    already loaded them (then sqlite-utils sees them as usual)."""
    loaded = sys.modules.get("sqlite_utils.db")
    if loaded is not None:
        return importlib.import_module("sqlite_utils")
    hidden = [name for name in _OPTIONAL_HEAVY if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # an import of it fails
    try:
        return importlib.import_module("sqlite_utils")
    finally:
        for name in hidden:
            if sys.modules.get(name) is None:
                del sys.modules[name]


class SchemaError(Exception):
    """A SQLite file that cannot be opened as the kind it was opened as."""


class SchemaTooNew(SchemaError):
    """The file ran migration steps this release does not know (a later release's)."""


@dataclass(frozen=True)
class FileKind:
    """One kind of SQLite file: its name (the migration set) and its ordered steps."""

    name: str
    steps: tuple[tuple[str, Step], ...]

    def migrations(self) -> Migrations:
        load_sqlite_utils()
        from sqlite_utils.migrations import Migrations

        migrations = Migrations(self.name)
        for step_name, step in self.steps:
            migrations(name=step_name)(step)
        return migrations

    @property
    def version(self) -> int:
        """Today's version: the number of steps."""
        return len(self.steps)


def database(conn: sqlite3.Connection) -> Database:
    """A sqlite-utils view of an open connection (no plugins, no connection pragmas)."""
    db: Database = load_sqlite_utils().Database(conn, recursive_triggers=False,
                                           execute_plugins=False)
    return db


def applied_steps(conn: sqlite3.Connection, kind: FileKind) -> list[str]:
    """The steps of `kind` the file has run, in order (read only, plain sqlite3: what
    sqlite-utils' `Migrations.applied` reads)."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                    (VERSION_TABLE,)).fetchone() is None:
        return []
    return [name for (name,) in conn.execute(
        f"SELECT name FROM {VERSION_TABLE} WHERE migration_set = ? ORDER BY rowid",
        (kind.name,))]


def version_of(conn: sqlite3.Connection, kind: FileKind) -> int:
    """How many of `kind`'s steps the file has run (0: none, or before versioning)."""
    return len(applied_steps(conn, kind))


def unknown_steps(applied: Sequence[str], kind: FileKind) -> list[str]:
    known = {name for name, _ in kind.steps}
    return [name for name in applied if name not in known]


def migrate(conn: sqlite3.Connection, kind: FileKind) -> int:
    """Run the steps of `kind` the file has not run yet; returns the file's version.
    SchemaTooNew (nothing written) if the file ran a step this release does not know."""
    if conn.in_transaction:
        raise SchemaError("migrate needs a connection outside a transaction")
    applied = applied_steps(conn, kind)
    later = unknown_steps(applied, kind)
    if later:
        raise SchemaTooNew(
            f"this {kind.name} file was written by a later release (it ran migration "
            f"steps {', '.join(later)}, unknown here); open it with that release")
    if applied != [name for name, _ in kind.steps]:  # a current file needs no sqlite-utils
        kind.migrations().apply(database(conn))
    return kind.version


__all__ = ["VERSION_TABLE", "FileKind", "SchemaError", "SchemaTooNew", "Step",
           "applied_steps", "database", "load_sqlite_utils", "migrate", "unknown_steps",
           "version_of"]
