"""`sediment catalog status`: it starts a tables cluster on the simulator, holds a
transaction open across DDL changes and shows that transaction holding compaction
back at the version it pins, with the versions, log size and coordinator iterations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sediment import cli
from sediment.catalog_status import render


def test_catalog_status_shows_what_holds_compaction_back(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["catalog", "status", "--json", "--seed", "1"]) == 0
    status = json.loads(capsys.readouterr().out)
    held = status["nodes"]["n2"]["oldest_tx"]
    assert held is not None and held[0].startswith("n2:")
    pinned = held[2]
    # compacted up to the version just below the one the open transaction began under
    assert status["earliest_version"] == pinned - 1
    assert status["latest_version"] > pinned
    assert status["log_size"] == status["latest_version"] - status["earliest_version"] + 1
    outcomes = [o["outcome"] for o in status["coordinator"]["outcomes"]]
    assert "compacted" in outcomes or status["earliest_version"] > 0
    assert all(not s["unpublished"] for s in status["nodes"].values())


def test_render_names_each_hold() -> None:
    status = {"earliest_version": 3, "earliest_activation": None, "latest_version": 7,
              "latest_activation": None, "log_size": 5, "leader": "n1",
              "coordinator": {"iteration": {"id": 9, "phase": "collecting",
                                            "waiting": ["n3"]},
                              "outcomes": [{"iteration": 8, "outcome": "partitions_missing",
                                            "detail": "n2 did not cover ['z0p1']",
                                            "version": None}]},
              "nodes": {"n1": {"lwm": None, "oldest_tx": ("n1:0:4", "12.0", 4),
                               "unpublished": [], "partitions": ["z0p0"]},
                        "n2": {"lwm": None, "oldest_tx": None, "unpublished": ["z0p1"],
                               "partitions": ["z0p1"]},
                        "n3": None},
              "index_builds": {"builds": [{"name": "T_v", "stage": "waiting_txs",
                                           "created_version": 5, "built": 0,
                                           "partitions": 4, "waiting_nodes": ["n1"]}]},
              "rebalances": {"running": [{"group": "z0p2", "stable": ["n1"],
                                          "target": ["n1", "n3"], "catalog_version": 6}]}}
    text = render(status)
    assert "index build       T_v waiting_txs (pins version 5; 0/4 partitions backfilled, " \
           "waiting for n1)" in text
    assert "rebalance         z0p2 ['n1'] -> ['n1', 'n3'] (pins version 6)" in text
    assert "catalog versions  3..7" in text
    assert "iteration 9 (collecting, waiting for n3)" in text
    assert "partitions_missing: n2 did not cover" in text
    assert "oldest tx n1:0:4 (began 12.0, pins version 4)" in text
    assert "unpublished partitions z0p1" in text
    assert "n3     down" in text


def test_catalog_needs_a_subcommand() -> None:
    with pytest.raises(SystemExit):
        cli.main(["catalog"])


def test_catalog_status_of_a_data_dir(capsys: pytest.CaptureFixture[str],
                                      tmp_path: Path) -> None:
    # the cluster `sediment tables` keeps in a data dir: its versions and log
    data = str(tmp_path / "t")
    assert cli.main(["catalog", "status", "--data-dir", data]) == 1  # nothing there yet
    assert "no tables cluster" in capsys.readouterr().err
    assert cli.main(["tables", "--data-dir", data, "create-zone", "Z"]) == 0
    assert cli.main(["tables", "--data-dir", data, "create-table", "T", "--zone", "Z",
                     "-c", "k:int!", "-k", "k"]) == 0
    capsys.readouterr()
    assert cli.main(["catalog", "status", "--json", "--data-dir", data]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["latest_version"] == 2 and status["earliest_version"] == 0
    assert sorted(status["nodes"]) == ["n1", "n2", "n3"]
