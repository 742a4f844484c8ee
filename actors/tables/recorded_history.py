"""What a tables cluster's recorder (`recorder.py`) records, for the history checker
(`scenarios/checkers/catalog_compaction.py`).

The record types live with the product that produces them: `TablesCluster` feeds its
`Recorder` as it runs, so the tables package must not import the scenario harness; the
checker and the tests import these types from here.

Times named `at`, `start`, `end` are the run's real (or virtual) time, in the order the
recorder saw things happen; timestamps named `*_ts` and `activation` are hybrid times
from the cluster. A pin is an interval during which something needed a catalog version:
a running index build, an active rebalance, a partition whose unflushed raft log holds
an entry written under it. Transactions pin the version active at their begin time and
are recorded as transactions (with their writes and outcome), so one record serves both
the compaction check and the visibility check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sediment.actors.catalog.hlc import HybridTimestamp

PinKind = Literal["transaction", "replay", "index_build", "rebalance"]
TxOutcome = Literal["committed", "aborted", "unknown"]
Cell = tuple[int, tuple[Any, ...]]  # (table id, primary key)


@dataclass(frozen=True, slots=True)
class VersionActivated:
    version: int
    activation: HybridTimestamp


@dataclass(frozen=True, slots=True)
class CatalogCompacted:
    """The snapshot moved to `version` at `at`: every version below it is gone."""

    version: int
    at: float


@dataclass(frozen=True, slots=True)
class Pin:
    kind: PinKind
    owner: str
    version: int
    start: float
    end: float | None  # None: still pinned when the run ended


@dataclass(frozen=True)
class TxRecord:
    tx_id: str
    begin_ts: HybridTimestamp
    start: float
    end: float | None  # None: never ended (its coordinator died; recovery may end it)
    outcome: TxOutcome
    commit_ts: HybridTimestamp | None = None
    writes: Mapping[Cell, Mapping[str, Any] | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ReadRecord:
    """A read-only read of one cell at `ts` and what it returned (None: no row)."""

    ts: HybridTimestamp
    cell: Cell
    value: Mapping[str, Any] | None
    at: float


@dataclass(frozen=True)
class CatalogHistory:
    versions: tuple[VersionActivated, ...] = ()
    compactions: tuple[CatalogCompacted, ...] = ()
    pins: tuple[Pin, ...] = ()
    txs: tuple[TxRecord, ...] = ()
    reads: tuple[ReadRecord, ...] = ()


def replay_pins(events: Iterable[tuple[float, str, Literal["apply", "flush"], int]]) -> list[Pin]:
    """Replay pins from a partition log's record: (at, partition, "apply", catalog
    version of the entry) and (at, partition, "flush", 0). From an entry's apply until the
    next flush of its partition, a crash would replay it and need its version."""
    open_since: dict[str, tuple[float, int]] = {}
    pins: list[Pin] = []
    for at, partition, kind, version in events:
        if kind == "apply":
            since = open_since.get(partition)
            if since is None or version < since[1]:
                if since is not None:
                    pins.append(Pin("replay", partition, since[1], since[0], at))
                open_since[partition] = (at, version)
        else:
            since = open_since.pop(partition, None)
            if since is not None:
                pins.append(Pin("replay", partition, since[1], since[0], at))
    pins.extend(Pin("replay", p, v, s, None) for p, (s, v) in sorted(open_since.items()))
    return pins


__all__ = [
    "CatalogCompacted",
    "CatalogHistory",
    "Cell",
    "Pin",
    "PinKind",
    "ReadRecord",
    "TxOutcome",
    "TxRecord",
    "VersionActivated",
    "replay_pins",
]
