"""`sediment tables ...` (sim): rows put, read back by key, scanned and deleted by later
commands over the same data dir (the cluster started again each time, its clocks on
the wall clock), each in a transaction of its own; index lookups (equal, prefix, range,
read-only at a timestamp); typed errors on stderr with exit 1 and nothing changed
(missing table, index not found, index not available at the read's time, a compacted
catalog version, a read below the low watermark), bad input exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sediment import cli, tables_cli
from sediment.actors.catalog.errors import (
    CatalogVersionCompacted,
    IndexNotFound,
    TableNotFound,
)
from sediment.actors.tables.errors import IndexNotAvailable, ReadBelowLowWatermark


def _cli(capsys: pytest.CaptureFixture[str], data: Path, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["tables", "--data-dir", str(data), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _rows(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines()]


def test_rows_persist_across_commands(capsys: pytest.CaptureFixture[str],
                                      tmp_path: Path) -> None:
    data = tmp_path / "t"
    assert _cli(capsys, data, "create-zone", "Z", "--partitions", "3")[0] == 0
    code, out, _ = _cli(capsys, data, "create-table", "T", "--zone", "Z", "-c", "k:int!",
                        "-c", "v:str", "-k", "k")
    assert code == 0 and "version=2" in out
    code, out, err = _cli(capsys, data, "put", "T", '{"k": 1, "v": "one"}')
    assert code == 0, err
    assert _cli(capsys, data, "put", "T", '{"k": 2, "v": "two"}')[0] == 0
    code, out, _ = _cli(capsys, data, "get", "T", "1")
    assert code == 0 and _rows(out) == [{"k": 1, "v": "one"}]
    assert _cli(capsys, data, "delete", "T", "2")[0] == 0
    code, out, _ = _cli(capsys, data, "scan", "T", "--json")
    assert code == 0 and json.loads(out) == [{"k": 1, "v": "one"}]
    code, out, err = _cli(capsys, data, "put", "NOPE", '{"k": 3}')
    assert code == 1 and out == "" and "TableNotFound: table not found: NOPE" in err
    code, _, err = _cli(capsys, data, "put", "T", "[1]")
    assert code == 2 and "must be a JSON object" in err
    state = json.loads((data / tables_cli.NODES_FILE).read_text())
    assert state["nodes"] == ["n1", "n2", "n3"] and state["clock_ms"] > 0


def _args(data: Path, *argv: str) -> object:
    args, _ = cli.build_parser().parse_known_args(
        ["tables", "--data-dir", str(data), "--data-availability", "1", *argv])
    return args


def test_lookups_and_typed_errors(tmp_path: Path) -> None:
    data = tmp_path / "t"

    def run(*argv: str) -> object:
        return tables_cli.run(c, _args(data, *argv))  # type: ignore[arg-type]

    with tables_cli.cluster(_args(data, "ls")) as c:  # type: ignore[arg-type]
        run("create-zone", "Z", "--partitions", "4")
        run("create-table", "T", "--zone", "Z", "-c", "k:int!", "-c", "a:int", "-c", "b:str",
            "-k", "k")
        for k, a, b in [(1, 5, "x"), (2, 5, "y"), (3, 6, "x"), (4, 7, "z")]:
            run("put", "T", json.dumps({"k": k, "a": a, "b": b}))
        registered = run("create-index", "T_ab", "--table", "T", "--columns", "a,b",
                         "--no-wait")
        assert isinstance(registered, dict) and registered["status"] == "registered"
        # read-only at the registering version's activation: the index was not built then
        with pytest.raises(IndexNotAvailable):
            run("lookup", "T_ab", "5", '"x"', "--at", registered["active_at"])
        c.wait_index_available("T_ab")
        assert run("lookup", "T_ab", "5", '"x"') == [{"k": 1, "a": 5, "b": "x"}]
        assert [r["k"] for r in run("lookup", "T_ab", "5", "--prefix")] == [1, 2]  # type: ignore[attr-defined]
        assert [r["k"] for r in run("lookup", "T_ab", "--from", "5", "--to", "6")] == [  # type: ignore[attr-defined]
            1, 2, 3]
        assert [r["k"] for r in run("lookup", "T_ab", "--from", "[5]", "--to", "[7]",  # type: ignore[attr-defined]
                                    "--exclusive")] == [3]
        with pytest.raises(IndexNotFound):
            run("lookup", "T_nope", "1")
        with pytest.raises(TableNotFound):
            run("get", "NOPE", "1")
        with pytest.raises(tables_cli.BadInput):
            run("lookup", "T_ab", "5", "--from", "1")
        assert run("get", "T", "9") == []
        before = run("scan", "T")
        # the watermark passes the early versions: they are compacted, old reads refused
        for i in range(3):
            c.add_column("T", (f"c{i}", "int"))
        c.rt.sleep(4.0)
        with pytest.raises(CatalogVersionCompacted):
            run("ls", "--version", "1")
        with pytest.raises(ReadBelowLowWatermark):
            run("get", "T", "1", "--at", registered["active_at"])
        after = run("scan", "T")
        assert [r["k"] for r in after] == [r["k"] for r in before]  # type: ignore[attr-defined]


def test_alter_zone_moves_replicas_and_versions_shows_the_log(tmp_path: Path) -> None:
    from sediment.actors.catalog.errors import InvalidDdl, ZoneNotFound

    data = tmp_path / "t"

    def run(*argv: str) -> object:
        return tables_cli.run(c, _args(data, *argv))  # type: ignore[arg-type]

    with tables_cli.cluster(_args(data, "ls")) as c:  # type: ignore[arg-type]
        run("create-zone", "Z", "--partitions", "3", "--replicas", "2")
        run("create-table", "T", "--zone", "Z", "-c", "k:int!", "-c", "v:str", "-k", "k")
        run("put", "T", json.dumps({"k": 1, "v": "one"}))
        before = run("versions")
        assert isinstance(before, dict) and before["latest_version"] == 2
        moved = run("alter-zone", "Z", "--replicas", "3")
        assert isinstance(moved, dict) and moved["version"] == 3
        assert moved["partitions"] == {str(p): ["n1", "n2", "n3"] for p in range(3)}
        # bad input: typed errors, the catalog unchanged
        with pytest.raises(ZoneNotFound):
            run("alter-zone", "NOPE", "--replicas", "2")
        with pytest.raises(InvalidDdl):
            run("alter-zone", "Z", "--replicas", "4")
        after = run("versions")
        assert isinstance(after, dict) and after["latest_version"] == 3
        assert run("get", "T", "1") == [{"k": 1, "v": "one"}]
