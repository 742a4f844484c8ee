"""benchmarks/catalog_bench.py runs its steps end to end: the catalog log rows (10,000
DDL in the real run; fewer here), and the tables and KV rows on the simulator with the
same clients it runs on Ray (the table node's typed calls, every transaction committed,
every put done), so a Ray run of it does not fail on the bench's own code."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "catalog_bench.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("catalog_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["catalog_bench"] = module
    spec.loader.exec_module(module)
    return module


def test_the_log_rows_shrink_with_compaction(bench: ModuleType) -> None:
    rows = bench.catalog_rows(400)
    before, keep, full = rows["before"], rows["after_keep"], rows["after_all"]
    assert before["entries"] == 400 + 21 + 1  # the zone, 20 tables, the initial version
    assert keep["entries"] == bench.KEEP + 1 and full["entries"] == 1
    assert before["bytes"] > keep["bytes"] > full["bytes"]


def test_the_tables_and_kv_rows_run_on_sim(bench: ModuleType, tmp_path: Path) -> None:
    tables = bench.tables_rows(str(tmp_path), 16, "test", backend="sim")
    assert tables["tx1/8_committed"] == 16 and tables["tx2/8_committed"] == 16
    assert all(tables[k] > 0 for k in ("tx1/1", "tx2/1", "tx1/8", "tx2/8"))
    kv = bench.kv_rows(str(tmp_path), 40, backend="sim")
    assert kv["put/8_done"] == 40 and kv["put/1"] > 0
