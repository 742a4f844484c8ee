"""Range and prefix lookups on a secondary index (`actors/tables/index_range.py`,
`TablesCluster.range_lookup` / `prefix_lookup`): the bounds by table, the candidates of
a partition, the order of the rows, and on sim a range and a prefix lookup that see the
rows written after the build, in index order, at every timestamp (MVCC), with typed
errors for bad bounds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tables_helpers import ks, sim_tables, upsert_ab

from sediment.actors.catalog.descriptors import (
    Catalog,
    Column,
    Index,
    IndexStatus,
    Table,
    ZonePartition,
)
from sediment.actors.catalog.errors import IndexNotFound, InvalidCommand
from sediment.actors.catalog.hlc import hts
from sediment.actors.tables import index_entries as ie
from sediment.actors.tables import index_range as ir
from sediment.actors.tables.errors import IndexNotAvailable
from sediment.actors.tables.index_range import IndexRange
from sediment.actors.tables.mvcc import PartitionRows, WriteIntent
from sediment.actors.tables.shell.node_protocol import RoGet
from sediment.scenarios.checkers.catalog_compaction import atomic_visibility
from sediment.wiring.tables import TablesCluster

# ---- the core -----------------------------------------------------------------------


@pytest.mark.parametrize("values, rng, inside", [
    ((3, 1), IndexRange(), True),  # unbounded
    ((3, 1), ir.exactly((3, 1)), True),  # equality on every column
    ((3, 2), ir.exactly((3, 1)), False),
    ((3, 2), ir.exactly((3,)), True),  # a prefix
    ((4, 1), ir.exactly((3,)), False),
    ((3, 9), IndexRange((3,), (7,), True, False), True),  # 3 <= a < 7
    ((7, 0), IndexRange((3,), (7,), True, False), False),
    ((7, 0), IndexRange((3,), (7,), True, True), True),  # a <= 7
    ((3, 0), IndexRange((3,), None, False), False),  # exclusive: every b of a = 3 out
    ((3, 5), IndexRange((3, 4), None, False), True),  # (a, b) > (3, 4)
    ((3, 4), IndexRange((3, 4), None, False), False),
    ((2, 9), IndexRange((3, 4)), False),
    ((None, 1), IndexRange(None, (3,)), True),  # NULL first: in when unbounded below
    ((None, 1), IndexRange((0,), (3,)), False),
])
def test_a_range_by_table(values: tuple[Any, ...], rng: IndexRange, inside: bool) -> None:
    assert ir.in_range(values, rng) is inside


def test_candidates_and_index_order() -> None:
    cols = ("a",)
    idx = ie.MaintainedIndex(7, cols, frozenset({((5,), (1,)), ((9,), (2,))}))
    intent = WriteIntent("t", ZonePartition(0, 0), hts(1), 1, 1, {"k": 5, "a": 6})
    rows = PartitionRows({}, {(7, (5,)): intent, (8, (6,)): intent})
    lookup = ir.IndexRangeLookup(3, 7, cols, IndexRange((4,), (8,)))
    assert ir.candidates([((4,), (3,)), ((1,), (4,))], idx, rows, lookup) == [(1,), (3,), (5,)]
    found = [((2,), {"a": 9}), ((1,), {"a": None}), ((3,), {"a": 4}), ((0,), {"a": 4})]
    assert [pk for pk, _ in ir.in_index_order(found, cols)] == [(1,), (0,), (3,), (2,)]


# ---- on sim -------------------------------------------------------------------------

@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[TablesCluster]:
    with sim_tables(tmp_path, seed=5) as c:
        yield c


def test_range_and_prefix_lookups_in_index_order_at_every_timestamp(
        cluster: TablesCluster) -> None:
    c = cluster
    upsert_ab(c, "n1", (1, 3, "x"), (2, 5, "y"), (3, 5, "a"), (4, 8, "z"), (5, None, "n"))
    c.create_index("T_ab", "T", ["a", "b"])
    c.wait_index_available("T_ab")
    before = c.read("n1", RoGet("T", (1,)))[1]  # a read's timestamp
    upsert_ab(c, "n2", (6, 5, "b"), (1, 6, "x"))  # a new row, and row 1 moves 3 -> 6
    upsert_ab(c, "n3", (4, None, None))  # row 4 leaves the range
    for node in c.nodes:
        assert ks(c.prefix_lookup("T_ab", [5], node=node)) == [3, 6, 2]  # by b
        assert ks(c.range_lookup("T_ab", [3], [7], upper_inclusive=False,
                                 node=node)) == [3, 6, 2, 1]
        assert ks(c.range_lookup("T_ab", [5, "a"], [5, "b"], lower_inclusive=False,
                                 node=node)) == [6]
        assert ks(c.range_lookup("T_ab", None, [4], node=node)) == [4, 5]  # NULLs first
        assert ks(c.range_lookup("T_ab", [5], None, lower_inclusive=False,
                                 node=node)) == [1]
        assert ks(c.prefix_lookup("T_ab", [5, "y"], node=node)) == [2]
        # MVCC: the same lookups as of before the updates
        assert ks(c.range_lookup("T_ab", [3], [7], upper_inclusive=False, ts=before,
                                 node=node)) == [1, 3, 2]
        assert ks(c.range_lookup("T_ab", [8], None, ts=before, node=node)) == [4]
    assert ks(c.lookup("T_ab", [5, "b"])) == [6]  # equality still works
    history = c.recorder.history()
    assert atomic_visibility(history).ok, atomic_visibility(history)


def test_bad_range_lookups_are_typed(cluster: TablesCluster) -> None:
    c = cluster
    upsert_ab(c, "n1", (1, 3, "x"))
    with pytest.raises(IndexNotFound):
        c.range_lookup("nope", [1])
    c.create_index("T_ab", "T", ["a", "b"])
    c.wait_index_available("T_ab")
    for lower in ([], [1, "x", 2], ["one"], [None], [True]):
        with pytest.raises(InvalidCommand):
            c.range_lookup("T_ab", lower)
    with pytest.raises(InvalidCommand):
        c.range_lookup("T_ab", None, [1, 2])  # b is a str
    assert ks(c.range_lookup("T_ab", [5], [1])) == []  # empty, not an error
    assert ks(c.prefix_lookup("T_ab", [3])) == [1]


def test_a_range_lookup_needs_an_available_index() -> None:
    table = Table(1, "T", 0, (Column("k", "int", False), Column("a", "int")), ("k",))
    index = Index(2, "T_a", 1, ("a",), False, IndexStatus.BUILDING, 3, 3)
    cat = Catalog(3, hts(1), 3, {}, {1: table}, {2: index})
    with pytest.raises(IndexNotAvailable):
        ir.plan(cat, "T_a", IndexRange())
    ready = Catalog(4, hts(2), 3, {}, {1: table},
                    {2: Index(2, "T_a", 1, ("a",), False, IndexStatus.AVAILABLE, 3, 4)})
    lookup, name = ir.plan(ready, "T_a", IndexRange((1,), None, False))
    assert name == "T" and lookup.range == IndexRange((1,), None, False, True)
