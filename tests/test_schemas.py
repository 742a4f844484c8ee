"""Every SQLite file kind's schema comes from `actors/schemas` (sqlite-utils), and files
of the release before versioning (`fixtures/release_files`, built by its `build.py` on
that release) open, migrate forward and read back what they held."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlite_utils import Database

from sediment.actors.catalog.descriptors import ZonePartition
from sediment.actors.kv.auth_machine import AuthKeeper
from sediment.actors.kv.machine import DB_FILE
from sediment.actors.kv.store import Store
from sediment.actors.schemas import FILES, KV_FILE, PARTITION_FILE, SchemaTooNew, version_of
from sediment.actors.schemas.migrate import (
    VERSION_TABLE,
    FileKind,
    SchemaError,
    applied_steps,
    migrate,
)
from sediment.actors.tables.partition_machine import PartitionMachine

RELEASE = Path(__file__).parent / "fixtures" / "release_files"
KV_TABLES = ("records", "compactions", "meta", "entries", "leases", "auth")
PARTITION_TABLES = ("meta", "versions", "intents", "txs")

# records as the releases before leases created it (no `lease` column)
PRE_LEASE_RECORDS = """
CREATE TABLE records (revision INTEGER NOT NULL, sub INTEGER NOT NULL DEFAULT 0,
    key BLOB NOT NULL, value BLOB, create_revision INTEGER NOT NULL,
    mod_revision INTEGER NOT NULL, version INTEGER NOT NULL,
    deleted INTEGER NOT NULL DEFAULT 0, compacted_at INTEGER,
    PRIMARY KEY (key, revision, sub));
INSERT INTO records VALUES (2, 0, X'6B', X'76', 2, 2, 1, 0, NULL);
"""


def _copy(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copyfile(RELEASE / name, target)
    return target


def _contents(path: Path, tables: tuple[str, ...]) -> dict[str, list[tuple[object, ...]]]:
    with sqlite3.connect(path) as conn:
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
                for t in tables}


def _shape(conn: sqlite3.Connection, table: str) -> list[tuple[object, ...]]:
    return conn.execute(f"PRAGMA table_info({table})").fetchall()


def test_file_names_are_the_ones_the_machines_write() -> None:
    assert FILES == {DB_FILE: KV_FILE, "partition.db": PARTITION_FILE}


def test_a_new_kv_file_has_the_release_schema_and_every_step_recorded(tmp_path: Path) -> None:
    Store(tmp_path / "kv.sqlite").close()
    new = sqlite3.connect(tmp_path / "kv.sqlite")
    old = sqlite3.connect(f"{(RELEASE / 'kv.sqlite').as_uri()}?mode=ro&immutable=1", uri=True)
    for table in KV_TABLES:  # sqlite-utils declares what the hand-written DDL did
        assert _shape(new, table) == _shape(old, table), table
    assert new.execute("PRAGMA index_info(records_by_revision)").fetchall() == \
        old.execute("PRAGMA index_info(records_by_revision)").fetchall()
    assert applied_steps(new, KV_FILE) == [name for name, _ in KV_FILE.steps]
    assert version_of(new, KV_FILE) == KV_FILE.version == 4
    new.close()
    old.close()


def test_reopening_runs_no_step_twice(tmp_path: Path) -> None:
    for _ in range(3):
        Store(tmp_path / "kv.sqlite").close()
    with sqlite3.connect(tmp_path / "kv.sqlite") as conn:
        assert conn.execute(f"SELECT COUNT(*) FROM {VERSION_TABLE}").fetchone()[0] == 4


def test_a_kv_file_of_the_previous_release_migrates_and_reads_back(tmp_path: Path) -> None:
    path = _copy("kv.sqlite", tmp_path)
    before = _contents(path, KV_TABLES)
    with sqlite3.connect(path) as conn:
        assert version_of(conn, KV_FILE) == 0  # written before versioning
    store = Store(path)
    assert _contents(path, KV_TABLES) == before  # migrating changed no row
    with sqlite3.connect(path) as conn:
        assert version_of(conn, KV_FILE) == KV_FILE.version
    assert (store.head, store.compact_revision, store.pending_compaction) == (11, 8, 8)
    assert store.finished_compact_revision == 5
    assert store.meta("applied") == 13
    k1, leased = store.get(b"k1"), store.get(b"leased")
    assert k1 is not None and k1.value == b"v1-again"
    assert leased is not None and leased.lease == 7
    assert store.get(b"k2") is None
    assert "alice" in AuthKeeper(store).state.users
    assert store.run_pending_compaction() > 0  # the pending pass resumes on today's code
    assert store.pending_compaction is None
    store.put(b"after", b"migration", applied=14)
    assert store.head == 12
    store.close()


def test_a_kv_file_before_leases_gains_the_lease_column(tmp_path: Path) -> None:
    path = tmp_path / "kv.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript(PRE_LEASE_RECORDS)
    with Store(path) as store:
        kv = store.get(b"k")
        assert kv is not None and (kv.value, kv.lease) == (b"v", 0)
    with sqlite3.connect(path) as conn:
        assert "lease" in {row[1] for row in _shape(conn, "records")}
        assert version_of(conn, KV_FILE) == 4


def test_a_file_of_a_later_release_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = _copy("kv.sqlite", tmp_path)
    Store(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"INSERT INTO {VERSION_TABLE} (migration_set, name, applied_at) "
                     "VALUES ('kv', 'kv_from_the_future', 'later')")
    before = _contents(path, (*KV_TABLES, VERSION_TABLE))
    with pytest.raises(SchemaTooNew, match="kv_from_the_future"):
        Store(path)
    assert _contents(path, (*KV_TABLES, VERSION_TABLE)) == before


def test_a_failing_step_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    def creates(db: Database) -> None:
        db.create_table("first", {"id": int}, pk="id")

    def fails(db: Database) -> None:
        db.create_table("half", {"id": int}, pk="id")
        raise RuntimeError("disk full")

    conn = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    migrate(conn, FileKind("x", (("first", creates),)))
    with pytest.raises(RuntimeError, match="disk full"):
        migrate(conn, FileKind("x", (("first", creates), ("second", fails))))
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "half" not in tables and "first" in tables
    assert applied_steps(conn, FileKind("x", (("first", creates),))) == ["first"]
    conn.execute("BEGIN")
    with pytest.raises(SchemaError, match="outside a transaction"):
        migrate(conn, FileKind("x", (("first", creates),)))
    conn.close()


def test_a_partition_file_of_the_previous_release_migrates_and_loads(tmp_path: Path) -> None:
    group_dir = tmp_path / "part-0-1"
    group_dir.mkdir()
    path = group_dir / "partition.db"
    shutil.copyfile(RELEASE / "partition.db", path)
    before = _contents(path, PARTITION_TABLES)
    machine = PartitionMachine(str(group_dir), ZonePartition(0, 1))
    assert machine.state.group == ZonePartition(0, 1)
    assert machine.applied == 0
    assert _contents(path, PARTITION_TABLES) == before
    assert version_of(machine.db, PARTITION_FILE) == PARTITION_FILE.version
    machine.flush()  # today's writes fit the migrated tables
    machine.db.close()
    fresh = tmp_path / "fresh"
    PartitionMachine(str(fresh), ZonePartition(0, 2)).db.close()
    with sqlite3.connect(fresh / "partition.db") as new, sqlite3.connect(path) as old:
        for table in PARTITION_TABLES:
            assert _shape(new, table) == _shape(old, table), table


def test_the_version_table_is_sqlite_utils_one() -> None:
    from sqlite_utils.migrations import Migrations

    assert Migrations.migrations_table == VERSION_TABLE


def test_opening_stores_loads_neither_pandas_nor_sqlite_utils_for_a_current_file(
        tmp_path: Path) -> None:
    """sqlite-utils would import pandas and numpy (seconds, 80 MB a process): a new file
    imports sqlite-utils without them, a current file not even sqlite-utils."""
    script = (
        "import sys; from sediment.actors.kv.store import Store\n"
        "Store(sys.argv[1]).close()\n"
        "new = sorted(m for m in ('pandas', 'numpy', 'sqlite_utils') if m in sys.modules)\n"
        "for m in list(sys.modules):\n"
        "    if m.startswith('sqlite_utils'): del sys.modules[m]\n"
        "Store(sys.argv[1]).close()\n"
        "again = 'sqlite_utils' in sys.modules\n"
        "import numpy\n"  # still importable afterwards
        "print(new, again)\n")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "kv.sqlite")],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['sqlite_utils'] False"
