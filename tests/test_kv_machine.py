"""The Netsy KV as a raft-hosted machine (sediment.actors.kv.machine): etcd semantics at
revision == raft index, `applied` consistent with the rows after a crash, and snapshots
without values that the live log entries alone restore."""

from __future__ import annotations

import functools
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sediment.actors.kv.errors import (
    ErrCompacted,
    ErrDuplicateKey,
    ErrEmptyKey,
    ErrFutureRev,
    ErrTooManyOps,
    InvalidRequest,
    KvError,
)
from sediment.actors.kv.machine import (
    DB_FILE,
    ErrMalformedCommand,
    ErrUnknownCommand,
    NetsyMachine,
    RestoreError,
    netsy,
)
from sediment.actors.kv.queries import AppliedSince, CompactRevisions, Events, Head, WatchHistory
from sediment.actors.kv.store import ALL_KEYS
from sediment.actors.kv.types import (
    AppliedBatch,
    Compact,
    CompactResult,
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
from sediment.actors.log.raft.types import Entry
from sediment.actors.log.shell.hosted import KeyIndex

EVERY = Range(b"\0", ALL_KEYS)
TXN_TAG = b'"txns":[['  # a snapshot that names the branch of a txn


def entries(commands: list[Any], first: int = 1) -> list[Entry]:
    return [Entry(first + i, 1, 0.0, c) for i, c in enumerate(commands)]


def feed(m: NetsyMachine, es: list[Entry]) -> list[Any]:
    return [m.apply(e) for e in es]


def norm(result: Any) -> Any:
    """Errors compare by type and message (exceptions compare by identity)."""
    return (type(result), result.args) if isinstance(result, BaseException) else result


def drain(m: NetsyMachine) -> int:
    n = 0
    while m.background():
        n += 1
    return n


def only(es: list[Entry], live: list[int]) -> Callable[[int], Entry | None]:
    """A log reader that holds the live entries and nothing else."""
    held = {e.index: e for e in es if e.index in set(live)}
    return held.get


@pytest.fixture
def m(tmp_path: Path) -> Iterator[NetsyMachine]:
    machine = netsy(str(tmp_path / "g"))
    yield machine
    machine.close()


# ------------------------------------------------------------------ apply --


def test_revisions_are_etcds_and_each_keeps_its_entry_index(m: NetsyMachine) -> None:
    res = feed(
        m,
        entries(
            [
                Put(b"a", b"1"),  # entry 1: revision 2 (etcd: the empty store is 1)
                None,  # entry 2: the leader's no-op, no revision
                Put(b"a", b"2", prev_kv=True),  # entry 3: revision 3
                Range(b"a"),  # entry 4: a read through the log, no revision
                DeleteRange(b"a", prev_kv=True),  # entry 5: revision 4
                DeleteRange(b"missing"),  # entry 6: writes nothing, no revision
                Put(b"a", b"3"),  # entry 7: revision 5
            ]
        ),
    )
    assert res[0] == PutResult(2)
    assert res[1] is None
    assert res[2] == PutResult(3, KeyValue(b"a", b"1", 2, 2, 1))
    assert res[3] == RangeResult([KeyValue(b"a", b"2", 2, 3, 2)], 1, False, 3)
    assert res[4] == DeleteResult(4, 1, [KeyValue(b"a", b"2", 2, 3, 2)])
    assert res[5] == DeleteResult(4, 0, [])
    assert res[6] == PutResult(5)
    assert m.applied == 7 and m.store.head == 5
    assert m.store.entries() == [(2, 1, None), (3, 3, None), (4, 5, None), (5, 7, None)]
    assert m.query(Range(b"a")).kvs == [KeyValue(b"a", b"3", 5, 5, 1)]
    assert m.query(Range(b"a", revision=3)).kvs == [KeyValue(b"a", b"2", 2, 3, 2)]
    assert m.query(Range(b"a", revision=4)).kvs == []


def test_txn_branches_and_a_writeless_txn_consumes_no_revision(m: NetsyMachine) -> None:
    res = feed(
        m,
        entries(
            [
                Put(b"k", b"v"),  # entry 1: revision 2
                Txn(
                    (Compare(b"k", "value", "=", b"v"),),
                    (Put(b"k", b"s"), Range(b"k")),
                    (Put(b"f", b"x"),),
                ),  # entry 2: success, revision 3
                Txn((Compare(b"k", "version", "=", 9),), (Put(b"no", b"1"),), (Range(b"k"),)),
                Txn((Compare(b"k", "version", "=", 9),), (), (Put(b"f", b"y"),)),  # failure: 4
            ]
        ),
    )
    assert isinstance(res[1], TxnResult) and res[1].succeeded and res[1].revision == 3
    assert res[1].responses[1].kvs == [KeyValue(b"k", b"s", 2, 3, 2)]
    assert res[2].succeeded is False and res[2].revision == 3  # read-only: head stays
    assert res[3] == TxnResult(False, [PutResult(4)], 4)
    assert m.store.head == 4 and m.applied == 4
    assert m.store.entries() == [(2, 1, None), (3, 2, "1"), (4, 4, "0")]


def test_compact_is_logical_in_apply_and_physical_in_background(tmp_path: Path) -> None:
    m = netsy(str(tmp_path), compaction_batch=1)
    feed(m, entries([Put(b"a", b"%d" % i) for i in range(1, 6)]))  # revisions 2..6
    res = feed(m, entries([Compact(4), Compact(4), Compact(99), Compact(3)], first=6))
    assert res[0] == CompactResult(6)
    assert isinstance(res[1], ErrCompacted) and res[1].compact_revision == 4
    assert isinstance(res[2], ErrFutureRev)
    assert isinstance(res[3], ErrCompacted)
    assert m.query(CompactRevisions()) == (4, 0)  # scheduled, value pass not run in apply
    assert m.store.compactable_count() == 2
    assert isinstance(m.apply(Entry(10, 1, 0.0, Range(b"a", revision=3))), ErrCompacted)
    assert m.query(Range(b"a", revision=4)).kvs[0].value == b"3"
    assert drain(m) >= 1
    assert not m.background()
    assert m.query(CompactRevisions()) == (4, 4)
    assert [r[2] for r in m.store.rows()] == [None, None, b"3", b"4", b"5"]
    assert m.applied == 10 and m.store.head == 6
    m.close()


BAD_COMMANDS: list[Any] = [
    ("put", "k", "v"),
    "put k v",
    42,
    Put("k", b"v"),  # type: ignore[arg-type]
    Put(b"", b"v"),
    Put(b"k", "v"),  # type: ignore[arg-type]
    DeleteRange(b"", b"a"),
    Txn(None, (), ()),  # type: ignore[arg-type]
    Txn((), (Put(b"a", b"1"), Put(b"a", b"2")), ()),
    Txn(("not a compare",), (), ()),  # type: ignore[arg-type]
    Txn((), (Txn((), ("op",)),), ()),  # type: ignore[arg-type]
    Txn((), (Put(b"a", b"1"),) * 200, ()),
    Compact("3"),  # type: ignore[arg-type]
    Compact(-1),
    Range(b"a", revision=99),
    Txn((), (Put(bytearray(b"a"), b"1"),), ()),  # type: ignore[arg-type]  # not bytes
    Range(b"a", limit=2.5),  # type: ignore[arg-type]
]


def test_bad_commands_return_typed_errors_and_change_nothing(m: NetsyMachine) -> None:
    feed(m, entries([Put(b"a", b"1"), Put(b"b", b"1")]))
    rows, head = m.store.rows(), m.store.head
    res = feed(m, entries(BAD_COMMANDS, first=3))
    assert all(isinstance(r, KvError) for r in res), res
    assert isinstance(res[0], ErrUnknownCommand) and isinstance(res[0], InvalidRequest)
    assert isinstance(res[4], ErrEmptyKey)
    assert isinstance(res[8], ErrDuplicateKey)
    assert isinstance(res[11], ErrTooManyOps)
    assert isinstance(res[14], ErrFutureRev)
    assert type(res[15]) is InvalidRequest and "must be bytes" in str(res[15])
    assert m.store.rows() == rows and m.store.head == head and m.store.compactions() == []
    assert m.applied == 2 + len(BAD_COMMANDS)
    assert m.apply(Entry(m.applied, 1, 0.0, Put(b"a", b"x"))) is not None  # never twice
    assert m.store.rows() == rows


class UnhashableKey(bytes):
    """Bytes that pass every check but break the Store's duplicate-key set."""

    __hash__ = None  # type: ignore[assignment]


def test_a_command_that_breaks_the_store_unforeseen_is_an_error_not_a_crash(
    m: NetsyMachine,
) -> None:
    feed(m, entries([Put(b"a", b"1")]))
    rows = m.store.rows()
    res = m.apply(Entry(2, 1, 0.0, Txn((), (Put(UnhashableKey(b"k"), b"1"),), ())))
    assert isinstance(res, ErrMalformedCommand) and "TypeError" in str(res)
    assert m.store.rows() == rows and m.applied == 2


def test_same_entries_same_results_on_every_member(tmp_path: Path) -> None:
    cmds = [
        Put(b"a", b"1"),
        Txn((), (Put(b"b", b"2"),), ()),
        DeleteRange(b"a", ALL_KEYS),
        *BAD_COMMANDS,
        Compact(2),
        Range(b"a", revision=1),
    ]
    one, two = netsy(str(tmp_path / "1")), netsy(str(tmp_path / "2"))
    es = entries(cmds)
    assert [norm(r) for r in feed(one, es)] == [norm(r) for r in feed(two, es)]
    assert one.store.rows() == two.store.rows()
    one.close()
    two.close()


# ------------------------------------------------------------ durability --


def test_reopen_keeps_applied_and_rows(tmp_path: Path) -> None:
    m = netsy(str(tmp_path))
    feed(m, entries([Put(b"a", b"1"), Put(b"b", b"2"), Compact(1), DeleteRange(b"a"), None]))
    rows, status = m.store.rows(), m.status()
    m.close()
    again = netsy(str(tmp_path))
    assert again.applied == 5  # the trailing no-op is persisted by close
    assert again.store.rows() == rows and again.status() == status
    assert again.apply(Entry(6, 1, 0.0, Put(b"c", b"3"))) == PutResult(5)
    again.close()
    again.close()  # idempotent


def test_a_second_instance_sees_applied_of_the_last_write(tmp_path: Path) -> None:
    """No close (a crash): the last write carries its `applied`; writeless entries after it
    are re-applied from the log and answer the same."""
    m = netsy(str(tmp_path))
    es = entries([Put(b"a", b"1"), Put(b"a", b"2"), None, Range(b"a"), DeleteRange(b"zz")])
    results = feed(m, es)
    other = netsy(str(tmp_path))
    assert other.applied == 2 and other.store.rows() == m.store.rows()
    assert [norm(r) for r in feed(other, es[2:])] == [norm(r) for r in results[2:]]
    other.close()
    m.close()


CRASH_HISTORY = [
    Put(b"a", b"1"),
    Put(b"b", b"1"),
    None,
    Txn((), (Put(b"a", b"2"), Put(b"c", b"1")), ()),
    DeleteRange(b"b"),
    Compact(4),
    Put(b"a", b"3"),
    Range(b"a"),
    Txn((Compare(b"a", "version", "=", 99),), (), (DeleteRange(b"a", ALL_KEYS),)),
    Put(b"d", b"4"),
]


def test_crash_keeps_applied_consistent_with_rows(tmp_path: Path) -> None:
    """Copy the database and a truncated WAL mid-way (what a power cut may leave with
    synchronous=NORMAL): whatever prefix survives, `applied` matches its rows."""
    m = netsy(str(tmp_path / "live"))
    es = entries(CRASH_HISTORY)
    feed(m, es)
    db = Path(m.path)
    wal = Path(str(db) + "-wal").read_bytes()
    assert len(wal) > 32  # the history is still in the WAL (no checkpoint yet)
    seen = set()
    for cut in sorted({*range(0, len(wal), max(1, len(wal) // 40)), len(wal)}):
        crashed = tmp_path / f"crash{cut}"
        crashed.mkdir()
        shutil.copy(db, crashed / DB_FILE)
        (crashed / f"{DB_FILE}-wal").write_bytes(wal[:cut])
        after = netsy(str(crashed))
        ref = netsy(str(tmp_path / f"ref{cut}"))
        feed(ref, [e for e in es if e.index <= after.applied])
        assert after.store.rows() == ref.store.rows(), cut
        assert after.store.compactions() == ref.store.compactions(), cut
        assert after.store.head == ref.store.head
        seen.add(after.applied)
        feed(after, [e for e in es if e.index > after.applied])  # the log re-applies
        assert after.store.rows() == m.store.rows()
        after.close()
        ref.close()
    assert len(seen) > 3  # several different crash points were exercised
    m.close()


def test_pending_compaction_resumes_on_open(tmp_path: Path) -> None:
    m = netsy(str(tmp_path), compaction_batch=1)
    feed(m, entries([Put(b"a", b"%d" % i) for i in range(6)] + [Compact(6)]))
    assert m.background()  # one batch done, more remains
    m.close()
    again = netsy(str(tmp_path), compaction_batch=1)
    assert again.query(CompactRevisions()) == (6, 0)
    drain(again)
    assert again.query(CompactRevisions()) == (6, 6)
    assert again.store.compactable_count() == 0
    again.close()


# --------------------------------------------------------------- snapshots --


def test_snapshot_is_durable_without_the_wal(tmp_path: Path) -> None:
    m = netsy(str(tmp_path / "g"))
    feed(m, entries([Put(b"a", b"1"), Put(b"b", b"2"), None]))
    m.snapshot()
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(m.path, copy / DB_FILE)  # the main file alone: the WAL is checkpointed
    other = netsy(str(copy))
    assert other.applied == 3 and other.store.rows() == m.store.rows()
    other.close()
    m.close()


def test_snapshot_bytes_deterministic_and_hold_no_values(tmp_path: Path) -> None:
    values = [b"\x7fSECRET-%d-VALUE\x01" % i for i in range(8)]
    cmds: list[Any] = [Put(b"k%d" % (i % 3), v) for i, v in enumerate(values[:5])]
    cmds += [
        Txn((), (Put(b"t", values[5]),), (Put(b"t", values[6]),)),
        Compact(5),
        DeleteRange(b"k1"),
        Put(b"k2", values[7]),
    ]
    one = netsy(str(tmp_path / "1"), compaction_batch=1)
    two = netsy(str(tmp_path / "2"), compaction_batch=1)
    feed(one, entries(cmds))
    feed(two, entries(cmds))
    drain(one)  # one has finished the value pass, two has not started it
    assert two.store.pending_compaction == 5
    data, live = one.snapshot()
    assert two.snapshot() == (data, live)
    for v in values:
        assert v not in data and v.hex().encode() not in data
        assert v[1:-1] not in data
    one.close()
    two.close()


def test_live_indexes_shrink_after_compaction(tmp_path: Path) -> None:
    m = netsy(str(tmp_path), compaction_batch=3)
    es = entries([Put(b"k%d" % (i % 2), b"%d" % i) for i in range(20)] + [None, Compact(19)])
    feed(m, es[:-1])  # entry i writes revision i + 1
    assert m.snapshot()[1] == list(range(1, 21))  # no compaction: every put is live
    feed(m, es[-1:])
    logical = m.snapshot()[1]  # live indexes follow the compact revision at once
    drain(m)
    _, live = m.snapshot()
    # k0@18 (entry 17), k1@19 (entry 18), everything above revision 19 (entries 19, 20)
    assert live == logical == [17, 18, 19, 20]
    assert len(live) < len(es)
    m.close()


def test_restore_needs_only_live_entries_and_is_atomic(tmp_path: Path) -> None:
    a = netsy(str(tmp_path / "a"))
    es = entries([Put(b"a", b"1"), Put(b"b", b"1"), Put(b"a", b"2"), Compact(4)])
    feed(a, es)
    data, live = a.snapshot()
    assert live == [2, 3]  # b@3 (entry 2) and a@4 (entry 3)
    b = netsy(str(tmp_path / "b"))
    feed(b, entries([Put(b"x", b"old")]))
    before = b.store.rows()
    with pytest.raises(RestoreError, match="live entry 3 .revision 4. is missing"):
        b.restore(data, 4, only(es, [2]))
    assert b.store.rows() == before and b.applied == 1
    with pytest.raises(RestoreError):
        b.restore(b"garbage", 4, only(es, live))
    b.restore(data, 4, only(es, live))
    assert b.store.pending_compaction is None  # the snapshot holds the compaction as done
    drain(a)
    assert b.applied == 4 and b.store.rows() == a.store.rows()
    b.restore(data, 4, [e for e in es if e.index in live])  # a sequence of entries works too
    assert b.store.rows() == a.store.rows()
    b.close()
    a.close()


def test_restore_rejects_an_entry_that_does_not_hold_the_value(tmp_path: Path) -> None:
    a = netsy(str(tmp_path / "a"))
    es = entries([Put(b"a", b"1")])
    feed(a, es)
    data, _ = a.snapshot()
    b = netsy(str(tmp_path / "b"))
    with pytest.raises(RestoreError, match="holds no value"):
        b.restore(data, 1, {1: Entry(1, 1, 0.0, None)}.get)
    with pytest.raises(RestoreError, match="does not put key"):
        b.restore(data, 1, {1: Entry(1, 1, 0.0, Put(b"other", b"1"))}.get)
    b.close()
    a.close()


# ------------------------------------------------ snapshot/restore property --

KEYS = [b"a", b"b", b"c"]
key_st = st.sampled_from(KEYS)
branch_st = st.lists(st.tuples(st.sampled_from(["put", "del"]), key_st), max_size=2)
op_st = st.one_of(
    st.tuples(st.just("put"), key_st),
    st.tuples(st.just("del"), key_st, st.sampled_from([None, b"c", ALL_KEYS])),
    st.tuples(
        st.just("txn"),
        key_st,
        st.sampled_from(["version", "value"]),
        st.integers(0, 2),
        branch_st,
        branch_st,
    ),
    st.tuples(st.just("compact"), st.integers(0, 30)),
    st.tuples(st.just("range"), st.integers(0, 30)),
    st.just(("noop",)),
    st.just(("bg",)),
)


def command(op: tuple[Any, ...], index: int) -> Any:
    """An op drawn by hypothesis as the command of the entry at `index` (unique values)."""
    kind = op[0]
    if kind == "put":
        return Put(op[1], b"v%d" % index)
    if kind == "del":
        return DeleteRange(op[1], op[2])
    if kind == "txn":
        _, key, target, n, succ, fail = op
        value: bytes | int = n if target == "version" else b"v%d" % n
        return Txn(
            (Compare(key, target, "=", value),), branch(succ, index, "s"), branch(fail, index, "f")
        )
    if kind == "compact":
        return Compact(op[1])
    if kind == "range":
        return Range(b"\0", ALL_KEYS, revision=op[1])
    return None


def branch(ops: list[tuple[str, bytes]], index: int, tag: str) -> tuple[Any, ...]:
    return tuple(
        Put(k, b"%s%d.%d" % (tag.encode(), index, j)) if kind == "put" else DeleteRange(k)
        for j, (kind, k) in enumerate(ops)
    )


def run(m: NetsyMachine, ops: list[tuple[Any, ...]], log: list[Entry]) -> list[Any]:
    """Apply ops as entries after `log` (appending them); "bg" runs one background batch."""
    out = []
    for op in ops:
        if op[0] == "bg":
            m.background()
            continue
        entry = Entry(m.applied + 1, 1, 0.0, command(op, m.applied + 1))
        log.append(entry)
        out.append(norm(m.apply(entry)))
    return out


def view(m: NetsyMachine) -> dict[str, Any]:
    """Everything a client can observe, at head and at every readable revision."""
    s = m.store
    low = max(s.compact_revision, 1)
    return {
        "status": m.status(),
        "compactions": [r for r, _ in s.compactions()],
        "ranges": [
            norm(m.query(Range(b"\0", ALL_KEYS, revision=r)))
            for r in [0, *range(s.compact_revision, s.head + 1)]
        ],
        "events": norm(m.query(Events(low, None, b"\0", ALL_KEYS, True))),
        "rows": [(*r[:7], r[7] is None) for r in s.rows()],
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=st.lists(op_st, max_size=30), more=st.lists(op_st, max_size=10))
def test_snapshot_restore_round_trip(history: list[Any], more: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        a = netsy(os.path.join(tmp, "a"), compaction_batch=2)
        b = netsy(os.path.join(tmp, "b"), compaction_batch=2)
        log: list[Entry] = []
        run(a, history, log)
        data, live = a.snapshot()
        event(f"compaction pending at snapshot: {a.store.pending_compaction is not None}")
        event(f"txn branches in snapshot: {TXN_TAG in data}")
        event(f"live < log: {len(live) < len(log)}")
        assert set(live) <= {e.index for e in log}
        b.restore(data, a.applied, only(log, live))
        assert b.applied == a.applied
        assert b.snapshot() == (data, live)
        drain(a)
        assert view(b) == view(a)
        assert run(a, more, list(log)) == run(b, more, log)
        drain(a)
        drain(b)
        assert view(b) == view(a)
        assert b.snapshot() == a.snapshot()
        a.close()
        b.close()


# ------------------------------------------------------------- queries --


def test_queries(m: NetsyMachine) -> None:
    feed(m, entries([Put(b"a", b"1"), Put(b"b", b"1"), DeleteRange(b"a"), Compact(3)]))
    events = m.query(Events(3, None, b"\0", ALL_KEYS))
    assert [(e.kind, e.kv.key, e.kv.mod_revision) for e in events] == [
        ("put", b"b", 3),
        ("delete", b"a", 4),
    ]
    assert len(m.query(Events(3, 3, b"a", b"c"))) == 1
    assert isinstance(m.query(Events(2, None, b"a", None)), ErrCompacted)
    assert m.query(CompactRevisions()) == (3, 0)
    assert m.query(Head()) == 4
    assert isinstance(m.query(KeyIndex("a")), ErrUnknownCommand)  # another machine's query
    assert isinstance(m.query(Range(b"")), ErrEmptyKey)
    assert m.query(EVERY).kvs == [KeyValue(b"b", b"1", 3, 3, 1)]
    assert m.status() == {
        "head": 4,
        "compact_revision": 3,
        "finished_compact_revision": 0,
        "applied": 4,
        "keys": 1,
    }


def test_applied_batch_reads_changes_compaction_and_head_in_one_query(m: NetsyMachine) -> None:
    feed(m, entries([Put(b"a", b"1"), Put(b"b", b"1"), Range(b"a"), DeleteRange(b"a")]))
    batch = m.query(AppliedSince(3, 4))  # revisions: a@2 b@3 a-del@4
    assert isinstance(batch, AppliedBatch) and (batch.compact_revision, batch.head) == (0, 4)
    assert batch.events == tuple(m.query(Events(3, 4, b"\0", ALL_KEYS, True)))
    assert [(e.kind, e.kv.key, e.kv.mod_revision) for e in batch.events] == [
        ("put", b"b", 3), ("delete", b"a", 4)]
    assert batch.events[1].prev_kv == KeyValue(b"a", b"1", 2, 2, 1)
    # no upper bound: everything from the first revision the caller has not seen
    assert m.query(AppliedSince(3, None)) == batch
    assert m.query(AppliedSince(5, None)) == AppliedBatch((), 0, 4)


def test_a_watch_never_reads_at_or_below_the_compact_revision(m: NetsyMachine) -> None:
    """A plain read at the compact revision is allowed (etcd), but revision C has lost
    its prev values there: a watch's replay or fan-out reaching C fails as compacted, so
    the watch is canceled, never served a broken event (sim fault history, seed 41)."""
    feed(m, entries([Put(b"a", b"1"), Put(b"a", b"2"), Put(b"b", b"1"), Compact(3)]))
    drain(m)
    at_c = m.query(Events(3, 4, b"\0", ALL_KEYS, True))
    assert [e.kv.mod_revision for e in at_c] == [3, 4] and at_c[0].prev_kv is None  # lost
    refused = m.query(WatchHistory(3, 4, b"\0", ALL_KEYS, True))
    assert isinstance(refused, ErrCompacted) and refused.compact_revision == 3
    above = m.query(WatchHistory(4, 5, b"\0", ALL_KEYS, True))
    assert [(e.kv.key, e.kv.mod_revision) for e in above] == [(b"b", 4)]
    lagging = m.query(AppliedSince(3, 5))  # a node that had not seen 3..5 yet
    assert lagging == AppliedBatch(None, 3, 4)
    assert m.query(AppliedSince(4, 5)) == AppliedBatch(tuple(above), 3, 4)


def test_factory_is_picklable_and_passes_options(tmp_path: Path) -> None:
    factory = pickle.loads(pickle.dumps(functools.partial(netsy, limits=Limits(max_txn_ops=2))))
    m = factory(str(tmp_path))
    assert isinstance(m, NetsyMachine)
    res = m.apply(Entry(1, 1, 0.0, Txn((), (Put(b"a", b""), Put(b"b", b""), Put(b"c", b"")))))
    assert isinstance(res, ErrTooManyOps)
    m.close()
    assert pickle.loads(pickle.dumps(netsy)) is netsy
