"""Recording a scenario run's history as it happens (`HistoryRecorder`).

The runner calls `invoke` / `complete` for each client operation, `watch_*` for each
watch stream, `fault` and `compaction` for what the nemesis and the cluster did, with
times it passes in: nothing here reads a clock. Bounded (`HistoryFull` when a limit is
reached, never a silent drop: a checker must not judge a truncated history);
`history()` freezes what was recorded so far into a `History`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sediment.actors.kv.types import Event
from sediment.scenarios.history import History
from sediment.scenarios.history_records import (
    CompactionEvent,
    Failure,
    FaultEvent,
    HistoryError,
    HistoryFull,
    JsonValue,
    Op,
    OpKind,
    Outcome,
    Request,
    Result,
    WatchLog,
    WatchResponse,
    as_time,
    is_int,
)

DEFAULT_MAX_OPS = 200_000
DEFAULT_MAX_WATCH_RESPONSES = 1_000_000
DEFAULT_MAX_EVENTS = 100_000  # faults + compactions


@dataclass(frozen=True)
class OpHandle:
    """What `invoke` returns; pass it to `complete`."""

    index: int
    client: int


class HistoryRecorder:
    """Collects a run's history. Not thread-safe: the runner serialises calls.

    `invoke` then `complete` for each client operation (one in flight per client, as a
    Jepsen process); `watch_*` for watch streams; `fault` and `compaction` for nemesis
    actions and compactions the cluster ran on its own. `history()` freezes what was
    recorded so far: operations still in flight become `info`."""

    def __init__(
        self,
        *,
        max_ops: int = DEFAULT_MAX_OPS,
        max_watch_responses: int = DEFAULT_MAX_WATCH_RESPONSES,
        max_events: int = DEFAULT_MAX_EVENTS,
    ) -> None:
        for name, n in (
            ("max_ops", max_ops),
            ("max_watch_responses", max_watch_responses),
            ("max_events", max_events),
        ):
            if not isinstance(n, int) or n < 1:
                raise HistoryError(f"{name} must be a positive int, got {n!r}")
        self._max_ops = max_ops
        self._max_responses = max_watch_responses
        self._max_events = max_events
        self._ops: list[Op] = []
        self._in_flight: dict[int, int] = {}  # client -> index of its pending op
        self._watches: list[WatchLog] = []
        self._responses = 0
        self._faults: list[FaultEvent] = []
        self._compactions: list[CompactionEvent] = []

    # -- client operations --

    def invoke(self, client: int, kind: OpKind, args: Request, t: float) -> OpHandle:
        if len(self._ops) >= self._max_ops:
            raise HistoryFull(f"more than {self._max_ops} operations")
        if not is_int(client):
            raise HistoryError(f"client must be an int, got {client!r}")
        if client in self._in_flight:
            raise HistoryError(f"client {client} already has an operation in flight")
        op = Op(client, kind, args, as_time(t), None, "info")
        self._in_flight[client] = len(self._ops)
        self._ops.append(op)
        return OpHandle(len(self._ops) - 1, client)

    def complete(
        self,
        handle: OpHandle,
        outcome: Outcome,
        t: float,
        result: Result | Failure | BaseException | None = None,
        index: int | None = None,
    ) -> Op:
        """Record how `handle` ended (`index`: its log entry, when known). An exception as
        `result` becomes a `Failure`."""
        if self._in_flight.get(handle.client) != handle.index:
            raise HistoryError(f"{handle} is not in flight")
        pending = self._ops[handle.index]
        res = Failure.of(result) if isinstance(result, BaseException) else result
        done = Op(pending.client, pending.kind, pending.args, pending.invoke_t, as_time(t),
                  outcome, res, index)
        if done.complete_t is not None and done.complete_t < done.invoke_t:
            raise HistoryError(f"completion {t} before invocation {done.invoke_t}")
        self._ops[handle.index] = done
        del self._in_flight[handle.client]
        return done

    # -- watches --

    def watch_open(
        self,
        client: int,
        key: bytes,
        t: float,
        *,
        range_end: bytes | None = None,
        start_revision: int = 0,
        prev_kv: bool = False,
        no_put: bool = False,
        no_delete: bool = False,
    ) -> int:
        """A watch was requested; returns its handle (unique in this history)."""
        if not isinstance(key, bytes) or not is_int(start_revision) or start_revision < 0:
            raise HistoryError("watch_open needs a bytes key and a revision >= 0")
        handle = len(self._watches)
        self._watches.append(WatchLog(handle, client, key, range_end, start_revision, as_time(t),
                                      prev_kv, no_put, no_delete))
        return handle

    def watch_created(self, handle: int, t: float, effective_start: int) -> None:
        w = self._open_watch(handle)
        self._watches[handle] = _replace(w, created_t=as_time(t), effective_start=effective_start)

    def watch_response(
        self, handle: int, t: float, revision: int, events: Sequence[Event] = ()
    ) -> None:
        if self._responses >= self._max_responses:
            raise HistoryFull(f"more than {self._max_responses} watch responses")
        w = self._open_watch(handle)
        if not is_int(revision) or revision < 0:
            raise HistoryError(f"watch response revision must be an int >= 0, got {revision!r}")
        response = WatchResponse(as_time(t), revision, tuple(events))
        self._watches[handle] = _replace(w, responses=(*w.responses, response))
        self._responses += 1

    def watch_end(
        self, handle: int, t: float, reason: str, compact_revision: int = 0
    ) -> None:
        """The watch ended: canceled by the server ("compacted" with its compact
        revision, "slow", "error") or by the client ("canceled")."""
        w = self._open_watch(handle)
        self._watches[handle] = _replace(
            w, end_t=as_time(t), end_reason=reason, compact_revision=compact_revision
        )

    # -- nemesis and cluster events --

    def fault(self, t: float, action: str, **detail: JsonValue) -> None:
        self._count_event()
        self._faults.append(FaultEvent(as_time(t), action, dict(detail)))

    def compaction(
        self,
        revision: int,
        t_end: float,
        *,
        t_start: float = 0.0,
        positions: Mapping[int, int] | None = None,
        source: str = "cluster",
    ) -> None:
        """A compaction the runner saw (one the cluster ran itself, or with the watch
        positions read at that moment). Client Compacts are taken from the ops."""
        self._count_event()
        if not is_int(revision) or revision < 1 or as_time(t_start) > as_time(t_end):
            raise HistoryError("compaction needs a revision >= 1 and t_start <= t_end")
        self._compactions.append(CompactionEvent(
            revision, t_start, t_end, dict(positions) if positions is not None else None, source))

    def history(self) -> History:
        return History(tuple(self._ops), tuple(self._watches), tuple(self._faults),
                       tuple(self._compactions))

    def _open_watch(self, handle: int) -> WatchLog:
        if not is_int(handle) or not 0 <= handle < len(self._watches):
            raise HistoryError(f"unknown watch handle {handle!r}")
        w = self._watches[handle]
        if w.end_t is not None:
            raise HistoryError(f"watch {handle} already ended")
        return w

    def _count_event(self) -> None:
        if len(self._faults) + len(self._compactions) >= self._max_events:
            raise HistoryFull(f"more than {self._max_events} fault/compaction events")


def _replace(w: WatchLog, **changes: Any) -> WatchLog:
    return replace(w, **changes)


__all__ = [
    "DEFAULT_MAX_EVENTS",
    "DEFAULT_MAX_OPS",
    "DEFAULT_MAX_WATCH_RESPONSES",
    "HistoryRecorder",
    "OpHandle",
]
