"""Typed errors of tables and transactions. Raising one changes nothing."""

from __future__ import annotations

from sediment.actors.catalog.errors import CatalogError


class TableError(CatalogError):
    """Base class of the data side's errors (a CatalogError, so one `except` catches a
    transaction on a dropped table and a bad row alike)."""


class InvalidRow(TableError):
    def __init__(self, reason: str) -> None:
        super().__init__(f"invalid row: {reason}")
        self.reason = reason


class WriteConflict(TableError):
    """Another transaction's intent is on the key, or a newer committed version exists
    (no-wait: the later transaction aborts rather than waiting). `intent_key`: the
    (table id, key) of the intent met, if it was one (its transaction's outcome may be
    decidable: `intent_resolver.py`)."""

    def __init__(self, tx_id: str, key: str, holder: str,
                 intent_key: tuple[object, ...] | None = None) -> None:
        super().__init__(f"transaction {tx_id} conflicts on {key} with {holder}")
        self.tx_id = tx_id
        self.key = key
        self.holder = holder
        self.intent_key = intent_key


class TxNotActive(TableError):
    def __init__(self, tx_id: str, phase: str) -> None:
        super().__init__(f"transaction {tx_id} is {phase}")
        self.tx_id = tx_id
        self.phase = phase


class TableDropped(TableError):
    """A table the transaction wrote was dropped before it committed: it aborts."""

    def __init__(self, tx_id: str, table: str) -> None:
        super().__init__(f"transaction {tx_id}: table {table} was dropped")
        self.tx_id = tx_id
        self.table = table


class PartitionUnavailable(TableError):
    """No member of a partition's raft group answered in time (the write or read may or
    may not have applied: a write makes its transaction abort)."""

    def __init__(self, what: str) -> None:
        super().__init__(f"partition unavailable: {what}")
        self.what = what


class ReadBelowLowWatermark(TableError):
    """A read-only read at a timestamp the low watermark has passed: the versions it
    would need may be garbage-collected."""

    def __init__(self, ts: object, lwm: object) -> None:
        super().__init__(f"read at {ts} is below the low watermark {lwm}")
        self.ts, self.lwm = ts, lwm


class IndexNotAvailable(TableError):
    """A lookup in an index that is not AVAILABLE in the catalog at the read's
    timestamp (still REGISTERED or BUILDING: its entries may be incomplete)."""

    def __init__(self, index: str, status: str) -> None:
        super().__init__(f"index {index} is {status}, not available")
        self.index, self.status = index, status


class SafeTimeUnavailable(TableError):
    """A read-only read at `ts` waited (bounded) and some node that may coordinate
    transactions was still not heard from at or above `ts`: a commit at or below it
    might still be stamped there (docs/catalog.md rule 5)."""

    def __init__(self, ts: object, behind: object) -> None:
        super().__init__(f"read at {ts} is not safe yet: not heard at it from {behind}")
        self.ts, self.behind = ts, behind


class UniqueConstraintViolation(TableError):
    """A write would give a unique index's values to a second live row (Ignite's
    duplicate-key error): held by another committed row, by a pending write of another
    transaction (`pending`: no-wait, it may still abort), or by another row of the same
    transaction. The transaction aborts; nothing changes. Also the reason a unique
    index build over rows that already share values fails."""

    def __init__(self, index: str, values: object, key: object, holder: object,
                 pending: bool = False) -> None:
        how = "a pending write of" if pending else "row"
        super().__init__(f"duplicate key in unique index {index}: {values!r} of row {key!r} "
                         f"is held by {how} {holder!r}")
        self.index, self.values, self.key, self.holder = index, values, key, holder
        self.pending = pending


class UnknownTransaction(TableError):
    """The node coordinates no transaction of that id (never began here, or the node
    restarted since: its transactions were abandoned to recovery)."""

    def __init__(self, tx_id: str) -> None:
        super().__init__(f"no transaction {tx_id} on this node")
        self.tx_id = tx_id


__all__ = ["IndexNotAvailable", "InvalidRow", "PartitionUnavailable", "ReadBelowLowWatermark",
           "SafeTimeUnavailable", "TableDropped", "TableError", "TxNotActive",
           "UniqueConstraintViolation", "UnknownTransaction", "WriteConflict"]
