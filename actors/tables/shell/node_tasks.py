"""What a table node's group task was for: the value behind a `TaskDone`'s tag.

The table node hands work to short-lived group tasks (`group_task.py`) and gets back a
`TaskDone` under an integer tag; `NodeState.next_tag(task)` keeps the task that tag
stands for, and the node's loop dispatches the answer with one `match` on its type.
Typed values instead of tuples whose first item names the kind: a misspelt kind or a
field read from the wrong position is a type error, not a silently dropped answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sediment.actors.catalog.descriptors import ZonePartition
from sediment.actors.tables import transactions as txn
from sediment.runtime.messages import CallRef


@dataclass(frozen=True, slots=True)
class TxMessage:
    """A transaction's write, finish or cleanup sent to a partition; `attempt` counts
    the sends after the first (a write met another's intent: resolved, then sent again)."""

    tx_id: str
    effect: txn.SendWrite | txn.SendFinish | txn.SendCleanup
    attempt: int


@dataclass(frozen=True, slots=True)
class UniqueRead:
    """The read of a row's current value before a write to a table with unique indexes
    (`unique_writes.py`); `attempt` 1 after the intent on the row was resolved."""

    tx_id: str
    table: Any
    row: Any
    delete: bool
    group: ZonePartition
    attempt: int


@dataclass(frozen=True, slots=True)
class DdlProposal:
    """DDL proposed to the metastore; `client` is answered once it is active."""

    client: CallRef


@dataclass(frozen=True, slots=True)
class LwmProposal:
    """The cluster's low watermark proposed to the metastore."""


@dataclass(frozen=True, slots=True)
class FloorAnnouncement:
    """The catalog's compaction floor announced to a partition this node leads."""

    group: ZonePartition


@dataclass(frozen=True, slots=True)
class MinTxTimeUpdate:
    """A partition told the minimum active transaction time (its answer is not needed)."""

    group: ZonePartition


@dataclass(frozen=True, slots=True)
class GarbageCollection:
    """A partition told to collect garbage below the watermark (its answer is not needed)."""

    group: ZonePartition


NodeTask = (TxMessage | UniqueRead | DdlProposal | LwmProposal | FloorAnnouncement
            | MinTxTimeUpdate | GarbageCollection)

__all__ = ["DdlProposal", "FloorAnnouncement", "GarbageCollection", "LwmProposal",
           "MinTxTimeUpdate", "NodeTask", "TxMessage", "UniqueRead"]
