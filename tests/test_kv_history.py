"""History below the KV's compact revision (sediment.actors.kv.history and the Store's
skeleton reads): the rows a flusher reads (`history_rows`), and Range / history answers
whose compacted values are filled from elsewhere, equal to what the store answered
before it compacted. Real SQLite files in a temporary directory; the "blocks" here are
the rows the store itself had before compaction."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from sediment.actors.kv import history as hist
from sediment.actors.kv.errors import (
    ErrCompacted,
    ErrFutureRev,
    ErrHistoryUnavailable,
    ErrNegativeRevision,
    InvalidRequest,
)
from sediment.actors.kv.machine import NetsyMachine
from sediment.actors.kv.queries import HistoryEvents, HistoryRange, HistoryRows
from sediment.actors.kv.store import ALL_KEYS, Store
from sediment.actors.kv.types import DeleteRange, Event, Put, Range, RangeResult
from sediment.actors.log.raft.types import Entry

KEYS = [b"a", b"b", b"c", b"d"]


def seeded(store: Store, seed: int, writes: int = 40) -> None:
    """Puts, single deletes, a range delete and two-key txns at consecutive revisions."""
    rng = random.Random(seed)
    for i in range(writes):
        roll = rng.random()
        if roll < 0.15:
            store.delete_range(rng.choice(KEYS))
        elif roll < 0.2:
            store.delete_range(b"a", b"c")
        elif roll < 0.3:
            a, b = rng.sample(KEYS, 2)
            store.txn((), (Put(a, b"t%d" % i), Put(b, b"")))
        else:
            store.put(rng.choice(KEYS), b"v%d" % i)


def values_of(store: Store) -> dict[hist.RowId, bytes | None]:
    """(key, revision) -> value (None: a delete) of every row: what the blocks keep."""
    return {(bytes(r[1]), r[0]): None if r[6] else bytes(r[2]) for r in store.rows()}


def answers(store: Store) -> tuple[dict[int, RangeResult], dict[int, list[Event]]]:
    head = store.head
    ranges = {rev: store.range(b"\0", ALL_KEYS, revision=rev) for rev in range(1, head + 1)}
    events = {rev: store.events(rev, b"\0", ALL_KEYS) for rev in range(1, head + 1)}
    return ranges, events


@pytest.mark.parametrize("seed", range(6))
def test_skeletons_filled_from_the_flushed_rows_answer_as_before_compaction(
        tmp_path: Path, seed: int) -> None:
    with Store(tmp_path / "kv.sqlite") as store:
        seeded(store, seed)
        flushed = values_of(store)
        ranges, events = answers(store)
        compact_at = store.head - 5
        store.compact(compact_at)
        with pytest.raises(ErrCompacted):
            store.range(b"\0", ALL_KEYS, revision=compact_at - 1)
        for rev, expected in ranges.items():
            skeleton = store.range_skeleton(Range(b"\0", ALL_KEYS, rev))
            assert skeleton.compact_revision == compact_at
            if rev >= compact_at:
                assert skeleton.missing == ()  # the hot store still has them all
            got = hist.fill_range(skeleton, flushed)
            assert (got.kvs, got.count, got.more) == (expected.kvs, expected.count,
                                                     expected.more), rev
            assert got.revision == store.head
        for rev, expected_events in events.items():
            skeleton_events = store.events_skeleton(rev, b"\0", ALL_KEYS)
            assert hist.fill_events(skeleton_events, flushed) == expected_events, rev


def test_a_skeleton_knows_which_values_are_gone(tmp_path: Path) -> None:
    with Store(tmp_path / "kv.sqlite") as store:
        store.put(b"a", b"1")  # 2
        store.put(b"b", b"1")  # 3
        store.put(b"a", b"2")  # 4
        store.delete_range(b"b")  # 5
        store.put(b"a", b"3")  # 6
        store.compact(5)
        skeleton = store.range_skeleton(Range(b"a", revision=3))
        assert skeleton.missing == (0,) and hist.range_needs(skeleton) == {(b"a", 2)}
        assert skeleton.result.kvs[0].value == b""  # a placeholder until filled
        assert store.range_skeleton(Range(b"a", revision=4)).missing == ()  # latest <= 5
        keys = store.range_skeleton(Range(b"a", ALL_KEYS, revision=3, keys_only=True))
        assert keys.missing == () and [kv.key for kv in keys.result.kvs] == [b"a", b"b"]
        counted = store.range_skeleton(Range(b"a", ALL_KEYS, revision=3, count_only=True))
        assert counted.missing == () and counted.result.count == 2
        limited = store.range_skeleton(Range(b"a", ALL_KEYS, revision=3, limit=1))
        assert limited.result.more and limited.missing == (0,)
        history = store.events_skeleton(1, b"a", ALL_KEYS)
        assert [e.kind for e in history.events] == ["put", "put", "put", "delete", "put"]
        assert history.missing == (0, 1)  # a@2 and b@3: superseded at or below 5
        assert hist.events_need(history) == {(b"a", 2), (b"b", 3)}
        with pytest.raises(ErrHistoryUnavailable):
            hist.fill_events(history, {(b"a", 2): b"1"})
        with pytest.raises(ErrHistoryUnavailable):  # a delete where a put should be
            hist.fill_range(skeleton, {(b"a", 2): None})


def test_skeleton_reads_refuse_bad_and_future_revisions(tmp_path: Path) -> None:
    with Store(tmp_path / "kv.sqlite") as store:
        store.put(b"a", b"1")
        store.put(b"a", b"2")  # head 3
        with pytest.raises(ErrFutureRev):
            store.range_skeleton(Range(b"a", revision=4))
        with pytest.raises(ErrFutureRev):
            store.events_skeleton(4, b"a")
        with pytest.raises(ErrFutureRev):
            store.events_skeleton(1, b"a", end_revision=4)
        with pytest.raises(InvalidRequest):
            store.events_skeleton(0, b"a")
        with pytest.raises(ErrNegativeRevision):
            store.events_skeleton(1, b"a", end_revision=-1)
        # etcd: a Range at a negative revision reads at head
        assert store.range_skeleton(Range(b"a", revision=-1)).result.kvs[0].value == b"2"
        with pytest.raises(InvalidRequest):
            store.events_skeleton(1, b"")
        assert store.events_skeleton(2, b"a", end_revision=1).events == ()


def test_history_rows_come_in_whole_revisions(tmp_path: Path) -> None:
    with Store(tmp_path / "kv.sqlite") as store:
        store.put(b"a", b"1")  # 2
        store.txn((), (Put(b"b", b"1"), Put(b"c", b"1"), Put(b"d", b"1")))  # 3: three rows
        store.delete_range(b"a")  # 4
        store.put(b"a", b"")  # 5: an empty value is a value
        assert store.history_rows(1, 10) == hist.FlushRows(
            ((2, b"a", b"1"), (3, b"b", b"1"), (3, b"c", b"1"), (3, b"d", b"1"),
             (4, b"a", None), (5, b"a", b"")), 5, False)
        cut = store.history_rows(1, 2)  # revision 3 would be split: stop before it
        assert (cut.rows, cut.through, cut.more) == (((2, b"a", b"1"),), 2, True)
        whole = store.history_rows(3, 1)  # a revision larger than the batch comes whole
        assert [r[0] for r in whole.rows] == [3, 3, 3] and whole.through == 3 and whole.more
        assert store.history_rows(6, 10) == hist.FlushRows((), 5, False)
        # a key deleted and put again in one revision: its last change is the row
        store.txn((), (DeleteRange(b"a", b"\0"), Put(b"b", b"2")))  # 6: etcd accepts it
        assert store.history_rows(6, 10).rows == (
            (6, b"a", None), (6, b"b", b"2"), (6, b"c", None), (6, b"d", None))
        store.compact(4)
        assert store.history_rows(4, 10).rows[0] == (4, b"a", None)  # at C: allowed
        with pytest.raises(ErrCompacted):
            store.history_rows(3, 10)
        for lo, n in ((0, 1), (1, 0), (-1, 1), (1, True)):
            with pytest.raises(InvalidRequest):
                store.history_rows(lo, n)  # type: ignore[arg-type]


def test_the_machine_answers_the_block_tier_queries(tmp_path: Path) -> None:
    machine = NetsyMachine(str(tmp_path))
    for index, command in enumerate([Put(b"a", b"1"), Put(b"a", b"2"), DeleteRange(b"a")], 1):
        machine.apply(Entry(index, 1, 0.0, command))
    assert machine.query(HistoryRows(1, 10)).rows == ((2, b"a", b"1"), (3, b"a", b"2"),
                                                         (4, b"a", None))
    machine.store.compact(3)
    skeleton = machine.query(HistoryRange(Range(b"a", revision=2)))
    assert isinstance(skeleton, hist.RangeSkeleton) and skeleton.missing == (0,)
    events = machine.query(HistoryEvents(1, None, b"a", None))
    assert isinstance(events, hist.EventsSkeleton) and events.head == 4
    assert isinstance(machine.query(HistoryRows(1, 10)), ErrCompacted)
    assert isinstance(machine.query(HistoryEvents(9, None, b"a", None)), ErrFutureRev)
    machine.close()
