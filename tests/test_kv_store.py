"""The MVCC store of the Netsy KV (sediment.actors.kv.store) against etcd's semantics."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sediment.actors.kv.errors import (
    ErrCompacted,
    ErrDuplicateKey,
    ErrEmptyKey,
    ErrFutureRev,
    ErrInvalidRangeEnd,
    ErrKeyTooLarge,
    ErrNegativeRevision,
    ErrRequestTooLarge,
    ErrRevisionNotAfterHead,
    ErrTooManyOps,
    ErrValueTooLarge,
    KvError,
)
from sediment.actors.kv.store import ALL_KEYS, Store, live_indexes, prefix_end
from sediment.actors.kv.types import (
    Compare,
    DeleteRange,
    DeleteResult,
    KeyValue,
    Put,
    PutResult,
    Range,
    RangeResult,
)
from sediment.actors.kv.validation import Limits


@pytest.fixture
def store(tmp_path: Path):
    s = Store(tmp_path / "kv.db")
    yield s
    s.close()


def keys(res: RangeResult) -> list[bytes]:
    return [kv.key for kv in res.kvs]


# ---------------------------------------------------------------- put / get / range --


def test_put_assigns_revisions_versions_and_create_revision(store: Store) -> None:
    assert store.head == 0
    assert store.put(b"a", b"1").revision == 1
    assert store.put(b"b", b"1").revision == 2
    assert store.put(b"a", b"2").revision == 3
    assert store.get(b"a") == KeyValue(b"a", b"2", create_revision=1, mod_revision=3, version=2)
    assert store.get(b"a", revision=1) == KeyValue(b"a", b"1", 1, 1, 1)
    assert store.get(b"a", revision=2) == KeyValue(b"a", b"1", 1, 1, 1)
    assert store.head == 3
    # a put after a delete starts a new generation
    store.delete_range(b"a")
    assert store.get(b"a") is None
    store.put(b"a", b"3")
    assert store.get(b"a") == KeyValue(b"a", b"3", 5, 5, 1)


def test_put_prev_kv(store: Store) -> None:
    assert store.put(b"k", b"v1", prev_kv=True).prev_kv is None
    assert store.put(b"k", b"v2", prev_kv=True).prev_kv == KeyValue(b"k", b"v1", 1, 1, 1)
    assert store.put(b"k", b"v3").prev_kv is None  # not asked for


@pytest.fixture
def filled(store: Store) -> Store:
    for k in (b"a", b"ab", b"abc", b"b", b"c", b"\xff", b"\xff\xff"):
        store.put(k, b"v-" + k)
    return store


@pytest.mark.parametrize(
    ("key", "range_end", "expected"),
    [
        (b"a", None, [b"a"]),
        (b"zz", None, []),
        (b"a", b"b", [b"a", b"ab", b"abc"]),
        (b"a", b"c", [b"a", b"ab", b"abc", b"b"]),
        (b"ab", prefix_end(b"ab"), [b"ab", b"abc"]),
        (b"a", prefix_end(b"a"), [b"a", b"ab", b"abc"]),
        (b"b", ALL_KEYS, [b"b", b"c", b"\xff", b"\xff\xff"]),
        (b"\0", ALL_KEYS, [b"a", b"ab", b"abc", b"b", b"c", b"\xff", b"\xff\xff"]),
        (b"\xff", prefix_end(b"\xff"), [b"\xff", b"\xff\xff"]),
        (b"b", b"b", []),  # empty interval, not an error
    ],
)
def test_range_forms(filled: Store, key, range_end, expected) -> None:
    res = filled.range(key, range_end)
    assert keys(res) == expected
    assert res.count == len(expected)
    assert res.revision == filled.head


def test_prefix_end() -> None:
    assert prefix_end(b"abc") == b"abd"
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"\xff\xff") == ALL_KEYS


def test_range_limit_count_only_keys_only(filled: Store) -> None:
    res = filled.range(b"a", ALL_KEYS, limit=2)
    assert keys(res) == [b"a", b"ab"] and res.count == 7 and res.more
    res = filled.range(b"a", ALL_KEYS, limit=7)
    assert len(res.kvs) == 7 and not res.more
    res = filled.range(b"a", ALL_KEYS, count_only=True)
    assert res.kvs == [] and res.count == 7
    res = filled.range(b"a", b"b", keys_only=True)
    assert [kv.value for kv in res.kvs] == [b"", b"", b""]
    assert [kv.mod_revision for kv in res.kvs] == [1, 2, 3]


def test_range_pages_of_a_large_range_count_every_live_key(store: Store) -> None:
    """Pages with a limit (read limit + 1 rows) against the whole range: keys updated,
    deleted and put again, read at head and at an older revision."""
    for i in range(0, 300, 3):
        store.txn((), tuple(Put(b"k/%03d" % j, b"v1") for j in range(i, i + 3)), ())
    old = store.head
    store.txn((), tuple(DeleteRange(b"k/%03d" % j) for j in range(0, 300, 7)[:100]), ())
    for j in range(0, 300, 14):
        store.put(b"k/%03d" % j, b"v2")  # put again after its delete
    for at in (0, old):
        whole = store.range(b"k/", b"k0", revision=at)
        key, seen = b"k/", []
        while True:
            page = store.range(key, b"k0", revision=at, limit=16)
            seen += page.kvs
            rest = store.range(key, b"k0", revision=at)
            assert page.count == len(rest.kvs) and page.more == (len(rest.kvs) > 16)
            if not page.more:
                break
            key = page.kvs[-1].key + b"\0"
        assert seen == whole.kvs and whole.count == len(whole.kvs)
        assert store.range(b"k/", b"k0", revision=at, count_only=True).count == whole.count
    assert store.range(b"k/", b"k0", revision=old).count == 300


def test_range_at_revisions(store: Store) -> None:
    store.put(b"a", b"1")  # 1
    store.put(b"b", b"1")  # 2
    store.delete_range(b"a")  # 3
    store.put(b"a", b"2")  # 4
    expected = {
        1: [(b"a", b"1")],
        2: [(b"a", b"1"), (b"b", b"1")],
        3: [(b"b", b"1")],
        4: [(b"a", b"2"), (b"b", b"1")],
        0: [(b"a", b"2"), (b"b", b"1")],
    }
    for rev, kvs in expected.items():
        res = store.range(b"a", ALL_KEYS, revision=rev)
        assert [(kv.key, kv.value) for kv in res.kvs] == kvs, rev
        assert res.revision == 4  # the header is always the head
    with pytest.raises(ErrFutureRev):
        store.range(b"a", revision=5)


def test_delete_range_prev_kv_and_revisions(filled: Store) -> None:
    head = filled.head
    res = filled.delete_range(b"a", b"b", prev_kv=True)
    assert res.deleted == 3 and res.revision == head + 1
    assert [kv.key for kv in res.prev_kvs] == [b"a", b"ab", b"abc"]
    assert res.prev_kvs[0].value == b"v-a"
    assert keys(filled.range(b"a", ALL_KEYS)) == [b"b", b"c", b"\xff", b"\xff\xff"]
    # deleting nothing does not consume a revision (etcd)
    res = filled.delete_range(b"nothing")
    assert res == DeleteResult(head + 1, 0, [])
    assert filled.head == head + 1
    assert filled.delete_range(b"b", prev_kv=False).prev_kvs == []


# ----------------------------------------------------------------------------- txn --


def test_txn_success_and_failure_branches(store: Store) -> None:
    store.put(b"k", b"v")  # 1
    res = store.txn(
        [Compare(b"k", "value", "=", b"v")],
        [Put(b"k", b"v2"), Put(b"j", b"x"), Range(b"k")],
        [Put(b"fail", b"1")],
    )
    assert res.succeeded and res.revision == 2
    assert [type(r) for r in res.responses] == [PutResult, PutResult, RangeResult]
    assert all(r.revision == 2 for r in res.responses)
    # the range inside the txn sees the txn's own earlier write
    rng = res.responses[2]
    assert isinstance(rng, RangeResult) and rng.kvs[0].value == b"v2"
    # one revision for the whole txn
    assert store.get(b"j").mod_revision == 2 and store.get(b"k").mod_revision == 2
    res = store.txn([Compare(b"k", "value", "=", b"v")], [Put(b"no", b"1")], [Put(b"f", b"1")])
    assert not res.succeeded and res.revision == 3
    assert store.get(b"no") is None and store.get(b"f") is not None


def test_read_only_txn_does_not_consume_a_revision(store: Store) -> None:
    store.put(b"k", b"v")
    res = store.txn([], [Range(b"k")], [])
    assert res.succeeded and res.revision == 1 and store.head == 1
    res = store.txn([], [DeleteRange(b"missing")], [])
    assert res.revision == 1 and store.head == 1


@pytest.fixture
def cmp_store(store: Store) -> Store:
    store.put(b"k", b"m")  # 1
    store.put(b"other", b"x")  # 2
    store.put(b"k", b"m")  # 3: k create 1, mod 3, version 2
    return store


@pytest.mark.parametrize(
    ("target", "op", "value", "expected"),
    [
        ("value", "=", b"m", True),
        ("value", "!=", b"m", False),
        ("value", "<", b"n", True),
        ("value", ">", b"n", False),
        ("value", ">", b"a", True),
        ("version", "=", 2, True),
        ("version", "!=", 2, False),
        ("version", "<", 3, True),
        ("version", ">", 1, True),
        ("version", ">", 2, False),
        ("create_revision", "=", 1, True),
        ("create_revision", "<", 1, False),
        ("create_revision", ">", 0, True),
        ("create_revision", "!=", 3, True),
        ("mod_revision", "=", 3, True),
        ("mod_revision", "<", 3, False),
        ("mod_revision", ">", 2, True),
        ("mod_revision", "!=", 1, True),
    ],
)
def test_txn_compare_targets(cmp_store: Store, target, op, value, expected) -> None:
    res = cmp_store.txn([Compare(b"k", target, op, value)], [], [])
    assert res.succeeded is expected


@pytest.mark.parametrize(
    ("compare", "expected"),
    [
        # a missing key has version / create / mod revision 0 (the create-if-absent idiom)
        (Compare(b"missing", "version", "=", 0), True),
        (Compare(b"missing", "create_revision", "=", 0), True),
        (Compare(b"missing", "mod_revision", "<", 1), True),
        # a value compare on a missing key is false, whatever the op
        (Compare(b"missing", "value", "!=", b"x"), False),
        (Compare(b"missing", "value", "=", b""), False),
        # over a range every key must satisfy it
        (Compare(b"k", "mod_revision", ">", 0, range_end=ALL_KEYS), True),
        (Compare(b"k", "version", "=", 2, range_end=ALL_KEYS), False),
    ],
)
def test_txn_compare_missing_keys_and_ranges(cmp_store: Store, compare, expected) -> None:
    assert cmp_store.txn([compare], [], []).succeeded is expected


def test_txn_compare_and_swap_retry_loop(store: Store) -> None:
    """Kubernetes' compaction loop: a CAS on compact_rev_key, then Compact."""
    res = store.txn(
        [Compare(b"compact_rev_key", "version", "=", 0)], [Put(b"compact_rev_key", b"1")], []
    )
    assert res.succeeded
    res = store.txn(
        [Compare(b"compact_rev_key", "version", "=", 0)], [Put(b"compact_rev_key", b"2")], []
    )
    assert not res.succeeded and store.get(b"compact_rev_key").value == b"1"


# ---------------------------------------------------------------------- compaction --


def history(store: Store) -> None:
    store.put(b"a", b"a1")  # 1
    store.put(b"b", b"b1")  # 2
    store.put(b"a", b"a2")  # 3
    store.delete_range(b"b")  # 4
    store.put(b"a", b"a3")  # 5
    store.put(b"c", b"c1")  # 6


def test_compact_error_rules(store: Store) -> None:
    history(store)
    with pytest.raises(ErrCompacted):
        store.compact(0)  # at the initial compact revision 0
    with pytest.raises(ErrFutureRev):
        store.compact(7)  # above head
    assert store.compact(3) == 6
    assert store.compact_revision == 3
    with pytest.raises(ErrCompacted):
        store.compact(3)  # at
    with pytest.raises(ErrCompacted):
        store.compact(2)  # below
    store.compact(6)  # exactly head is allowed
    assert store.compact_revision == 6
    with pytest.raises(ErrNegativeRevision):
        store.compact(-1)


def test_range_at_below_and_above_the_compact_revision(store: Store) -> None:
    history(store)
    store.compact(3)
    # AT the compact revision: allowed, and returns the full state at 3
    res = store.range(b"a", ALL_KEYS, revision=3)
    assert [(kv.key, kv.value) for kv in res.kvs] == [(b"a", b"a2"), (b"b", b"b1")]
    with pytest.raises(ErrCompacted):
        store.range(b"a", revision=2)
    with pytest.raises(ErrCompacted) as e:
        store.range(b"zzz", revision=1)  # even when no returned row is compacted (Netsy flaw)
    assert e.value.compact_revision == 3
    with pytest.raises(ErrFutureRev):
        store.range(b"a", revision=7)
    assert store.get(b"a", revision=4).value == b"a2"
    assert store.get(b"a").value == b"a3"
    # a txn range below the compact revision fails the whole txn, nothing written
    with pytest.raises(ErrCompacted):
        store.txn([], [Put(b"x", b"1"), Range(b"a", revision=2)], [])
    assert store.get(b"x") is None and store.head == 6


def test_value_only_compaction_keeps_latest_values_and_nulls_tombstones(store: Store) -> None:
    history(store)
    store.compact(4)
    rows = {(r[0], r[1]): r for r in store.rows()}
    # superseded at or below 4: a@1 (by a@3); b@2 (by the tombstone at 4); tombstone b@4
    for rev, key in [(1, b"a"), (2, b"b"), (4, b"b")]:
        assert rows[(rev, key)][2] is None and rows[(rev, key)][7] == 4, (rev, key)
    # a@3 is the latest at or below 4 (superseded only at 5): kept, needed to read at 4
    assert rows[(3, b"a")][2] == b"a2" and rows[(3, b"a")][7] is None
    # rows above the compaction revision are untouched
    assert rows[(5, b"a")][7] is None and rows[(6, b"c")][7] is None
    assert len(rows) == 6  # value-only: no row removed
    assert store.get(b"a", revision=4).value == b"a2"
    assert store.compactions() == [(4, True)]


@pytest.mark.parametrize(
    ("name", "ops", "compact_at", "compacted", "kept"),
    [
        # Netsy's TestExecuteCompaction cases, with etcd's bound on "superseded" (<= R)
        ("tombstone compacted when key recreated", ["p k", "d k", "p k"], 3, [1, 2], [3]),
        ("latest tombstone compacted", ["p k", "d k"], 2, [1, 2], []),
        ("latest value before the revision kept", ["p k", "p j"], 2, [], [1, 2]),
        ("newer row of another key does not compact", ["p k", "p j", "p j"], 3, [2], [1, 3]),
        ("value at the revision compacted when superseded", ["p k", "p k", "p k"], 2, [1], [2]),
        ("superseded only after the revision is kept", ["p k", "p k"], 1, [], [1, 2]),
    ],
)
def test_compaction_cases_are_idempotent(
    store: Store, name, ops, compact_at, compacted, kept
) -> None:
    for i, op in enumerate(ops):
        kind, key = op.split()
        if kind == "p":
            store.put(key.encode(), f"v{i}".encode())
        else:
            store.delete_range(key.encode())
    store.compact(compact_at)
    by_rev = {r[0]: r for r in store.rows()}
    assert sorted(r for r, row in by_rev.items() if row[7] is not None) == compacted, name
    assert all(by_rev[r][2] is not None for r in kept), name
    before = store.rows()
    # re-running the pass affects 0 rows and changes nothing
    assert store.compactable_count(compact_at) == 0
    store._finished_rev = 0  # force a re-run of the same revision
    assert store.compact_batch(1) == 0
    assert store.rows() == before


def test_compaction_in_batches_with_pause_and_resume_after_crash(tmp_path: Path) -> None:
    path = tmp_path / "kv.db"
    s = Store(path)
    for i in range(30):
        s.put(b"k%d" % (i % 3), b"v%d" % i)
    s.delete_range(b"k0")  # 31
    todo = s.compactable_count(31)
    assert todo == 29  # 27 superseded puts, k0's last put (deleted) and the tombstone
    s.schedule_compaction(31)
    assert s.pending_compaction == 31
    assert s.compact_batch(5) == 5
    assert s.compact_batch(5) == 5
    assert s.compactions() == [(31, False)]
    s.close()  # "crash" between scheduled and finished

    s = Store(path)
    assert s.pending_compaction == 31  # reported so the caller resumes it
    assert s.compact_revision == 31 and s.head == 31
    with pytest.raises(ErrCompacted):
        s.compact(31)  # the compact revision was not lost
    with pytest.raises(ErrCompacted):
        s.range(b"k1", revision=30)
    pauses: list[int] = []
    assert s.run_pending_compaction(batch_size=4, pause=lambda: pauses.append(1)) == 19
    assert len(pauses) == 4  # 4+4+4+4+3: a pause between batches, none after the last
    assert s.pending_compaction is None and s.compactions() == [(31, True)]
    assert s.compactable_count(31) == 0
    assert s.get(b"k1").value == b"v28" and s.get(b"k2").value == b"v29"
    assert s.get(b"k0") is None
    s.close()
    s = Store(path)
    assert s.pending_compaction is None and s.compact_revision == 31
    s.close()


def test_new_compaction_while_one_is_pending_covers_both(store: Store) -> None:
    history(store)
    store.compact(2, physical=False)
    store.compact(5, physical=False)
    assert store.pending_compaction == 5
    store.run_pending_compaction(batch_size=1)
    assert store.compactions() == [(2, True), (5, True)]
    assert store.finished_compact_revision == 5


# ------------------------------------------------------- etcd regression sequences --


def test_etcd_18089_watch_at_compacted_delete_keeps_the_delete_event(store: Store) -> None:
    """etcd #18089: "A watch dropped a DELETE event when compacting on the delete. Repro:
    PUT…; DELETE k@r5; PUT k@r6; COMPACT r5; WATCH rev=r5 returns only the r6 event".
    Guards: the tombstone at the compact revision stays in the history, so a replay from
    the compact revision yields the delete at r5 and then the put at r6."""
    for i in range(4):
        store.put(b"k", b"v%d" % i)  # r1..r4
    assert store.delete_range(b"k").revision == 5
    assert store.put(b"k", b"v6").revision == 6
    store.compact(5, batch_size=1)
    evs = store.events(5, b"k")
    assert [(e.kind, e.kv.mod_revision) for e in evs] == [("delete", 5), ("put", 6)]
    assert evs[1].kv.value == b"v6" and evs[1].kv.create_revision == 6
    with pytest.raises(ErrCompacted):
        store.events(4, b"k")


def test_etcd_19179_watch_at_compact_revision_sees_the_delete(store: Store) -> None:
    """etcd #19179: "Missing delete event on a watch opened at the same revision as the
    compaction". Guards: compacting at a delete's revision (tombstone compacted, batch
    boundaries as in etcd's regression scenario with small batch limits) leaves the
    delete event visible to a watch opened exactly at the compact revision."""
    for i in range(10):
        store.put(b"key%d" % (i % 4), b"v%d" % i)  # r1..r10
    rev = store.delete_range(b"key", prefix_end(b"key")).revision  # r11, 4 tombstones
    store.compact(rev, batch_size=3)
    evs = store.events(rev, b"key", prefix_end(b"key"))
    assert [(e.kind, e.kv.key) for e in evs] == [("delete", b"key%d" % i) for i in range(4)]
    assert all(e.kv.mod_revision == rev for e in evs)
    # and the same through an explicit range of every key
    assert len(store.events(rev, b"\0", ALL_KEYS)) == 4


def test_etcd_17780_revision_never_goes_backwards_after_crash_in_compaction(
    tmp_path: Path,
) -> None:
    """etcd #17780: "Revision went backwards after a crash during compaction" of a
    tombstone. Guards: with the last write a delete, compacting at it and crashing
    between `scheduled` and `finished`, the reopened store keeps head >= the compact
    revision and the next write gets a fresh, higher revision."""
    path = tmp_path / "kv.db"
    s = Store(path)
    s.put(b"a", b"1")  # 1
    s.put(b"a", b"2")  # 2
    s.delete_range(b"a")  # 3: the head is a tombstone
    s.compact(3, physical=False)
    s.compact_batch(1)  # one batch, then the crash
    s.close()
    s = Store(path)
    assert s.head == 3 and s.compact_revision == 3 and s.pending_compaction == 3
    assert s.range(b"a", revision=3).kvs == []  # reading at the compact revision
    assert s.put(b"b", b"x").revision == 4
    s.run_pending_compaction()
    s.close()
    s = Store(path)
    assert s.head == 4 and s.compact_revision == 3
    s.close()


def test_head_restored_from_compact_revision_when_meta_lost(tmp_path: Path) -> None:
    """The #17780 fix itself: currentRev = max(currentRev, compactMainRev, scheduled)."""
    path = tmp_path / "kv.db"
    s = Store(path)
    s.put(b"a", b"1")
    s.put(b"a", b"2")
    s.compact(2)
    s._db.execute("DELETE FROM meta")
    s._db.execute("DELETE FROM records WHERE revision = 2")
    s.close()
    s = Store(path)
    assert s.head == 2
    assert s.put(b"b", b"1").revision == 3
    s.close()


def test_events_replay_with_prev_kv(store: Store) -> None:
    store.put(b"a", b"1")  # 1
    store.put(b"b", b"1")  # 2
    store.put(b"a", b"2")  # 3
    store.delete_range(b"a")  # 4
    evs = store.events(2, b"a", ALL_KEYS, prev_kv=True)
    assert [(e.kind, e.kv.key, e.kv.mod_revision) for e in evs] == [
        ("put", b"b", 2),
        ("put", b"a", 3),
        ("delete", b"a", 4),
    ]
    assert evs[0].prev_kv is None
    assert evs[1].prev_kv == KeyValue(b"a", b"1", 1, 1, 1)
    assert evs[2].prev_kv == KeyValue(b"a", b"2", 1, 3, 2)
    assert evs[2].kv == KeyValue(b"a", b"", 0, 4, 0)
    assert store.events(0, b"a", ALL_KEYS) == []  # start 0 = "from now"
    assert store.events(2, b"a", ALL_KEYS, end_revision=2) == evs[:1]
    store.compact(3)
    # the previous value of the event at the compact revision has been compacted away
    evs = store.events(3, b"a", prev_kv=True)
    assert evs[0].prev_kv is None and evs[1].prev_kv == KeyValue(b"a", b"2", 1, 3, 2)


# ----------------------------------------------------------------- live indexes --


def test_live_indexes(store: Store) -> None:
    history(store)  # a@1 b@2 a@3 b-del@4 a@5 c@6
    assert live_indexes(store) == [1, 2, 3, 4, 5, 6]  # nothing compacted: all needed
    store.compact(4)
    # a@3 is read at revision 4; the tombstone b@4 and a@1, b@2 are not needed
    assert live_indexes(store) == [3, 5, 6]
    store.compact(6)
    assert live_indexes(store) == [5, 6]  # each key's latest put
    store.put(b"c", b"c2")  # 7
    store.compact(7)
    assert live_indexes(store) == [5, 7]  # advancing compaction frees c@6


# -------------------------------------------------------------------- bad input --


def small(tmp_path: Path) -> Store:
    return Store(
        tmp_path / "small.db",
        limits=Limits(max_key_bytes=8, max_value_bytes=16, max_request_bytes=20, max_txn_ops=3),
    )


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda s: s.put(b"", b"v"), ErrEmptyKey),
        (lambda s: s.put(b"k" * 9, b"v"), ErrKeyTooLarge),
        (lambda s: s.put(b"k", b"v" * 17), ErrValueTooLarge),
        (lambda s: s.put(b"kkkkkkkk", b"v" * 13), ErrRequestTooLarge),
        (lambda s: s.put(b"k", "str"), KvError),
        (lambda s: s.put("k", b"v"), KvError),
        (lambda s: s.delete_range(b""), ErrEmptyKey),
        (lambda s: s.delete_range(b"b", b"a"), ErrInvalidRangeEnd),
        (lambda s: s.range(b"b", b"a"), ErrInvalidRangeEnd),
        (lambda s: s.range(b"", ALL_KEYS), ErrEmptyKey),
        (lambda s: s.range(b"a", revision=-1), ErrNegativeRevision),
        (lambda s: s.range(b"a", limit=-1), ErrNegativeRevision),
        (lambda s: s.compact(-5), ErrNegativeRevision),
        (lambda s: s.events(-1, b"a"), ErrNegativeRevision),
        (lambda s: s.put(b"k", b"v", revision=-3), ErrNegativeRevision),
        (lambda s: s.put(b"k", b"v", revision=1), ErrRevisionNotAfterHead),
        (lambda s: s.txn([], [Put(b"a", b"1")] * 4, []), ErrTooManyOps),
        (lambda s: s.txn([], [], [Put(b"a", b"1")] * 4), ErrTooManyOps),
        (lambda s: s.txn([Compare(b"a", "version", "=", 0)] * 4, [], []), ErrTooManyOps),
        (lambda s: s.txn([], [Put(b"a", b"1"), Put(b"a", b"2")], []), ErrDuplicateKey),
        (lambda s: s.txn([], [DeleteRange(b"a", b"c"), Put(b"b", b"2")], []), ErrDuplicateKey),
        # a bad op in the branch not taken still fails the whole request (etcd validates both)
        (lambda s: s.txn([], [Put(b"a", b"1")], [Put(b"", b"2")]), ErrEmptyKey),
        (lambda s: s.txn([], [Put(b"a", b"1"), DeleteRange(b"z", b"y")], []), ErrInvalidRangeEnd),
        (lambda s: s.txn([Compare(b"a", "version", "=", b"x")], [], []), KvError),
        (lambda s: s.txn([Compare(b"a", "bogus", "=", 1)], [], []), KvError),
        (lambda s: s.txn([Compare(b"a", "version", "~", 1)], [], []), KvError),
    ],
)
def test_bad_input_is_rejected_and_nothing_written(tmp_path: Path, call, error) -> None:
    s = small(tmp_path)
    s.put(b"k", b"v")  # 1
    before = (s.rows(), s.head, s.compactions())
    with pytest.raises(error):
        call(s)
    assert (s.rows(), s.head, s.compactions()) == before
    s.close()


def test_default_limits_are_etcds_request_size(store: Store) -> None:
    assert store.limits.max_request_bytes == 1536 * 1024 and store.limits.max_txn_ops == 128
    with pytest.raises(ErrRequestTooLarge):
        store.put(b"k", b"v" * (1536 * 1024))
    store.put(b"k", b"v" * (1536 * 1024 - 1))
    store.txn([], [Put(b"k%d" % i, b"") for i in range(128)], [])
    with pytest.raises(ErrTooManyOps):
        store.txn([], [Put(b"k%d" % i, b"") for i in range(129)], [])


def test_range_end_all_keys_form_is_not_an_error(store: Store) -> None:
    store.put(b"z", b"1")
    assert keys(store.range(b"z", ALL_KEYS)) == [b"z"]
    assert store.delete_range(b"y", ALL_KEYS).deleted == 1


def test_explicit_revisions_from_the_raft_log(store: Store) -> None:
    assert store.put(b"a", b"1", revision=5).revision == 5
    assert store.delete_range(b"missing", revision=6).revision == 5  # no change, no revision
    res = store.txn([], [Put(b"b", b"1"), Put(b"c", b"1")], [], revision=9)
    assert res.revision == 9 and store.head == 9
    assert store.get(b"a", revision=7).value == b"1"
    with pytest.raises(ErrRevisionNotAfterHead):
        store.put(b"a", b"2", revision=9)


# -------------------------------------------------- model-based (hypothesis) test --

KEYS = [b"a", b"b", b"ba", b"c"]


class Model:
    """A pure-Python MVCC: the full key -> (value, create, mod, version) map per revision."""

    def __init__(self) -> None:
        self.states: list[dict[bytes, tuple[bytes, int, int, int]]] = [{}]
        self.compact = 0

    @property
    def head(self) -> int:
        return len(self.states) - 1

    def put(self, k: bytes, v: bytes) -> int:
        st = dict(self.states[-1])
        rev = self.head + 1
        prev = st.get(k)
        st[k] = (v, prev[1], rev, prev[3] + 1) if prev else (v, rev, rev, 1)
        self.states.append(st)
        return rev

    def delete(self, k: bytes, end: bytes | None) -> tuple[int, int]:
        st = dict(self.states[-1])
        hit = [x for x in st if in_range(x, k, end)]
        if not hit:
            return self.head, 0
        for x in hit:
            del st[x]
        self.states.append(st)
        return self.head, len(hit)

    def do_compact(self, rev: int) -> None:
        if rev <= self.compact:
            raise ErrCompacted()
        if rev > self.head:
            raise ErrFutureRev()
        self.compact = rev

    def range(self, k: bytes, end: bytes | None, rev: int) -> list[tuple]:
        if rev > self.head:
            raise ErrFutureRev()
        rev = rev or self.head
        if rev < self.compact:
            raise ErrCompacted()
        st = self.states[rev]
        return [(x, *st[x]) for x in sorted(st) if in_range(x, k, end)]

    def events(self, start: int) -> list[tuple]:
        if start == 0:
            return []
        if start < self.compact:
            raise ErrCompacted()
        out = []
        for r in range(max(start, 1), self.head + 1):
            old, new = self.states[r - 1], self.states[r]
            for x in sorted(set(old) | set(new)):
                if x in new and new[x][2] == r:
                    out.append(("put", x, r))
                elif x in old and x not in new:
                    out.append(("delete", x, r))
        return out


def in_range(x: bytes, k: bytes, end: bytes | None) -> bool:
    if end is None:
        return x == k
    if end == ALL_KEYS:
        return x >= k
    return k <= x < end


key_st = st.sampled_from(KEYS)
end_st = st.one_of(st.none(), st.just(ALL_KEYS), st.sampled_from([b"b", b"bb", b"d"]))
op_st = st.one_of(
    st.tuples(st.just("put"), key_st, st.binary(max_size=3)),
    st.tuples(st.just("delete"), key_st, end_st),
    st.tuples(st.just("compact"), st.integers(0, 30), st.booleans(), st.integers(1, 3)),
    st.tuples(st.just("range"), key_st, end_st, st.integers(0, 30)),
    st.tuples(st.just("batch"), st.integers(1, 3)),
    st.tuples(st.just("events"), st.integers(0, 30)),
)


def outcome(fn):
    try:
        return ("ok", fn())
    except KvError as e:
        return ("err", type(e).__name__)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op_st, max_size=40))
def test_store_matches_dict_model(ops) -> None:
    s = Store(":memory:")
    m = Model()
    try:
        for op in ops:
            if op[0] == "put":
                assert s.put(op[1], op[2]).revision == m.put(op[1], op[2])
            elif op[0] == "delete":
                if op[2] is not None and op[2] != ALL_KEYS and op[2] < op[1]:
                    with pytest.raises(ErrInvalidRangeEnd):
                        s.delete_range(op[1], op[2])
                    continue
                res = s.delete_range(op[1], op[2])
                assert (res.revision, res.deleted) == m.delete(op[1], op[2])
            elif op[0] == "compact":
                got = outcome(lambda op=op: s.compact(op[1], physical=op[2], batch_size=op[3]))
                want = outcome(lambda op=op: m.do_compact(op[1]))
                assert got[0] == want[0] and (got[0] == "ok" or got[1] == want[1])
            elif op[0] == "batch":
                s.compact_batch(op[1])
            elif op[0] == "range":
                if op[2] is not None and op[2] != ALL_KEYS and op[2] < op[1]:
                    continue
                got = outcome(
                    lambda op=op: [
                        (kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.version)
                        for kv in s.range(op[1], op[2], revision=op[3]).kvs
                    ]
                )
                want = outcome(lambda op=op: m.range(op[1], op[2], op[3]))
                assert got == want
                if want[0] == "ok":  # a limit reads only what it returns; count is every key
                    for limit in (1, 2):
                        res = s.range(op[1], op[2], revision=op[3], limit=limit)
                        assert [kv.key for kv in res.kvs] == [w[0] for w in want[1][:limit]]
                        assert (res.count, res.more) == (len(want[1]), len(want[1]) > limit)
                    counted = s.range(op[1], op[2], revision=op[3], count_only=True)
                    assert (counted.count, counted.kvs) == (len(want[1]), [])
            else:
                got = outcome(
                    lambda op=op: [
                        (e.kind, e.kv.key, e.kv.mod_revision)
                        for e in s.events(op[1], b"\0", ALL_KEYS)
                    ]
                )
                want = outcome(lambda op=op: m.events(op[1]))
                if op[1] > m.head and want[0] == "ok":
                    want = ("ok", [])
                assert got == want
            assert s.head == m.head and s.compact_revision == m.compact
        # after the value-only pass finishes, every readable revision still reads the same
        s.run_pending_compaction()
        assert s.compactable_count() == 0
        for rev in range(max(m.compact, 1), m.head + 1):
            got = [
                (kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.version)
                for kv in s.range(b"\0", ALL_KEYS, revision=rev).kvs
            ]
            assert got == m.range(b"\0", ALL_KEYS, rev)
    finally:
        s.close()
