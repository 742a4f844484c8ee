"""How a transaction ended, as its commit partition records it (Ignite's TxStateStorage
and write-intent resolution), pure.

The commit partition is the one place that decides: `finish` records COMMITTED (with the
commit time) or ABORTED once, and later requests get that recorded outcome back whatever
they ask for. So when a coordinator dies mid-commit, whoever finds one of its intents
asks the commit partition; if nothing is recorded and the coordinator is gone, `recover`
records ABORTED, and a Finish(commit) arriving later is answered "aborted": no
transaction is ever committed in one partition and aborted in another.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from sediment.actors.catalog.descriptors import ZonePartition
from sediment.actors.catalog.hlc import HybridTimestamp


class TxStatus(enum.Enum):
    PENDING = "pending"  # the coordinator is running it (no record at the commit partition)
    COMMITTED = "committed"
    ABORTED = "aborted"


@dataclass(frozen=True, slots=True)
class TxRecord:
    """The commit partition's record of an ended transaction."""

    status: TxStatus
    commit_ts: HybridTimestamp | None
    enlisted: frozenset[ZonePartition]


@dataclass(frozen=True, slots=True)
class FinishOutcome:
    """What a Finish request learns: the recorded outcome, and whether it was the one
    asked for (`as_requested` False: a commit came after a recovery had aborted it)."""

    record: TxRecord
    as_requested: bool


def finish(record: TxRecord | None, commit: bool, commit_ts: HybridTimestamp | None,
           enlisted: frozenset[ZonePartition]) -> tuple[TxRecord, FinishOutcome]:
    """Record the coordinator's decision unless one is recorded already."""
    if record is not None:
        wanted = TxStatus.COMMITTED if commit else TxStatus.ABORTED
        return record, FinishOutcome(record, record.status is wanted)
    if commit and commit_ts is None:
        raise ValueError("a commit needs a commit timestamp")
    new = TxRecord(TxStatus.COMMITTED if commit else TxStatus.ABORTED,
                   commit_ts if commit else None, enlisted)
    return new, FinishOutcome(new, True)


def recover(record: TxRecord | None) -> TxRecord:
    """Its coordinator is gone and it never finished: it aborts (enlisted unknown)."""
    if record is not None:
        return record
    return TxRecord(TxStatus.ABORTED, None, frozenset())


class Resolution(enum.Enum):
    COMMITTED = "committed"  # the intent is a version at the record's commit time
    ABORTED = "aborted"  # the intent is garbage
    WAIT = "wait"  # the coordinator is alive and may still finish: ask again later
    RECOVER = "recover"  # the coordinator is gone: propose `recover` at the commit partition


def resolve(record: TxRecord | None, coordinator_alive: bool) -> Resolution:
    """What a reader that found an intent does, given the commit partition's record."""
    if record is not None:
        return Resolution.COMMITTED if record.status is TxStatus.COMMITTED else Resolution.ABORTED
    return Resolution.WAIT if coordinator_alive else Resolution.RECOVER


__all__ = ["FinishOutcome", "Resolution", "TxRecord", "TxStatus", "finish", "recover", "resolve"]
