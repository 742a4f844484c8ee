"""The tables tier in scenarios (`cluster.tables`, `scenarios/tables/`): the schema reads
and refuses it, and each file passes on sim for SEDIMENT_SCENARIO_SEEDS seeds (1 by
default; the sweeps are in docs/catalog.md) with the catalog checks run and the
evidence that its situation happened (the coordinator's aborts, the pins the checker
enforced, the events applied). On Ray (the session's cluster) the headline file runs
once: the tier's processes in real hosts, both catalog checks passed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sediment.scenarios import schema
from sediment.scenarios.runner import RunResult, run_scenario
from sediment.scenarios.schema_tables import TablesSpec
from sediment.scenarios.tables_tier import TIER_CHECK

FILES = Path(__file__).resolve().parents[1] / "scenarios" / "tables"
SEEDS = int(os.environ.get("SEDIMENT_SCENARIO_SEEDS", "1"))
NAMES = ("tables-coordinator-killed-mid-compaction", "tables-long-transaction-and-index-build",
         "tables-rebalance-and-dropped-zone", "tables-node-stopped-past-its-watermark",
         "tables-contended-rows", "tables-idle-node-stopped-past-its-watermark")
TABLE_CHECKS = ("catalog_compaction_safety", "catalog_atomic_visibility", TIER_CHECK)


def load(name: str) -> schema.Scenario:
    return schema.load(FILES / f"{name}.yaml")


def test_the_files_load_and_round_trip() -> None:
    found = {s.name: s for s in schema.load_dir(FILES)}
    assert set(found) == set(NAMES)
    for s in found.values():
        assert isinstance(s.cluster.tables, TablesSpec)
        assert s.cluster.tables.events
        assert schema.load_dict(s.to_dict()) == s
        assert schema.loads(s.to_yaml()) == s


def test_a_scenario_without_the_tier_has_none() -> None:
    s = schema.loads("name: plain\nduration: 2\n")
    assert s.cluster.tables is None
    assert "tables" not in s.to_dict()["cluster"]


def test_the_lock_wait_is_the_clusters_default_unless_set() -> None:
    # a file without it keeps the cluster's default, and its plain form stays as it was
    # (so histories of the existing files do not change); 0 is no-wait
    from sediment.actors.tables.shell.node_state import DEFAULT_LOCK_WAIT

    plain = schema.loads("name: w\nduration: 2\ncluster: {tables: {}}\n")
    assert plain.cluster.tables is not None
    assert plain.cluster.tables.lock_wait == DEFAULT_LOCK_WAIT
    assert "lock_wait" not in plain.to_dict()["cluster"]["tables"]
    nowait = schema.loads("name: w\nduration: 2\ncluster: {tables: {lock_wait: 0}}\n")
    assert nowait.cluster.tables is not None and nowait.cluster.tables.lock_wait == 0.0
    assert schema.load_dict(nowait.to_dict()) == nowait


BASE = """
name: bad
duration: 4
cluster:
  tables: {tables}
"""


@pytest.mark.parametrize("tables, message", [
    ("{nodes: 2, replicas: 3}", "cluster.tables.replicas: must be at most nodes (2), got 3"),
    ("{partitons: 3}", "unknown key (did you mean 'partitions'?)"),
    ("{mix: {tx: 0}}", "at least one weight must be above 0"),
    ("{events: [{at: 1}]}", "needs exactly one action"),
    ("{events: [{at: 1, alter_zone: {}}]}", "cluster.tables.events[0].alter_zone.replicas: "
                                            "is required"),
    ("{events: [{at: 1, alter_zone: {replicas: 4}}]}", "must be an integer in [1, 3]"),
    ("{events: [{at: 9, drop_zone: {}}]}", "cluster.tables.events[0].at: must be a number"),
    ("{events: [{at: 1, kill_node: {node: n1}}]}", "must be one of t1, t2, t3, leader, any, "
                                                   "idle"),
    ("{events: [{at: 1, stop_node: {node: t1}}]}", "stop_node.hold: is required"),
    ("{events: [{at: 1, drop_zone: {}, kill_leader: {}}]}", "got drop_zone, kill_leader"),
    ("{lock_wait: -1}", "cluster.tables.lock_wait: must be a number"),
])
def test_bad_tables_settings_are_refused(tables: str, message: str) -> None:
    with pytest.raises(schema.ScenarioError) as err:
        schema.loads(BASE.format(tables=tables), "bad.yaml")
    assert message in str(err.value)
    assert "bad.yaml:" in str(err.value)  # with its place in the file


def run(name: str, seed: int, tmp_path: Path, backend: str = "sim") -> RunResult:
    result = run_scenario(load(name), backend, seed, data_dir=tmp_path / f"{name}-{seed}")
    assert result.error is None, result.error
    checks = {c.name: c for c in result.checks}
    for check in TABLE_CHECKS:  # run on every run with the tier, and passed
        assert check in checks, sorted(checks)
        assert checks[check].status == "ok", checks[check].report()
    assert result.verdict == "pass", [c.report() for c in result.violations]
    return result


def note(result: RunResult, prefix: str) -> str:
    found = [n for n in result.notes if n.startswith(prefix)]
    assert found, result.notes
    return found[0]


def count(line: str, key: str) -> int:
    """`key N` in a notes line of counts."""
    for part in line.split(": ", 1)[1].split(", "):
        k, _, v = part.rpartition(" ")
        if k == key:
            return int(v)
    return 0


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(SEEDS))
def test_the_coordinator_killed_mid_compaction(seed: int, tmp_path: Path) -> None:
    r = run(NAMES[0], seed, tmp_path)
    events = [n for n in r.notes if n.startswith("tables event:")]
    held = [n for n in events if "held before applying a compaction" in n]
    assert held, events  # the kill landed mid-compaction at least once
    assert sum("killed" in n for n in events) == 3
    assert count(note(r, "tables coordinator outcomes"), "compacted") >= 1


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(SEEDS))
def test_a_long_transaction_and_a_held_index_build(seed: int, tmp_path: Path) -> None:
    r = run(NAMES[1], seed, tmp_path)
    outcomes = note(r, "tables coordinator outcomes")
    assert count(outcomes, "index_building") >= 1, outcomes
    assert count(note(r, "tables pins"), "index_build") == 2
    assert any("long transaction" in n and "committed True" in n for n in r.notes)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(SEEDS))
def test_a_rebalance_and_a_dropped_zone(seed: int, tmp_path: Path) -> None:
    r = run(NAMES[2], seed, tmp_path)
    assert count(note(r, "tables pins"), "rebalance") >= 1
    assert any("dropped at version" in n for n in r.notes)
    earliest = int(note(r, "tables catalog").split("earliest version ")[1].split(",")[0])
    dropped = int(next(n for n in r.notes if "dropped at version" in n).rsplit(" ", 1)[1])
    assert earliest > dropped  # compaction passed the dropped zone


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(SEEDS))
def test_a_node_stopped_then_a_node_killed(seed: int, tmp_path: Path) -> None:
    r = run(NAMES[3], seed, tmp_path)
    outcomes = note(r, "tables coordinator outcomes")
    assert count(outcomes, "nodes_missing") >= 1, outcomes
    assert any("restarted" in n for n in r.notes)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(SEEDS))
def test_an_idle_node_restarts_past_its_stored_watermark(seed: int, tmp_path: Path) -> None:
    """Ignite's ItNodeRecoveryAfterCatalogTruncatedAboveStoredLwmTest as a file: the
    catalog was compacted past the watermark the stopped node stored, and it came back."""
    r = run(NAMES[5], seed, tmp_path)
    restarted = [n for n in r.notes if n.startswith("tables event:") and "restarted" in n]
    assert len(restarted) == 1 and "compacted past it yes" in restarted[0], restarted
    assert count(note(r, "tables coordinator outcomes"), "compacted") >= 1


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(SEEDS))
def test_contended_rows_with_the_bounded_lock_wait(seed: int, tmp_path: Path) -> None:
    """Four clients on three rows: writers met live holders (some waited through, some
    were refused), transactions still committed, compaction ran, both kills landed."""
    r = run(NAMES[4], seed, tmp_path)
    clients = note(r, "tables clients")
    assert count(clients, "write:WriteConflict") >= 1, clients  # contention happened
    assert count(clients, "write:ok") >= 10 and count(clients, "tx:ok") >= 10, clients
    txs = note(r, "tables transactions")  # the recorded ones, by outcome
    assert count(txs, "committed") >= 10 and count(txs, "writes in committed") >= 10, txs
    assert count(note(r, "tables coordinator outcomes"), "compacted") >= 1
    events = [n for n in r.notes if n.startswith("tables event:")]
    assert sum("killed" in n for n in events) == 2, events


# Seeds a sweep found failing, run on sim once fixed (file, seed, the bug).
REGRESSION_SEEDS = (
    ("tables-contended-rows", 98,
     "a read-only read that resolved one transaction's intent returned the row of the "
     "intent another transaction had put on the key meanwhile"),
    ("tables-node-stopped-past-its-watermark", 43,
     "the recorder kept a transaction pinned for ever whose Begin the killed node's old "
     "incarnation answered after its transactions were abandoned (its writes then "
     "answered UnknownTransaction); catalog_compaction_safety flagged a safe compaction"),
)


@pytest.mark.slow
@pytest.mark.parametrize("name, seed, bug", REGRESSION_SEEDS,
                         ids=[f"{n}-{s}-regression" for n, s, _ in REGRESSION_SEEDS])
def test_a_seed_a_sweep_found_failing_passes(name: str, seed: int, bug: str,
                                             tmp_path: Path) -> None:
    run(name, seed, tmp_path)  # every check passes, catalog_atomic_visibility among them


def test_table_nodes_that_hide_their_transactions_are_caught(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The protocol broken on purpose, end to end: table nodes that report no active
    transaction to the coordinator let compaction pass the version the long transaction
    began under, and `catalog_compaction_safety` says so."""
    from sediment.actors.tables import active_txs

    monkeypatch.setattr(active_txs, "min_version", lambda a: None)
    monkeypatch.setattr(active_txs, "minimum_required_time", lambda a, now, f: now)
    r = run_scenario(load(NAMES[1]), "sim", 0, data_dir=tmp_path / "broken")
    assert r.error is None, r.error
    safety = next(c for c in r.checks if c.name == "catalog_compaction_safety")
    assert safety.status == "violation", safety.report()
    assert any("still needed by transaction" in d for d in safety.details), safety.details


# ---- on ray (not run with -m "not ray") -------------------------------------------------


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_coordinator_killed_mid_compaction_on_ray(tmp_path: Path,
                                                      request: pytest.FixtureRequest) -> None:
    """The issue's headline situation with real processes: the coordinator killed
    while the catalog compacts; every check passes, a kill landed and one compaction at
    least went through (how many of the three kills find a held leader is up to Ray's
    timing: 2 in the first run here)."""
    request.getfixturevalue("ray_cluster")
    r = run(NAMES[0], 0, tmp_path, backend="ray")
    events = [n for n in r.notes if n.startswith("tables event:")]
    assert sum("killed" in n for n in events) >= 1, events
    assert count(note(r, "tables coordinator outcomes"), "compacted") >= 1
