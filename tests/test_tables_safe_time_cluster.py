"""Safe time wired into the table nodes (docs/catalog.md rule 5, `node_safe_time.py`),
on sim: a read-only read is served only once every node that may coordinate
transactions was heard from at or above its timestamp. With one node's clock behind,
a read at "now" elsewhere waits for that clock instead of missing a commit the slow
node stamps below it afterwards; a clock too far behind ends the wait in a typed error;
a stopped node leaves the read's topology."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from tables_helpers import COLUMNS

from sediment.actors.catalog.hlc import hts
from sediment.actors.tables import safe_time as st
from sediment.actors.tables.errors import SafeTimeUnavailable
from sediment.actors.tables.shell import node_safe_time as nst
from sediment.actors.tables.shell.node_protocol import RoGet
from sediment.scenarios.checkers.catalog_compaction import atomic_visibility, compaction_safety
from sediment.wiring.tables import TEST_LWM, TablesCluster

NODES = frozenset({"a", "b", "c"})


@pytest.mark.parametrize("heard, now, ts, ask", [
    ((), 100, 99, ("b", "c")),  # nobody heard from
    ((("b", 99), ("c", 120)), 100, 99, ()),  # both at or above: safe already
    ((("b", 98), ("c", 120)), 100, 99, ("b",)),  # b heard below ts
    ((("b", 200), ("c", 200)), 100, 150, ("a",)),  # ts ahead of its own clock
])
def test_who_a_read_asks(heard: tuple[tuple[str, int], ...], now: int, ts: int,
                         ask: tuple[str, ...]) -> None:
    tracker = st.init("a", NODES)
    for node, ms in heard:
        tracker = st.heard(tracker, node, 1, hts(ms))
    assert nst.to_ask(tracker, hts(now), hts(ts)) == ask


@pytest.mark.parametrize("ts, physical, observed", [
    (hts(1_005), 1_000, True),  # within the skew bound: the clock moves
    (hts(1_010), 1_000, True),
    (hts(1_011), 1_000, False),  # too far ahead: the read waits instead
    (None, 1_000, False),  # a start's request carries no time
    ("bad", 1_000, False),
])
def test_a_clock_request_moves_a_clock_only_within_the_skew(ts: object, physical: int,
                                                             observed: bool) -> None:
    assert nst.may_observe(ts, physical, 10) is observed


def start(tmp_path: Path, seed: int, offsets: dict[str, int],
          replicas: int = 2) -> TablesCluster:
    # reads at a timestamp from before a 1.5 s wait stay above the low watermark
    lwm = dataclasses.replace(TEST_LWM, data_availability_ms=20_000)
    c = TablesCluster.start(3, backend="sim", data_dir=str(tmp_path), seed=seed,
                            lwm=lwm, clock_offsets_ms=offsets)
    c.create_zone("Z", partitions=4, replicas=replicas)
    c.create_table("T", "Z", COLUMNS, ["k"])
    return c


@pytest.fixture
def skewed(tmp_path: Path) -> Iterator[TablesCluster]:
    c = start(tmp_path, 1, {"n2": -1_500})  # n2's clock 1.5 s behind the others
    yield c
    c.stop()


@pytest.mark.parametrize("key", [1, 2, 3])
def test_a_read_waits_for_a_slow_clock_instead_of_missing_its_commit(
        skewed: TablesCluster, key: int) -> None:
    c = skewed
    rows, read_ts = c.read("n1", RoGet("T", (key,), None))
    assert rows == [] or rows[0][1] is None
    # n2 coordinates a commit right after: its clock alone would stamp it 1.5 s below
    # the read; the read waited until n2's clock passed its timestamp
    tx = c.begin("n2")
    tx.insert("T", {"k": key, "v": 7})
    assert tx.commit()
    assert tx.commit_ts is not None and tx.commit_ts > read_ts
    for node in c.nodes:  # the same read again, anywhere: still nothing (repeatable)
        assert c.get("T", (key,), ts=read_ts, node=node) is None
        assert c.get("T", (key,), ts=tx.commit_ts, node=node) == {"k": key, "v": 7}
    assert compaction_safety(c.recorder.history()).ok
    assert atomic_visibility(c.recorder.history()).ok


def test_a_clock_too_far_behind_ends_the_wait_in_a_typed_error(tmp_path: Path) -> None:
    c = start(tmp_path, 2, {"n3": -60_000})  # behind by more than the bounded wait
    try:
        tx = c.begin("n1")
        tx.insert("T", {"k": 5, "v": 1})
        assert tx.commit()
        with pytest.raises(SafeTimeUnavailable) as err:
            c.get("T", (5,), node="n1")
        assert err.value.behind == ["n3"]
        # nothing changed: a read at the commit is not safe either, an old one is
        with pytest.raises(SafeTimeUnavailable):
            c.get("T", (5,), ts=tx.commit_ts, node="n2")
    finally:
        c.stop()


def test_a_stopped_node_leaves_the_topology(tmp_path: Path) -> None:
    c = start(tmp_path, 3, {}, replicas=3)  # a majority of every partition stays up
    try:
        tx = c.begin("n1")
        tx.insert("T", {"k": 2, "v": 3})
        assert tx.commit()
        c.stop_node("n3")
        assert c.get("T", (2,), node="n1") == {"k": 2, "v": 3}
        c.restart_node("n3")
        assert c.get("T", (2,), node="n3") == {"k": 2, "v": 3}
    finally:
        c.stop()
