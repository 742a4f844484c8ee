"""The catalog history checker: each restriction caught when broken, passed when kept;
atomic visibility of committed, aborted and unknown transactions."""

from __future__ import annotations

from sediment.actors.catalog.hlc import hts
from sediment.actors.tables.recorded_history import (
    CatalogCompacted,
    CatalogHistory,
    Pin,
    ReadRecord,
    TxRecord,
    VersionActivated,
    replay_pins,
)
from sediment.scenarios.checkers.catalog_compaction import atomic_visibility, compaction_safety

VERSIONS = tuple(VersionActivated(v, hts(100 * v)) for v in range(6))  # v active from 100v


def history(**kw: object) -> CatalogHistory:
    return CatalogHistory(versions=VERSIONS, **kw)  # type: ignore[arg-type]


def test_transaction_pin() -> None:
    tx = TxRecord("tx1", hts(250), start=1.0, end=5.0, outcome="committed", commit_ts=hts(600))
    # The tx began under version 2: compacting to 2 keeps it, to 3 removes it.
    assert compaction_safety(history(txs=(tx,), compactions=(CatalogCompacted(2, 3.0),))).ok
    bad = compaction_safety(history(txs=(tx,), compactions=(CatalogCompacted(3, 3.0),)))
    assert bad.status == "violation" and "transaction tx1" in bad.details[0]
    # Before it began or after it ended: fine.
    assert compaction_safety(history(txs=(tx,), compactions=(CatalogCompacted(5, 0.5),
                                                             CatalogCompacted(5, 5.0)))).ok
    # Never ended (a dead coordinator): pinned to the end of the run.
    hung = TxRecord("tx2", hts(250), 1.0, None, "unknown")
    assert not compaction_safety(history(txs=(hung,), compactions=(CatalogCompacted(4, 99.),))).ok


def test_other_pins() -> None:
    for kind in ("replay", "index_build", "rebalance"):
        pin = Pin(kind, "x", 3, 1.0, 2.0)  # type: ignore[arg-type]
        assert compaction_safety(history(pins=(pin,), compactions=(CatalogCompacted(3, 1.5),))).ok
        bad = compaction_safety(history(pins=(pin,), compactions=(CatalogCompacted(4, 1.5),)))
        assert not bad.ok and kind in bad.details[0]
    assert compaction_safety(history()).ok
    assert compaction_safety(CatalogHistory(compactions=(CatalogCompacted(1, 0.0),))).status \
        == "unknown"


def test_replay_pins_follow_flushes() -> None:
    events = [(1.0, "p0", "apply", 3), (2.0, "p0", "apply", 2), (3.0, "p1", "apply", 4),
              (4.0, "p0", "flush", 0), (5.0, "p0", "apply", 5)]
    assert replay_pins(events) == [  # type: ignore[arg-type]
        Pin("replay", "p0", 3, 1.0, 2.0), Pin("replay", "p0", 2, 2.0, 4.0),
        Pin("replay", "p0", 5, 5.0, None), Pin("replay", "p1", 4, 3.0, None)]


CELL = (1, (7,))
OTHER = (1, (8,))


def tx(tx_id: str, outcome: str, commit: int | None, **writes: int) -> TxRecord:
    cells = {"a": CELL, "b": OTHER}
    return TxRecord(tx_id, hts(1), 0.0, 1.0, outcome,  # type: ignore[arg-type]
                    hts(commit) if commit is not None else None,
                    {cells[k]: {"v": v} for k, v in writes.items()})


def read(ts: int, cell: tuple[int, tuple[int]], v: int | None) -> ReadRecord:
    return ReadRecord(hts(ts), cell, None if v is None else {"v": v}, 2.0)


def test_visibility_of_committed_and_aborted() -> None:
    txs = (tx("c1", "committed", 10, a=1, b=1), tx("x", "aborted", None, a=9),
           tx("c2", "committed", 20, a=2))
    good = (read(5, CELL, None), read(10, CELL, 1), read(15, OTHER, 1), read(25, CELL, 2))
    assert atomic_visibility(CatalogHistory(txs=txs, reads=good)).ok
    saw_aborted = atomic_visibility(CatalogHistory(txs=txs, reads=(read(15, CELL, 9),)))
    assert not saw_aborted.ok and "aborted x" in saw_aborted.details[0]
    missed = atomic_visibility(CatalogHistory(txs=txs, reads=(read(15, OTHER, None),)))
    assert not missed.ok and "committed by c1" in missed.details[0]


def test_visibility_of_unknown_outcomes() -> None:
    txs = (tx("c1", "committed", 10, a=1, b=1), tx("u", "unknown", 20, a=5, b=5))
    either = (read(25, CELL, 1), read(26, OTHER, 1))
    assert atomic_visibility(CatalogHistory(txs=txs, reads=either)).ok
    seen = (read(25, CELL, 5), read(26, OTHER, 5))
    assert atomic_visibility(CatalogHistory(txs=txs, reads=seen)).ok
    # Seen on one cell at 25, missing on the other at 26: half a transaction.
    torn = (read(25, CELL, 5), read(26, OTHER, 1))
    result = atomic_visibility(CatalogHistory(txs=txs, reads=torn))
    assert not result.ok and "misses u" in result.details[0]


def test_an_unknown_transaction_without_a_commit_time_may_be_seen_after_its_begin() -> None:
    """Found by `scenarios/tables/tables-coordinator-killed-mid-compaction.yaml` seed 13:
    a client's commit call failed (its node killed), so the run knows neither the
    outcome nor the commit time; the commit had landed, and a later read saw it. That
    is no violation; a value no transaction wrote still is."""
    txs = (tx("c1", "committed", 10, a=1), tx("u", "unknown", None, a=5))  # began at 1
    assert atomic_visibility(CatalogHistory(txs=txs, reads=(read(25, CELL, 5),))).ok
    assert atomic_visibility(CatalogHistory(txs=txs, reads=(read(25, CELL, 1),))).ok
    assert not atomic_visibility(CatalogHistory(txs=txs, reads=(read(25, CELL, 7),))).ok
