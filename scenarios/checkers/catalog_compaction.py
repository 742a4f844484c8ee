"""Checks of a catalog run (`actors/tables/recorded_history.py`).

`compaction_safety`: no catalog version was compacted away while something needed it
(seed 002's four restrictions):
- a transaction active at the compaction that began under that version (the version
  active at its begin time; it began at or after the version's activation);
- a partition whose unflushed raft log held an entry written under it (a crash would
  replay the entry and need the version);
- an index build pinned to it; a rebalance pinned to it.
Compacting to V removes every version below V; V itself stays (it is the snapshot).

`atomic_visibility`: every read-only read at a timestamp returned exactly what the
committed transactions wrote at or before it: a committed transaction's writes are all
visible from its commit time on, an aborted transaction's never. A transaction whose
outcome the run could not learn ("unknown") may be seen or not, as a whole: a read
that sees one of its writes proves it committed, and then its other writes must be
visible to reads at that time or later too. One whose commit time is unknown too (its
commit call failed) may be seen by any read after its begin time (not checked further).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Any

from sediment.actors.tables.recorded_history import CatalogHistory, Cell, Pin, ReadRecord, TxRecord
from sediment.scenarios.checkers.result import CheckResult, passed, unknown, violated

SAFETY = "catalog_compaction_safety"
VISIBILITY = "catalog_atomic_visibility"
MAX_DETAILS = 20


def compaction_safety(h: CatalogHistory) -> CheckResult:
    if h.compactions and not h.versions:
        return unknown(SAFETY, "compactions recorded but no catalog versions")
    activations = sorted((v.activation.value, v.version) for v in h.versions)
    keys = [a for a, _ in activations]
    pins = list(h.pins)
    for tx in h.txs:
        i = bisect.bisect_right(keys, tx.begin_ts.value) - 1
        if i >= 0:
            pins.append(Pin("transaction", tx.tx_id, activations[i][1], tx.start, tx.end))
    problems: list[str] = []
    for c in sorted(h.compactions, key=lambda c: c.at):
        for pin in pins:
            if pin.version < c.version and pin.start <= c.at and (pin.end is None
                                                                    or c.at < pin.end):
                problems.append(f"compaction to {c.version} at {c.at:.3f} removed version "
                                f"{pin.version} still needed by {pin.kind} {pin.owner} "
                                f"(pinned {pin.start:.3f}..{_end(pin.end)})")
    if problems:
        return violated(SAFETY, f"{len(problems)} catalog version(s) compacted while needed",
                        details=problems[:MAX_DETAILS])
    return passed(SAFETY, f"{len(h.compactions)} compactions, {len(pins)} pins")


def atomic_visibility(h: CatalogHistory) -> CheckResult:
    by_cell: dict[Cell, list[tuple[int, TxRecord]]] = {}
    for tx in h.txs:
        if tx.outcome == "aborted" or tx.commit_ts is None:
            continue
        for cell in tx.writes:
            by_cell.setdefault(cell, []).append((tx.commit_ts.value, tx))
    for chain in by_cell.values():
        chain.sort(key=lambda e: (e[0], e[1].tx_id))
    aborted_values = {(cell, _freeze(v)): tx.tx_id for tx in h.txs if tx.outcome == "aborted"
                      for cell, v in tx.writes.items()}
    # unknown outcome and commit time (its commit call failed): it may have committed
    # at any time after it began, so a read after its begin may see its write
    undated: dict[Cell, list[TxRecord]] = {}
    for tx in h.txs:
        if tx.outcome == "unknown" and tx.commit_ts is None:
            for cell in tx.writes:
                undated.setdefault(cell, []).append(tx)
    proven: dict[str, int] = {}  # unknown txs seen committed: at which read ts
    problems: list[str] = []
    for read in sorted(h.reads, key=lambda r: (r.ts.value, r.at)):
        if any(tx.begin_ts < read.ts and _freeze(tx.writes[read.cell]) == _freeze(read.value)
               for tx in undated.get(read.cell, ())):
            continue
        problem = _check_read(read, by_cell.get(read.cell, []), aborted_values, proven)
        if problem:
            problems.append(problem)
    for read in h.reads:  # an unknown tx seen once must be seen at and after that time
        for ts_value, tx in by_cell.get(read.cell, []):
            seen = proven.get(tx.tx_id)
            if (tx.outcome == "unknown" and seen is not None and ts_value <= read.ts.value
                    and read.ts.value >= seen and not _visible_or_overwritten(
                        read, by_cell[read.cell], tx)):
                problems.append(f"read of {_cell(read.cell)} at {read.ts} misses {tx.tx_id}, "
                                f"seen committed by a read at {seen}")
    if problems:
        return violated(VISIBILITY, f"{len(problems)} read(s) break atomic visibility",
                        details=problems[:MAX_DETAILS])
    return passed(VISIBILITY, f"{len(h.reads)} reads, {len(h.txs)} transactions")


def _check_read(read: ReadRecord, chain: list[tuple[int, TxRecord]],
                aborted: Mapping[tuple[Cell, Any], str], proven: dict[str, int]) -> str:
    """The read may return the newest committed write at or before its ts, or the write
    of any unknown-outcome tx committed after that one (and at or before ts)."""
    visible = [(ts, tx) for ts, tx in chain if ts <= read.ts.value]
    base = next(((ts, tx) for ts, tx in reversed(visible) if tx.outcome == "committed"), None)
    allowed: list[tuple[Any, TxRecord | None]] = [
        (_freeze(base[1].writes[read.cell]) if base else None, base[1] if base else None)]
    allowed += [(_freeze(tx.writes[read.cell]), tx) for ts, tx in visible
                if tx.outcome == "unknown" and (base is None or ts > base[0])]
    got = _freeze(read.value)
    for value, tx in allowed:
        if value == got:
            if tx is not None and tx.outcome == "unknown":
                proven.setdefault(tx.tx_id, read.ts.value)
            return ""
    culprit = aborted.get((read.cell, got))
    if culprit is not None:
        return (f"read of {_cell(read.cell)} at {read.ts} saw {read.value!r}, written by "
                f"aborted {culprit}")
    expected = allowed[0][0]
    who = base[1].tx_id if base else "nothing"
    return (f"read of {_cell(read.cell)} at {read.ts} saw {read.value!r}, expected "
            f"{_thaw(expected)!r} (committed by {who})")


def _visible_or_overwritten(read: ReadRecord, chain: list[tuple[int, TxRecord]],
                            tx: TxRecord) -> bool:
    got = _freeze(read.value)
    later = [t for ts, t in chain if ts <= read.ts.value and (ts, t.tx_id) >= (
        tx.commit_ts.value if tx.commit_ts else 0, tx.tx_id)]
    return any(_freeze(t.writes[read.cell]) == got for t in later)


def _freeze(value: Mapping[str, Any] | None) -> Any:
    return None if value is None else tuple(sorted(value.items()))


def _thaw(value: Any) -> Any:
    return None if value is None else dict(value)


def _cell(cell: Cell) -> str:
    return f"t{cell[0]}{list(cell[1])}"


def _end(end: float | None) -> str:
    return "end" if end is None else f"{end:.3f}"


__all__ = ["SAFETY", "VISIBILITY", "atomic_visibility", "compaction_safety"]
