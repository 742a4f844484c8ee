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
    ErrKeyTooLarge,
    ErrNegativeRevision,
    ErrRequestTooLarge,
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
    Txn,
    TxnResult,
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
    assert store.head == 1  # etcd: an empty store is at revision 1
    assert store.put(b"a", b"1").revision == 2
    assert store.put(b"b", b"1").revision == 3
    assert store.put(b"a", b"2").revision == 4
    assert store.get(b"a") == KeyValue(b"a", b"2", create_revision=2, mod_revision=4, version=2)
    assert store.get(b"a", revision=2) == KeyValue(b"a", b"1", 2, 2, 1)
    assert store.get(b"a", revision=3) == KeyValue(b"a", b"1", 2, 2, 1)
    assert store.head == 4
    # a put after a delete starts a new generation
    store.delete_range(b"a")
    assert store.get(b"a") is None
    store.put(b"a", b"3")
    assert store.get(b"a") == KeyValue(b"a", b"3", 6, 6, 1)


def test_put_prev_kv(store: Store) -> None:
    assert store.put(b"k", b"v1", prev_kv=True).prev_kv is None
    assert store.put(b"k", b"v2", prev_kv=True).prev_kv == KeyValue(b"k", b"v1", 2, 2, 1)
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
    assert [kv.mod_revision for kv in res.kvs] == [2, 3, 4]


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
    store.put(b"a", b"1")  # 2
    store.put(b"b", b"1")  # 3
    store.delete_range(b"a")  # 4
    store.put(b"a", b"2")  # 5
    expected = {
        1: [],
        2: [(b"a", b"1")],
        3: [(b"a", b"1"), (b"b", b"1")],
        4: [(b"b", b"1")],
        5: [(b"a", b"2"), (b"b", b"1")],
        0: [(b"a", b"2"), (b"b", b"1")],
        -1: [(b"a", b"2"), (b"b", b"1")],  # etcd: a negative revision reads at head
    }
    for rev, kvs in expected.items():
        res = store.range(b"a", ALL_KEYS, revision=rev)
        assert [(kv.key, kv.value) for kv in res.kvs] == kvs, rev
        assert res.revision == 5  # the header is always the head
    with pytest.raises(ErrFutureRev):
        store.range(b"a", revision=6)


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
    store.put(b"k", b"v")  # 2
    res = store.txn(
        [Compare(b"k", "value", "=", b"v")],
        [Range(b"k"), Put(b"k", b"v2"), Put(b"j", b"x"), Range(b"k")],
        [Put(b"fail", b"1")],
    )
    assert res.succeeded and res.revision == 3
    assert [type(r) for r in res.responses] == [RangeResult, PutResult, PutResult, RangeResult]
    # each op is stamped with the revision at its point of the txn (etcd): a read before
    # the first write the old head, the writes and what follows them the txn's revision
    assert [r.revision for r in res.responses] == [2, 3, 3, 3]
    # the range inside the txn sees the txn's own earlier write
    rng = res.responses[3]
    assert isinstance(rng, RangeResult) and rng.kvs[0].value == b"v2"
    # one revision for the whole txn
    assert store.get(b"j").mod_revision == 3 and store.get(b"k").mod_revision == 3
    res = store.txn([Compare(b"k", "value", "=", b"v")], [Put(b"no", b"1")], [Put(b"f", b"1")])
    assert not res.succeeded and res.revision == 4
    assert store.get(b"no") is None and store.get(b"f") is not None


def test_read_only_txn_does_not_consume_a_revision(store: Store) -> None:
    store.put(b"k", b"v")
    res = store.txn([], [Range(b"k")], [])
    assert res.succeeded and res.revision == 2 and store.head == 2
    res = store.txn([], [DeleteRange(b"missing")], [])
    assert res.revision == 2 and store.head == 2


@pytest.fixture
def cmp_store(store: Store) -> Store:
    store.put(b"k", b"m")  # 2
    store.put(b"other", b"x")  # 3
    store.put(b"k", b"m")  # 4: k create 2, mod 4, version 2
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
        ("create_revision", "=", 2, True),
        ("create_revision", "<", 2, False),
        ("create_revision", ">", 0, True),
        ("create_revision", "!=", 4, True),
        ("mod_revision", "=", 4, True),
        ("mod_revision", "<", 4, False),
        ("mod_revision", ">", 3, True),
        ("mod_revision", "!=", 2, True),
        ("lease", "=", 0, True),  # no key has a lease (leases are not implemented yet)
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
    """Revisions 2..7 (etcd: the empty store is revision 1): a@2 b@3 a@4 b-del@5 a@6
    c@7; tests below name them by the old numbering + 1."""
    store.put(b"a", b"a1")  # 2
    store.put(b"b", b"b1")  # 3
    store.put(b"a", b"a2")  # 4
    store.delete_range(b"b")  # 5
    store.put(b"a", b"a3")  # 6
    store.put(b"c", b"c1")  # 7


def test_compact_error_rules(store: Store) -> None:
    with pytest.raises(ErrCompacted):
        store.compact(-1)  # etcd: before any compaction the compact revision is -1
    assert store.compact(0) == 1  # so Compact 0 on a fresh store is accepted (etcd)
    with pytest.raises(ErrCompacted):
        store.compact(0)  # at
    history(store)
    with pytest.raises(ErrFutureRev):
        store.compact(8)  # above head
    assert store.compact(4) == 7  # the header: the head (a Compact takes no revision)
    assert store.compact_revision == 4 and store.head == 7
    with pytest.raises(ErrCompacted):
        store.compact(4)  # at
    with pytest.raises(ErrCompacted):
        store.compact(3)  # below
    store.compact(7)  # exactly head is allowed
    assert store.compact_revision == 7
    with pytest.raises(ErrCompacted):
        store.compact(-5)  # a negative revision is below every compact revision


def test_range_at_below_and_above_the_compact_revision(store: Store) -> None:
    history(store)
    store.compact(4)
    # AT the compact revision: allowed, and returns the full state at 4
    res = store.range(b"a", ALL_KEYS, revision=4)
    assert [(kv.key, kv.value) for kv in res.kvs] == [(b"a", b"a2"), (b"b", b"b1")]
    with pytest.raises(ErrCompacted):
        store.range(b"a", revision=3)
    with pytest.raises(ErrCompacted) as e:
        store.range(b"zzz", revision=2)  # even when no returned row is compacted (Netsy flaw)
    assert e.value.compact_revision == 4
    with pytest.raises(ErrFutureRev):
        store.range(b"a", revision=8)
    assert store.get(b"a", revision=5).value == b"a2"
    assert store.get(b"a").value == b"a3"
    # a txn range below the compact revision fails the whole txn, nothing written
    with pytest.raises(ErrCompacted):
        store.txn([], [Put(b"x", b"1"), Range(b"a", revision=3)], [])
    # etcd: in a txn (not alone) a negative revision is below the compact revision
    with pytest.raises(ErrCompacted):
        store.txn([], [Put(b"x", b"1"), Range(b"a", revision=-1)], [])
    assert store.get(b"x") is None and store.head == 7


def test_value_only_compaction_keeps_latest_values_and_nulls_tombstones(store: Store) -> None:
    history(store)
    store.compact(5)
    rows = {(r[0], r[1]): r for r in store.rows()}
    # superseded at or below 5: a@2 (by a@4); b@3 (by the tombstone at 5); tombstone b@5
    for rev, key in [(2, b"a"), (3, b"b"), (5, b"b")]:
        assert rows[(rev, key)][2] is None and rows[(rev, key)][7] == 5, (rev, key)
    # a@4 is the latest at or below 5 (superseded only at 6): kept, needed to read at 5
    assert rows[(4, b"a")][2] == b"a2" and rows[(4, b"a")][7] is None
    # rows above the compaction revision are untouched
    assert rows[(6, b"a")][7] is None and rows[(7, b"c")][7] is None
    assert len(rows) == 6  # value-only: no row removed
    assert store.get(b"a", revision=5).value == b"a2"
    assert store.compactions() == [(5, True)]


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
    store.compact(compact_at + 1)  # the cases count from 1, etcd's revisions from 2
    by_rev = {r[0] - 1: r for r in store.rows()}
    assert sorted(r for r, row in by_rev.items() if row[7] is not None) == compacted, name
    assert all(by_rev[r][2] is not None for r in kept), name
    before = store.rows()
    # re-running the pass affects 0 rows and changes nothing
    assert store.compactable_count(compact_at + 1) == 0
    store._finished_rev = 0  # force a re-run of the same revision
    assert store.compact_batch(1) == 0
    assert store.rows() == before


def test_compaction_in_batches_with_pause_and_resume_after_crash(tmp_path: Path) -> None:
    path = tmp_path / "kv.db"
    s = Store(path)
    for i in range(30):
        s.put(b"k%d" % (i % 3), b"v%d" % i)
    s.delete_range(b"k0")  # 32
    todo = s.compactable_count(32)
    assert todo == 29  # 27 superseded puts, k0's last put (deleted) and the tombstone
    s.schedule_compaction(32)
    assert s.pending_compaction == 32
    assert s.compact_batch(5) == 5
    assert s.compact_batch(5) == 5
    assert s.compactions() == [(32, False)]
    s.close()  # "crash" between scheduled and finished

    s = Store(path)
    assert s.pending_compaction == 32  # reported so the caller resumes it
    assert s.compact_revision == 32 and s.head == 32
    with pytest.raises(ErrCompacted):
        s.compact(32)  # the compact revision was not lost
    with pytest.raises(ErrCompacted):
        s.range(b"k1", revision=31)
    pauses: list[int] = []
    assert s.run_pending_compaction(batch_size=4, pause=lambda: pauses.append(1)) == 19
    assert len(pauses) == 4  # 4+4+4+4+3: a pause between batches, none after the last
    assert s.pending_compaction is None and s.compactions() == [(32, True)]
    assert s.compactable_count(32) == 0
    assert s.get(b"k1").value == b"v28" and s.get(b"k2").value == b"v29"
    assert s.get(b"k0") is None
    s.close()
    s = Store(path)
    assert s.pending_compaction is None and s.compact_revision == 32
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
        store.put(b"k", b"v%d" % i)  # r2..r5
    assert store.delete_range(b"k").revision == 6
    assert store.put(b"k", b"v6").revision == 7
    store.compact(6, batch_size=1)
    evs = store.events(6, b"k")
    assert [(e.kind, e.kv.mod_revision) for e in evs] == [("delete", 6), ("put", 7)]
    assert evs[1].kv.value == b"v6" and evs[1].kv.create_revision == 7
    with pytest.raises(ErrCompacted):
        store.events(5, b"k")


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
    s.put(b"a", b"1")  # 2
    s.put(b"a", b"2")  # 3
    s.delete_range(b"a")  # 4: the head is a tombstone
    s.compact(4, physical=False)
    s.compact_batch(1)  # one batch, then the crash
    s.close()
    s = Store(path)
    assert s.head == 4 and s.compact_revision == 4 and s.pending_compaction == 4
    assert s.range(b"a", revision=4).kvs == []  # reading at the compact revision
    assert s.put(b"b", b"x").revision == 5
    s.run_pending_compaction()
    s.close()
    s = Store(path)
    assert s.head == 5 and s.compact_revision == 4
    s.close()


def test_head_restored_from_compact_revision_when_meta_lost(tmp_path: Path) -> None:
    """The #17780 fix itself: currentRev = max(currentRev, compactMainRev, scheduled)."""
    path = tmp_path / "kv.db"
    s = Store(path)
    s.put(b"a", b"1")
    s.put(b"a", b"2")
    s.compact(3)
    s._db.execute("DELETE FROM meta")
    s._db.execute("DELETE FROM records WHERE revision = 3")
    s.close()
    s = Store(path)
    assert s.head == 3
    assert s.put(b"b", b"1").revision == 4
    s.close()


def test_events_replay_with_prev_kv(store: Store) -> None:
    store.put(b"a", b"1")  # 2
    store.put(b"b", b"1")  # 3
    store.put(b"a", b"2")  # 4
    store.delete_range(b"a")  # 5
    evs = store.events(3, b"a", ALL_KEYS, prev_kv=True)
    assert [(e.kind, e.kv.key, e.kv.mod_revision) for e in evs] == [
        ("put", b"b", 3),
        ("put", b"a", 4),
        ("delete", b"a", 5),
    ]
    assert evs[0].prev_kv is None
    assert evs[1].prev_kv == KeyValue(b"a", b"1", 2, 2, 1)
    assert evs[2].prev_kv == KeyValue(b"a", b"2", 2, 4, 2)
    assert evs[2].kv == KeyValue(b"a", b"", 0, 5, 0)
    assert store.events(0, b"a", ALL_KEYS) == []  # start 0 = "from now"
    assert store.events(3, b"a", ALL_KEYS, end_revision=3) == evs[:1]
    store.compact(4)
    # the previous value of the event at the compact revision has been compacted away
    evs = store.events(4, b"a", prev_kv=True)
    assert evs[0].prev_kv is None and evs[1].prev_kv == KeyValue(b"a", b"2", 2, 4, 2)


# ----------------------------------------------------------------- live indexes --


def test_live_revisions_and_their_raft_indexes(store: Store) -> None:
    # as applied from a raft log: entry 10 + 3 * revision (the log holds other entries)
    for i, (kind, key, value) in enumerate([("p", b"a", b"a1"), ("p", b"b", b"b1"),
                                            ("p", b"a", b"a2"), ("d", b"b", b""),
                                            ("p", b"a", b"a3"), ("p", b"c", b"c1")]):
        if kind == "p":
            store.put(key, value, applied=10 + 3 * (i + 2))
        else:
            store.delete_range(key, applied=10 + 3 * (i + 2))
    # a@2 b@3 a@4 b-del@5 a@6 c@7
    assert store.live_revisions() == [2, 3, 4, 5, 6, 7]  # nothing compacted: all needed
    assert live_indexes(store) == [16, 19, 22, 25, 28, 31]
    store.compact(5)
    # a@4 is read at revision 5; the tombstone b@5 and a@2, b@3 are not needed
    assert store.live_revisions() == [4, 6, 7] and live_indexes(store) == [22, 28, 31]
    store.compact(7)
    assert live_indexes(store) == [28, 31]  # each key's latest put
    store.put(b"c", b"c2", applied=40)  # 8
    store.compact(8)
    assert live_indexes(store) == [28, 40]  # advancing compaction frees c@7
    # a write without a raft index (the Store used on its own) is in no log
    store.put(b"d", b"1")
    assert store.live_revisions()[-1] == 9 and live_indexes(store) == [28, 40]


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
        (lambda s: s.range(b"", ALL_KEYS), ErrEmptyKey),
        (lambda s: s.compact(-5), ErrCompacted),
        (lambda s: s.compact(3), ErrFutureRev),
        (lambda s: s.events(-1, b"a"), ErrNegativeRevision),
        (lambda s: s.range(b"a", revision=3), ErrFutureRev),
        (lambda s: s.range(b"a", sort_order="up"), KvError),
        (lambda s: s.txn([], [Put(b"a", b"1")] * 4, []), ErrTooManyOps),
        (lambda s: s.txn([], [], [Put(b"a", b"1")] * 4), ErrTooManyOps),
        (lambda s: s.txn([Compare(b"a", "version", "=", 0)] * 4, [], []), ErrTooManyOps),
        (lambda s: s.txn([], [Put(b"a", b"1"), Put(b"a", b"2")], []), ErrDuplicateKey),
        (lambda s: s.txn([], [DeleteRange(b"a", b"c"), Put(b"b", b"2")], []), ErrDuplicateKey),
        # a bad op in the branch not taken still fails the whole request (etcd validates both)
        (lambda s: s.txn([], [Put(b"a", b"1")], [Put(b"", b"2")]), ErrEmptyKey),
        (lambda s: s.txn([], [Put(b"a", b"1"), Txn((), (Put(b"a", b"2"),))], []),
         ErrDuplicateKey),
        (lambda s: s.txn([], [Txn((), (Put(b"a", b"2"),)), Txn((), (), (Put(b"a", b"2"),))],
                         []), ErrDuplicateKey),
        (lambda s: s.txn([], [Txn((), (Put(b"", b"2"),))], []), ErrEmptyKey),
        (lambda s: s.txn([], [Range(b"a")] * 2 + [Txn((), (Range(b"a"),) * 2)], []),
         ErrTooManyOps),  # a nested txn gets what its parent leaves (3 - 2)
        (lambda s: s.txn([], [Put(b"x", b"1"), Range(b"a", revision=3)], []), ErrFutureRev),
        (lambda s: s.txn([Compare(b"a", "version", "=", b"x")], [], []), KvError),
        (lambda s: s.txn([Compare(b"a", "bogus", "=", 1)], [], []), KvError),
        (lambda s: s.txn([Compare(b"a", "version", "~", 1)], [], []), KvError),
    ],
)
def test_bad_input_is_rejected_and_nothing_written(tmp_path: Path, call, error) -> None:
    s = small(tmp_path)
    s.put(b"k", b"v")  # 2
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


def test_writes_from_the_raft_log_keep_their_index(store: Store) -> None:
    """Revisions are etcd's (one per request that changes something); the raft index
    of the entry behind each written revision is kept beside it."""
    assert store.put(b"a", b"1", applied=5).revision == 2
    assert store.delete_range(b"missing", applied=6).revision == 2  # no change, no revision
    res = store.txn([], [Put(b"b", b"1"), Put(b"c", b"1")], [], applied=9)
    assert res.revision == 3 and store.head == 3
    assert store.entries() == [(2, 5, None), (3, 9, "1")]
    assert store.meta("applied") == 9


# -------------------------------------------------- model-based (hypothesis) test --

KEYS = [b"a", b"b", b"ba", b"c"]


class Model:
    """A pure-Python MVCC: the full key -> (value, create, mod, version) map per revision."""

    def __init__(self) -> None:
        # revisions 0 and 1 are empty: etcd's store starts at revision 1
        self.states: list[dict[bytes, tuple[bytes, int, int, int]]] = [{}, {}]
        self.compact = -1  # etcd's compact revision before any compaction

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
        rev = rev if rev > 0 else self.head
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
        for r in range(max(start, 2), self.head + 1):
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
    st.tuples(st.just("compact"), st.integers(-1, 30), st.booleans(), st.integers(1, 3)),
    st.tuples(st.just("range"), key_st, end_st, st.integers(-1, 30)),
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
                res = s.delete_range(op[1], op[2])  # an end before the key: deletes nothing
                assert (res.revision, res.deleted) == m.delete(op[1], op[2])
            elif op[0] == "compact":
                got = outcome(lambda op=op: s.compact(op[1], physical=op[2], batch_size=op[3]))
                want = outcome(lambda op=op: m.do_compact(op[1]))
                assert got[0] == want[0] and (got[0] == "ok" or got[1] == want[1])
            elif op[0] == "batch":
                s.compact_batch(op[1])
            elif op[0] == "range":
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
            assert s.head == m.head and s.compact_revision == max(0, m.compact)
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


# ------------------------------------------------------------ etcd's txn edges --


def test_a_txn_may_change_a_key_twice_and_watches_see_both_in_order(store: Store) -> None:
    """etcd's checkIntervals takes a delete's range_end literally, so a txn deleting
    [a, "\\0") (every key from a) and putting b is accepted, as is one putting b and then
    deleting [a, "\\0"). One revision, events in change order (etcd's sub-revisions),
    prev_kv the key at the revision before (etcd's watch), none for a creating put."""
    store.put(b"b", b"old")  # 2
    res = store.txn([], [DeleteRange(b"a", ALL_KEYS), Put(b"b", b"new", prev_kv=True),
                         Put(b"z", b"1")], [])
    assert res.revision == 3 and [r.revision for r in res.responses] == [3, 3, 3]
    assert res.responses[1].prev_kv is None  # deleted earlier in this txn
    assert store.get(b"b") == KeyValue(b"b", b"new", 3, 3, 1)
    evs = store.events(3, b"\0", ALL_KEYS, prev_kv=True)
    assert [(e.kind, e.kv.key) for e in evs] == [("delete", b"b"), ("put", b"b"),
                                                 ("put", b"z")]  # change order, not key
    assert evs[0].prev_kv == KeyValue(b"b", b"old", 2, 2, 1)
    assert evs[1].prev_kv is None  # a put that creates the key
    store.txn([], [Put(b"b", b"x"), DeleteRange(b"a", ALL_KEYS)], [])  # 4: put, delete
    evs = store.events(4, b"b", prev_kv=True)
    assert [e.kind for e in evs] == ["put", "delete"]
    # both prev_kv are the key at revision 3, not the put of this txn
    assert evs[0].prev_kv == evs[1].prev_kv == KeyValue(b"b", b"new", 3, 3, 1)
    assert store.get(b"b") is None and store.head == 4


def test_a_nested_txn_judges_its_compares_before_the_outer_txn_writes(store: Store) -> None:
    """etcd's compareToPath: the whole tree's compares see the state before the txn."""
    store.put(b"n", b"0")  # 2
    res = store.txn([], [Put(b"n", b"1"),
                         Txn((Compare(b"n", "value", "=", b"0"),), (Range(b"n"),),
                             (Put(b"m", b"f"),))], [])
    nested = res.responses[1]
    assert isinstance(nested, TxnResult) and nested.succeeded and nested.revision == 0
    assert nested.responses[0].kvs[0].value == b"1"  # its read sees the outer put
    assert store.get(b"m") is None


def test_range_options_as_etcd_applies_them(store: Store) -> None:
    for k, v in [(b"a", b"3"), (b"b", b"1"), (b"c", b"2"), (b"d", b"0")]:
        store.put(k, v)  # a@2 b@3 c@4 d@5
    store.put(b"b", b"9")  # b@6
    r = store.range(b"a", ALL_KEYS, sort_order="descend", sort_target="value", limit=2)
    assert keys(r) == [b"b", b"a"] and r.count == 4 and r.more
    # a sort target alone sorts ascending, but etcd then reads only limit + 1 keys
    r = store.range(b"a", ALL_KEYS, sort_target="value", limit=1)
    assert keys(r) == [b"a"] and r.more  # the smaller value of a and b (d's 0 unread)
    r = store.range(b"a", ALL_KEYS, sort_order="ascend", sort_target="value", limit=1)
    assert keys(r) == [b"d"]  # an asked-for order reads every key first
    r = store.range(b"a", ALL_KEYS, min_mod_revision=4, max_create_revision=4)
    assert keys(r) == [b"b", b"c"] and r.count == 4  # count is before the filters
    r = store.range(b"a", ALL_KEYS, limit=-1, revision=-3)
    assert len(r.kvs) == 4 and not r.more  # no limit, read at head
    r = store.range(b"a", ALL_KEYS, count_only=True, limit=1)
    assert r.kvs == [] and r.count == 4 and not r.more


# ---- batches: a raft batch applied in one SQLite transaction ----------------------------


def test_a_batch_keeps_its_writes_and_a_write_that_fails_in_it_rolls_back_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Store(tmp_path / "s.db") as s:
        with s.batch():
            s.put(b"a", b"1")
            real = s._set_meta

            def broken(name: str, value: int) -> None:
                raise OSError("disk hiccup")

            monkeypatch.setattr(s, "_set_meta", broken)
            with pytest.raises(OSError):
                s.put(b"b", b"2")
            monkeypatch.setattr(s, "_set_meta", real)
            s.put(b"c", b"3")
        keys = [kv.key for kv in s.range(b"\0", b"\0").kvs]
        assert keys == [b"a", b"c"] and s.head == 3
    with Store(tmp_path / "s.db") as again:  # committed to the file, not only in memory
        assert [kv.key for kv in again.range(b"\0", b"\0").kvs] == [b"a", b"c"]


def test_a_batch_that_fails_leaves_nothing_of_itself(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as s:
        s.put(b"before", b"0")
        head = s.head
        with pytest.raises(RuntimeError), s.batch():
            s.put(b"a", b"1")
            raise RuntimeError("the disk, say")
        assert s.head == head and s.get(b"a") is None
        s.put(b"after", b"1")
        assert s.head == head + 1
