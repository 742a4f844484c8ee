"""A node's active read-write transactions by the catalog version they began under
(Ignite's IndexNodeFinishedRwTransactionsChecker, which is also its
ActiveLocalTxMinimumRequiredTimeProvider), pure.

- `minimum_required_time`: the activation time of the oldest catalog version an active
  RW transaction began under; with none active, the node's current time (no later
  transaction can begin earlier). This is what the node reports to the compaction
  coordinator as its active-tx minimum (IGNITE-22975: the version's activation, not the
  begin time itself, so the whole version stays).
- `finished_before(version)`: no active RW transaction began under a version older than
  `version` (an index build waits for this before it starts building).

Read-only transactions do not count: they read at a timestamp the low watermark
protects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sediment.actors.catalog.hlc import HybridTimestamp


@dataclass(frozen=True)
class ActiveTxs:
    """tx id -> (begin time, catalog version at begin). Treat as immutable."""

    txs: Mapping[str, tuple[HybridTimestamp, int]] = field(default_factory=dict)


def begin(a: ActiveTxs, tx_id: str, begin_ts: HybridTimestamp, version: int) -> ActiveTxs:
    if tx_id in a.txs:
        raise ValueError(f"transaction {tx_id} began twice")
    return ActiveTxs({**a.txs, tx_id: (begin_ts, version)})


def end(a: ActiveTxs, tx_id: str) -> ActiveTxs:
    """Idempotent: ending an unknown transaction (its begin was never counted, or it
    ended already) changes nothing."""
    if tx_id not in a.txs:
        return a
    return ActiveTxs({t: v for t, v in a.txs.items() if t != tx_id})


def min_version(a: ActiveTxs) -> int | None:
    return min((v for _, v in a.txs.values()), default=None)


def min_begin(a: ActiveTxs) -> HybridTimestamp | None:
    return min((ts for ts, _ in a.txs.values()), default=None)


def minimum_required_time(a: ActiveTxs, now: HybridTimestamp,
                          activation_of: Callable[[int], HybridTimestamp]) -> HybridTimestamp:
    """The activation of the oldest version in use, or `now` when none is."""
    version = min_version(a)
    return now if version is None else activation_of(version)


def finished_before(a: ActiveTxs, version: int) -> bool:
    return all(v >= version for _, v in a.txs.values())


__all__ = ["ActiveTxs", "begin", "end", "finished_before", "min_begin", "min_version",
           "minimum_required_time"]
