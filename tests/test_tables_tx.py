"""Transactions: the commit partition's record (a table of finish / recover / resolve),
the coordinator's two-phase lifecycle, and bad input (typed errors, nothing sent)."""

from __future__ import annotations

from typing import Any

import pytest

from sediment.actors.catalog import catalog_log, ddl
from sediment.actors.catalog.descriptors import Catalog, Column, ZonePartition
from sediment.actors.catalog.errors import TableNotFound
from sediment.actors.catalog.hlc import hts
from sediment.actors.tables import mvcc, partition, tx_state
from sediment.actors.tables import transactions as txn
from sediment.actors.tables.errors import InvalidRow, TableDropped, TxNotActive, WriteConflict
from sediment.actors.tables.partition import FinishTxCmd, Ok, PartitionState, WriteIntentCmd
from sediment.actors.tables.transactions import Phase, SendCleanup, SendFinish, SendWrite, TxEnded
from sediment.actors.tables.tx_state import Resolution, TxRecord, TxStatus

G0, G1 = ZonePartition(0, 0), ZonePartition(0, 1)
T = hts(100)
C = hts(200)

COMMITTED = TxRecord(TxStatus.COMMITTED, C, frozenset({G0}))
ABORTED = TxRecord(TxStatus.ABORTED, None, frozenset({G0}))


@pytest.mark.parametrize(
    ("record", "commit", "after", "as_requested"),
    [
        (None, True, COMMITTED, True),
        (None, False, ABORTED, True),
        (COMMITTED, True, COMMITTED, True),  # a retried finish: idempotent
        (ABORTED, False, ABORTED, True),
        (ABORTED, True, ABORTED, False),  # a recovery aborted it first: the commit loses
        (COMMITTED, False, COMMITTED, False),  # a late rollback cannot undo a commit
    ],
)
def test_finish(record: TxRecord | None, commit: bool, after: TxRecord,
                as_requested: bool) -> None:
    new, outcome = tx_state.finish(record, commit, C if commit else None, frozenset({G0}))
    assert new == after and outcome.record == after and outcome.as_requested is as_requested


@pytest.mark.parametrize(
    ("record", "alive", "resolution"),
    [
        (COMMITTED, False, Resolution.COMMITTED),
        (COMMITTED, True, Resolution.COMMITTED),
        (ABORTED, True, Resolution.ABORTED),
        (None, True, Resolution.WAIT),
        (None, False, Resolution.RECOVER),
    ],
)
def test_resolve(record: TxRecord | None, alive: bool, resolution: Resolution) -> None:
    assert tx_state.resolve(record, alive) is resolution


def test_recover_aborts_only_unfinished() -> None:
    assert tx_state.recover(None).status is TxStatus.ABORTED
    assert tx_state.recover(COMMITTED) == COMMITTED


def test_finish_commit_needs_a_timestamp() -> None:
    with pytest.raises(ValueError):
        tx_state.finish(None, True, None, frozenset())


# ---- the coordinator's lifecycle ---------------------------------------------------------


K = Column("k", "int", nullable=False)
V = Column("v", "str")


def catalog() -> Catalog:
    log = catalog_log.initial()
    log, _ = catalog_log.execute(log, (ddl.CreateZone("Z", partitions=2, replicas=1),
                                       ddl.CreateTable("T", "Z", (K, V), ("k",)),
                                       ddl.CreateTable("U", "Z", (K,), ("k",))), hts(10), 0)
    return log.latest


def begun() -> txn.RwTx:
    return txn.begin("tx1", "n1", T, catalog())


def write(tx: txn.RwTx, k: int, table: str = "T") -> tuple[txn.RwTx, SendWrite]:
    row: dict[str, Any] = {"k": k, "v": f"v{k}"} if table == "T" else {"k": k}
    tx, effects = txn.write(tx, catalog(), table, row)
    assert len(effects) == 1 and isinstance(effects[0], SendWrite)
    return tx, effects[0]


def test_commit_is_two_phase() -> None:
    tx, w1 = write(begun(), 1)
    tx, w2 = write(tx, 4)
    groups = {w1.group, w2.group}
    assert groups == {G0, G1}  # keys 1 and 4 land in different partitions
    assert tx.commit_partition == w1.group and w2.command.commit_partition == w1.group
    # Commit waits for the acks, then asks the commit partition.
    tx, effects = txn.commit(tx, C, catalog())
    assert effects == [] and tx.phase is Phase.COMMITTING
    tx, effects = txn.on_write_result(tx, None)
    assert effects == []
    tx, effects = txn.on_write_result(tx, None)
    assert effects == [SendFinish(w1.group, FinishTxCmd("tx1", True, C, frozenset(groups), 1))]
    # The commit partition records it; cleanup everywhere, then the end.
    record, outcome = tx_state.finish(None, True, C, frozenset(groups))
    tx, effects = txn.on_finish_result(tx, outcome)
    assert tx.phase is Phase.COMMITTED
    assert {e.group for e in effects if isinstance(e, SendCleanup)} == groups
    assert effects[-1] == TxEnded("tx1", True, C, None)


def test_a_one_partition_transaction_finishes_and_cleans_up_in_one_entry() -> None:
    tx, w1 = write(begun(), 1)
    g = w1.group
    same = next(k for k in range(2, 40) if write(begun(), k)[1].group == g)
    other = next(k for k in range(2, 40) if write(begun(), k)[1].group != g)
    tx, _ = write(tx, same)
    assert txn.one_partition(tx)
    tx, _ = txn.on_write_result(tx, None)
    tx, _ = txn.on_write_result(tx, None)
    for commit in (True, False):
        t, effects = txn.commit(tx, C, catalog()) if commit else txn.rollback(tx)
        ts = C if commit else None
        assert effects == [SendFinish(g, FinishTxCmd("tx1", commit, ts, frozenset({g}), 1,
                                                     cleanup=True))]
        _, outcome = tx_state.finish(None, commit, ts, frozenset({g}))
        t, effects = txn.on_finish_result(t, outcome)
        assert effects == [TxEnded("tx1", commit, ts, None)]  # nothing left to clean up
    tx, _ = write(tx, other)  # a second partition: two-phase again
    assert not txn.one_partition(tx)


def test_a_finish_that_cleans_up_follows_the_record() -> None:
    """`FinishTxCmd(cleanup=True)`: the intents become versions at the commit time, or
    vanish on an abort, or on a commit that a recovery aborted first; others' stay."""
    def state() -> PartitionState:
        s = partition.initial(G0)
        for i, (tx, k) in enumerate((("tx1", 1), ("tx1", 2), ("tx2", 3)), start=1):
            s, result = partition.apply(s, i, WriteIntentCmd(tx, 1, (k,), {"k": k}, 1, 1, T,
                                                             G0))
            assert result == Ok()
        return s
    finish = FinishTxCmd("tx1", True, C, frozenset({G0}), 1, cleanup=True)
    s, outcome = partition.apply(state(), 4, finish)
    assert isinstance(outcome, tx_state.FinishOutcome) and outcome.as_requested
    assert set(s.rows.intents) == {(1, (3,))}
    assert mvcc.read_at(s.rows, (1, (2,)), C) == {"k": 2}
    assert mvcc.read_at(s.rows, (1, (2,)), T) is None
    s, _ = partition.apply(state(), 4, FinishTxCmd("tx1", False, None, frozenset({G0}), 1,
                                                   cleanup=True))
    assert set(s.rows.intents) == {(1, (3,))} and not s.rows.versions
    s, _ = partition.apply(state(), 4, partition.RecoverTxCmd("tx1"))
    s, outcome = partition.apply(s, 5, finish)
    assert isinstance(outcome, tx_state.FinishOutcome) and not outcome.as_requested
    assert set(s.rows.intents) == {(1, (3,))} and not s.rows.versions
    s, _ = partition.apply(s, 6, partition.CleanupCmd("tx1", None, 1))  # a late one: no-op
    assert set(s.rows.intents) == {(1, (3,))}


def test_a_conflict_turns_the_commit_into_an_abort() -> None:
    tx, w1 = write(begun(), 1)
    tx, _ = write(tx, 4)
    tx, _ = txn.on_write_result(tx, None)
    conflict = WriteConflict("tx1", "t1[4]", "tx0")
    tx, _ = txn.on_write_result(tx, conflict)
    tx, effects = txn.commit(tx, C, catalog())
    assert tx.phase is Phase.ABORTING
    assert effects == [SendFinish(w1.group, FinishTxCmd("tx1", False, None,
                                                        frozenset({G0, G1}), 1))]
    _, outcome = tx_state.finish(None, False, None, frozenset({G0, G1}))
    tx, effects = txn.on_finish_result(tx, outcome)
    assert tx.phase is Phase.ABORTED and effects[-1] == TxEnded("tx1", False, None, conflict)


def test_a_commit_after_recovery_is_answered_aborted() -> None:
    tx, _ = write(begun(), 1)
    tx, _ = txn.on_write_result(tx, None)
    tx, _ = txn.commit(tx, C, catalog())
    _, outcome = tx_state.finish(tx_state.recover(None), True, C, frozenset({G0}))
    tx, effects = txn.on_finish_result(tx, outcome)
    assert tx.phase is Phase.ABORTED
    end = effects[-1]
    assert isinstance(end, TxEnded) and not end.committed and isinstance(end.failure, TxNotActive)


def test_a_table_dropped_before_commit_aborts_the_transaction() -> None:
    tx, _ = write(begun(), 1, table="U")
    tx, _ = txn.on_write_result(tx, None)
    log = catalog_log.initial()
    log, _ = catalog_log.execute(log, (ddl.CreateZone("Z", 2, 1),), hts(10), 0)
    tx, effects = txn.commit(tx, C, log.latest)  # the version at commit has no table U
    assert tx.phase is Phase.ABORTING and isinstance(tx.failure, TableDropped)
    assert isinstance(effects[0], SendFinish) and not effects[0].command.commit


def test_rollback_and_empty_commit() -> None:
    tx, effects = txn.commit(begun(), C, catalog())
    assert tx.phase is Phase.COMMITTED and effects == [TxEnded("tx1", True, C, None)]
    tx, effects = txn.rollback(begun())
    assert tx.phase is Phase.ABORTED and effects == [TxEnded("tx1", False, None, None)]


BAD: list[tuple[str, str, Any, type[Exception]]] = [
    ("missing table", "NOPE", {"k": 1}, TableNotFound),
    ("unknown column", "T", {"k": 1, "zz": 2}, InvalidRow),
    ("null primary key", "T", {"v": "x"}, InvalidRow),
    ("wrong type", "T", {"k": "one"}, InvalidRow),
    ("bool for int", "T", {"k": True}, InvalidRow),
    ("not a mapping", "T", [("k", 1)], InvalidRow),
]


@pytest.mark.parametrize(("table", "row", "error"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_writes_are_typed_errors_and_send_nothing(table: str, row: Any,
                                                      error: type[Exception]) -> None:
    tx = begun()
    with pytest.raises(error):
        txn.write(tx, catalog(), table, row)
    assert tx == begun()


def test_a_transaction_on_a_dropped_table() -> None:
    """The table was dropped before the transaction began: its catalog version has no
    such table, so the write is refused and nothing is sent."""
    log = catalog_log.initial()
    log, _ = catalog_log.execute(log, (ddl.CreateZone("Z", 2, 1),
                                       ddl.CreateTable("T", "Z", (K,), ("k",))), hts(10), 0)
    log, _ = catalog_log.execute(log, (ddl.DropTable("T"),), hts(20), 0)
    tx = txn.begin("tx9", "n1", hts(30), catalog_log.catalog_at(log, hts(30)))
    with pytest.raises(TableNotFound):
        txn.write(tx, catalog_log.catalog_at(log, hts(30)), "T", {"k": 1})
    with pytest.raises(TableNotFound):
        txn.delete(tx, catalog_log.catalog_at(log, hts(30)), "T", (1,))


def test_ended_transactions_refuse_work() -> None:
    tx, _ = txn.rollback(begun())
    for action in (lambda: txn.write(tx, catalog(), "T", {"k": 1}),
                   lambda: txn.commit(tx, C, catalog()), lambda: txn.rollback(tx)):
        with pytest.raises(TxNotActive):
            action()


# ---- the partition machine ----------------------------------------------------------


def test_partition_applies_writes_finish_and_cleanup() -> None:
    s = partition.initial(G0)
    cmd = WriteIntentCmd("tx1", 1, (1,), {"k": 1}, 1, 3, T, G0)
    s, result = partition.apply(s, 1, cmd)
    assert result == Ok() and partition.replay_floor(s) == 3
    s, result = partition.apply(s, 2, WriteIntentCmd("tx2", 1, (1,), {"k": 1}, 1, 2, T, G0))
    assert isinstance(result, partition.Failed) and isinstance(result.error, WriteConflict)
    assert partition.replay_floor(s) == 3 and s.applied == 2  # refused: not recorded
    s, result = partition.apply(s, 3, FinishTxCmd("tx1", True, C, frozenset({G0}), 4))
    assert isinstance(result, tx_state.FinishOutcome) and result.as_requested
    s, _ = partition.apply(s, 4, partition.CleanupCmd("tx1", C, 4))
    assert s.rows.intents == {} and s.txs["tx1"].status is TxStatus.COMMITTED
    s, published = partition.flush(s)
    assert partition.replay_floor(s) is None and s.flushed == 4 and published is None
    with pytest.raises(ValueError):
        partition.apply(s, 4, cmd)  # an index applied twice is a bug of the caller
    s, result = partition.apply(s, 5, "garbage")
    assert isinstance(result, partition.Failed) and s.applied == 5


def test_partition_state_is_a_value() -> None:
    a = partition.initial(G0)
    b, _ = partition.apply(a, 1, WriteIntentCmd("t", 1, (1,), None, 1, 1, T, G0))
    assert a == PartitionState(G0) and a != b
