"""The tables cluster on the simulator: processes, raft groups and SQLite, driven through
the Python API. Transactions across partitions commit whole or not at all and are seen
by read-only reads at their commit time; write conflicts abort; bad input is a typed
error with nothing changed; the catalog is compacted once the low watermark passes its
versions, and the recorded history passes both checkers; a killed node comes back with
its rows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_helpers import eventually

from sediment.actors.catalog.errors import (
    CatalogVersionCompacted,
    InvalidCommand,
    TableExists,
    TableNotFound,
    ZoneNotFound,
)
from sediment.actors.catalog.hlc import hts
from sediment.actors.catalog.low_watermark import LowWatermarkConfig
from sediment.actors.tables.errors import (
    InvalidRow,
    ReadBelowLowWatermark,
    UnknownTransaction,
    WriteConflict,
)
from sediment.actors.tables.shell.node_protocol import Write
from sediment.scenarios.checkers.catalog_compaction import atomic_visibility, compaction_safety
from sediment.wiring.tables import TablesCluster

COLUMNS = [("k", "int", False), ("v", "str")]
LWM = LowWatermarkConfig(data_availability_ms=3_000, update_interval_ms=300, max_clock_skew_ms=10)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[TablesCluster]:
    with TablesCluster.start(nodes=3, backend="sim", data_dir=str(tmp_path), seed=3,
                             lwm=LWM) as c:
        c.create_zone("Z", partitions=4, replicas=2)
        c.create_table("T", "Z", COLUMNS, ["k"])
        yield c


def checks_pass(c: TablesCluster) -> None:
    c.poll()
    history = c.recorder.history()
    for check in (compaction_safety, atomic_visibility):
        result = check(history)
        assert result.ok, result.report()


def test_a_transaction_across_partitions_commits_whole(cluster: TablesCluster) -> None:
    c = cluster
    tx = c.begin("n1")
    for k in range(8):
        tx.insert("T", {"k": k, "v": f"v{k}"})
    assert tx.get("T", (3,)) == {"k": 3, "v": "v3"}  # its own intent
    # not committed: a read before it began does not see it (one at a later time would
    # wait for the transaction to end: docs/catalog.md §4)
    assert c.get("T", (3,), ts=tx.begin_ts.subtract_physical(1)) is None
    assert len({g for g in c.node_status("n1")["partitions"]}) >= 1
    assert tx.commit()
    assert tx.commit_ts is not None and tx.commit_ts > tx.begin_ts
    assert c.scan("T") == [{"k": k, "v": f"v{k}"} for k in range(8)]
    # a read at a time before the commit sees nothing, after it everything
    assert c.get("T", (5,), ts=tx.begin_ts) is None
    assert c.get("T", (5,), ts=tx.commit_ts, node="n3") == {"k": 5, "v": "v5"}
    rolled = c.begin("n2")
    rolled.insert("T", {"k": 1, "v": "never"})
    rolled.delete("T", (2,))
    rolled.rollback()
    assert rolled.outcome == "aborted"
    assert c.get("T", (1,)) == {"k": 1, "v": "v1"} and c.get("T", (2,)) == {"k": 2, "v": "v2"}
    checks_pass(c)


def test_a_read_only_transaction_reads_one_snapshot_whatever_commits_meanwhile(
        cluster: TablesCluster) -> None:
    """Ignite's read-only transaction: its first read fixes the timestamp, and every
    later read of it (rows, a scan, across partitions, through another node's handle at
    the same time) sees that snapshot while newer transactions commit."""
    c = cluster
    first = c.begin("n1")
    for k in range(4):
        first.insert("T", {"k": k, "v": "old"})
    assert first.commit()
    ro = c.read_only(node="n2")
    assert ro.ts is None
    assert ro.get("T", (0,)) == {"k": 0, "v": "old"}
    fixed = ro.ts
    assert fixed is not None and first.commit_ts is not None and fixed >= first.commit_ts
    later = c.begin("n3")
    later.insert("T", {"k": 1, "v": "new"})
    later.delete("T", (2,))
    later.insert("T", {"k": 9, "v": "new"})
    assert later.commit()
    assert ro.get("T", (1,)) == {"k": 1, "v": "old"} and ro.get("T", (9,)) is None
    assert ro.scan("T") == [{"k": k, "v": "old"} for k in range(4)]
    assert ro.ts == fixed
    assert c.scan("T") == [{"k": 0, "v": "old"}, {"k": 1, "v": "new"},
                           {"k": 3, "v": "old"}, {"k": 9, "v": "new"}]
    # the same timestamp through another node sees the same snapshot
    assert c.read_only(fixed, node="n1").scan("T") == ro.scan("T")
    checks_pass(c)


def test_a_read_only_transaction_past_the_low_watermark_is_refused(
        cluster: TablesCluster) -> None:
    """Nothing holds the watermark for a handle: once it passes the handle's time the
    next read is refused with the typed error (Ignite's data availability bounds how
    long a read-only transaction may run)."""
    c = cluster
    tx = c.begin("n1")
    tx.insert("T", {"k": 1, "v": "a"})
    assert tx.commit()
    ro = c.read_only()
    assert ro.get("T", (1,)) == {"k": 1, "v": "a"}
    assert ro.ts is not None

    def refused() -> bool:
        try:
            ro.get("T", (1,))
        except ReadBelowLowWatermark:
            return True
        return False

    assert eventually(c.rt, refused, timeout=30, step=0.5)
    assert c.get("T", (1,)) == {"k": 1, "v": "a"}  # a fresh read is served


def test_a_one_partition_transaction_ends_with_its_finish(cluster: TablesCluster) -> None:
    """Its finish cleans its intents up in the same entry: the coordinator forgets it
    as soon as the client hears the outcome, and a writer of the row meets no intent."""
    c = cluster
    for v, node in (("a", "n1"), ("b", "n2"), ("c", "n3")):
        tx = c.begin(node)
        tx.insert("T", {"k": 1, "v": v})
        assert tx.commit()
        assert c.node_status(node)["active_txs"] == 0  # no cleanup to wait for
    tx = c.begin("n1")
    tx.insert("T", {"k": 1, "v": "d"})
    tx.rollback()
    assert c.node_status("n1")["active_txs"] == 0
    assert c.get("T", (1,)) == {"k": 1, "v": "c"}
    checks_pass(c)


def test_a_write_conflict_aborts_the_later_transaction(cluster: TablesCluster) -> None:
    c = cluster
    first, second = c.begin("n1"), c.begin("n2")
    first.insert("T", {"k": 5, "v": "first"})
    second.insert("T", {"k": 6, "v": "second"})
    with pytest.raises(WriteConflict):
        second.insert("T", {"k": 5, "v": "second"})
    with pytest.raises(WriteConflict):
        second.get("T", (5,))  # another transaction's intent
    assert not second.commit()  # all or nothing: its k=6 goes too
    assert first.commit()
    assert c.get("T", (5,)) == {"k": 5, "v": "first"}
    assert c.get("T", (6,)) is None
    checks_pass(c)


def test_bad_input_is_a_typed_error_and_changes_nothing(cluster: TablesCluster) -> None:
    c = cluster
    latest = c.versions().latest_version
    with pytest.raises(TableNotFound):
        c.add_column("nope", ("x", "int"))
    with pytest.raises(TableExists):
        c.create_table("T", "Z", COLUMNS, ["k"])
    with pytest.raises(ZoneNotFound):
        c.create_table("U", "nowhere", COLUMNS, ["k"])
    assert c.versions().latest_version == latest
    tx = c.begin()
    with pytest.raises(TableNotFound):
        tx.insert("nope", {"k": 1})
    with pytest.raises(InvalidRow):
        tx.insert("T", {"k": "not an int"})
    with pytest.raises(InvalidRow):
        tx.insert("T", {"v": "no key"})
    with pytest.raises(UnknownTransaction):
        c.call("n1", Write("n1:0:999", "T", {"k": 1}))
    with pytest.raises(InvalidCommand):
        c.call("n1", ("bogus",))
    tx.insert("T", {"k": 9, "v": "nine"})
    assert tx.commit()  # the refused writes did not spoil it
    # a transaction on a table dropped before it commits aborts; a new one finds no table
    open_tx = c.begin("n3")
    open_tx.insert("T", {"k": 10, "v": "ten"})
    c.drop_table("T")
    assert not open_tx.commit()
    with pytest.raises(TableNotFound):
        c.begin().insert("T", {"k": 11})
    with pytest.raises(TableNotFound):
        c.get("T", (9,))
    checks_pass(c)


def test_the_catalog_is_compacted_behind_the_low_watermark(cluster: TablesCluster) -> None:
    c = cluster
    for i in range(6):
        c.add_column("T", (f"c{i}", "int"))
        tx = c.begin(f"n{i % 3 + 1}")
        tx.insert("T", {"k": i, "v": str(i)})
        assert tx.commit()
    latest = c.versions().latest_version
    assert eventually(c.rt, lambda: c.versions().earliest_version >= latest - 1, timeout=20)
    status = c.catalog_status()
    assert status["log_size"] < latest  # the snapshot replaced the updates below it
    assert any(o["outcome"] == "compacted" for o in status["coordinator"]["outcomes"])
    first = c.recorder.versions[1]
    with pytest.raises(CatalogVersionCompacted):
        c.catalog_at(first)
    with pytest.raises(CatalogVersionCompacted):
        c.catalog_at(hts(0))
    with pytest.raises(ReadBelowLowWatermark):
        c.get("T", (1,), ts=hts(1))
    assert [row["k"] for row in c.scan("T")] == list(range(6))
    checks_pass(c)


def test_a_killed_node_comes_back_with_its_rows(cluster: TablesCluster) -> None:
    c = cluster
    tx = c.begin("n1")
    for k in range(6):
        tx.insert("T", {"k": k, "v": "x"})
    assert tx.commit()
    c.kill_node("n2")
    assert c.scan("T", node="n1") == [{"k": k, "v": "x"} for k in range(6)]
    assert eventually(c.rt, lambda: c.node_status("n2") is not None, timeout=30)
    assert eventually(c.rt, lambda: len(c.node_status("n2")["partitions"]) > 0, timeout=30)
    assert c.scan("T", node="n2") == [{"k": k, "v": "x"} for k in range(6)]
    after = c.begin("n2")
    after.insert("T", {"k": 0, "v": "y"})
    assert after.commit()
    assert c.get("T", (0,), node="n3") == {"k": 0, "v": "y"}
    checks_pass(c)
