"""What a scenario run observed: client operations, watch streams, faults and compactions.

The shape follows Jepsen and porcupine: every client operation is recorded with the time
it was invoked and the time it completed, and an outcome:

- `ok`: it happened, `result` is what the store answered;
- `fail`: it definitely did not take effect (`result` is a `Failure`, e.g. ErrCompacted,
  ErrFutureRev, an invalid request);
- `info`: indeterminate (a timeout, the serving process died): it may have taken effect at
  any moment after its invocation, or never. Checkers treat its completion time as +inf.

Times are numbers the runner passes in (virtual time on `sim`, monotonic seconds on
`ray`): nothing here reads a clock. A `HistoryRecorder` is bounded (`HistoryFull` when a
limit is reached, never a silent drop: a checker must not judge a truncated history) and
its `History` round-trips through JSON, which is what the runner saves next to a report.
"""

from __future__ import annotations

import json
import math
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from functools import cache
from typing import Any, Literal, TypeAlias

from sediment.actors.kv import errors as kv_errors
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

Outcome = Literal["ok", "fail", "info"]
OpKind = Literal["put", "delete", "get", "range", "txn", "compact"]
Request: TypeAlias = Put | DeleteRange | Range | Txn | Compact
Result: TypeAlias = PutResult | DeleteResult | RangeResult | TxnResult | CompactResult
JsonValue: TypeAlias = Any  # what json.loads may return

OUTCOMES: tuple[Outcome, ...] = ("ok", "fail", "info")
OP_KINDS: tuple[OpKind, ...] = ("put", "delete", "get", "range", "txn", "compact")
FORMAT_VERSION = 1

CLUSTER_CLIENT = -1  # Op.client of what the cluster did on its own (not a client request)
TIER_CLIENT = -2  # Op.client of a tier's requests on the KV (the branch tier's refs)

DEFAULT_MAX_OPS = 200_000
DEFAULT_MAX_WATCH_RESPONSES = 1_000_000
DEFAULT_MAX_EVENTS = 100_000  # faults + compactions

_REQUEST_OF: dict[str, type] = {
    "put": Put,
    "delete": DeleteRange,
    "get": Range,
    "range": Range,
    "txn": Txn,
    "compact": Compact,
}
_RESULT_OF: dict[str, type] = {
    "put": PutResult,
    "delete": DeleteResult,
    "get": RangeResult,
    "range": RangeResult,
    "txn": TxnResult,
    "compact": CompactResult,
}


class HistoryError(ValueError):
    """A recorder call or a saved history breaks the model (bad time, unknown handle,
    a client with two operations in flight, ...). Nothing is recorded when raised."""


class HistoryFull(HistoryError):
    """A bound of the recorder was reached."""


# ---- records ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """Why an operation failed (or, for `info`, what the client saw). `error` is the
    error's class name (`ErrCompacted`, `ErrFutureRev`, `Timeout`, ...);
    `compact_revision` is ErrCompacted's, 0 when unknown."""

    error: str
    message: str = ""
    compact_revision: int = 0

    @classmethod
    def of(cls, exc: BaseException) -> Failure:
        rev = getattr(exc, "compact_revision", 0)
        return cls(type(exc).__name__, str(exc), rev if isinstance(rev, int) else 0)


@dataclass(frozen=True)
class Op:
    """One client operation. `complete_t` is None while in flight and for an `info`
    operation that never came back; an `info` op may still carry the time the client gave
    up (checkers ignore it: an indeterminate op completes at +inf). `index`: the raft log
    index of the request's entry when known (its place in Sediment's log; the revisions
    in `result` are etcd's, numbered apart from it; None for a store without such a log,
    or when the entry is unknown). `client` is
    CLUSTER_CLIENT for what the cluster did on its own (the compaction coordinator's
    Compacts, read from the log)."""

    client: int
    kind: OpKind
    args: Request
    invoke_t: float
    complete_t: float | None
    outcome: Outcome
    result: Result | Failure | None = None
    index: int | None = None

    def __post_init__(self) -> None:
        _check_op(self)

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @property
    def end(self) -> float:
        """The completion time as checkers use it: +inf for an indeterminate op."""
        if self.outcome == "info" or self.complete_t is None:
            return math.inf
        return self.complete_t

    @property
    def error(self) -> str | None:
        return self.result.error if isinstance(self.result, Failure) else None

    def describe(self) -> str:
        """One line for a report: `c2 put k1=v7 -> ok rev 12 [3.100, 3.250]`."""
        done = "inf" if self.end == math.inf else f"{self.end:.3f}"
        return (
            f"c{self.client} {_describe_request(self.args)} -> {self.outcome}"
            f"{_describe_result(self.result)} [{self.invoke_t:.3f}, {done}]"
        )


@dataclass(frozen=True)
class WatchResponse:
    """One watch response as the client got it (no events: a progress notification)."""

    t: float
    revision: int
    events: tuple[Event, ...] = ()


@dataclass(frozen=True)
class WatchLog:
    """One watch, from the request to its end. `effective_start` is the start revision
    the server reported when it created the watch (etcd: "from now" = head + 1);
    `end_reason` is "compacted", "canceled" (by the client), "slow", "error", ... and
    None while the watch was still open at the end of the run."""

    handle: int
    client: int
    key: bytes
    range_end: bytes | None
    start_revision: int
    open_t: float
    prev_kv: bool = False
    no_put: bool = False
    no_delete: bool = False
    created_t: float | None = None
    effective_start: int | None = None
    responses: tuple[WatchResponse, ...] = ()
    end_t: float | None = None
    end_reason: str | None = None
    compact_revision: int = 0

    @property
    def start(self) -> int | None:
        """The first revision the watch asked for (the effective one for "from now")."""
        return self.start_revision or self.effective_start


@dataclass(frozen=True)
class FaultEvent:
    """A fault the nemesis injected (or healed): `action` as in the scenario file, with
    the resolved targets in `detail` (e.g. {"process": "raft:kv@n2", "node": "n2"})."""

    t: float
    action: str
    detail: Mapping[str, JsonValue] = field(default_factory=dict)


@dataclass(frozen=True)
class CompactionEvent:
    """A compaction to `revision` seen by the runner, that took effect somewhere in
    [t_start, t_end] (a client Compact's invoke/complete; for a compaction the cluster ran
    on its own, t_start 0 when unknown). `positions`, when the runner could read them at
    that moment, map each live watch handle to the next revision it still needed."""

    revision: int
    t_start: float
    t_end: float
    positions: Mapping[int, int] | None = None
    source: str = "client"


@dataclass(frozen=True)
class History:
    ops: tuple[Op, ...] = ()
    watches: tuple[WatchLog, ...] = ()
    faults: tuple[FaultEvent, ...] = ()
    compactions: tuple[CompactionEvent, ...] = ()

    def compaction_events(self) -> list[CompactionEvent]:
        """Every compaction: the recorded ones plus each successful client Compact."""
        out = list(self.compactions)
        for op in self.ops:
            if op.ok and isinstance(op.args, Compact) and op.complete_t is not None:
                source = "cluster" if op.client == CLUSTER_CLIENT else "client"
                out.append(CompactionEvent(op.args.revision, op.invoke_t, op.complete_t,
                                           source=source))
        return sorted(out, key=lambda c: (c.t_end, c.revision))

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": FORMAT_VERSION,
                "ops": [encode(op) for op in self.ops],
                "watches": [encode(w) for w in self.watches],
                "faults": [encode(f) for f in self.faults],
                "compactions": [encode(c) for c in self.compactions],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> History:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise HistoryError(f"not a JSON history: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION:
            raise HistoryError(f"not a history of format {FORMAT_VERSION}")
        try:
            return cls(
                tuple(_expect(decode(x), Op) for x in data.get("ops", [])),
                tuple(_expect(decode(x), WatchLog) for x in data.get("watches", [])),
                tuple(_expect(decode(x), FaultEvent) for x in data.get("faults", [])),
                tuple(_expect(decode(x), CompactionEvent) for x in data.get("compactions", [])),
            )
        except HistoryError:
            raise
        except (TypeError, KeyError, AttributeError, ValueError) as exc:
            raise HistoryError(f"malformed history: {exc}") from None


# ---- the recorder ----------------------------------------------------------------------


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
        if not _is_int(client):
            raise HistoryError(f"client must be an int, got {client!r}")
        if client in self._in_flight:
            raise HistoryError(f"client {client} already has an operation in flight")
        op = Op(client, kind, args, _time(t), None, "info")
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
        done = Op(pending.client, pending.kind, pending.args, pending.invoke_t, _time(t),
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
        if not isinstance(key, bytes) or not _is_int(start_revision) or start_revision < 0:
            raise HistoryError("watch_open needs a bytes key and a revision >= 0")
        handle = len(self._watches)
        self._watches.append(WatchLog(handle, client, key, range_end, start_revision, _time(t),
                                      prev_kv, no_put, no_delete))
        return handle

    def watch_created(self, handle: int, t: float, effective_start: int) -> None:
        w = self._open_watch(handle)
        self._watches[handle] = _replace(w, created_t=_time(t), effective_start=effective_start)

    def watch_response(
        self, handle: int, t: float, revision: int, events: Sequence[Event] = ()
    ) -> None:
        if self._responses >= self._max_responses:
            raise HistoryFull(f"more than {self._max_responses} watch responses")
        w = self._open_watch(handle)
        if not _is_int(revision) or revision < 0:
            raise HistoryError(f"watch response revision must be an int >= 0, got {revision!r}")
        response = WatchResponse(_time(t), revision, tuple(events))
        self._watches[handle] = _replace(w, responses=(*w.responses, response))
        self._responses += 1

    def watch_end(
        self, handle: int, t: float, reason: str, compact_revision: int = 0
    ) -> None:
        """The watch ended: canceled by the server ("compacted" with its compact
        revision, "slow", "error") or by the client ("canceled")."""
        w = self._open_watch(handle)
        self._watches[handle] = _replace(
            w, end_t=_time(t), end_reason=reason, compact_revision=compact_revision
        )

    # -- nemesis and cluster events --

    def fault(self, t: float, action: str, **detail: JsonValue) -> None:
        self._count_event()
        self._faults.append(FaultEvent(_time(t), action, dict(detail)))

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
        if not _is_int(revision) or revision < 1 or _time(t_start) > _time(t_end):
            raise HistoryError("compaction needs a revision >= 1 and t_start <= t_end")
        self._compactions.append(CompactionEvent(
            revision, t_start, t_end, dict(positions) if positions is not None else None, source))

    def history(self) -> History:
        return History(tuple(self._ops), tuple(self._watches), tuple(self._faults),
                       tuple(self._compactions))

    def _open_watch(self, handle: int) -> WatchLog:
        if not _is_int(handle) or not 0 <= handle < len(self._watches):
            raise HistoryError(f"unknown watch handle {handle!r}")
        w = self._watches[handle]
        if w.end_t is not None:
            raise HistoryError(f"watch {handle} already ended")
        return w

    def _count_event(self) -> None:
        if len(self._faults) + len(self._compactions) >= self._max_events:
            raise HistoryFull(f"more than {self._max_events} fault/compaction events")


# ---- validation helpers ----------------------------------------------------------------


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _time(t: object) -> float:
    if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
        raise HistoryError(f"a time must be a finite number, got {t!r}")
    return float(t)


def _check_op(op: Op) -> None:
    if op.kind not in _REQUEST_OF:
        raise HistoryError(f"unknown op kind {op.kind!r}; one of {OP_KINDS}")
    if not isinstance(op.args, _REQUEST_OF[op.kind]):
        raise HistoryError(f"a {op.kind} op needs {_REQUEST_OF[op.kind].__name__} args")
    if op.outcome not in OUTCOMES:
        raise HistoryError(f"outcome must be one of {OUTCOMES}, got {op.outcome!r}")
    _time(op.invoke_t)
    if op.complete_t is not None and _time(op.complete_t) < op.invoke_t:
        raise HistoryError(f"completion {op.complete_t} before invocation {op.invoke_t}")
    if op.outcome == "ok":
        if op.complete_t is None or not isinstance(op.result, _RESULT_OF[op.kind]):
            raise HistoryError(f"an ok {op.kind} needs a completion time and a "
                               f"{_RESULT_OF[op.kind].__name__}")
    elif op.outcome == "fail":
        if op.complete_t is None or not isinstance(op.result, Failure):
            raise HistoryError("a failed op needs a completion time and a Failure")
    elif op.result is not None and not isinstance(op.result, Failure):
        raise HistoryError("an info op's result is None or a Failure")
    if op.index is not None and (not _is_int(op.index) or op.index < 1):
        raise HistoryError(f"a log index must be an int >= 1, got {op.index!r}")


def _expect(x: object, cls: type[Any]) -> Any:
    if not isinstance(x, cls):
        raise HistoryError(f"expected {cls.__name__}, got {type(x).__name__}")
    return x


def _replace(w: WatchLog, **changes: Any) -> WatchLog:
    return replace(w, **changes)


# ---- descriptions ----------------------------------------------------------------------


def show(b: bytes | None) -> str:
    """A key or value as a short readable string."""
    if b is None:
        return "-"
    text = b.decode("utf-8", "backslashreplace")
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return text if len(text) <= 24 else text[:21] + "..."


def _describe_range(key: bytes, range_end: bytes | None) -> str:
    if range_end is None:
        return show(key)
    if range_end == b"\0":
        return f"[{show(key)}, +inf)"
    return f"[{show(key)}, {show(range_end)})"


def _describe_request(r: Request) -> str:
    match r:
        case Put(key=k, value=v):
            return f"put {show(k)}={show(v)}"
        case DeleteRange(key=k, range_end=e):
            return f"delete {_describe_range(k, e)}"
        case Range(key=k, range_end=e, revision=rev):
            return f"range {_describe_range(k, e)}" + (f" @{rev}" if rev else "")
        case Txn(compare=c, success=s, failure=f):
            return f"txn({len(c)} cmp, {len(s)}/{len(f)} ops)"
        case Compact(revision=rev):
            return f"compact {rev}"
    raise AssertionError(r)  # every Request is matched above


def _describe_kvs(kvs: Sequence[KeyValue]) -> str:
    shown = ", ".join(f"{show(kv.key)}={show(kv.value)}@{kv.mod_revision}" for kv in kvs[:4])
    return "{" + shown + (", ..." if len(kvs) > 4 else "") + "}"


def _describe_result(r: Result | Failure | None) -> str:
    match r:
        case None:
            return ""
        case Failure(error=e, compact_revision=c):
            return f" {e}" + (f"({c})" if c else "")
        case RangeResult(kvs=kvs, revision=rev):
            return f" {_describe_kvs(kvs)} rev {rev}"
        case TxnResult(succeeded=ok, revision=rev):
            return f" {'succeeded' if ok else 'failed'} rev {rev}"
        case DeleteResult(deleted=n, revision=rev):
            return f" deleted {n} rev {rev}"
        case PutResult(revision=rev) | CompactResult(revision=rev):
            return f" rev {rev}"
    raise AssertionError(r)  # every Result is matched above


# ---- JSON codec ------------------------------------------------------------------------
# Dataclasses become {"$t": name, field: value, ...}, bytes {"$b": latin-1 text} (every
# byte maps to one code point, so any key or value survives). Tuples are restored from
# the field's annotation.

_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        Put, DeleteRange, Range, Txn, Compact, Compare, KeyValue, Event, PutResult,
        DeleteResult, RangeResult, TxnResult, CompactResult, Failure, Op, WatchResponse,
        WatchLog, FaultEvent, CompactionEvent,
    )
}


def encode(x: object) -> JsonValue:
    if isinstance(x, bytes):
        return {"$b": x.decode("latin-1")}
    if x is None or isinstance(x, bool | int | str):
        return x
    if isinstance(x, float):
        if not math.isfinite(x):
            raise HistoryError(f"cannot encode {x}")
        return x
    if is_dataclass(x) and not isinstance(x, type):
        name = type(x).__name__
        if _TYPES.get(name) is not type(x):
            raise HistoryError(f"cannot encode a {name}")
        out: dict[str, JsonValue] = {"$t": name}
        for f in fields(x):
            out[f.name] = encode(getattr(x, f.name))
        return out
    if isinstance(x, list | tuple):
        return [encode(v) for v in x]
    if isinstance(x, Mapping):
        return {"$m": [[encode(k), encode(v)] for k, v in x.items()]}
    raise HistoryError(f"cannot encode {type(x).__name__}")


@cache
def _tuple_fields(cls: type) -> frozenset[str]:
    hints = typing.get_type_hints(cls)
    return frozenset(n for n, h in hints.items() if typing.get_origin(h) is tuple)


def decode(x: JsonValue) -> Any:
    if isinstance(x, list):
        return [decode(v) for v in x]
    if not isinstance(x, dict):
        return x
    if "$b" in x:
        return str(x["$b"]).encode("latin-1")
    if "$m" in x:
        return {decode(k): decode(v) for k, v in x["$m"]}
    cls = _TYPES.get(x.get("$t", ""))
    if cls is None:
        raise HistoryError(f"unknown record type {x.get('$t')!r}")
    tuples = _tuple_fields(cls)
    kwargs = {}
    for k, v in x.items():
        if k == "$t":
            continue
        value = decode(v)
        kwargs[k] = tuple(value) if k in tuples and isinstance(value, list) else value
    return cls(**kwargs)


# kv errors the checkers reason about, by the name `Failure.error` carries
ERR_COMPACTED = kv_errors.ErrCompacted.__name__
ERR_FUTURE_REV = kv_errors.ErrFutureRev.__name__

__all__ = [
    "CLUSTER_CLIENT",
    "TIER_CLIENT",
    "ERR_COMPACTED",
    "ERR_FUTURE_REV",
    "OP_KINDS",
    "OUTCOMES",
    "CompactionEvent",
    "Failure",
    "FaultEvent",
    "History",
    "HistoryError",
    "HistoryFull",
    "HistoryRecorder",
    "Op",
    "OpHandle",
    "OpKind",
    "Outcome",
    "Request",
    "Result",
    "WatchLog",
    "WatchResponse",
    "decode",
    "encode",
    "show",
]
