"""The layers stay layered: the actor packages know none of each other's tiers, and
only the wiring layer (`sediment/wiring/`) puts them together.

Read from the source (every import statement, those inside functions too), so a
coupling that comes back fails here before anyone has to find it in a diff.
"""

from __future__ import annotations

from pathlib import Path

from import_scan import imports_of

import sediment
from sediment.wiring.cluster import Cluster

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("actors", "runtime", "supervision")
OTHER_TIERS = ("sediment.actors.blocks", "sediment.actors.branches", "sediment.actors.spark",
               "sediment.actors.catalog", "sediment.actors.tables")


_imports = imports_of


def _offenders(directory: str, banned: tuple[str, ...]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / directory).rglob("*.py")):
        bad = sorted(m for m in _imports(path) if m.startswith(banned))
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    return found


def test_the_kv_package_imports_no_other_tier_and_no_wiring() -> None:
    # the coordinator's hold comes in as a value (KvNodeConfig.flush_hold), not by
    # naming the metastore; Cluster and its client live in the wiring layer
    assert _offenders("actors/kv", (*OTHER_TIERS, "sediment.wiring")) == {}


def test_the_block_tier_imports_no_kv_module() -> None:
    # the MVCC read errors both tiers raise (ErrCompacted, ErrFutureRev, their KvError
    # base) live in actors/mvcc_errors.py, and the flusher reads the KV's history
    # through the HistorySource port the wiring layer fills (sediment/wiring/kv_history.py)
    assert _offenders("actors/blocks", ("sediment.actors.kv",)) == {}
    shared = _imports(ROOT / "actors/mvcc_errors.py")
    assert not any(m.startswith("sediment.actors.kv") for m in shared)


def test_the_block_tier_imports_no_spark_module() -> None:
    # the Spark executor (actors/spark/shell/executor.py) is passed in by the tier's config;
    # the block tier's worker knows only the Executor protocol
    assert _offenders("actors/blocks", ("sediment.actors.spark",)) == {}


def test_no_product_package_imports_the_wiring_layer_or_holds_a_checker() -> None:
    for package in PRODUCT:
        assert _offenders(package, ("sediment.wiring", "sediment.scenarios.checkers")) == {}
        # test oracles live under scenarios/checkers (watch_oracle.py was actors/kv's)
        assert sorted((ROOT / package).rglob("*checker*.py")) == []


# the CLI's scenario commands: `run`/`sweep` (sweep.py), their progress bar (progress.py),
# the headline demo (demo.py) and `local` (local_cluster.py, a scenario's observers
# and runner over a local cluster)
RUNS_SCENARIOS = {"sediment/demo.py", "sediment/local_cluster.py", "sediment/progress.py",
                  "sediment/sweep.py"}


def test_only_the_clis_scenario_commands_import_the_scenario_harness() -> None:
    # a product module that needs a type the harness also uses owns it (the tables
    # recorder's history types are actors/tables/recorded_history.py)
    found: dict[str, list[str]] = {}
    for package in (*PRODUCT, "sediment"):
        found.update(_offenders(package, ("sediment.scenarios",)))
    assert sorted(found) == sorted(RUNS_SCENARIOS)


def test_the_public_cluster_is_the_wiring_layers() -> None:
    assert sediment.Cluster is Cluster
