"""The records of a scenario run's history: client operations, watch streams, faults and
compactions, each checked when built, and their one-line descriptions for reports.

`history.py` holds the `History` that gathers them, `history_recorder.py` the recorder
that builds one during a run, `history_codec.py` their JSON form. Pure: no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from sediment.actors.kv import errors as kv_errors
from sediment.actors.kv.types import (
    Compact,
    CompactResult,
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


# ---- validation helpers ----------------------------------------------------------------


def is_int(x: object) -> bool:
    """An int that is not a bool."""
    return isinstance(x, int) and not isinstance(x, bool)


def as_time(t: object) -> float:
    """`t` as a float time, or HistoryError when it is not a finite number."""
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
    as_time(op.invoke_t)
    if op.complete_t is not None and as_time(op.complete_t) < op.invoke_t:
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
    if op.index is not None and (not is_int(op.index) or op.index < 1):
        raise HistoryError(f"a log index must be an int >= 1, got {op.index!r}")


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


# kv errors the checkers reason about, by the name `Failure.error` carries
ERR_COMPACTED = kv_errors.ErrCompacted.__name__
ERR_FUTURE_REV = kv_errors.ErrFutureRev.__name__

__all__ = [
    "CLUSTER_CLIENT",
    "ERR_COMPACTED",
    "ERR_FUTURE_REV",
    "FORMAT_VERSION",
    "OP_KINDS",
    "OUTCOMES",
    "TIER_CLIENT",
    "CompactionEvent",
    "Failure",
    "FaultEvent",
    "HistoryError",
    "HistoryFull",
    "JsonValue",
    "Op",
    "OpKind",
    "Outcome",
    "Request",
    "Result",
    "WatchLog",
    "WatchResponse",
    "as_time",
    "is_int",
    "show",
]
