"""The history model (scenarios/history.py) and the checkers other than linearizability.

The recorder: one operation in flight per client, times passed in, bounds, JSON round
trip. Then each checker on small hand-made histories: what it must accept, and each
violation it must report with the right evidence — lost writes, revisions going
backwards, compactions passing live watches, broken watch guarantees (through the
adapter over scenarios/checkers/watch_oracle.py, with the truth rebuilt from the history and
compared with the real store's own event history).
"""

from __future__ import annotations

import math

import pytest

from sediment.actors.kv.errors import ErrCompacted, ErrFutureRev
from sediment.actors.kv.store import ALL_KEYS, Store
from sediment.actors.kv.types import (
    Compact,
    CompactResult,
    Compare,
    DeleteRange,
    DeleteResult,
    Event,
    KeyValue,
    Put,
    PutResult,
    Range,
    RangeResult,
    Txn,
    TxnResult,
)
from sediment.scenarios import checkers
from sediment.scenarios.checkers import (
    compaction_safety,
    lost_writes,
    revisions,
    watch_guarantees,
)
from sediment.scenarios.history import (
    CompactionEvent,
    Failure,
    History,
    HistoryError,
    HistoryFull,
    Op,
    WatchLog,
    WatchResponse,
)
from sediment.scenarios.history_recorder import HistoryRecorder

K, J = b"k", b"j"


def kv(key: bytes, value: bytes, mod: int, create: int | None = None, version: int = 1) -> KeyValue:
    return KeyValue(key, value, create if create is not None else mod, mod, version)


def put(c: int, key: bytes, value: bytes, t: float, rev: int, outcome: str = "ok") -> Op:
    if outcome == "info":
        return Op(c, "put", Put(key, value), t, None, "info")
    return Op(c, "put", Put(key, value), t, t + 0.5, "ok", PutResult(rev))


def delete(c: int, key: bytes, t: float, rev: int, deleted: int = 1,
           range_end: bytes | None = None, outcome: str = "ok") -> Op:
    if outcome == "info":
        return Op(c, "delete", DeleteRange(key, range_end), t, None, "info")
    return Op(c, "delete", DeleteRange(key, range_end), t, t + 0.5, "ok",
              DeleteResult(rev, deleted))


def read_all(c: int, t: float, header: int, *kvs: KeyValue) -> Op:
    return Op(c, "range", Range(b"\0", ALL_KEYS), t, t + 0.5, "ok",
              RangeResult(list(kvs), len(kvs), False, header))


def get(c: int, key: bytes, t: float, header: int, *kvs: KeyValue, revision: int = 0) -> Op:
    return Op(c, "get", Range(key, revision=revision), t, t + 0.5, "ok",
              RangeResult(list(kvs), len(kvs), False, header))


def compact(c: int, rev: int, t: float, header: int) -> Op:
    return Op(c, "compact", Compact(rev), t, t + 0.5, "ok", CompactResult(header))


def H(*ops: Op, watches: tuple[WatchLog, ...] = (),
      compactions: tuple[CompactionEvent, ...] = ()) -> History:
    return History(tuple(ops), watches, (), compactions)


# ---- the recorder ----------------------------------------------------------------------


def test_recorder_records_operations_with_the_times_given() -> None:
    r = HistoryRecorder()
    a = r.invoke(1, "put", Put(K, b"v"), 1.0)
    b = r.invoke(2, "get", Range(K), 1.5)
    r.complete(b, "ok", 2.0, RangeResult([], 0, False, 0))
    done = r.complete(a, "ok", 2.5, PutResult(1))
    assert done == Op(1, "put", Put(K, b"v"), 1.0, 2.5, "ok", PutResult(1))
    c = r.invoke(1, "get", Range(K, revision=9), 3.0)
    r.complete(c, "fail", 3.5, ErrFutureRev())
    r.invoke(2, "put", Put(K, b"w"), 4.0)  # never completes
    h = r.history()
    assert [op.outcome for op in h.ops] == ["ok", "ok", "fail", "info"]
    assert h.ops[2].result == Failure("ErrFutureRev", "etcdserver: mvcc: required revision "
                                      "is a future revision")
    assert h.ops[3].end == math.inf and h.ops[3].complete_t is None


@pytest.mark.parametrize("bad", [
    lambda r: r.invoke(1, "put", Range(K), 0),  # wrong args for the kind
    lambda r: r.invoke(1, "scan", Range(K), 0),  # unknown kind
    lambda r: r.invoke(1, "put", Put(K, b"v"), math.nan),
    lambda r: r.invoke(True, "put", Put(K, b"v"), 0),
    lambda r: (r.invoke(1, "put", Put(K, b"v"), 0), r.invoke(1, "get", Range(K), 1)),
    lambda r: r.complete(r.invoke(1, "put", Put(K, b"v"), 5), "ok", 4, PutResult(1)),
    lambda r: r.complete(r.invoke(1, "put", Put(K, b"v"), 5), "ok", 6, None),
    lambda r: r.complete(r.invoke(1, "put", Put(K, b"v"), 5), "fail", 6, PutResult(1)),
    lambda r: r.watch_response(7, 1.0, 1),
    lambda r: r.compaction(0, 1.0),
])
def test_recorder_rejects_bad_calls(bad: object) -> None:
    r = HistoryRecorder()
    with pytest.raises(HistoryError):
        bad(r)  # type: ignore[operator]


def test_a_rejected_completion_leaves_the_op_in_flight() -> None:
    r = HistoryRecorder()
    h = r.invoke(1, "put", Put(K, b"v"), 5)
    with pytest.raises(HistoryError):
        r.complete(h, "ok", 6, None)
    r.complete(h, "ok", 6, PutResult(1))
    assert r.history().ops[0].ok


def test_recorder_is_bounded() -> None:
    r = HistoryRecorder(max_ops=2, max_watch_responses=1, max_events=1)
    r.complete(r.invoke(1, "put", Put(K, b"v"), 0), "ok", 1, PutResult(1))
    r.invoke(1, "put", Put(K, b"v"), 2)
    with pytest.raises(HistoryFull):
        r.invoke(2, "put", Put(K, b"v"), 2)
    w = r.watch_open(1, K, 0)
    r.watch_response(w, 1, 1)
    with pytest.raises(HistoryFull):
        r.watch_response(w, 2, 2)
    r.fault(1.0, "kill_node", node="n1")
    with pytest.raises(HistoryFull):
        r.compaction(3, 2.0)
    with pytest.raises(HistoryError):
        HistoryRecorder(max_ops=0)


def test_history_round_trips_through_json() -> None:
    r = HistoryRecorder()
    odd = bytes(range(256))
    r.complete(r.invoke(1, "put", Put(odd, b"\x00\xff", True), 0), "ok", 1,
               PutResult(1, kv(odd, b"x", 1)))
    t = Txn((Compare(K, "value", "=", b"a"), Compare(K, "version", ">", 2)),
            (Put(K, b"b"), Range(K, ALL_KEYS, 1)), (DeleteRange(J, b"z"),))
    r.complete(r.invoke(2, "txn", t, 2), "ok", 3,
               TxnResult(True, [PutResult(2), RangeResult([kv(K, b"b", 2)], 1, False, 2)], 2))
    r.complete(r.invoke(3, "get", Range(K, revision=1), 4), "fail", 5, ErrCompacted(2))
    r.invoke(4, "compact", Compact(3), 6)
    w = r.watch_open(1, K, 7, range_end=ALL_KEYS, start_revision=2, prev_kv=True)
    r.watch_created(w, 7.5, 2)
    r.watch_response(w, 8, 2, [Event("put", kv(K, b"b", 2), kv(K, b"a", 1))])
    r.watch_end(w, 9, "compacted", 3)
    r.fault(10, "partition", sides=[["n1"], ["n2", "n3"]])
    r.compaction(3, 11, t_start=10.5, positions={0: 4})
    h = r.history()
    again = History.from_json(h.to_json())
    assert again == h
    assert isinstance(again.ops[1].args, Txn) and isinstance(again.ops[1].args.compare, tuple)
    with pytest.raises(HistoryError):
        History.from_json('{"format": 99}')
    with pytest.raises(HistoryError):
        History.from_json('{"format": 1, "ops": [{"$t": "Evil"}]}')
    with pytest.raises(HistoryError):
        History.from_json('{"format": 1, "ops": [{"$t": "Put", "key": {"$b": "\u20ac"}}]}')
    with pytest.raises(HistoryError):
        History.from_json("not json")


def test_ops_describe_themselves_in_one_line() -> None:
    op = Op(2, "put", Put(K, b"v7"), 3.1, 3.25, "ok", PutResult(12))
    assert op.describe() == "c2 put k=v7 -> ok rev 12 [3.100, 3.250]"
    info = Op(1, "delete", DeleteRange(K, ALL_KEYS), 1, None, "info")
    assert info.describe() == "c1 delete [k, +inf) -> info [1.000, inf]"


# ---- lost writes -----------------------------------------------------------------------


def test_writes_in_the_final_state_or_superseded_are_not_lost() -> None:
    h = H(put(1, K, b"a", 0, 1), put(1, K, b"b", 1, 2), put(2, J, b"x", 2, 3),
          delete(2, J, 3, 4), put(1, J, b"y", 4, 5),
          read_all(3, 9, 5, kv(J, b"y", 5), kv(K, b"b", 2, 1, 2)))
    assert lost_writes.check(h).ok


def test_an_acknowledged_put_missing_from_the_final_state_is_lost() -> None:
    lost = put(1, K, b"b", 1, 2)
    final = read_all(3, 9, 2, kv(K, b"a", 1))
    result = lost_writes.check(H(put(1, K, b"a", 0, 1), lost, final))
    assert result.status == "violation"
    assert result.evidence == (lost, final)
    assert "put k=b at revision 2" in result.explanation
    assert "older version" in result.explanation


@pytest.mark.parametrize("ops, final, why", [
    ([put(1, K, b"a", 0, 1)], read_all(3, 9, 1), "absent and no later delete"),
    ([put(1, K, b"a", 0, 1)], read_all(3, 9, 1, kv(K, b"z", 1)), "another value"),
    ([put(1, K, b"a", 0, 1), put(1, J, b"b", 1, 2)], read_all(3, 9, 1, kv(K, b"a", 1)),
     "header 1 is below it"),
    ([put(1, K, b"a", 0, 1), delete(1, b"a", 1, 2, range_end=b"z")],
     read_all(3, 9, 2, kv(K, b"a", 1)), "still has a version from before it"),
])
def test_each_kind_of_lost_write(ops: list[Op], final: Op, why: str) -> None:
    result = lost_writes.check(H(*ops, final))
    assert result.status == "violation" and why in result.explanation, result.report()


def test_a_put_may_be_gone_if_some_delete_could_have_removed_it() -> None:
    for d in (delete(2, K, 2, 2), delete(2, b"a", 2, 0, range_end=b"z", outcome="info")):
        assert lost_writes.check(H(put(1, K, b"a", 0, 1), d, read_all(3, 9, 2))).ok
    early = delete(2, K, 0, 0, deleted=0)  # nothing deleted, before the put
    assert not lost_writes.check(H(early, put(1, K, b"a", 1, 1), read_all(3, 9, 1))).ok


def test_txn_writes_count_and_a_final_read_may_be_passed() -> None:
    t = Op(1, "txn", Txn((), (Put(K, b"t"),), ()), 0, 1, "ok",
           TxnResult(True, [PutResult(1)], 1))
    assert lost_writes.check(H(t), RangeResult([kv(K, b"t", 1)], 1, False, 1)).ok
    assert not lost_writes.check(H(t), RangeResult([], 0, False, 1)).ok
    assert lost_writes.check(H(t)).status == "unknown"  # no final read recorded


# ---- revisions -------------------------------------------------------------------------


def test_monotonic_revisions_pass() -> None:
    h = H(put(1, K, b"a", 0, 1), get(1, K, 1, 1, kv(K, b"a", 1)), compact(2, 1, 2, 1),
          Op(2, "get", Range(K, revision=1), 3, 3.5, "fail", Failure("ErrCompacted", "", 1)))
    assert revisions.check(h).ok


@pytest.mark.parametrize("ops, rule, culprit", [
    # a client's header goes back
    ([put(1, K, b"a", 0, 1), put(1, J, b"b", 1, 2), get(1, K, 2, 1, kv(K, b"a", 1))],
     "client: c1 saw revision 2, then header 1", 2),
    # ErrFutureRev for a revision the client already saw
    ([put(1, K, b"a", 0, 1), Op(1, "get", Range(K, revision=1), 1, 1.5, "fail",
                                Failure("ErrFutureRev"))],
     "client: c1 saw revision 1, then ErrFutureRev", 1),
    # the compact revision goes back
    ([compact(1, 5, 0, 9), Op(2, "get", Range(K, revision=2), 1, 1.5, "fail",
                              Failure("ErrCompacted", "", 3))],
     "compact: compact revision 5 was established, then ErrCompacted reported 3", 1),
    # a read below the compact revision succeeds
    ([compact(1, 5, 0, 9), get(2, K, 1, 9, revision=4)],
     "compact: compact revision 5 was established, then a read at 4 succeeded", 1),
    # a Compact at or below it succeeds
    ([compact(1, 5, 0, 9), compact(2, 5, 1, 9)],
     "compact: compact revision 5 was established, then Compact 5 succeeded", 1),
    # the head falls below the compact revision (etcd #17780)
    ([compact(1, 5, 0, 9), get(2, K, 1, 3)],
     "compact: compact revision 5 was established, then header 3 is below it", 1),
])
def test_revisions_going_backwards(ops: list[Op], rule: str, culprit: int) -> None:
    result = revisions.check(H(*ops))
    assert result.status == "violation"
    assert result.explanation.startswith(rule), result.explanation
    assert result.evidence[-1] is ops[culprit]


def test_concurrent_observations_are_not_ordered() -> None:
    # the ErrCompacted(3) read overlaps the Compact 5: no order is established
    h = H(compact(1, 5, 0, 9), Op(2, "get", Range(K, revision=2), 0.2, 0.4, "fail",
                                  Failure("ErrCompacted", "", 3)))
    assert revisions.check(h).ok


def _watch(handle: int, *responses: WatchResponse, start: int = 1, end: str | None = None,
           compact_revision: int = 0, open_t: float = 0.0, created_t: float | None = 0.1,
           prev_kv: bool = False) -> WatchLog:
    return WatchLog(handle, 9, b"\0", ALL_KEYS, start, open_t, prev_kv, False, False,
                    created_t, start, tuple(responses), None if end is None else 20.0, end,
                    compact_revision)


def test_a_watch_going_back_in_time() -> None:
    ev = Event("put", kv(K, b"a", 3))
    w = _watch(0, WatchResponse(1, 3, (ev,)), WatchResponse(2, 2))
    result = revisions.check(H(watches=(w,)))
    assert result.status == "violation" and result.evidence == (w,)
    assert "watch 0 response 1: header 2 after 3" in result.explanation
    cancel_early = _watch(1, end="compacted", compact_revision=2, open_t=10)
    result = revisions.check(H(compact(1, 5, 0, 9), watches=(cancel_early,)))
    assert "watch 1 was canceled at 2" in result.explanation


# ---- compaction safety -----------------------------------------------------------------


def test_recorded_positions_of_live_watches() -> None:
    w = _watch(0, start=4)
    passed = CompactionEvent(4, 1, 2, {0: 4}, source="cluster")
    result = compaction_safety.check(H(watches=(w,), compactions=(passed,)))
    assert result.status == "violation"
    assert result.evidence == (passed, w)
    assert "still needs revision 4" in result.explanation
    fine = CompactionEvent(3, 1, 2, {0: 4}, source="cluster")
    assert compaction_safety.check(H(watches=(w,), compactions=(fine,))).ok
    by_client = CompactionEvent(4, 1, 2, {0: 4}, source="client")  # etcd semantics
    assert compaction_safety.check(H(watches=(w,), compactions=(by_client,))).ok


def test_a_live_watch_canceled_by_a_cluster_compaction() -> None:
    w = _watch(0, start=4, end="compacted", compact_revision=6, created_t=1.0)
    later = CompactionEvent(6, 2.0, 3.0, source="cluster")
    result = compaction_safety.check(H(watches=(w,), compactions=(later,)))
    assert result.status == "violation"
    assert result.evidence == (w, later)
    assert "watch 0 from revision 4, live since 1.000" in result.explanation


def test_cancels_that_are_allowed() -> None:
    w = _watch(0, start=4, end="compacted", compact_revision=6, created_t=1.0)
    # a client Compact to that revision: etcd cancels watches below it
    assert compaction_safety.check(H(compact(1, 6, 2, 9), watches=(w,))).ok
    # the floor was already above the start when the watch was created
    before = CompactionEvent(5, 0.5, 3.0, source="cluster")
    assert compaction_safety.check(H(watches=(w,), compactions=(before,))).ok
    # a cluster compaction with an unknown start could have come first
    unknown_start = CompactionEvent(6, 0.0, 3.0, source="cluster")
    assert compaction_safety.check(H(watches=(w,), compactions=(unknown_start,))).ok
    # refused at admission under the floor of a notice that was rolled back, compacted
    # by a later cycle: never live, so never passed (slow-watcher, sim seed 34)
    refused = _watch(0, start=4, end="compacted", compact_revision=6, created_t=None)
    later_cycle = CompactionEvent(6, 2.0, 3.0, source="cluster")
    assert compaction_safety.check(H(watches=(refused,), compactions=(later_cycle,))).ok


# ---- watch guarantees (through scenarios/checkers/watch_oracle.py) ------------------------------


def _recorded_store_run() -> tuple[History, list[Event], Store]:
    """A short run on the real store: the ops as a client saw them (revisions 2..7:
    etcd's empty store is revision 1), and one watch from revision 1 that received every
    event, a revision per response."""
    store = Store(":memory:", synchronous="OFF")
    ops = []
    t = 0.0
    for req in [Put(K, b"a"), Put(J, b"b", True), Put(K, b"c", True), DeleteRange(J),
                Txn((Compare(K, "value", "=", b"c"),), (Put(K, b"d"), DeleteRange(b"x")), ()),
                DeleteRange(b"zz"), Put(J, b"e")]:
        if isinstance(req, Put):
            res: object = store.put(req.key, req.value, req.prev_kv)
            kind = "put"
        elif isinstance(req, DeleteRange):
            res, kind = store.delete_range(req.key, req.range_end), "delete"
        else:
            res, kind = store.txn(req.compare, req.success, req.failure), "txn"
        ops.append(Op(1, kind, req, t, t + 0.5, "ok", res))  # type: ignore[arg-type]
        t += 1
    truth = store.events(1, b"\0", ALL_KEYS, prev_kv=True)
    return History(tuple(ops)), truth, store


def test_the_truth_rebuilt_from_the_history_is_the_stores_own() -> None:
    h, truth, store = _recorded_store_run()
    rebuilt = watch_guarantees.committed_events(h)
    assert rebuilt == (truth, store.head)
    gap = History(h.ops[:2] + h.ops[3:])  # revision 4 unaccounted for
    assert watch_guarantees.committed_events(gap) is None


def _full_watch(truth: list[Event], prev_kv: bool = True) -> WatchLog:
    by_rev: dict[int, list[Event]] = {}
    for e in truth:
        by_rev.setdefault(e.kv.mod_revision, []).append(
            e if prev_kv else Event(e.kind, e.kv))
    responses = [WatchResponse(10 + r, r, tuple(es)) for r, es in sorted(by_rev.items())]
    return _watch(0, *responses, WatchResponse(30, max(by_rev)), prev_kv=prev_kv)


def test_a_complete_watch_passes_and_a_gap_is_reported() -> None:
    h, truth, _ = _recorded_store_run()
    w = _full_watch(truth)
    assert watch_guarantees.check(History(h.ops, (w,))).ok
    holed = WatchLog(**{**w.__dict__, "responses": w.responses[:2] + w.responses[3:]})
    result = watch_guarantees.check(History(h.ops, (holed,)))
    assert result.status == "violation"
    assert result.evidence == (holed,)
    assert result.explanation.startswith("reliable (watch 0)"), result.explanation


def test_watch_truth_given_or_unknown() -> None:
    h, truth, store = _recorded_store_run()
    w = _full_watch(truth)
    assert watch_guarantees.check(History(h.ops[:1], (w,)), truth, store.head).ok
    unknown = watch_guarantees.check(History(h.ops[:2] + h.ops[3:], (w,)))
    assert unknown.status == "unknown" and not unknown.ok
    assert watch_guarantees.check(History(h.ops)).ok  # no watches: nothing to check


def test_a_prev_kv_lost_to_compaction_is_forgiven_only_at_or_below_it() -> None:
    h, truth, _ = _recorded_store_run()
    stripped = [Event(e.kind, e.kv, None) if e.kv.mod_revision == 4 else e for e in truth]
    w = _full_watch(stripped)
    assert not watch_guarantees.check(History(h.ops, (w,))).ok
    compacted = History(h.ops, (w,), (), (CompactionEvent(4, 0, 1, source="cluster"),))
    assert watch_guarantees.check(compacted).ok


# ---- all of them -----------------------------------------------------------------------


def test_run_applies_the_named_checks() -> None:
    h, truth, _ = _recorded_store_run()
    final = read_all(2, 20, 7, kv(J, b"e", 7), kv(K, b"d", 6, 2, 3))
    history = History((*h.ops, final), (_full_watch(truth),))
    results = checkers.run(history)
    assert [r.name for r in results] == list(checkers.NAMES)
    assert all(r.ok for r in results), "\n".join(r.report() for r in results)
    assert [r.name for r in checkers.run(history, ["no_lost_writes"])] == ["no_lost_writes"]
    with pytest.raises(ValueError, match="unknown checks"):
        checkers.run(history, ["serializable"])
