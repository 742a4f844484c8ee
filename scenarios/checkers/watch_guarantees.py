"""etcd's six watch guarantees over a recorded run: an adapter to `watch_oracle`.

`watch_oracle.py` (beside it) already checks ordered, unique, atomic, reliable, resumable
and bookmarkable (plus phantom events, filters, prev_kv, committed, canceled) given the
committed history (the truth) and one record per watch. This module only turns a
`History` into those inputs:

- one `WatchRecord` per `WatchLog` (watch id = the log's handle);
- the truth: given by the runner (e.g. read from the raft log on `sim`), or rebuilt from
  the history when its acknowledged writes account for every revision 1..head (replayed
  through the KV model, so each event has its create/mod revision, version and prev_kv);
  otherwise the check is "unknown" — an indeterminate write may have filled a gap;
- an event delivered without prev_kv at or below a compaction revision is taken as
  right: value-only compaction may have removed the previous value (store.events).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from sediment.actors.kv.types import (
    DeleteRange,
    DeleteResult,
    Event,
    Put,
    PutResult,
    Txn,
    TxnResult,
)
from sediment.scenarios.checkers.kv_model import FIRST_REVISION, KvModel, UnknownWrite
from sediment.scenarios.checkers.result import CheckResult, passed, unknown, violated
from sediment.scenarios.checkers.watch_oracle import Cancellation, Response, WatchRecord
from sediment.scenarios.checkers.watch_oracle import check as check_watches
from sediment.scenarios.history import History, Op, Request, WatchLog

NAME = "watch_guarantees"
MAX_DETAILS = 10


def record(w: WatchLog) -> WatchRecord:
    responses = tuple(Response(r.revision, r.events) for r in w.responses)
    canceled = Cancellation(w.end_reason, w.compact_revision) if w.end_reason else None
    return WatchRecord(
        w.handle, w.key, w.range_end, w.start_revision, w.effective_start, w.prev_kv,
        w.no_put, w.no_delete, responses, canceled,
    )


def _write_revision(op: Op) -> int | None:
    """The revision an acknowledged op created (None: it wrote nothing)."""
    if op.outcome != "ok":
        return None
    res = op.result
    if isinstance(op.args, Put) and isinstance(res, PutResult):
        return res.revision
    if isinstance(op.args, DeleteRange) and isinstance(res, DeleteResult):
        return res.revision if res.deleted else None
    if isinstance(op.args, Txn) and isinstance(res, TxnResult):
        return res.revision if _wrote(res) else None
    return None


def _wrote(res: TxnResult) -> bool:
    return any(isinstance(r, PutResult) or (isinstance(r, DeleteResult) and r.deleted)
               or (isinstance(r, TxnResult) and _wrote(r)) for r in res.responses)


def committed_events(history: History) -> tuple[list[Event], int] | None:
    """The committed history rebuilt from acknowledged writes (events, head), or None
    when they do not account for every revision up to the highest one observed."""
    writes: dict[int, Op] = {}
    for op in history.ops:
        rev = _write_revision(op)
        if rev is not None:
            if rev in writes:
                return None  # two writes claim one revision: not ours to untangle
            writes[rev] = op
    headers = [r.revision for w in history.watches for r in w.responses]
    headers += [h for op in history.ops if op.outcome == "ok"
                for h in [getattr(op.result, "revision", 0)] if isinstance(h, int)]
    head = max([*writes, *headers], default=FIRST_REVISION)
    if sorted(writes) != list(range(FIRST_REVISION + 1, head + 1)):
        return None
    model = KvModel()
    state = model.initial()
    events: list[Event] = []
    for rev in range(FIRST_REVISION + 1, head + 1):
        nxt, _, made = model.step(state, writes[rev].args)
        if nxt.head != rev:
            return None
        events += made
        state = nxt
    return events, head


def log_events(entries: Sequence[tuple[int, Request | UnknownWrite]]
               ) -> tuple[list[Event], int]:
    """The committed history of a log: (index, request) pairs applied in index order
    (Sediment's raft log), the events their writes made (revisions numbered as etcd
    does, one revision's events in the order the request made them) and the head
    revision. Requests that write nothing (reads, Compacts) take no revision."""
    model = KvModel()
    state = model.initial()
    events: list[Event] = []
    for index, request in sorted(entries, key=lambda e: e[0]):
        state, _, made = model.step(state, request, index)
        events += made
    return events, state.head


def _forgive_compacted_prev(
    records: list[WatchRecord], truth: Sequence[Event], compacted: int
) -> list[WatchRecord]:
    real = {(e.kv.mod_revision, e.kv.key): e for e in truth}
    out = []
    for w in records:
        responses = []
        for r in w.responses:
            events = []
            for e in r.events:
                t = real.get((e.kv.mod_revision, e.kv.key))
                if (w.prev_kv and e.prev_kv is None and t is not None
                        and e.kv.mod_revision <= compacted):
                    e = replace(e, prev_kv=t.prev_kv)
                events.append(e)
            responses.append(Response(r.revision, tuple(events)))
        out.append(replace(w, responses=tuple(responses)))
    return out


def check(
    history: History, truth: Sequence[Event] | None = None, head: int | None = None
) -> CheckResult:
    """See the module doc. `truth` and `head` come together or not at all."""
    if not history.watches:
        return passed(NAME, "no watches")
    if truth is None or head is None:
        rebuilt = committed_events(history)
        if rebuilt is None:
            return unknown(NAME, "the committed history cannot be rebuilt from acknowledged "
                           "writes (a revision is unaccounted for); pass the truth")
        truth, head = rebuilt
    compacted = max((c.revision for c in history.compaction_events()), default=0)
    records = _forgive_compacted_prev([record(w) for w in history.watches], truth, compacted)
    found = check_watches(truth, head, records)
    if not found:
        return passed(NAME, f"{len(records)} watches")
    by_handle = {w.handle: w for w in history.watches}
    first = found[0]
    evidence = [by_handle[first.watch_id]] if first.watch_id in by_handle else []
    details = [str(v) for v in found[1:MAX_DETAILS]]
    if len(found) > MAX_DETAILS:
        details.append(f"... {len(found) - MAX_DETAILS} more")
    return violated(NAME, str(first), evidence, details)


__all__ = ["NAME", "check", "committed_events", "log_events", "record"]
