"""Hash partitioning of keys and rendezvous placement of replicas."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sediment.actors.catalog.descriptors import Column, Table, Zone, ZonePartition
from sediment.actors.tables import partitioning
from sediment.actors.tables.partitioning import InvalidKey


def test_partition_of_is_stable_and_spread() -> None:
    # Fixed values: the hash must never change between runs or processes.
    assert [partitioning.partition_of((i,), 8) for i in range(8)] == [0, 0, 5, 6, 7, 4, 6, 4]
    counts = Counter(partitioning.partition_of((i, "x"), 16) for i in range(16_000))
    assert len(counts) == 16 and min(counts.values()) > 800
    # Values of different types never collide by accident of encoding.
    assert partitioning.partition_of((1,), 1 << 20) != partitioning.partition_of(("1",), 1 << 20)


@pytest.mark.parametrize("key", [(), [1], (None,), ({"a": 1},)])
def test_bad_keys(key: object) -> None:
    with pytest.raises(InvalidKey):
        partitioning.partition_of(key, 4)  # type: ignore[arg-type]


def test_key_of_needs_every_pk_column() -> None:
    table = Table(1, "T", 0, (Column("a", "int", False), Column("b", "str", False),
                              Column("v", "int")), ("a", "b"))
    assert partitioning.key_of(table, {"a": 1, "b": "x", "v": 3}) == (1, "x")
    with pytest.raises(InvalidKey):
        partitioning.key_of(table, {"a": 1, "v": 3})


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 12), st.integers(1, 4), st.sets(st.sampled_from(
    [f"n{i}" for i in range(8)]), min_size=1), st.data())
def test_assign_is_rendezvous(partitions: int, replicas: int, nodes: set[str],
                              data: st.DataObject) -> None:
    zone = Zone(3, "z", partitions, replicas)
    a = partitioning.assign(zone, nodes)
    assert set(a) == {ZonePartition(3, p) for p in range(partitions)}
    assert all(len(v) == min(replicas, len(nodes)) and v <= nodes for v in a.values())
    assert partitioning.assign(zone, sorted(nodes, reverse=True)) == a  # order-free
    # A node leaving moves only the partitions it held; the others keep their replicas.
    gone = data.draw(st.sampled_from(sorted(nodes)))
    if len(nodes) > 1:
        b = partitioning.assign(zone, nodes - {gone})
        for group, held in a.items():
            if gone not in held:
                assert b[group] == held
            else:
                assert held - {gone} <= b[group]
