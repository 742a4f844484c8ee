"""What clients, readers, drivers and the compaction coordinator exchange with a table
node (`table_node.py`): one frozen dataclass per message, so a caller matches on a type
instead of re-parsing a tuple.

Calls (`ctx.call(table_node_name(node), request)`):

- `Ddl(commands)` -> `DdlActive(version, activation)` once the new catalog version is
  active everywhere, or `NotLeader(hint)` (this node's metastore member does not lead).
- `Begin()` -> `Began(tx_id, ts, version)`: a read-write transaction this node runs.
- `Write(tx, table, row)`, `Delete(tx, table, key)` -> `Written()` once the intent is
  applied.
- `Get(tx, table, key)`, `Scan(tx, table)`, `TxLookup(tx, index, values)`,
  `TxRange(tx, index, bounds)` -> `Rows(rows, None)`: inside the transaction (its own
  writes over the newest committed rows; another's intent is a `WriteConflict`).
- `Commit(tx)`, `Rollback(tx)` -> `Ended(committed, commit_ts, failure)`.
- `RoGet(table, key, ts)`, `RoScan(table, ts)`, `RoLookup(index, values, ts)` (the rows
  whose indexed columns equal `values`), `RoRange(index, bounds, ts)` (range and prefix
  lookups in index order, `index_range.py`) -> `Rows(rows, read_ts)`: read-only reads
  at `ts` (None: now).
- `TxAlive(tx)` -> bool: whether this node still runs the transaction.
- `Clock(ts)` -> `ClockReading(node, incarnation, now)` (rule 5, `node_safe_time.py`).
- `TxsFinished(version)` -> `TxsFinishedAnswer(finished)`: has every RW transaction
  older than catalog version `version` ended?
- `SubscribeLwm(pid)` -> `LwmNow(lwm)`; every later change is sent to `pid` as
  `LwmChanged(lwm)`.
- `Status()` -> a dict (the common status call every process answers).

Any call may be answered `Failed(error)` (a typed `CatalogError`; nothing changed).

Messages: `MinTimesAsk(request, reply_to)` from the compaction coordinator, answered
with a `MinTimesReply` message (`catalog/compaction_messages.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sediment.actors.catalog.compaction_messages import MinTimesRequest
from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.runtime.pid import Pid

# -- calls ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ddl:
    """Run a batch of DDL commands (`catalog/ddl.py`) on the metastore leader's node."""

    commands: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Begin:
    """Begin a read-write transaction coordinated by this node."""


@dataclass(frozen=True, slots=True)
class Write:
    """Upsert `row` into `table` inside transaction `tx` (an intent until it commits)."""

    tx: Any
    table: Any
    row: Any


@dataclass(frozen=True, slots=True)
class Delete:
    """Delete the row of `key` in `table` inside transaction `tx`."""

    tx: Any
    table: Any
    key: Any


@dataclass(frozen=True, slots=True)
class Get:
    """Read the row of `key` in `table` inside transaction `tx`."""

    tx: Any
    table: Any
    key: Any


@dataclass(frozen=True, slots=True)
class Scan:
    """Read every row of `table` inside transaction `tx`."""

    tx: Any
    table: Any


@dataclass(frozen=True, slots=True)
class TxLookup:
    """Inside transaction `tx`: the rows whose columns of index `index` equal `values`
    (its own uncommitted writes included)."""

    tx: Any
    index: Any
    values: Any


@dataclass(frozen=True, slots=True)
class TxRange:
    """Inside transaction `tx`: a range lookup through index `index` (`index_range.py`),
    rows in index order (its own uncommitted writes included)."""

    tx: Any
    index: Any
    bounds: Any  # index_range.IndexRange


@dataclass(frozen=True, slots=True)
class Commit:
    """Commit transaction `tx`."""

    tx: Any


@dataclass(frozen=True, slots=True)
class Rollback:
    """Roll transaction `tx` back."""

    tx: Any


@dataclass(frozen=True, slots=True)
class RoGet:
    """A read-only read of the row of `key` in `table` at `ts` (None: now)."""

    table: Any
    key: Any
    ts: HybridTimestamp | None = None


@dataclass(frozen=True, slots=True)
class RoScan:
    """A read-only read of every row of `table` at `ts` (None: now)."""

    table: Any
    ts: HybridTimestamp | None = None


@dataclass(frozen=True, slots=True)
class RoLookup:
    """A read-only lookup through index `index`: the rows whose indexed columns equal
    `values`, at `ts` (None: now)."""

    index: Any
    values: Any
    ts: HybridTimestamp | None = None


@dataclass(frozen=True, slots=True)
class RoRange:
    """A read-only range lookup through index `index` (`index_range.py`): the rows whose
    indexed columns fall within `bounds` (each bound a prefix of the columns), in index
    order, at `ts` (None: now)."""

    index: Any
    bounds: Any  # index_range.IndexRange
    ts: HybridTimestamp | None = None


@dataclass(frozen=True, slots=True)
class TxAlive:
    """Does this node still run transaction `tx` (may it still finish it)?"""

    tx: Any


@dataclass(frozen=True, slots=True)
class Clock:
    """A reader's clock request: observe `ts` (within the skew bound) and tell the time."""

    ts: HybridTimestamp | None


@dataclass(frozen=True, slots=True)
class TxsFinished:
    """Has every RW transaction begun under a catalog version below `version` ended?"""

    version: int


@dataclass(frozen=True, slots=True)
class SubscribeLwm:
    """Tell `pid` of every change of this node's low watermark (until it ends)."""

    pid: Pid


ReadRequest = Get | Scan | TxLookup | TxRange | RoGet | RoScan | RoLookup | RoRange
TxRead = Get | Scan | TxLookup | TxRange  # inside an RW transaction

# -- replies ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DdlActive:
    """The DDL batch made catalog version `version`, active from `activation`."""

    version: int
    activation: HybridTimestamp


@dataclass(frozen=True, slots=True)
class NotLeader:
    """This node's metastore member does not lead; `hint`: the node it believes does."""

    hint: str | None


@dataclass(frozen=True, slots=True)
class Began:
    """Transaction `tx_id` began at `ts` under catalog version `version`."""

    tx_id: str
    ts: HybridTimestamp
    version: int


@dataclass(frozen=True, slots=True)
class Written:
    """A write or a delete's intent is applied."""


@dataclass(frozen=True, slots=True)
class Ended:
    """The transaction ended: `committed` at `commit_ts`, or aborted (`failure`: why)."""

    committed: bool
    commit_ts: HybridTimestamp | None
    failure: Any


@dataclass(frozen=True, slots=True)
class Rows:
    """Rows read, `[(key, row)]` (a get: one pair, row None when absent), and the read's
    timestamp (None inside an RW transaction)."""

    rows: list[tuple[tuple[Any, ...], Any]]
    ts: HybridTimestamp | None


@dataclass(frozen=True, slots=True)
class ClockReading:
    """Node `node` (incarnation `incarnation`) read `now` on its clock."""

    node: str
    incarnation: float
    now: HybridTimestamp


@dataclass(frozen=True, slots=True)
class TxsFinishedAnswer:
    """Whether every RW transaction older than the version asked about ended."""

    finished: bool


@dataclass(frozen=True, slots=True)
class LwmNow:
    """The node's low watermark now (None: none yet)."""

    lwm: HybridTimestamp | None


@dataclass(frozen=True, slots=True)
class Failed:
    """The call failed with `error` (typed; nothing changed)."""

    error: BaseException


# -- messages ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LwmChanged:
    """The node's low watermark moved to `lwm` (to every `SubscribeLwm` subscriber)."""

    lwm: HybridTimestamp


@dataclass(frozen=True, slots=True)
class MinTimesAsk:
    """The compaction coordinator's `request`; the `MinTimesReply` goes to `reply_to`."""

    request: MinTimesRequest
    reply_to: Pid


__all__ = ["Began", "Begin", "Clock", "ClockReading", "Commit", "Ddl", "DdlActive",
           "Delete", "Ended", "Failed", "Get", "LwmChanged", "LwmNow", "MinTimesAsk",
           "NotLeader", "ReadRequest", "RoGet", "RoLookup", "RoScan", "Rollback", "Rows",
           "Scan", "SubscribeLwm", "TxAlive", "TxLookup", "TxRange", "TxRead", "TxsFinished",
           "TxsFinishedAnswer", "Write", "Written"]
