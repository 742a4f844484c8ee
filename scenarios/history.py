"""What a scenario run observed: client operations, watch streams, faults and compactions.

The shape follows Jepsen and porcupine: every client operation is recorded with the time
it was invoked and the time it completed, and an outcome:

- `ok`: it happened, `result` is what the store answered;
- `fail`: it definitely did not take effect (`result` is a `Failure`, e.g. ErrCompacted,
  ErrFutureRev, an invalid request);
- `info`: indeterminate (a timeout, the serving process died): it may have taken effect at
  any moment after its invocation, or never. Checkers treat its completion time as +inf.

Times are numbers the runner passes in (virtual time on `sim`, monotonic seconds on
`ray`): nothing here reads a clock. A `HistoryRecorder` (`history_recorder.py`) is
bounded (`HistoryFull` when a limit is reached, never a silent drop: a checker must not
judge a truncated history) and its `History` round-trips through JSON, which is what the
runner saves next to a report.

This module holds the `History` and re-exports the records it gathers
(`history_records.py`); their JSON form is `history_codec.py`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sediment.actors.kv.types import Compact
from sediment.scenarios.history_codec import decode, encode, expect
from sediment.scenarios.history_records import (
    CLUSTER_CLIENT,
    ERR_COMPACTED,
    ERR_FUTURE_REV,
    FORMAT_VERSION,
    OP_KINDS,
    OUTCOMES,
    TIER_CLIENT,
    CompactionEvent,
    Failure,
    FaultEvent,
    HistoryError,
    HistoryFull,
    Op,
    OpKind,
    Outcome,
    Request,
    Result,
    WatchLog,
    WatchResponse,
    show,
)


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
                tuple(expect(decode(x), Op) for x in data.get("ops", [])),
                tuple(expect(decode(x), WatchLog) for x in data.get("watches", [])),
                tuple(expect(decode(x), FaultEvent) for x in data.get("faults", [])),
                tuple(expect(decode(x), CompactionEvent) for x in data.get("compactions", [])),
            )
        except HistoryError:
            raise
        except (TypeError, KeyError, AttributeError, ValueError) as exc:
            raise HistoryError(f"malformed history: {exc}") from None


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
    "Op",
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
