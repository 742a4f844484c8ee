"""The pure core of one Watcher (a client session holding many watches), etcd semantics.

`init` builds a watcher at the node's committed revision and floor; `step(state, event)
-> (state, effects)` is the whole behaviour, with no clock, store or network inside
(`watch_protocol` states the shell contract). Same events in, same effects out.

How a watch moves (etcd's watchable_store, made explicit):
- *synced*: next_revision > committed. Live `Committed` events go straight out. A watch
  with a future start is synced too; it skips revisions below its start.
- *unsynced*: it needs history [next_revision, committed]. One `FetchHistory` at a time
  per watcher (the oldest watch first, so min_revision rises soonest). While it is out,
  live events for that watch are buffered; the answer is delivered, then the buffer,
  and the watch is synced. A buffer that overflowed, an `Advanced` jump or a cut answer
  just means another fetch from where the watch got to: never a gap, never a duplicate.

Flow control: `in_flight` counts delivered events not yet acked. Replay fetches only
while in_flight is below half of `max_pending` (its `limit` is the rest of that half),
so a replay can neither flood the client nor starve live traffic. A live delivery that
would push in_flight past `max_pending` closes the watcher ("slow"): memory stays
bounded by max_pending events plus one response, and the client never sees a gap.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from sediment.actors.kv.errors import (
    ErrCompacted,
    InvalidRequest,
    KvError,
    WatchProtocolError,
)
from sediment.actors.kv.types import Event, key_in_range
from sediment.actors.kv.watch_protocol import (
    BROADCAST_ID,
    Ack,
    Advanced,
    Canceled,
    CancelWatch,
    CloseReason,
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
from sediment.actors.kv.watch_validation import asked_id, is_int, validate

DEFAULT_MAX_PENDING = 1024  # unacked events per watcher (Netsy's inbox is 64 responses)
DEFAULT_PROGRESS_INTERVAL = 600.0  # etcd's progressReportInterval (10 min)


@dataclass(frozen=True)
class WatcherConfig:
    max_pending: int = DEFAULT_MAX_PENDING
    progress_interval: float = DEFAULT_PROGRESS_INTERVAL

    def __post_init__(self) -> None:
        if not is_int(self.max_pending) or self.max_pending < 2:
            raise InvalidRequest(f"max_pending must be an int >= 2, got {self.max_pending!r}")
        if not self.progress_interval > 0:
            raise InvalidRequest(f"progress_interval must be > 0, got {self.progress_interval}")


@dataclass(frozen=True, slots=True)
class WatchState:
    """One watch. Every revision below next_revision is delivered or not wanted."""

    watch_id: int
    key: bytes
    range_end: bytes | None
    start_revision: int  # effective: a "from now" watch records committed + 1
    next_revision: int
    prev_kv: bool = False
    no_put: bool = False
    no_delete: bool = False
    progress_notify: bool = False
    quiet: bool = True  # nothing delivered since the last progress tick


@dataclass(frozen=True, slots=True)
class Fetch:
    """The outstanding FetchHistory, and the live events of its watch above to_revision
    that arrived meanwhile (complete from to_revision + 1 while buffer_ok)."""

    fetch_id: int
    watch_id: int
    from_revision: int
    to_revision: int
    buffer: tuple[Event, ...] = ()
    buffer_ok: bool = True


@dataclass
class WatcherState:
    """Everything one watcher knows. `step` never mutates a given state."""

    config: WatcherConfig
    committed: int = 0
    floor: int = 0  # watch-admission floor: a watch must start above it
    watches: dict[int, WatchState] = field(default_factory=dict)
    next_watch_id: int = 0
    next_fetch_id: int = 1
    fetch: Fetch | None = None
    seq: int = 0  # the last Deliver's seq
    in_flight: tuple[tuple[int, int], ...] = ()  # (seq, events) delivered, not acked
    in_flight_events: int = 0
    progress_requested: bool = False  # a RequestProgress waits for every watch to sync
    progress_due: float = 0.0
    closed: CloseReason | None = None

    def copy(self) -> WatcherState:
        return replace(self, watches=dict(self.watches))


def init(
    config: WatcherConfig | None = None,
    committed_revision: int = 0,
    floor: int = 0,
    now: float = 0.0,
) -> WatcherState:
    """A watcher with no watch, at the node's committed revision and admission floor."""
    for name, value in (("committed_revision", committed_revision), ("floor", floor)):
        if not is_int(value) or value < 0:
            raise InvalidRequest(f"{name} must be a non-negative int, got {value!r}")
    cfg = config or WatcherConfig()
    return WatcherState(cfg, committed_revision, floor, progress_due=now + cfg.progress_interval)


def step(state: WatcherState, event: WatcherEvent) -> tuple[WatcherState, list[Effect]]:
    """Apply one event; return the new state and the effects, in execution order."""
    if state.closed is not None:
        return state, []
    error = validate(state, event)
    if error is not None:
        return state, [Rejected(error, asked_id(event))]
    s = state.copy()
    fx: list[Effect] = []
    _dispatch(s, event, fx)
    if s.closed is None:
        _schedule_fetch(s, fx)
        _progress_if_synced(s, fx)
    return s, fx


# ---- queries for the shell and the node's peer API -------------------------------------


def min_revision(state: WatcherState) -> int | None:
    """The lowest revision any active watch still needs (None: no watch). The primary
    compacts at most to the cluster minimum - 1, so no watch loses history it needs."""
    return min((w.next_revision for w in state.watches.values()), default=None)


def positions(state: WatcherState) -> dict[int, int]:
    """Each active watch's next needed revision."""
    return {wid: w.next_revision for wid, w in state.watches.items()}


def is_synced(state: WatcherState, watch_id: int) -> bool:
    """True when the watch has every committed revision (it needs no history)."""
    return _synced(state, state.watches[watch_id])


def wakeup_at(state: WatcherState) -> float | None:
    """When the shell must Tick next (None: no watch asked for progress notifies)."""
    if state.closed is None and any(w.progress_notify for w in state.watches.values()):
        return state.progress_due
    return None


# ---- events ----------------------------------------------------------------------------


def _dispatch(s: WatcherState, event: WatcherEvent, fx: list[Effect]) -> None:
    match event:
        case CreateWatch():
            _create(s, event, fx)
        case CancelWatch(watch_id=wid):
            _drop(s, wid)
            fx.append(Canceled(wid, "canceled"))
        case Committed(revision=rev, events=events):
            _on_committed(s, rev, events, fx)
        case Advanced(revision=rev):
            _on_advanced(s, rev)
        case HistoryFetched():
            _on_fetched(s, event, fx)
        case FetchFailed(fetch_id=fid, error=error):
            _on_fetch_failed(s, fid, error, fx)
        case FloorRaised(revision=rev):
            _on_floor(s, rev, fx)
        case Ack(seq=seq):
            _on_ack(s, seq)
        case RequestProgress():
            s.progress_requested = True
        case Tick(now=now):
            _on_tick(s, now, fx)
        case _:
            raise WatchProtocolError(f"not a watcher event: {event!r}")


def _create(s: WatcherState, ev: CreateWatch, fx: list[Effect]) -> None:
    """A start at or below the floor is created then canceled compacted (etcd and Netsy
    both answer Created + Canceled). A "from now" watch starts at committed + 1 and is
    recorded so, so it never pins compaction at 0 (Netsy's flaw)."""
    wid = _auto_id(s) if ev.watch_id is None else ev.watch_id
    start = ev.start_revision or s.committed + 1
    fx.append(Created(wid, start, s.committed))
    if ev.start_revision and start <= s.floor:
        fx.append(Canceled(wid, "compacted", s.floor))
        return
    s.watches[wid] = WatchState(
        wid,
        ev.key,
        ev.range_end or None,
        start,
        start,
        ev.prev_kv,
        ev.no_put,
        ev.no_delete,
        ev.progress_notify,
    )


def _auto_id(s: WatcherState) -> int:
    """etcd's watchStream: the counter, skipping ids the client chose."""
    wid = s.next_watch_id
    while wid in s.watches:
        wid += 1
    s.next_watch_id = wid + 1
    return wid


def _drop(s: WatcherState, wid: int) -> None:
    del s.watches[wid]
    if s.fetch is not None and s.fetch.watch_id == wid:
        s.fetch = None  # its answer, when it comes, has a stale fetch_id


def _on_committed(
    s: WatcherState, revision: int, events: tuple[Event, ...], fx: list[Effect]
) -> None:
    _check_committed(s, revision, events)
    old, s.committed = s.committed, revision
    for wid in sorted(s.watches):
        w = s.watches[wid]
        if s.fetch is not None and s.fetch.watch_id == wid:
            _buffer(s, w, events)
        elif w.next_revision > old:  # synced before this commit: live delivery
            s.watches[wid] = replace(w, next_revision=max(w.next_revision, revision + 1))
            if not _deliver_live(s, w, _select(w, events), fx):
                return


def _check_committed(s: WatcherState, revision: int, events: tuple[Event, ...]) -> None:
    if not is_int(revision) or revision < s.committed:
        raise WatchProtocolError(f"Committed({revision}) below committed {s.committed}")
    _check_ordered(events, s.committed + 1, revision, "Committed")


def _check_ordered(events: Iterable[Event], lo: int, hi: int, what: str) -> None:
    last = lo
    for e in events:
        rev = e.kv.mod_revision
        if not last <= rev <= hi:
            raise WatchProtocolError(f"{what}: event at {rev} out of order or outside {lo}..{hi}")
        last = rev


def _on_advanced(s: WatcherState, revision: int) -> None:
    if not is_int(revision) or revision < s.committed:
        raise WatchProtocolError(f"Advanced({revision}) below committed {s.committed}")
    if revision > s.committed and s.fetch is not None:
        s.fetch = replace(s.fetch, buffer=(), buffer_ok=False)  # a hole in the buffer
    s.committed = revision


def _buffer(s: WatcherState, w: WatchState, events: tuple[Event, ...]) -> None:
    """Keep live events of the fetching watch; past max_pending, give up the buffer (the
    next fetch reads them from history instead)."""
    f = s.fetch
    assert f is not None
    if not f.buffer_ok:
        return
    new = tuple(e for e in _select(w, events) if e.kv.mod_revision > f.to_revision)
    if len(f.buffer) + len(new) > s.config.max_pending:
        s.fetch = replace(f, buffer=(), buffer_ok=False)
    elif new:
        s.fetch = replace(f, buffer=f.buffer + new)


def _on_fetched(s: WatcherState, ev: HistoryFetched, fx: list[Effect]) -> None:
    f = s.fetch
    if f is None or f.fetch_id != ev.fetch_id:
        return  # stale: its watch was canceled
    if not (is_int(ev.to_revision) and f.from_revision <= ev.to_revision <= f.to_revision):
        raise WatchProtocolError(
            f"fetch {f.fetch_id} answered to {ev.to_revision}, asked "
            f"{f.from_revision}..{f.to_revision}"
        )
    _check_ordered(ev.events, f.from_revision, ev.to_revision, f"fetch {f.fetch_id}")
    s.fetch = None
    w = s.watches[f.watch_id]
    w = _deliver(s, w, _select(w, ev.events), fx)
    w = replace(w, next_revision=ev.to_revision + 1)
    if ev.to_revision == f.to_revision and f.buffer_ok and _fits(s, len(f.buffer)):
        w = _deliver(s, w, f.buffer, fx)
        w = replace(w, next_revision=s.committed + 1)
    s.watches[w.watch_id] = w


def _on_fetch_failed(s: WatcherState, fetch_id: int, error: KvError, fx: list[Effect]) -> None:
    f = s.fetch
    if f is None or f.fetch_id != fetch_id:
        return
    _drop(s, f.watch_id)
    if isinstance(error, ErrCompacted):
        fx.append(Canceled(f.watch_id, "compacted", error.compact_revision or s.floor))
    else:
        fx.append(Canceled(f.watch_id, "error", detail=str(error)))


def _on_floor(s: WatcherState, revision: int, fx: list[Effect]) -> None:
    """Cancel every watch that still needs history at or below the new floor. A synced
    watch (only possible above committed on a lagging replica) gets its revisions live,
    from the node's apply, not from the compacted history, so it stays."""
    if not is_int(revision):
        raise WatchProtocolError(f"FloorRaised({revision!r}): not a revision")
    if revision <= s.floor:
        return
    s.floor = revision
    for wid in sorted(s.watches):
        w = s.watches[wid]
        if w.next_revision <= revision and not _synced(s, w):
            _drop(s, wid)
            fx.append(Canceled(wid, "compacted", revision))


def _on_ack(s: WatcherState, seq: int) -> None:
    acked = sum(n for q, n in s.in_flight if q <= seq)
    s.in_flight = tuple(p for p in s.in_flight if p[0] > seq)
    s.in_flight_events -= acked


def _on_tick(s: WatcherState, now: float, fx: list[Effect]) -> None:
    """etcd v3rpc: at each interval, a progress for every progress_notify watch that is
    synced and was sent nothing during the interval; then every watch turns quiet."""
    if now < s.progress_due:
        return
    s.progress_due = now + s.config.progress_interval
    for wid in sorted(s.watches):
        w = s.watches[wid]
        if w.progress_notify and w.quiet and _synced(s, w):
            fx.append(Progress(wid, s.committed))
        s.watches[wid] = replace(w, quiet=True)


# ---- delivery, fetching, progress ------------------------------------------------------


def _select(w: WatchState, events: Iterable[Event]) -> tuple[Event, ...]:
    """The watch's view of events: its range and revisions, filters, prev_kv if asked."""
    out = []
    for e in events:
        if e.kv.mod_revision < w.next_revision or not key_in_range(e.kv.key, w.key, w.range_end):
            continue
        if (e.kind == "put" and w.no_put) or (e.kind == "delete" and w.no_delete):
            continue
        out.append(e if w.prev_kv or e.prev_kv is None else replace(e, prev_kv=None))
    return tuple(out)


def _synced(s: WatcherState, w: WatchState) -> bool:
    return w.next_revision > s.committed


def _fits(s: WatcherState, n: int) -> bool:
    """Room for n more unacked events (one response always fits an idle client)."""
    return n == 0 or s.in_flight_events == 0 or s.in_flight_events + n <= s.config.max_pending


def _deliver(
    s: WatcherState, w: WatchState, events: tuple[Event, ...], fx: list[Effect]
) -> WatchState:
    if not events:
        return w
    s.seq += 1
    s.in_flight += ((s.seq, len(events)),)
    s.in_flight_events += len(events)
    fx.append(Deliver(w.watch_id, s.seq, s.committed, events))
    return replace(w, quiet=False)


def _deliver_live(
    s: WatcherState, w: WatchState, events: tuple[Event, ...], fx: list[Effect]
) -> bool:
    """Deliver to a synced watch, or close the watcher when the client is too far behind.
    False: closed."""
    if not _fits(s, len(events)):
        _close(s, "slow", fx)
        return False
    current = s.watches[w.watch_id]
    s.watches[w.watch_id] = _deliver(s, current, events, fx)
    return True


def _close(s: WatcherState, reason: CloseReason, fx: list[Effect]) -> None:
    s.watches = {}
    s.fetch = None
    s.progress_requested = False
    s.closed = reason
    fx.append(CloseWatcher(reason))


def _schedule_fetch(s: WatcherState, fx: list[Effect]) -> None:
    """Start the next replay: the watch needing the oldest revision, within the replay
    half of the flow-control window."""
    budget = s.config.max_pending // 2 - s.in_flight_events
    if s.fetch is not None or budget <= 0:
        return
    behind = [w for w in s.watches.values() if not _synced(s, w)]
    if not behind:
        return
    w = min(behind, key=lambda x: (x.next_revision, x.watch_id))
    s.fetch = Fetch(s.next_fetch_id, w.watch_id, w.next_revision, s.committed)
    s.next_fetch_id += 1
    fx.append(
        FetchHistory(
            s.fetch.fetch_id,
            w.watch_id,
            w.key,
            w.range_end,
            w.next_revision,
            s.committed,
            w.prev_kv,
            budget,
        )
    )


def _progress_if_synced(s: WatcherState, fx: list[Effect]) -> None:
    """etcd's progressIfSync: answer a RequestProgress only once every watch is synced,
    so the revision it carries is a true bookmark for all of them."""
    if s.progress_requested and all(_synced(s, w) for w in s.watches.values()):
        s.progress_requested = False
        fx.append(Progress(BROADCAST_ID, s.committed))


__all__ = [
    "DEFAULT_MAX_PENDING",
    "DEFAULT_PROGRESS_INTERVAL",
    "Fetch",
    "WatchState",
    "WatcherConfig",
    "WatcherState",
    "init",
    "is_synced",
    "min_revision",
    "positions",
    "step",
    "wakeup_at",
]
