"""A checker of recorded watch histories against etcd's watch guarantees.

The truth is the committed history (every change, by revision) and the final committed
revision; the observations are, per watch, what its client asked for and every response
it received in order (a response without events is a progress notification, as in
etcd's robustness validator). `check` returns the violations; an empty list means the
history is consistent with:

- ordered: a watch's event revisions never decrease;
- unique: no event is delivered twice;
- atomic: a revision's events arrive in one response;
- reliable: no gap between the first and last delivered revision;
- resumable: a watch from revision r gets exactly the matching events from r on (a
  prefix of them; completeness up to R is what a progress notification at R proves);
- bookmarkable: after a progress at R no event <= R arrives, and every matching event
  <= R arrived before it;
- plus: events are real (phantom), match the range and filters, carry the right prev_kv,
  were committed; a "compacted" cancel only hits a watch that needed compacted history;
  and no compaction passed a live watch (`CompactionRecord`).

`Recorder` builds the records from a watcher core's events and effects (the client's
view), for tests that drive `watch_core` directly.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from sediment.actors.kv.types import Event, key_in_range
from sediment.actors.kv.watch_protocol import (
    BROADCAST_ID,
    Canceled,
    CloseWatcher,
    Created,
    CreateWatch,
    Deliver,
    Effect,
    Progress,
    WatcherEvent,
)

Rule = Literal[
    "ordered",
    "unique",
    "atomic",
    "reliable",
    "resumable",
    "bookmarkable",
    "phantom",
    "filter",
    "prev_kv",
    "committed",
    "canceled",
    "compaction",
]


@dataclass(frozen=True)
class Response:
    """One response as the client got it: header revision and events (none: progress)."""

    revision: int
    events: tuple[Event, ...] = ()

    @property
    def is_progress(self) -> bool:
        return not self.events


@dataclass(frozen=True)
class Cancellation:
    reason: str  # "compacted", "canceled", "error", "slow", ...
    compact_revision: int = 0


@dataclass(frozen=True)
class WatchRecord:
    """One watch: the request, and the responses in the order received. effective_start
    is where a "from now" watch (start_revision 0) really started, when known."""

    watch_id: int
    key: bytes
    range_end: bytes | None = None
    start_revision: int = 0
    effective_start: int | None = None
    prev_kv: bool = False
    no_put: bool = False
    no_delete: bool = False
    responses: tuple[Response, ...] = ()
    canceled: Cancellation | None = None

    @property
    def start(self) -> int | None:
        return self.start_revision or self.effective_start


@dataclass(frozen=True)
class CompactionRecord:
    """A compaction at `revision`, with the next revision each watch still live after it
    needed at that moment (watch id -> revision)."""

    revision: int
    positions: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Violation:
    rule: Rule
    watch_id: int | None
    message: str

    def __str__(self) -> str:
        return f"{self.rule} (watch {self.watch_id}): {self.message}"


def check(
    history: Sequence[Event],
    head: int,
    watches: Sequence[WatchRecord],
    compactions: Sequence[CompactionRecord] = (),
) -> list[Violation]:
    """Every violation of the watch guarantees in the recorded history (see module doc).
    history: every committed change, by revision; head: the last committed revision."""
    truth = _Truth(history)
    out: list[Violation] = []
    for w in watches:
        out += _check_watch(truth, head, w)
    for c in compactions:
        out += _check_compaction(c)
    return out


# ---- the truth -------------------------------------------------------------------------


class _Truth:
    def __init__(self, history: Sequence[Event]) -> None:
        self.events = list(history)
        self.idents = _idents(self.events)
        self.at = dict(zip(self.idents, self.events, strict=True))

    def wanted(self, w: WatchRecord, lo: int, hi: int) -> list[tuple[Ident, Event]]:
        """The events watch w must get in revisions [lo, hi], as it must get them."""
        return [(i, _view(w, e)) for i, e in zip(self.idents, self.events, strict=True)
                if lo <= _rev(e) <= hi and _wants(w, e)]


def _rev(e: Event) -> int:
    return e.kv.mod_revision


# (revision, key, kind, n): the n-th change of that kind to the key in the revision. etcd
# may change a key twice in one revision (a txn that puts b and deletes [a, "\0"), which
# its duplicate check does not see as overlapping): the events come in change order.
Ident = tuple[int, bytes, str, int]


def _idents(events: Iterable[Event]) -> list[Ident]:
    seen: Counter[tuple[int, bytes, str]] = Counter()
    out: list[Ident] = []
    for e in events:
        k = (_rev(e), e.kv.key, e.kind)
        out.append((*k, seen[k]))
        seen[k] += 1
    return out


def _wants(w: WatchRecord, e: Event) -> bool:
    if not key_in_range(e.kv.key, w.key, w.range_end or None):
        return False
    return not ((e.kind == "put" and w.no_put) or (e.kind == "delete" and w.no_delete))


def _view(w: WatchRecord, e: Event) -> Event:
    return e if w.prev_kv or e.prev_kv is None else replace(e, prev_kv=None)


# ---- per watch -------------------------------------------------------------------------

Delivered = list[tuple[int, Event]]  # (response index, event), in order received


def _check_watch(t: _Truth, head: int, w: WatchRecord) -> list[Violation]:
    got: Delivered = [(i, e) for i, r in enumerate(w.responses) for e in r.events]
    return [
        *_committed(w, head),
        *_contents(t, w, got),
        *_ordered(w, got),
        *_unique(w, got, t),
        *_atomic(w, got),
        *_reliable(t, w, got),
        *_resumable(t, w, got),
        *_bookmarkable(t, w),
        *_canceled(w, got),
    ]


def _v(rule: Rule, w: WatchRecord, message: str) -> Violation:
    return Violation(rule, w.watch_id, message)


def _committed(w: WatchRecord, head: int) -> Iterable[Violation]:
    """Only committed revisions are visible; an event is never above its header."""
    for i, r in enumerate(w.responses):
        if r.revision > head:
            yield _v("committed", w, f"response {i} has header {r.revision} > head {head}")
        for e in r.events:
            if _rev(e) > r.revision:
                yield _v("committed", w, f"response {i}: event at {_rev(e)} > its header")


def _contents(t: _Truth, w: WatchRecord, got: Delivered) -> Iterable[Violation]:
    for (i, e), ident in zip(got, _idents(e for _, e in got), strict=True):
        real = t.at.get(ident)
        where = f"response {i}: {e.kind} {e.kv.key!r}@{_rev(e)}"
        if real is None and ident[3] and (*ident[:3], 0) in t.at:
            continue  # delivered again: `unique` says so
        if real is None:
            yield _v("phantom", w, f"{where} never happened")
        elif not _wants(w, real):
            yield _v("filter", w, f"{where} is outside the watch's range or filters")
        elif (e.kind, e.kv) != (real.kind, real.kv):
            yield _v("phantom", w, f"{where} differs from the history: {real}")
        elif e.prev_kv != _view(w, real).prev_kv:
            yield _v("prev_kv", w, f"{where} prev_kv {e.prev_kv} != {_view(w, real).prev_kv}")


def _ordered(w: WatchRecord, got: Delivered) -> Iterable[Violation]:
    last = 0
    for i, e in got:
        if _rev(e) < last:
            yield _v("ordered", w, f"response {i}: revision {_rev(e)} after {last}")
        last = max(last, _rev(e))


def _unique(w: WatchRecord, got: Delivered, t: _Truth) -> Iterable[Violation]:
    seen = Counter((_rev(e), e.kv.key, e.kind) for _, e in got)
    real = Counter(i[:3] for i in t.idents)
    for (rev, key, kind), n in sorted(seen.items()):
        if n > max(1, real[(rev, key, kind)]):
            yield _v("unique", w, f"{key!r}@{rev} delivered {n} times")


def _atomic(w: WatchRecord, got: Delivered) -> Iterable[Violation]:
    where: dict[int, set[int]] = {}
    for i, e in got:
        where.setdefault(_rev(e), set()).add(i)
    for rev, responses in sorted(where.items()):
        if len(responses) > 1:
            yield _v("atomic", w, f"revision {rev} split over responses {sorted(responses)}")


def _missing(t: _Truth, w: WatchRecord, got: Iterable[Event], lo: int, hi: int) -> list[Event]:
    have = set(_idents(got))
    return [e for i, e in t.wanted(w, lo, hi) if i not in have]


def _describe(events: list[Event]) -> str:
    shown = ", ".join(f"{e.kind} {e.kv.key!r}@{_rev(e)}" for e in events[:5])
    return shown + (f" (+{len(events) - 5} more)" if len(events) > 5 else "")


def _reliable(t: _Truth, w: WatchRecord, got: Delivered) -> Iterable[Violation]:
    """No gap: between the first and the last delivered revision, everything arrived."""
    if not got:
        return
    revs = [_rev(e) for _, e in got]
    gap = _missing(t, w, (e for _, e in got), min(revs), max(revs))
    if gap:
        yield _v("reliable", w, f"missing between {min(revs)} and {max(revs)}: {_describe(gap)}")


def _resumable(t: _Truth, w: WatchRecord, got: Delivered) -> Iterable[Violation]:
    """From start on: nothing before it, and the first delivery is the first match."""
    start = w.start
    if not start or not got:
        return
    early = [e for _, e in got if _rev(e) < start]
    if early:
        yield _v("resumable", w, f"events before start {start}: {_describe(early)}")
    first = min(_rev(e) for _, e in got)
    skipped = _missing(t, w, (e for _, e in got), start, first - 1)
    if skipped:
        yield _v(
            "resumable",
            w,
            f"start {start} but first delivery at {first}, skipping {_describe(skipped)}",
        )


def _bookmarkable(t: _Truth, w: WatchRecord) -> Iterable[Violation]:
    """A progress at R: every matching event <= R came before it, none comes after."""
    got: list[Event] = []
    marks: list[tuple[int, int]] = []  # (response index, R) seen so far
    for i, r in enumerate(w.responses):
        for e in r.events:
            for j, mark in marks:
                if _rev(e) <= mark:
                    yield _v(
                        "bookmarkable",
                        w,
                        f"response {i}: event at {_rev(e)} after progress at {mark} (response {j})",
                    )
        got += r.events
        if r.is_progress:
            marks.append((i, r.revision))
            yield from _bookmark_complete(t, w, got, i, r.revision)


def _bookmark_complete(
    t: _Truth, w: WatchRecord, got: list[Event], i: int, mark: int
) -> Iterable[Violation]:
    lo = w.start or (min(_rev(e) for e in got) if got else None)
    if lo is None:
        return
    missing = _missing(t, w, got, lo, mark)
    if missing:
        yield _v(
            "bookmarkable", w, f"progress at {mark} (response {i}) before {_describe(missing)}"
        )


def _canceled(w: WatchRecord, got: Delivered) -> Iterable[Violation]:
    """A compacted cancel at C means the watch needed revision <= C: it had seen nothing
    at or above C."""
    c = w.canceled
    if c is None or c.reason != "compacted":
        return
    if c.compact_revision <= 0:
        yield _v("canceled", w, "canceled as compacted without a compact revision")
        return
    seen = [_rev(e) for _, e in got] + [r.revision for r in w.responses if r.is_progress]
    if w.start:
        seen.append(w.start - 1)
    at = max(seen, default=0)
    if at >= c.compact_revision:
        yield _v(
            "canceled",
            w,
            f"canceled as compacted at {c.compact_revision} but it was already at {at}",
        )


def _check_compaction(c: CompactionRecord) -> Iterable[Violation]:
    for wid, needs in sorted(c.positions.items()):
        if needs <= c.revision:
            yield Violation(
                "compaction",
                wid,
                f"compaction at {c.revision} passed a live watch that still needs revision {needs}",
            )


# ---- recording a watcher core ----------------------------------------------------------


class Recorder:
    """The client's view of one watcher core: feed every (event, effects) pair of its
    steps in order; `records()` gives one WatchRecord per created watch. A progress for
    BROADCAST_ID goes to every live watch (etcd's client broadcasts it)."""

    def __init__(self) -> None:
        self._records: list[WatchRecord] = []
        self._live: dict[int, int] = {}  # watch id -> index in _records

    def observe(self, event: WatcherEvent, effects: Sequence[Effect]) -> None:
        for fx in effects:
            self._effect(event, fx)

    def records(self) -> list[WatchRecord]:
        return list(self._records)

    def stream_ended(self, reason: str) -> None:
        """The stream ended without a CloseWatcher effect (its process or node died): every
        live watch ends with `reason`, as the client saw it."""
        for wid in self.live():
            self._end(wid, Cancellation(reason))

    def live(self) -> list[int]:
        return sorted(self._live)

    def _effect(self, event: WatcherEvent, fx: Effect) -> None:
        match fx:
            case Created(watch_id=wid, start_revision=start) if isinstance(event, CreateWatch):
                self._live[wid] = len(self._records)
                self._records.append(_record(wid, event, start))
            case Deliver(watch_id=wid, revision=rev, events=events):
                self._add(wid, Response(rev, events))
            case Progress(watch_id=wid, revision=rev):
                ids = self.live() if wid == BROADCAST_ID else [wid]
                for each in ids:
                    self._add(each, Response(rev))
            case Canceled(watch_id=wid, reason=reason, compact_revision=rev):
                self._end(wid, Cancellation(reason, rev))
            case CloseWatcher(reason=reason):
                for wid in self.live():
                    self._end(wid, Cancellation(reason))

    def _add(self, wid: int, response: Response) -> None:
        k = self._live[wid]
        r = self._records[k]
        self._records[k] = replace(r, responses=(*r.responses, response))

    def _end(self, wid: int, why: Cancellation) -> None:
        k = self._live.pop(wid)
        self._records[k] = replace(self._records[k], canceled=why)


def _record(wid: int, ev: CreateWatch, start: int) -> WatchRecord:
    return WatchRecord(
        wid,
        ev.key,
        ev.range_end or None,
        ev.start_revision,
        start,
        ev.prev_kv,
        ev.no_put,
        ev.no_delete,
    )


__all__ = [
    "Cancellation",
    "CompactionRecord",
    "Recorder",
    "Response",
    "Rule",
    "Violation",
    "WatchRecord",
    "check",
]
