"""The recorder of a tables cluster's history, for `checkers/catalog_compaction.py`.

The Python API feeds it as it runs: every DDL answer (a version and its activation),
every RW transaction (begin time, the real time it began and ended, the writes the
node acknowledged, its outcome and commit time), every read-only read (its timestamp,
cell and answer). Compactions come from the coordinators (`poll`): each compacted
iteration at the time it was *proposed* (no later than it applied, so the check never
misses a pin that ended between the two), and, for a compaction whose coordinator died
before it heard the answer, the snapshot version seen moving, at the time it was seen.

Index builds pin the version that registered them: from just before the
`create_index` call (the index cannot exist earlier) until the driver first proposed
`MakeIndexAvailable` (it cannot be AVAILABLE earlier) or `drop_index` was called.
Rebalances pin the version they were planned at (`poll_rebalances`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sediment.actors.catalog.hlc import MIN, HybridTimestamp
from sediment.scenarios.catalog_history import (
    CatalogCompacted,
    CatalogHistory,
    Pin,
    ReadRecord,
    TxRecord,
    VersionActivated,
)


@dataclass
class _Tx:
    begin_ts: HybridTimestamp
    start: float
    end: float | None = None
    outcome: str = "unknown"
    commit_ts: HybridTimestamp | None = None
    writes: dict[tuple[int, tuple[Any, ...]], Any] = field(default_factory=dict)


@dataclass
class Recorder:
    versions: dict[int, HybridTimestamp] = field(default_factory=lambda: {0: MIN})
    txs: dict[str, _Tx] = field(default_factory=dict)
    reads: list[ReadRecord] = field(default_factory=list)
    compactions: dict[int, float] = field(default_factory=dict)
    index_pins: dict[str, list[Any]] = field(default_factory=dict)  # [version, start, end]
    pins: list[Pin] = field(default_factory=list)  # pins from other sources
    # (group, planned at) -> [version, start, end]
    rebalance_pins: dict[tuple[str, float], list[Any]] = field(default_factory=dict)

    def poll_rebalances(self, driver: dict[str, Any] | None, at: float) -> None:
        """A rebalance pins the catalog version it was planned at, from when the driver
        planned it (before its pending record) until the driver first proposed its
        stable record, or, for one that failed, until the driver saw it end."""
        for r in [*(driver or {}).get("running", ()), *(driver or {}).get("finished", ())]:
            key = (r["group"], r["planned_at"])
            pin = self.rebalance_pins.setdefault(key, [r["catalog_version"], r["planned_at"],
                                                       None])
            end = r.get("recorded_at")
            if end is None and r.get("state") not in (None, "planning", "running"):
                end = r.get("ended_at", at)
            if end is not None:
                pin[2] = end if pin[2] is None else min(pin[2], end)

    def index_registered(self, name: str, version: int, at: float) -> None:
        self.index_pins[name] = [version, at, None]

    def index_dropped(self, name: str, at: float) -> None:
        pin = self.index_pins.get(name)
        if pin is not None and pin[2] is None:
            pin[2] = at

    def poll_indexes(self, driver: dict[str, Any] | None) -> None:
        """When the index driver first proposed each index's AVAILABLE status."""
        for b in [*(driver or {}).get("builds", ()), *(driver or {}).get("finished", ())]:
            pin = self.index_pins.get(b["name"])
            proposed = b.get("available_proposed_at")
            if pin is not None and proposed is not None:
                pin[2] = proposed if pin[2] is None else min(pin[2], proposed)

    def version(self, version: int, activation: HybridTimestamp) -> None:
        self.versions[version] = activation

    def begin(self, tx_id: str, begin_ts: HybridTimestamp, at: float) -> None:
        self.txs[tx_id] = _Tx(begin_ts, at)

    def write(self, tx_id: str, cell: tuple[int, tuple[Any, ...]] | None, row: Any) -> None:
        if cell is not None and tx_id in self.txs:
            self.txs[tx_id].writes[cell] = row

    def end(self, tx_id: str, outcome: str, commit_ts: HybridTimestamp | None,
            at: float) -> None:
        tx = self.txs.get(tx_id)
        if tx is not None:
            tx.outcome, tx.commit_ts, tx.end = outcome, commit_ts, at

    def abandon(self, node: str, at: float) -> None:
        """The node died: the transactions it coordinated and had not ended are
        abandoned (no one runs them any more; recovery decides their outcome), so
        their pins end now, as the pure simulation records a crash."""
        for tx_id, tx in self.txs.items():
            if tx_id.startswith(f"{node}:") and tx.end is None:
                tx.end = at

    def read(self, ts: HybridTimestamp, cell: tuple[int, tuple[Any, ...]], value: Any,
             at: float) -> None:
        self.reads.append(ReadRecord(ts, cell, value, at))

    def poll(self, coordinator: dict[str, Any] | None, earliest_version: int,
             at: float) -> None:
        """What the current coordinator reports, and the snapshot version now."""
        for o in (coordinator or {}).get("outcomes", ()):
            if o["outcome"] == "compacted" and o["version"] is not None:
                when = o["proposed_at"] if o["proposed_at"] is not None else o["at"]
                self.compactions[o["version"]] = min(when, self.compactions.get(
                    o["version"], when))
        if earliest_version > max(self.compactions, default=0):
            self.compactions[earliest_version] = at

    def history(self) -> CatalogHistory:
        versions = tuple(VersionActivated(v, a) for v, a in sorted(self.versions.items()))
        compactions = tuple(CatalogCompacted(v, at) for v, at in sorted(self.compactions.items()))
        txs = tuple(TxRecord(tx_id, t.begin_ts, t.start, t.end,
                             t.outcome,  # type: ignore[arg-type]
                             t.commit_ts, dict(t.writes))
                    for tx_id, t in self.txs.items())
        pins = (*self.pins, *(Pin("index_build", f"index:{name}", v, start, end)
                              for name, (v, start, end) in sorted(self.index_pins.items())),
                *(Pin("rebalance", group, v, start, end)
                  for (group, _), (v, start, end) in sorted(self.rebalance_pins.items())))
        return CatalogHistory(versions, compactions, pins, txs, tuple(self.reads))


__all__ = ["Recorder"]
