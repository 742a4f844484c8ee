"""From what a run's processes reported to the history the checkers judge (pure).

Sediment gives every request a raft log entry, so the committed log the run read
(`observers.log_tail`) places every operation; an operation carries two numbers, the
raft index of its entry (`Op.index`: its place in the log, which this module matches)
and the etcd revisions of its answer (what the replay of the log in index order gives
each write):

- an operation that got an answer carries its index already, except over etcd's gRPC API
  (`client: grpc`: etcd's answer has no raft index): such an answered write is placed as
  an indeterminate one is, by its request (a refused one is not: a client's Compact
  refused as compacted is the same command as the coordinator's entry that compacted
  it), and the log holds it as the etcd server proposed it (`Wire`: the request with
  its user), unwrapped here;
- an indeterminate one (`info`) whose request is in the log gets that entry's index, an
  entry above every operation that had completed before it was invoked (the log's order
  is a linearization, so an entry committed before the request existed is not its own: a
  client's Compact of the revision the coordinator had just compacted is the same
  command as the coordinator's). A write's value is unique; identical requests, e.g.
  two deletes of one key, are matched in order: the earliest invoked with the lowest
  index it may have, which is feasible whenever any matching is (the bounds only grow
  in invocation order). An answered one may only have an entry at which the log's
  replay gives its answer, when one does: two overlapping deletes of a key, the first
  sent answered "deleted 0", took the entries in the other order otherwise;
- an entry nobody asked for is the cluster's own: the compaction coordinator's Compact,
  recorded as an operation of `CLUSTER_CLIENT` between the last sample in which no
  admission floor had reached its revision (the cycle's notice came later) and the
  moment the tail read it, with the answer the log gives. A write nobody sent is a
  fault of the system (e.g. a request applied twice): it is kept, so the model sees the
  truth, and reported.

The committed history (every event) is the log replayed through the KV model
(`watch_guarantees.log_events`), with answered operations filling entries the tail could
not read any more. Times become seconds since the traffic started (`t0`).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sediment.actors.kv.auth_store import Wire
from sediment.actors.kv.types import Compact, DeleteRange, Event, Put, Range, RangeResult, Txn
from sediment.scenarios.checkers.kv_model import KvModel, UnknownWrite, matches
from sediment.scenarios.checkers.watch_guarantees import log_events
from sediment.scenarios.history import (
    CLUSTER_CLIENT,
    TIER_CLIENT,
    Failure,
    FaultEvent,
    History,
    WatchLog,
)
from sediment.scenarios.history_recorder import HistoryRecorder
from sediment.scenarios.observe import ClusterView
from sediment.scenarios.processes import Dump, Missing, OpRecord

REQUEST_TYPES = (Put, DeleteRange, Range, Txn, Compact)
WRITES = (Put, DeleteRange, Txn)
# Keys that belong to a tier running on the KV (the branch tier's refs, commits and
# staged entries, `actors/branches/names.ROOT`): its requests are the cluster's own,
# recorded as operations of TIER_CLIENT (one lane, in log order), not strays.
TIER_KEY_PREFIXES: tuple[bytes, ...] = (b"/sediment/branches/",)


def _keys(command: Any) -> list[bytes]:
    if isinstance(command, Put | DeleteRange | Range):
        return [command.key]
    if isinstance(command, Txn):
        out = [c.key for c in command.compare]
        for op in (*command.success, *command.failure):
            out += _keys(op)
        return out
    return []


def tier_owned(command: Any) -> bool:
    """A write of a tier that runs on the KV: every key it names is under a tier prefix."""
    keys = _keys(command)
    return bool(keys) and all(k.startswith(TIER_KEY_PREFIXES) for k in keys)


@dataclass(frozen=True)
class Assembled:
    history: History
    truth: list[Event]
    head: int
    final: RangeResult | None
    samples: tuple[ClusterView, ...]
    notes: tuple[str, ...]
    strays: tuple[str, ...]  # committed writes no client sent
    unknown_entries: tuple[int, ...]  # log indexes whose content is unknown


def _key(request: Any) -> Any:
    """A hashable identity of a request (requests are frozen dataclasses)."""
    try:
        hash(request)
    except TypeError:
        return repr(request)
    return request


def _shift(t: float, t0: float) -> float:
    return max(0.0, t - t0)


def request_of(command: Any) -> Any:
    """The client's request in a log entry (a request off the etcd API is proposed with
    its user and auth revision: `Wire`)."""
    return command.request if isinstance(command, Wire) else command


def _unplaced(op: OpRecord) -> bool:
    """An operation whose entry is to be found by its request: an indeterminate one, or
    one answered over the gRPC API (no index in etcd's answer). Reads over gRPC are
    served by ReadIndex and have no entry."""
    if op.index is not None or isinstance(op.request, Range):
        return False
    return op.outcome == "info" or (op.outcome == "ok" and op.client_kind == "grpc")


def place_ops(ops: Sequence[OpRecord], entries: dict[int, Any],
              answers: Mapping[int, Any] | None = None) -> tuple[
        list[OpRecord], dict[int, Any]]:
    """Give indeterminate operations (and writes answered over gRPC) the index of their
    entry; the entries nobody claims remain (index -> command).

    Answered writes first: each is in the log for sure, so it takes the first entry of
    its request after what was answered before it was sent, among those where the log's
    replay (`answers`: index -> the model's answer) gives the answer it got, if any
    does. Indeterminate ones share what is left: given first, one that never reached the
    log took the entry of a later identical request that did, and that one was pushed
    past its own answer (a gRPC run's `linearizable` then failed on two `delete k/0`,
    one cut off by a node's kill). Without the answers, two overlapping `delete k/4`
    were placed by when they were sent: the one that deleted nothing took the entry
    that deleted the key (the same failure)."""
    answers = answers or {}
    claimed = {op.index for op in ops if op.index is not None}
    unclaimed: dict[Any, list[int]] = defaultdict(list)
    for index in sorted(entries):
        command = entries[index]
        if index not in claimed and isinstance(command, REQUEST_TYPES):
            unclaimed[_key(command)].append(index)
    out = list(ops)
    done = [(op.complete_t, op.index) for op in ops if op.index is not None]
    for answered in (True, False):
        waiting = sorted((op.invoke_t, i) for i, op in enumerate(ops)
                         if _unplaced(op) and (op.outcome == "ok") == answered)
        pending = sorted(done)  # a heap by completion time
        floor = 0  # the highest index answered before the current invoke
        for invoke_t, i in waiting:
            while pending and pending[0][0] < invoke_t:
                floor = max(floor, heapq.heappop(pending)[1])
            free = unclaimed.get(_key(ops[i].request)) or []
            later = [j for j, index in enumerate(free) if index > floor]
            if answered:  # an entry whose replay gives the op's own answer, if one does
                later = [j for j in later if _gives(answers, free[j], ops[i])] or later
            pick = later[0] if later else None
            if pick is not None:
                index = free.pop(pick)
                out[i] = replace(ops[i], index=index)
                if answered:  # placed: it bounds what is invoked after it completed
                    placed = (ops[i].complete_t, index)
                    heapq.heappush(pending, placed)
                    done.append(placed)
    left = {index: entries[index] for indexes in unclaimed.values() for index in indexes}
    return out, left


def _gives(answers: Mapping[int, Any], index: int, op: OpRecord) -> bool:
    """Whether the log's replay answers at `index` what `op` was answered."""
    answer = answers.get(index)
    return answer is not None and op.result is not None and matches(answer, op.result)


def _observed(ops: Sequence[OpRecord], watches: Sequence[WatchLog]) -> dict[int, set[Any]]:
    """What clients saw written at each revision: ("put", key, value) and ("delete",
    key), from watch events and from the values reads returned."""
    seen: dict[int, set[Any]] = defaultdict(set)
    for w in watches:
        for r in w.responses:
            for e in r.events:
                mark = ("put", e.kv.key, e.kv.value) if e.kind == "put" else (
                    "delete", e.kv.key)
                seen[e.kv.mod_revision].add(mark)
    for op in ops:
        if op.outcome != "ok":
            continue
        results = [op.result, *getattr(op.result, "responses", [])]
        for res in results:
            kvs = list(getattr(res, "kvs", []) or []) + list(getattr(res, "prev_kvs", []) or [])
            prev = getattr(res, "prev_kv", None)
            kvs += [prev] if prev is not None else []
            for kv in kvs:
                seen[kv.mod_revision].add(("put", kv.key, kv.value))
    return seen


def _writes(request: Any) -> set[Any]:
    """The marks (as `_observed` makes them) a request could leave."""
    ops = [request] if isinstance(request, Put | DeleteRange) else [
        *request.success, *request.failure] if isinstance(request, Txn) else []
    out: set[Any] = set()
    for o in ops:
        if isinstance(o, Put):
            out.add(("put", o.key, o.value))
        elif isinstance(o, DeleteRange) and o.range_end is None:
            out.add(("delete", o.key))
    return out


def place_by_observation(ops: list[OpRecord], unknown: Mapping[int, int],
                         watches: Sequence[WatchLog]) -> list[OpRecord]:
    """Give an indeterminate write the entry clients saw its effect in, for entries the
    tail could not read but whose revision a member knew (`unknown`: raft index ->
    revision): clients saw the effect at that revision (a unique value names its
    write)."""
    seen = _observed(ops, watches)
    out = list(ops)
    taken = {op.index for op in ops if op.index is not None}
    for index, revision in sorted(unknown.items()):
        marks = seen.get(revision)
        if not marks or index in taken:
            continue
        for i, op in enumerate(out):
            if op.outcome == "info" and op.index is None and marks & _writes(op.request):
                out[i] = replace(op, index=index)
                taken.add(index)
                break
    return out


def _compact_start(revision: int, seen: float, samples: Sequence[ClusterView]) -> float:
    """The last sample before `seen` in which no live KV node's floor reached `revision`:
    the coordinator's notice for it came after. A sample in which no KV node answered
    (a loaded machine's status calls timed out) says nothing and is skipped: taking it
    as "no floor reached" put a Compact's start after its commit."""
    start = 0.0
    for s in samples:
        if s.t > seen:
            break
        answered = [m for m in s.members if m.kv_up]
        if answered and all(m.floor < revision for m in answered):
            start = s.t
    return start


def _replayable(entries: dict[int, Any]) -> list[tuple[int, Any]]:
    """(index, request) in log order for the model: the known requests, and an
    UnknownWrite for an unread entry a member mapped to a revision (an unread entry that
    wrote nothing, or that nobody mapped, is left out)."""
    out: list[tuple[int, Any]] = []
    for index in sorted(entries):
        command = entries[index]
        if isinstance(command, REQUEST_TYPES):
            out.append((index, command))
        elif isinstance(command, Missing) and command.revision is not None:
            out.append((index, UnknownWrite()))
    return out


def _replayed(entries: dict[int, Any]) -> dict[int, Any]:
    """What the model answers at each index of the log (answered in index order). The
    model keeps the history the log's own reads ask for (a tier's reads pinned at a
    past revision: `KvModel()` would keep only each key's latest version)."""
    replayable = _replayable(entries)
    model = KvModel.for_requests(c for _, c in replayable if not isinstance(c, UnknownWrite))
    state = model.initial()
    out = {}
    for index, command in replayable:
        state, out[index] = model.apply(state, command, index)
    return out


def assemble(dump: Dump, t0: float, faults: Sequence[FaultEvent],
             final: OpRecord | None) -> Assembled:
    notes = list(dump.notes)
    entries = {e.index: request_of(e.command) for e in dump.entries}
    seen_at = {e.index: e.seen_t for e in dump.entries}
    ops, left = place_ops(dump.ops, entries, _replayed(entries))
    # answered operations fill entries the tail missed
    known = dict(entries)
    for op in ops:
        if op.index is not None and (op.index not in known or isinstance(known[op.index],
                                                                          Missing)):
            known[op.index] = op.request
    unread = {i: c.revision for i, c in known.items()
              if isinstance(c, Missing) and c.revision is not None}
    if unread:
        ops = place_by_observation(ops, unread, dump.watches)
        for op in ops:
            if op.index in unread:
                known[op.index] = op.request
    # unread entries: one that a member said wrote nothing is no doubt; the others are
    # (unmapped: even the numbering of the revisions after it is a guess)
    unknown = tuple(sorted(i for i, c in known.items() if isinstance(c, Missing)
                           and not (c.mapped and c.revision is None)))
    replay = _replayed(known)
    samples = tuple(replace(s, t=_shift(s.t, t0)) for s in dump.samples)
    extra: list[OpRecord] = []
    strays: list[str] = []
    for index, command in sorted(left.items()):
        if isinstance(command, Range):
            continue  # a read nobody waits for (the cluster's own barrier): changes nothing
        if isinstance(command, WRITES) and not tier_owned(command):
            strays.append(f"entry {index} holds {command!r:.160} which no client sent "
                          "(or sent once and it was applied twice)")
        result = replay.get(index)
        outcome = "fail" if isinstance(result, Failure) else "ok"
        seen = seen_at.get(index, t0)
        start = (_compact_start(command.revision, _shift(seen, t0), samples)
                 if isinstance(command, Compact) else 0.0)
        kind = {Put: "put", DeleteRange: "delete", Txn: "txn", Compact: "compact"}[
            type(command)]
        who = TIER_CLIENT if tier_owned(command) else CLUSTER_CLIENT
        extra.append(OpRecord(who, kind, command, t0 + start,  # type: ignore[arg-type]
                              seen, outcome, result, index))
    if unknown:
        notes.append(f"{len(unknown)} committed entries could not be read from any member "
                     f"(first {unknown[0]}); answered operations filled what they could")
    rec = HistoryRecorder()
    by_client: dict[int, list[OpRecord]] = defaultdict(list)
    for op in [*ops, *extra]:
        by_client[op.client].append(op)
    for client in sorted(by_client):
        for op in sorted(by_client[client], key=lambda o: (o.invoke_t, o.complete_t)):
            h = rec.invoke(op.client, op.kind, op.request, _shift(op.invoke_t, t0))
            rec.complete(h, op.outcome, _shift(op.complete_t, t0), op.result,  # type: ignore[arg-type]
                         op.index)
    for w in sorted(dump.watches, key=lambda w: (w.open_t, w.client)):
        _replay_watch(rec, w, t0)
    for f in faults:
        rec.fault(f.t, f.action, **dict(f.detail))
    # the head revision (what a watch's header says), replayed as etcd numbers it
    events, head = log_events(_replayable(known))
    final_result = final.result if final is not None and isinstance(
        final.result, RangeResult) else None
    return Assembled(rec.history(), events, head, final_result, samples, tuple(notes),
                     tuple(strays), unknown)


def _replay_watch(rec: HistoryRecorder, w: WatchLog, t0: float) -> None:
    h = rec.watch_open(w.client, w.key, _shift(w.open_t, t0), range_end=w.range_end,
                       start_revision=w.start_revision, prev_kv=w.prev_kv, no_put=w.no_put,
                       no_delete=w.no_delete)
    if w.created_t is not None and w.effective_start is not None:
        rec.watch_created(h, _shift(w.created_t, t0), w.effective_start)
    for r in w.responses:
        rec.watch_response(h, _shift(r.t, t0), r.revision, r.events)
    if w.end_t is not None and w.end_reason is not None:
        rec.watch_end(h, _shift(w.end_t, t0), w.end_reason, w.compact_revision)


__all__ = ["Assembled", "assemble", "place_by_observation", "place_ops", "request_of"]
