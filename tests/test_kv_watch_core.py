"""The pure watcher core and the watch-history checker.

Table tests drive one watcher by hand-built events, rule by rule (etcd's watch semantics,
Netsy's admission floor and slow-consumer close). A hypothesis state machine then drives
a watcher against a real Store (the shell's side: fetches answered from `Store.events`,
late, cut or failed) and runs every client-visible response through the checker. The
last tests feed the checker bad histories to show it catches each kind of violation.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sediment.actors.kv import store as store_mod
from sediment.actors.kv.errors import (
    ErrCompacted,
    ErrEmptyKey,
    ErrInvalidRangeEnd,
    ErrNegativeRevision,
    ErrWatcherDuplicateID,
    ErrWatcherNotExist,
    InvalidRequest,
    KvError,
    WatchProtocolError,
)
from sediment.actors.kv.store import Store
from sediment.actors.kv.types import DeleteRange, Event, KeyValue, Put
from sediment.actors.kv.watch_core import (
    WatcherConfig,
    WatcherState,
    init,
    is_synced,
    min_revision,
    positions,
    step,
    wakeup_at,
)
from sediment.actors.kv.watch_protocol import (
    ALL_KEYS,
    BROADCAST_ID,
    Ack,
    Advanced,
    Canceled,
    CancelWatch,
    CloseWatcher,
    Committed,
    Created,
    CreateWatch,
    Deliver,
    Effect,
    FetchFailed,
    FetchHistory,
    FloorRaised,
    HistoryFetched,
    Progress,
    Rejected,
    RequestProgress,
    Tick,
    WatcherEvent,
)
from sediment.scenarios.checkers.watch_oracle import (
    Cancellation,
    CompactionRecord,
    Recorder,
    Response,
    Violation,
    WatchRecord,
    check,
)

# ---- helpers ---------------------------------------------------------------------------


def put(key: bytes, rev: int, value: bytes = b"v", prev: KeyValue | None = None) -> Event:
    version = prev.version + 1 if prev else 1
    create = prev.create_revision if prev else rev
    return Event("put", KeyValue(key, value, create, rev, version), prev)


def delete(key: bytes, rev: int, prev: KeyValue | None = None) -> Event:
    return Event("delete", KeyValue(key, b"", 0, rev, 0), prev)


def run(state: WatcherState, *events: WatcherEvent) -> tuple[WatcherState, list[Effect]]:
    """Step every event; all the effects, in order."""
    out: list[Effect] = []
    for ev in events:
        state, fx = step(state, ev)
        out += fx
    return state, out


def only(fx: Sequence[Effect], kind: type[Any]) -> list[Any]:
    return [f for f in fx if isinstance(f, kind)]


def fetch_of(fx: Sequence[Effect]) -> FetchHistory:
    (f,) = only(fx, FetchHistory)
    return f


def at(committed: int = 10, floor: int = 0, **cfg: Any) -> WatcherState:
    return init(WatcherConfig(**cfg), committed, floor)


# ---- creation and bad input ------------------------------------------------------------


def test_from_now_starts_at_committed_plus_one_and_counts_so() -> None:
    s, fx = run(at(10), CreateWatch(b"a"))
    assert fx == [Created(0, 11, 10)]
    # Netsy flaw fixed: a "from now" watch pins compaction at 10, not at 0
    assert min_revision(s) == 11 and positions(s) == {0: 11} and is_synced(s, 0)
    assert min_revision(at(10)) is None


def test_auto_ids_skip_ids_the_client_chose() -> None:
    s, fx = run(at(), CreateWatch(b"a", watch_id=1), CreateWatch(b"a"), CreateWatch(b"a"))
    assert [f.watch_id for f in only(fx, Created)] == [1, 0, 2]


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        (CreateWatch(b""), ErrEmptyKey),
        (CreateWatch(b"b", b"a"), ErrInvalidRangeEnd),
        (CreateWatch(b"b", b"b"), ErrInvalidRangeEnd),  # etcd: watcher range is empty
        (CreateWatch(b"a", start_revision=-1), ErrNegativeRevision),
        (CreateWatch(b"a", watch_id=7), ErrWatcherDuplicateID),
        (CreateWatch(b"a", watch_id=-2), InvalidRequest),
        (CreateWatch("a"), InvalidRequest),  # type: ignore[arg-type]
        (CreateWatch(b"a", start_revision=1.5), InvalidRequest),  # type: ignore[arg-type]
        (CancelWatch(99), ErrWatcherNotExist),
        (Ack(5), InvalidRequest),  # nothing was delivered
        (Ack(-1), InvalidRequest),
    ],
)
def test_bad_input_is_rejected_and_changes_nothing(request_: WatcherEvent, error: type) -> None:
    s, _ = run(at(10), CreateWatch(b"a", watch_id=7))
    before = copy.deepcopy(s)
    s2, fx = step(s, request_)
    assert len(fx) == 1 and isinstance(fx[0], Rejected) and isinstance(fx[0].error, error)
    assert s2 is s and s == before


def test_range_forms_are_accepted() -> None:
    s, fx = run(at(), CreateWatch(b"a", ALL_KEYS), CreateWatch(b"a", b""), CreateWatch(b"a", b"b"))
    assert len(only(fx, Created)) == 3 and not only(fx, Rejected)
    assert s.watches[1].range_end is None  # b"" is etcd's "single key"


@pytest.mark.parametrize(("start", "refused"), [(4, True), (5, True), (6, False)])
def test_start_at_or_below_the_floor_is_canceled_compacted(start: int, refused: bool) -> None:
    s, fx = run(at(10, floor=5), CreateWatch(b"a", start_revision=start))
    assert fx[0] == Created(0, start, 10)
    if refused:
        assert fx[1:] == [Canceled(0, "compacted", 5)] and not s.watches
    else:
        assert fetch_of(fx).from_revision == 6 and min_revision(s) == 6


def test_cancel_removes_the_watch() -> None:
    s, fx = run(at(), CreateWatch(b"a"), CancelWatch(0))
    assert fx[-1] == Canceled(0, "canceled") and min_revision(s) is None
    s, fx = run(s, Committed(11, (put(b"a", 11),)))
    assert fx == []


# ---- live delivery ---------------------------------------------------------------------


def test_live_events_are_delivered_per_revision_in_one_response() -> None:
    s, _ = run(at(10), CreateWatch(b"a", ALL_KEYS))
    evs = (put(b"a", 11), put(b"b", 11), delete(b"c", 13))
    s, fx = run(s, Committed(13, evs))
    assert fx == [Deliver(0, 1, 13, evs)]
    assert positions(s) == {0: 14} and s.committed == 13


def test_commits_without_matching_events_still_move_the_watch() -> None:
    s, _ = run(at(10), CreateWatch(b"a"))
    s, fx = run(s, Committed(12, (put(b"b", 12),)), Committed(15))
    assert fx == [] and min_revision(s) == 16


def test_future_start_waits_for_its_revision() -> None:
    s, fx = run(at(10), CreateWatch(b"a", start_revision=13))
    assert fx == [Created(0, 13, 10)] and is_synced(s, 0)
    s, fx = run(s, Committed(11, (put(b"a", 11),)), Committed(12, (put(b"a", 12),)))
    assert fx == [] and min_revision(s) == 13  # revisions below its start never count
    s, fx = run(s, Committed(13, (put(b"a", 13),)))
    assert fx == [Deliver(0, 1, 13, (put(b"a", 13),))]


@pytest.mark.parametrize(
    ("key", "range_end", "keys"),
    [
        (b"a", None, [b"a"]),
        (b"a", b"b", [b"a", b"ab"]),
        (b"ab", ALL_KEYS, [b"ab", b"b", b"c"]),
        (b"b", b"c", [b"b"]),
    ],
)
def test_key_ranges(key: bytes, range_end: bytes | None, keys: list[bytes]) -> None:
    s, _ = run(at(10), CreateWatch(key, range_end))
    evs = tuple(put(k, 11) for k in (b"a", b"ab", b"b", b"c"))
    _, fx = run(s, Committed(11, evs))
    assert [e.kv.key for d in only(fx, Deliver) for e in d.events] == keys


@pytest.mark.parametrize(
    ("flags", "kinds", "with_prev"),
    [
        ({}, ["put", "delete"], False),
        ({"prev_kv": True}, ["put", "delete"], True),
        ({"no_put": True}, ["delete"], False),
        ({"no_delete": True}, ["put"], False),
        ({"no_put": True, "no_delete": True}, [], False),
    ],
)
def test_filters_and_prev_kv(flags: dict[str, bool], kinds: list[str], with_prev: bool) -> None:
    s, _ = run(at(10), CreateWatch(b"a", b"c", **flags))
    old = KeyValue(b"a", b"old", 3, 3, 1)
    evs = (put(b"a", 11, prev=old), delete(b"b", 12, prev=KeyValue(b"b", b"x", 4, 4, 1)))
    _, fx = run(s, Committed(12, evs))
    got = [e for d in only(fx, Deliver) for e in d.events]
    assert [e.kind for e in got] == kinds
    assert all((e.prev_kv is not None) == with_prev for e in got)


@pytest.mark.parametrize(
    "bad",
    [
        Committed(9),  # backwards
        Committed(12, (put(b"a", 13),)),  # above the revision it claims
        Committed(12, (put(b"a", 10),)),  # already committed
        Committed(12, (put(b"a", 12), put(b"a", 11))),  # out of order
        Advanced(9),
    ],
)
def test_shell_contract_breaks_raise(bad: WatcherEvent) -> None:
    s, _ = run(at(10), CreateWatch(b"a"))
    with pytest.raises(WatchProtocolError):
        step(s, bad)


# ---- replay ----------------------------------------------------------------------------


def test_replay_then_live() -> None:
    s, fx = run(at(10), CreateWatch(b"a", start_revision=4, prev_kv=True))
    f = fetch_of(fx)
    assert f == FetchHistory(1, 0, b"a", None, 4, 10, True, 512)
    assert min_revision(s) == 4 and not is_synced(s, 0)
    hist = (put(b"a", 5), put(b"a", 9))
    s, fx = run(s, HistoryFetched(1, 10, hist))
    assert fx == [Deliver(0, 1, 10, hist)] and is_synced(s, 0) and min_revision(s) == 11
    s, fx = run(s, Committed(11, (put(b"a", 11),)))
    assert fx == [Deliver(0, 2, 11, (put(b"a", 11),))]


def test_live_commits_during_a_fetch_are_buffered_then_delivered_once() -> None:
    s, fx = run(at(10), CreateWatch(b"a", start_revision=8))
    assert fetch_of(fx).to_revision == 10
    s, fx = run(s, Committed(11, (put(b"a", 11),)), Committed(12, (put(b"a", 12),)))
    assert fx == []  # nothing overtakes the replay
    s, fx = run(s, HistoryFetched(1, 10, (put(b"a", 9),)))
    assert [d.events for d in only(fx, Deliver)] == [
        (put(b"a", 9),),
        (put(b"a", 11), put(b"a", 12)),
    ]
    assert is_synced(s, 0) and min_revision(s) == 13
    s, fx = run(s, Committed(13, (put(b"a", 13),)))
    assert [e.kv.mod_revision for d in only(fx, Deliver) for e in d.events] == [13]


def test_an_overflowing_buffer_is_dropped_and_refetched() -> None:
    s, _ = run(at(10, max_pending=4), CreateWatch(b"a", start_revision=8))
    live = [Committed(r, (put(b"a", r),)) for r in range(11, 16)]
    s, fx = run(s, *live)
    assert fx == [] and s.fetch is not None and not s.fetch.buffer_ok
    s, fx = run(s, HistoryFetched(1, 10, (put(b"a", 9),)))
    assert only(fx, Deliver)[0].events == (put(b"a", 9),)
    # the rest comes from history, within what is left of the replay half of the window
    assert fetch_of(fx) == FetchHistory(2, 0, b"a", None, 11, 15, False, 1)


def test_a_cut_answer_fetches_the_rest() -> None:
    s, _ = run(at(10), CreateWatch(b"a", start_revision=2))
    s, fx = run(s, Committed(11, (put(b"a", 11),)), HistoryFetched(1, 6, (put(b"a", 3),)))
    assert only(fx, Deliver)[0].events == (put(b"a", 3),)
    assert fetch_of(fx).from_revision == 7 and fetch_of(fx).to_revision == 11
    s, fx = run(s, HistoryFetched(2, 11, (put(b"a", 8), put(b"a", 11))))
    assert only(fx, Deliver)[0].events == (put(b"a", 8), put(b"a", 11))
    assert is_synced(s, 0)


def test_advanced_without_events_makes_watches_catch_up_from_history() -> None:
    s, _ = run(at(10), CreateWatch(b"a"), CreateWatch(b"b", start_revision=30))
    s, fx = run(s, Advanced(20))
    f = fetch_of(fx)
    assert (f.watch_id, f.from_revision, f.to_revision) == (0, 11, 20)
    assert is_synced(s, 1)  # its start is still in the future
    s, fx = run(s, Advanced(22), HistoryFetched(1, 20))  # the jump left a hole
    assert fetch_of(fx).from_revision == 21


def test_stale_and_bad_fetch_answers() -> None:
    s, _ = run(at(10), CreateWatch(b"a", start_revision=5), CancelWatch(0))
    s2, fx = run(s, HistoryFetched(1, 10, (put(b"a", 6),)))
    assert fx == [] and s2 == s  # the watch is gone: ignored
    s, _ = run(at(10), CreateWatch(b"a", start_revision=5))
    for bad in (
        HistoryFetched(1, 11),
        HistoryFetched(1, 4),
        HistoryFetched(1, 8, (put(b"a", 9),)),
    ):
        with pytest.raises(WatchProtocolError):
            step(s, bad)


@pytest.mark.parametrize(
    ("error", "cancel"),
    [
        (ErrCompacted(7), Canceled(0, "compacted", 7)),
        (KvError("disk on fire"), Canceled(0, "error", detail="disk on fire")),
    ],
)
def test_failed_fetch_cancels(error: KvError, cancel: Canceled) -> None:
    s, _ = run(at(10), CreateWatch(b"a", start_revision=5))
    s, fx = run(s, FetchFailed(1, error))
    assert fx == [cancel] and min_revision(s) is None


def test_replays_one_at_a_time_oldest_first() -> None:
    s, fx = run(at(10), CreateWatch(b"a", start_revision=8), CreateWatch(b"b", start_revision=3))
    assert fetch_of(fx).watch_id == 0  # the first fetch went out before watch 1 existed
    s, fx = run(s, HistoryFetched(1, 10))
    assert fetch_of(fx).watch_id == 1
    s, _ = run(at(10), CreateWatch(b"a", start_revision=8))
    s, fx = run(s, CreateWatch(b"b", start_revision=3), CreateWatch(b"c", start_revision=2))
    assert not only(fx, FetchHistory)
    _, fx = run(s, HistoryFetched(1, 10))
    assert fetch_of(fx).watch_id == 2  # the lowest next revision goes first


# ---- compaction floor ------------------------------------------------------------------


def test_floor_cancels_watches_still_replaying_below_it() -> None:
    s, _ = run(
        at(10),
        CreateWatch(b"a", start_revision=3),  # fetching from 3
        CreateWatch(b"b", start_revision=6),  # waiting to fetch from 6
        CreateWatch(b"c", start_revision=9),  # waiting to fetch from 9
        CreateWatch(b"d"),  # synced, at 11
    )
    s, fx = run(s, FloorRaised(6))
    assert fx == [Canceled(0, "compacted", 6), Canceled(1, "compacted", 6), fetch_of(fx)]
    assert fetch_of(fx).watch_id == 2 and positions(s) == {2: 9, 3: 11}
    s2, fx = run(s, HistoryFetched(1, 10, (put(b"a", 4),)))
    assert fx == [] and s2 == s  # the canceled watch's late answer
    s, fx = run(s, FloorRaised(5))
    assert fx == [] and s.floor == 6  # the floor never goes down
    s, fx = run(s, CreateWatch(b"e", start_revision=6))
    assert fx == [Created(4, 6, 10), Canceled(4, "compacted", 6)]


def test_floor_above_committed_keeps_synced_watches() -> None:
    """A lagging replica can learn a floor above its own committed revision: its synced
    watches get those revisions live from the node's apply, not from history."""
    s, _ = run(at(10), CreateWatch(b"a"), CreateWatch(b"b", start_revision=5))
    s, fx = run(s, FloorRaised(15))
    assert fx == [Canceled(1, "compacted", 15)] and positions(s) == {0: 11}


# ---- progress notifications ------------------------------------------------------------


def test_interval_progress_for_quiet_synced_watches_only() -> None:
    s = init(WatcherConfig(progress_interval=5.0), 10, now=100.0)
    s, _ = run(
        s,
        CreateWatch(b"a", progress_notify=True),
        CreateWatch(b"b", progress_notify=True),
        CreateWatch(b"c"),
        CreateWatch(b"d", progress_notify=True, start_revision=2),  # replaying
    )
    assert wakeup_at(s) == 105.0
    s, fx = run(s, Tick(104.0))
    assert fx == []
    s, fx = run(s, Committed(11, (put(b"a", 11),)), Tick(105.0))
    assert only(fx, Progress) == [Progress(1, 11)]  # a just got an event; d is behind
    assert wakeup_at(s) == 110.0
    s, fx = run(s, Tick(110.0))
    assert only(fx, Progress) == [Progress(0, 11), Progress(1, 11)]
    s, _ = run(s, CancelWatch(0), CancelWatch(1), CancelWatch(3))
    assert wakeup_at(s) is None


def test_request_progress_waits_until_every_watch_is_synced() -> None:
    s, fx = run(at(10), RequestProgress())
    assert fx == [Progress(BROADCAST_ID, 10)]  # no watch: nothing to wait for
    s, _ = run(s, CreateWatch(b"a"), CreateWatch(b"b", start_revision=5))
    s, fx = run(s, RequestProgress(), RequestProgress(), Committed(11, (put(b"a", 11),)))
    assert not only(fx, Progress)
    s, fx = run(s, HistoryFetched(1, 10, (put(b"b", 6),)))
    assert fx == [Deliver(1, 2, 11, (put(b"b", 6),)), Progress(BROADCAST_ID, 11)]
    s, fx = run(s, Committed(12))
    assert fx == []  # the two requests were answered once


# ---- flow control and slow consumers ---------------------------------------------------


def test_acks_keep_a_watcher_open_and_a_slow_one_is_closed() -> None:
    s, _ = run(at(10, max_pending=4), CreateWatch(b"a"))
    for r in range(11, 20):  # an acking client never fills the window
        s, fx = run(s, Committed(r, (put(b"a", r),)))
        s, _ = run(s, Ack(only(fx, Deliver)[0].seq))
    assert s.closed is None and s.in_flight_events == 0
    for r in range(20, 24):
        s, fx = run(s, Committed(r, (put(b"a", r),)))
    assert s.in_flight_events == 4 and s.closed is None
    s, fx = run(s, Committed(24, (put(b"a", 24),)))
    assert fx == [CloseWatcher("slow")] and s.closed == "slow"
    assert min_revision(s) is None and wakeup_at(s) is None
    s2, fx = run(s, Committed(25), CreateWatch(b"a"), RequestProgress())
    assert fx == [] and s2 is s  # a closed watcher ignores everything


def test_ack_is_cumulative_and_idempotent() -> None:
    s, _ = run(at(10, max_pending=10), CreateWatch(b"a"))
    s, _ = run(s, *(Committed(r, (put(b"a", r),)) for r in range(11, 14)))
    assert s.in_flight_events == 3
    s, _ = run(s, Ack(2), Ack(1), Ack(2))
    assert s.in_flight_events == 1 and s.in_flight == ((3, 1),)


def test_one_response_always_fits_an_idle_client() -> None:
    s, _ = run(at(10, max_pending=2), CreateWatch(b"a", ALL_KEYS))
    big = tuple(put(bytes([97 + i]), 11) for i in range(5))
    s, fx = run(s, Committed(11, big))
    assert fx == [Deliver(0, 1, 11, big)] and s.closed is None


def test_replay_waits_for_acks_instead_of_flooding() -> None:
    s, _ = run(at(10, max_pending=4), CreateWatch(b"a"))
    s, _ = run(s, Committed(11, (put(b"a", 11),)), Committed(12, (put(b"a", 12),)))
    s, fx = run(s, CreateWatch(b"b", start_revision=2))
    assert not only(fx, FetchHistory)  # 2 unacked = the replay half of 4
    s, fx = run(s, Ack(1))
    assert fetch_of(fx).limit == 1


def test_step_is_pure() -> None:
    s, _ = run(at(10), CreateWatch(b"a"), CreateWatch(b"a", start_revision=4))
    before = copy.deepcopy(s)
    events: list[WatcherEvent] = [
        Committed(12, (put(b"a", 11), put(b"a", 12))),
        HistoryFetched(1, 10, (put(b"a", 5),)),
        Ack(1),
        FloorRaised(3),
        RequestProgress(),
    ]
    a = run(s, *events)
    b = run(s, *events)
    assert a == b and s == before


def test_all_keys_matches_the_store() -> None:
    assert ALL_KEYS == store_mod.ALL_KEYS


# ---- the checker catches bad histories -------------------------------------------------

HISTORY = (
    put(b"a", 1),
    put(b"b", 1),
    put(b"a", 2, b"v2", prev=KeyValue(b"a", b"v", 1, 1, 1)),
    delete(b"b", 3, prev=KeyValue(b"b", b"v", 1, 1, 1)),
    put(b"c", 4),
    put(b"a", 5, b"v3", prev=KeyValue(b"a", b"v2", 1, 2, 2)),
)


def strip(e: Event) -> Event:
    return Event(e.kind, e.kv)


def rec(*responses: Response, **kw: Any) -> WatchRecord:
    kw.setdefault("range_end", ALL_KEYS)
    kw.setdefault("start_revision", 1)
    return WatchRecord(0, b"a", responses=responses, **kw)


def resp(rev: int, *events: Event) -> Response:
    return Response(rev, tuple(strip(e) for e in events))


GOOD = rec(resp(2, *HISTORY[:3]), resp(5, *HISTORY[3:]), Response(5))


def rules(violations: list[Violation]) -> set[str]:
    return {v.rule for v in violations}


def test_checker_accepts_a_good_history() -> None:
    assert check(HISTORY, 5, [GOOD]) == []
    with_prev = rec(Response(5, HISTORY), prev_kv=True)
    assert check(HISTORY, 5, [with_prev]) == []
    only_a = rec(resp(5, HISTORY[0], HISTORY[2], HISTORY[5]), range_end=None)
    assert check(HISTORY, 5, [only_a]) == []
    puts = rec(resp(5, *(e for e in HISTORY if e.kind == "put")), no_delete=True)
    assert check(HISTORY, 5, [puts]) == []
    late = rec(resp(5, HISTORY[5]), start_revision=0, effective_start=5)
    assert check(HISTORY, 5, [late]) == []
    compacted = rec(start_revision=2, canceled=Cancellation("compacted", 3))
    assert check(HISTORY, 5, [compacted], [CompactionRecord(3, {1: 4})]) == []


@pytest.mark.parametrize(
    ("record", "rule"),
    [
        (rec(resp(2, *HISTORY[:3]), resp(5, HISTORY[4], HISTORY[5])), "reliable"),  # gap
        (rec(resp(2, *HISTORY[:3]), resp(5, *HISTORY[2:])), "unique"),  # duplicate
        (rec(resp(1, HISTORY[0]), resp(5, *HISTORY[1:])), "atomic"),  # split revision
        (rec(resp(5, *HISTORY[3:]), resp(5, *HISTORY[:3])), "ordered"),
        (rec(resp(5, *HISTORY[2:]), start_revision=1), "resumable"),  # skipped rev 1
        (rec(resp(5, *HISTORY), start_revision=2), "resumable"),  # before its start
        (rec(resp(2, *HISTORY[:3]), Response(3)), "bookmarkable"),  # progress before rev 3
        (rec(resp(2, *HISTORY[:2]), Response(2), resp(5, *HISTORY[2:])), "bookmarkable"),
        (rec(resp(1, *HISTORY[:2], put(b"z", 1))), "phantom"),
        (rec(resp(1, put(b"a", 1, b"other"), HISTORY[1])), "phantom"),
        (rec(resp(5, *HISTORY), no_put=True), "filter"),
        (rec(Response(2, HISTORY[:3])), "prev_kv"),  # prev_kv not asked for: must be None
        (rec(resp(1, *HISTORY[:2]), Response(9)), "committed"),
        (rec(resp(2, *HISTORY[:3]), canceled=Cancellation("compacted", 2)), "canceled"),
    ],
)
def test_checker_catches(record: WatchRecord, rule: str) -> None:
    violations = check(HISTORY, 5, [record])
    assert rule in rules(violations), violations
    assert all(str(v).startswith(v.rule) for v in violations)


def test_checker_catches_a_compaction_past_a_live_watch() -> None:
    bad = CompactionRecord(4, {0: 5, 3: 4})
    assert check(HISTORY, 5, [GOOD], [bad]) == [
        Violation(
            "compaction", 3, "compaction at 4 passed a live watch that still needs revision 4"
        )
    ]


def test_recorder_builds_the_clients_view() -> None:
    r = Recorder()
    s = at(0)
    for ev in (
        CreateWatch(b"a", ALL_KEYS),
        CreateWatch(b"b"),
        Committed(1, HISTORY[:2]),
        RequestProgress(),
        CancelWatch(1),
    ):
        s, fx = step(s, ev)
        r.observe(ev, fx)
    a, b = r.records()
    assert a.responses == (resp(1, *HISTORY[:2]), Response(1)) and a.canceled is None
    assert b.responses == (resp(1, HISTORY[1]), Response(1))
    assert b.canceled == Cancellation("canceled") and r.live() == [0]
    assert check(HISTORY[:2], 1, r.records()) == []


# ---- the state machine: random traffic through a real Store, checked -------------------

KEYS = (b"a", b"ab", b"b", b"c")
RANGES: tuple[tuple[bytes, bytes | None], ...] = (
    (b"a", None),
    (b"b", None),
    (b"a", b"b"),
    (b"a", ALL_KEYS),
    (b"ab", b"c"),
)
MAX_PENDING = 8


class WatcherMachine(RuleBasedStateMachine):
    """One client session against one node: the node commits txns into a Store and feeds
    them to the watcher (live, or as an Advanced jump); the shell answers fetches from
    Store.events late, cut or failed; the client acks late; the primary raises the floor
    and compacts the store. Every response goes through the checker."""

    def __init__(self) -> None:
        super().__init__()
        self.store = Store(":memory:")
        self.cfg = WatcherConfig(max_pending=MAX_PENDING, progress_interval=1.0)
        # the node starts a watcher at its head (etcd: an empty store is revision 1)
        self.state = init(self.cfg, self.store.head)
        self.recorder = Recorder()
        self.records: list[WatchRecord] = []  # of closed watcher generations
        self.truth: list[Event] = []
        self.compactions: list[CompactionRecord] = []
        self.fetches: list[FetchHistory] = []  # asked, not yet answered (maybe stale)
        self.now = 0.0
        self.biggest = 0  # the largest revision, in events

    def feed(self, ev: WatcherEvent) -> list[Effect]:
        self.state, fx = step(self.state, ev)
        self.recorder.observe(ev, fx)
        self.fetches += only(fx, FetchHistory)
        return fx

    # -- the node --

    @rule(
        changes=st.lists(
            st.tuples(st.sampled_from(KEYS), st.booleans()),
            min_size=1,
            max_size=3,
            unique_by=lambda c: c[0],
        ),
        gap=st.integers(1, 2),
        live=st.integers(0, 3),
    )
    def commit(self, changes: list[tuple[bytes, bool]], gap: int, live: int) -> None:
        ops = [Put(k, b"v%d" % self.store.head) if p else DeleteRange(k) for k, p in changes]
        self._write(ops, gap, live > 0)

    @rule(gap=st.integers(1, 2))
    def delete_prefix(self, gap: int) -> None:
        self._write([DeleteRange(b"a", b"b")], gap, True)

    @rule(n=st.integers(2, 8), seed=st.integers(0, 3))
    def burst(self, n: int, seed: int) -> None:
        """Several commits in a row, no client turn between: fills windows and buffers."""
        for i in range(n):
            key = KEYS[(seed + i) % len(KEYS)]
            self._write([Put(key, b"b%d" % i)], 1, True)

    @rule(n=st.integers(1, 4), seed=st.integers(0, 3))
    def jump(self, n: int, seed: int) -> None:
        """A snapshot install: n revisions arrive without their events (Advanced)."""
        for i in range(n):
            self._write([Put(KEYS[(seed + i) % len(KEYS)], b"j%d" % i)], 1, False, notify=False)
        self.feed(Advanced(self.store.head))

    def _write(
        self, ops: list[Put | DeleteRange], gap: int, live: bool, notify: bool = True
    ) -> None:
        """Write ops as the last of `gap` revisions (the ones before it fill: one commit
        notice may cover several revisions), then tell the core (or not)."""
        first = self.store.head + 1
        for i in range(gap - 1):
            self.store.put(KEYS[i % len(KEYS)], b"f%d" % self.store.head)
        rev = self.store.txn([], ops, []).revision
        if rev < first:
            return  # nothing changed: no revision consumed
        events = self.store.events(first, b"\0", ALL_KEYS, end_revision=rev, prev_kv=True)
        self.truth += events
        self.biggest = max(self.biggest, len(events))
        if notify:
            self.feed(Committed(rev, tuple(events)) if live else Advanced(rev))

    @rule(back=st.integers(0, 4))
    def raise_floor(self, back: int) -> None:
        """Netsy: raise the floor first (the core cancels what is below), then compact."""
        rev = self.store.head - back
        if rev <= self.store.compact_revision:
            return
        self.feed(FloorRaised(rev))
        self.compactions.append(CompactionRecord(rev, positions(self.state)))
        self.store.compact(rev)

    # -- the client --

    @rule(
        where=st.sampled_from(RANGES),
        back=st.one_of(st.none(), st.integers(-3, 8)),
        wid=st.one_of(st.none(), st.none(), st.none(), st.integers(0, 4)),
        flags=st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()),
    )
    def create(
        self,
        where: tuple[bytes, bytes | None],
        back: int | None,
        wid: int | None,
        flags: tuple[bool, bool, bool, bool],
    ) -> None:
        start = 0 if back is None else max(1, self.state.committed - back)
        prev_kv, no_put, no_delete, progress = flags
        self.feed(CreateWatch(where[0], where[1], start, wid, prev_kv, no_put, no_delete, progress))

    @rule(where=st.sampled_from(RANGES), data=st.data())
    def create_replaying(self, where: tuple[bytes, bytes | None], data: st.DataObject) -> None:
        """A watch resuming from a past revision above the floor: it replays history."""
        lo, hi = self.state.floor + 1, self.state.committed
        if lo <= hi:
            start = data.draw(st.integers(lo, hi))
            self.feed(CreateWatch(where[0], where[1], start, progress_notify=True))

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        live = sorted(self.state.watches)
        if live:
            self.feed(CancelWatch(data.draw(st.sampled_from(live))))

    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        acked = self.state.in_flight[0][0] - 1 if self.state.in_flight else self.state.seq
        self.feed(Ack(data.draw(st.integers(acked, self.state.seq))))

    @rule()
    def request_progress(self) -> None:
        self.feed(RequestProgress())

    @rule(dt=st.floats(0.1, 2.0))
    def tick(self, dt: float) -> None:
        self.now += dt
        self.feed(Tick(self.now))

    # -- the shell --

    @rule(cut=st.sampled_from([0.0, 0.5, 1.0]), stale_first=st.booleans())
    def answer_fetch(self, cut: float, stale_first: bool) -> None:
        """A late, possibly stale, possibly cut answer (cut 0: one revision only)."""
        if self.fetches:
            f = self.fetches.pop(0 if stale_first else -1)
            self.feed(self._answer(f, cut))

    @rule()
    def answer_current_fetch(self) -> None:
        """The common case: the shell answers the outstanding fetch in full, in time."""
        if self.fetches:
            self.feed(self._answer(self.fetches.pop()))

    def _answer(self, f: FetchHistory, cut: float = 1.0) -> WatcherEvent:
        try:
            events = self.store.events(
                f.from_revision,
                f.key,
                f.range_end,
                end_revision=f.to_revision,
                prev_kv=f.prev_kv,
            )
        except ErrCompacted as e:
            return FetchFailed(f.fetch_id, e)
        limit = max(1, int(f.limit * cut))
        if len(events) <= limit:
            return HistoryFetched(f.fetch_id, f.to_revision, tuple(events))
        last = events[limit - 1].kv.mod_revision  # cut after whole revisions
        kept = tuple(e for e in events if e.kv.mod_revision <= last)
        return HistoryFetched(f.fetch_id, last, kept)

    @precondition(lambda self: self.state.closed is not None)
    @rule()
    def reconnect(self) -> None:
        """The client of a closed watcher opens a new session."""
        self.records += self.recorder.records()
        self.recorder = Recorder()
        self.fetches = []
        self.state = init(self.cfg, self.store.head, self.store.compact_revision, self.now)

    # -- always --

    @invariant()
    def bounded(self) -> None:
        s = self.state
        assert s.in_flight_events <= MAX_PENDING + self.biggest
        assert s.fetch is None or len(s.fetch.buffer) <= MAX_PENDING
        assert s.committed <= self.store.head

    @invariant()
    def no_live_watch_below_the_floor(self) -> None:
        assert all(r > self.store.compact_revision for r in positions(self.state).values())

    def teardown(self) -> None:
        try:
            if self.state.closed is None:
                self._drain()
            records = self.records + self.recorder.records()
            violations = check(self.truth, self.store.head, records, self.compactions)
            assert violations == [], "\n".join(map(str, violations))
        finally:
            self.store.close()

    def _drain(self) -> None:
        """Answer every fetch and ack everything until all watches are synced, then ask
        for progress: its bookmark makes the checker verify every watch is complete."""
        for _ in range(1000):
            if self.state.fetch is None and not any(
                not is_synced(self.state, w) for w in self.state.watches
            ):
                break
            self.feed(Ack(self.state.seq))
            while self.fetches:
                self.feed(self._answer(self.fetches.pop(0)))
        fx = self.feed(RequestProgress())
        assert Progress(BROADCAST_ID, self.state.committed) in fx


TestWatcherMachine = WatcherMachine.TestCase
TestWatcherMachine.settings = settings(max_examples=80, stateful_step_count=50, deadline=None)
