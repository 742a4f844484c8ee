"""`sediment inspect NODE`: a node's SQLite files shown read only (schema version,
tables and row counts, KV revisions and compactions); bad input is one line, exit 2."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from sediment import cli
from sediment.actors.catalog.descriptors import ZonePartition
from sediment.actors.kv.store import Store
from sediment.actors.tables.partition_machine import PartitionMachine

RELEASE = Path(__file__).parent / "fixtures" / "release_files"


def _node(tmp_path: Path) -> Path:
    """A node directory as a KV member and a table partition member leave it."""
    node = tmp_path / "n1"
    kv_dir = node / "groups" / "kv"
    kv_dir.mkdir(parents=True)
    with Store(kv_dir / "kv.sqlite") as store:
        for i in range(5):
            store.put(b"k%d" % i, b"v", applied=i + 1)
        store.put(b"k0", b"w", applied=6)
        store.compact(3)
        store.schedule_compaction(5)
    PartitionMachine(str(node / "groups" / "part-0-1"), ZonePartition(0, 1)).db.close()
    return node


def _digest(node: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(node.rglob("*")) if p.is_file() and p.suffix in (".sqlite", ".db")}


def test_shows_tables_revisions_and_compactions(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    node = _node(tmp_path)
    assert cli.main(["inspect", str(node)]) == 0
    out = capsys.readouterr().out
    assert "groups/kv/kv.sqlite  (kv file, schema version 4 of 4: current)" in out
    assert "head 7  compact revision 5  finished compaction 3 (pass at 5 not finished)" in out
    assert "applied raft index 6" in out
    assert re.search(r"records +6 rows", out) and re.search(r"compactions +2 rows", out)
    assert re.search(r"_sqlite_migrations +4 rows", out)
    assert "revision 3         finished" in out and "revision 5         pending" in out
    assert "groups/part-0-1/partition.db  (partition file, schema version 1 of 1" in out


def test_json_and_nothing_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = _node(tmp_path)
    before = _digest(node)
    assert cli.main(["inspect", str(node), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    kv = next(f for f in doc["files"] if f["kind"] == "kv")
    assert (kv["head"], kv["compact_revision"], kv["pending_compaction"]) == (7, 5, 5)
    assert kv["tables"]["records"] == 6 and kv["tables"]["_sqlite_migrations"] == 4
    assert kv["compactions"] == [{"revision": 3, "finished": True},
                                 {"revision": 5, "finished": False}]
    assert doc["errors"] == []
    assert _digest(node) == before


def test_a_file_of_the_previous_release_is_shown_unmigrated(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copyfile(RELEASE / "kv.sqlite", tmp_path / "kv.sqlite")
    assert cli.main(["inspect", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "schema version 0 of 4: 4 migration step(s) to run when its node opens it" in out
    assert "head 11  compact revision 8" in out
    assert "_sqlite_migrations" not in out  # inspecting migrated nothing


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "missing", "no such directory"),
    (lambda p: (p / "file").write_text("x") and p / "file", "not a directory"),
    (lambda p: p, "no SQLite files of a node under it"),
])
def test_bad_node_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                              make: object, message: str) -> None:
    node = make(tmp_path)  # type: ignore[operator]
    assert cli.main(["inspect", str(node)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_broken_file_is_reported_and_the_rest_shown(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = _node(tmp_path)
    broken = node / "groups" / "other" / "kv.sqlite"
    broken.parent.mkdir()
    broken.write_bytes(b"not a database at all" * 100)
    assert cli.main(["inspect", str(node)]) == 2
    captured = capsys.readouterr()
    assert "groups/kv/kv.sqlite" in captured.out
    assert f"{broken}: cannot open as SQLite" in captured.err
    assert "Traceback" not in captured.err


def test_a_file_of_a_later_release_is_named_so(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    Store(tmp_path / "kv.sqlite").close()
    with sqlite3.connect(tmp_path / "kv.sqlite") as conn:
        conn.execute("INSERT INTO _sqlite_migrations (migration_set, name, applied_at) "
                     "VALUES ('kv', 'kv_from_the_future', 'later')")
    assert cli.main(["inspect", str(tmp_path), "--json"]) == 0
    (info,) = json.loads(capsys.readouterr().out)["files"]
    assert info["state"].startswith("from a later release")
    assert info["unknown"] == ["kv_from_the_future"] and "head" not in info
