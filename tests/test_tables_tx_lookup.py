"""Index lookups inside a read-write transaction (`Transaction.lookup`, `range_lookup`,
`prefix_lookup`; `TxLookup`/`TxRange` at the table node, `node_reads._lookup`): on sim,
the transaction sees its own uncommitted writes (an inserted row found, an updated row
under its new value and not its old one, a deleted row absent) over the newest committed
rows, another transaction's intent met is a `WriteConflict` (as its row reads), and an
index not AVAILABLE in the transaction's catalog version is `IndexNotAvailable`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_helpers import collector, eventually
from tables_helpers import ks, sim_tables, upsert_ab

from sediment.actors.catalog.errors import CatalogError, IndexNotFound, InvalidCommand
from sediment.actors.tables.errors import IndexNotAvailable, UnknownTransaction, WriteConflict
from sediment.actors.tables.index_range import IndexRange
from sediment.actors.tables.shell.index_driver import BEFORE_AVAILABLE
from sediment.actors.tables.shell.node_protocol import TxLookup, TxRange
from sediment.runtime.failpoints import FailpointHit
from sediment.wiring.tables import TablesCluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[TablesCluster]:
    with sim_tables(tmp_path, seed=7) as c:
        yield c


def test_a_transactions_lookups_see_its_own_writes(cluster: TablesCluster) -> None:
    c = cluster
    upsert_ab(c, "n1", (1, 3, "x"), (2, 5, "y"), (3, 5, "a"), (4, 8, "z"))
    c.create_index("T_a", "T", ["a"])
    c.create_index("T_ab", "T", ["a", "b"])
    c.wait_index_available("T_a")
    c.wait_index_available("T_ab")
    tx = c.begin("n2")
    upsert_ab(c, "n3", (6, 5, "d"))  # committed after tx began, before its lookups
    tx.insert("T", {"k": 5, "a": 5, "b": "b"})  # inserted
    tx.insert("T", {"k": 1, "a": 5, "b": "c"})  # updated: 3 -> 5
    tx.delete("T", (3,))  # deleted
    tx.insert("T", {"k": 4, "a": 9, "b": "z"})  # updated: 8 -> 9
    assert ks(tx.lookup("T_a", [5])) == [1, 2, 5, 6]
    assert tx.lookup("T_a", [3]) == [] and tx.lookup("T_a", [8]) == []  # old values
    assert ks(tx.lookup("T_a", [9])) == [4]
    assert ks(tx.lookup("T_ab", [5, "c"])) == [1]
    assert ks(tx.prefix_lookup("T_ab", [5])) == [5, 1, 6, 2]  # index order: by b
    assert ks(tx.range_lookup("T_ab", [5, "b"], [9], lower_inclusive=False)) == [1, 6, 2, 4]
    assert ks(tx.range_lookup("T_ab", None, [8])) == [5, 1, 6, 2]
    # a read-only lookup from before tx began sees none of it, nor row 6
    assert ks(c.lookup("T_a", [5], ts=tx.begin_ts.subtract_physical(1))) == [2, 3]
    assert tx.commit()
    assert ks(c.lookup("T_a", [5])) == [1, 2, 5, 6]
    assert ks(c.prefix_lookup("T_ab", [9])) == [4]


def test_another_transactions_intent_is_a_conflict(cluster: TablesCluster) -> None:
    c = cluster
    upsert_ab(c, "n1", (1, 5, "x"))
    c.create_index("T_a", "T", ["a"])
    c.wait_index_available("T_a")
    tx, other = c.begin("n1"), c.begin("n3")
    other.insert("T", {"k": 2, "a": 5, "b": "o"})  # pending, with the values looked up
    with pytest.raises(WriteConflict):
        tx.lookup("T_a", [5])
    with pytest.raises(WriteConflict):
        tx.prefix_lookup("T_a", [5])
    assert tx.lookup("T_a", [7]) == []  # other values meet no intent
    other.rollback()

    def clean() -> bool:
        try:
            return ks(tx.lookup("T_a", [5])) == [1]
        except WriteConflict:  # the rollback's cleanup not applied yet
            return False

    assert eventually(c.rt, clean, timeout=30)
    assert tx.commit()


def test_a_lookup_in_an_index_not_available_is_typed(cluster: TablesCluster) -> None:
    c = cluster
    upsert_ab(c, "n1", (1, 5, "x"))
    sink = c.rt.spawn(collector, node="ctl")
    c.rt.arm_failpoint_everywhere(BEFORE_AVAILABLE, "pause", notify=sink, tag="held")
    c.create_index("T_a", "T", ["a"])
    assert eventually(c.rt, lambda: any(isinstance(m, FailpointHit)
                                        for m in c.rt.call(sink, "get")), timeout=30)
    building = c.begin("n2")  # its catalog version has the index BUILDING
    for lookup in (lambda: building.lookup("T_a", [5]),
                   lambda: building.range_lookup("T_a", [1], [9])):
        with pytest.raises(IndexNotAvailable) as err:
            lookup()
        assert err.value.status == "building"
    c.rt.release_failpoint_everywhere(BEFORE_AVAILABLE)
    c.wait_index_available("T_a")
    with pytest.raises(IndexNotAvailable):  # still, in the transaction's version
        building.lookup("T_a", [5])
    building.insert("T", {"k": 2, "a": 5})
    assert building.commit()
    tx = c.begin("n3")
    assert ks(tx.lookup("T_a", [5])) == [1, 2]
    assert tx.commit()


def test_bad_lookups_in_a_transaction_are_typed(cluster: TablesCluster) -> None:
    c = cluster
    upsert_ab(c, "n1", (1, 5, "x"))
    c.create_index("T_a", "T", ["a"])
    c.wait_index_available("T_a")
    tx = c.begin("n1")
    with pytest.raises(IndexNotFound):
        tx.lookup("nope", [5])
    with pytest.raises(InvalidCommand):
        tx.lookup("T_a", [5, 6])  # one column
    with pytest.raises(InvalidCommand):
        tx.range_lookup("T_a", ["five"])
    with pytest.raises(UnknownTransaction):
        c.call("n1", TxLookup("n1:0:99", "T_a", (5,)))
    with pytest.raises(CatalogError):
        c.call("n1", TxRange(tx.id, "T_a", (1, 2)))  # not an IndexRange
    with pytest.raises(UnknownTransaction):  # the transaction runs on n1, not n2
        c.call("n2", TxRange(tx.id, "T_a", IndexRange()))
    c.drop_index("T_a")
    with pytest.raises(IndexNotFound):  # dropped since the transaction began
        tx.lookup("T_a", [5])
    tx.insert("T", {"k": 2, "a": 5})
    assert tx.commit()  # the failed lookups changed nothing
    assert ks(c.scan("T")) == [1, 2]
