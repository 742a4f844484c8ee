"""MVCC rows with write intents: reads at timestamps, conflicts, cleanup and GC."""

from __future__ import annotations

import pytest

from sediment.actors.catalog.descriptors import ZonePartition
from sediment.actors.catalog.hlc import hts
from sediment.actors.tables import mvcc
from sediment.actors.tables.errors import WriteConflict
from sediment.actors.tables.mvcc import IntentFound, PartitionRows, WriteIntent

CP = ZonePartition(0, 0)
KEY = (1, (7,))


def intent(tx: str, begin: int, value: int | None) -> WriteIntent:
    return WriteIntent(tx, CP, hts(begin), 1, 1, None if value is None else {"k": 7, "v": value})


def committed(*writes: tuple[str, int, int, int | None]) -> PartitionRows:
    """(tx, begin, commit, value) in order."""
    rows = PartitionRows()
    for tx, begin, commit, value in writes:
        rows = mvcc.write_intent(rows, KEY, intent(tx, begin, value))
        rows = mvcc.finalize(rows, tx, hts(commit))
    return rows


def test_reads_at_timestamps() -> None:
    rows = committed(("a", 10, 20, 1), ("b", 30, 40, 2), ("c", 50, 60, None))
    got = [mvcc.read_at(rows, KEY, hts(t)) for t in (5, 20, 39, 40, 59, 60, 99)]
    assert got == [None, {"k": 7, "v": 1}, {"k": 7, "v": 1}, {"k": 7, "v": 2},
                   {"k": 7, "v": 2}, None, None]


def test_intent_visibility_and_resolution() -> None:
    rows = mvcc.write_intent(committed(("a", 10, 20, 1)), KEY, intent("t", 30, 5))
    # A read before the intent's transaction began cannot see it, whatever happens.
    assert mvcc.read_at(rows, KEY, hts(25)) == {"k": 7, "v": 1}
    # A read after it must resolve it at the commit partition.
    found = mvcc.read_at(rows, KEY, hts(35))
    assert isinstance(found, IntentFound) and found.intent.tx_id == "t"
    assert mvcc.resolved_read(rows, KEY, hts(35), "t", hts(33)) == {"k": 7, "v": 5}  # at 33
    assert mvcc.resolved_read(rows, KEY, hts(35), "t", hts(36)) == {"k": 7, "v": 1}  # later
    assert mvcc.resolved_read(rows, KEY, hts(35), "t", None) == {"k": 7, "v": 1}  # aborted
    # Inside the transaction: its own intent; another transaction conflicts.
    assert mvcc.read_latest(rows, KEY, "t") == {"k": 7, "v": 5}
    with pytest.raises(WriteConflict):
        mvcc.read_latest(rows, KEY, "other")


def test_a_resolved_read_ignores_an_intent_that_replaced_the_resolved_one() -> None:
    """The reader resolves the intent it found, then reads again: meanwhile that intent
    may have been cleaned up (committed at 33) and another transaction's put on the key
    (began at 34, its outcome unknown). The commit time resolved belongs to the first
    transaction only: the read sees its version, never the newcomer's row (sim seed 98
    of tables-contended-rows saw the newcomer's row)."""
    rows = mvcc.write_intent(committed(("a", 10, 20, 1)), KEY, intent("t", 30, 5))
    found = mvcc.read_at(rows, KEY, hts(35))
    assert isinstance(found, IntentFound) and found.intent.tx_id == "t"
    rows = mvcc.finalize(rows, "t", hts(33))  # t's cleanup lands
    later = mvcc.write_intent(rows, KEY, intent("u", 36, 9))  # u began after the read
    assert mvcc.resolved_read(later, KEY, hts(35), "t", hts(33)) == {"k": 7, "v": 5}
    # a newcomer that began at or before the read may have committed before it: it is
    # found (and resolved in turn), not taken for the resolved one
    early = mvcc.write_intent(rows, KEY, intent("u", 34, 9))
    again = mvcc.resolved_read(early, KEY, hts(35), "t", hts(33))
    assert isinstance(again, IntentFound) and again.intent.tx_id == "u"
    # t aborted and its intent went: the committed row as of the read
    gone = mvcc.write_intent(mvcc.finalize(mvcc.write_intent(
        committed(("a", 10, 20, 1)), KEY, intent("t", 30, 5)), "t", None), KEY,
        intent("u", 36, 9))
    assert mvcc.resolved_read(gone, KEY, hts(35), "t", None) == {"k": 7, "v": 1}


def test_write_conflicts_change_nothing() -> None:
    rows = mvcc.write_intent(committed(("a", 10, 20, 1)), KEY, intent("t", 30, 5))
    with pytest.raises(WriteConflict) as held:
        mvcc.write_intent(rows, KEY, intent("u", 31, 6))  # another's intent
    assert held.value.holder == "t"
    old = committed(("a", 10, 20, 1))
    with pytest.raises(WriteConflict):
        mvcc.write_intent(old, KEY, intent("late", 15, 6))  # began before a newer commit
    assert mvcc.write_intent(rows, KEY, intent("t", 30, 9)).intents[KEY].row == {"k": 7, "v": 9}


def test_finalize_commit_abort_and_idempotent() -> None:
    rows = mvcc.write_intent(PartitionRows(), KEY, intent("t", 30, 5))
    aborted = mvcc.finalize(rows, "t", None)
    assert aborted == PartitionRows({}, {})
    done = mvcc.finalize(rows, "t", hts(40))
    assert mvcc.read_at(done, KEY, hts(40)) == {"k": 7, "v": 5}
    assert mvcc.finalize(done, "t", hts(50)) == done  # a second cleanup: no intents left


@pytest.mark.parametrize(
    ("lwm", "left", "removed"),
    [
        (5, [20, 40, 60], 0),  # nothing below: nothing goes
        (20, [20, 40, 60], 0),  # the newest at or below the watermark stays readable
        (45, [40, 60], 1),
        (60, [], 3),  # the newest at or below is a deletion: the key goes entirely
        (99, [], 3),
    ],
)
def test_gc(lwm: int, left: list[int], removed: int) -> None:
    rows = committed(("a", 10, 20, 1), ("b", 30, 40, 2), ("c", 50, 60, None))
    after, n = mvcc.gc(rows, hts(lwm))
    assert [v.commit_ts for v in after.versions.get(KEY, ())] == [hts(t) for t in left]
    assert n == removed
    # Every read at or above the watermark is unchanged.
    for t in range(lwm, 70):
        assert mvcc.read_at(after, KEY, hts(t)) == mvcc.read_at(rows, KEY, hts(t))


def test_drop_table_and_keys() -> None:
    rows = committed(("a", 10, 20, 1))
    rows = mvcc.write_intent(rows, (2, (1,)), intent("t", 30, 1))
    assert list(mvcc.keys_of(rows, 1)) == [KEY] and list(mvcc.keys_of(rows, 2)) == [(2, (1,))]
    assert list(mvcc.keys_of(mvcc.drop_table(rows, 1), 1)) == []
