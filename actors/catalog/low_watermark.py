"""The low watermark (Ignite's LowWatermarkImpl), as a pure step core per node.

A cluster timestamp below which old row versions are garbage and no read is allowed.
Every `update_interval_ms` the node proposes now - (data availability + max clock skew)
as the new watermark; it only grows. A read-only transaction locks its read timestamp
(`TryLock`: refused below the watermark) and the watermark waits above no lock: a
candidate is held back while a lock below it exists and set once they are released.

Setting it persists it first (`Persist`, Ignite writes the vault before notifying) and
then announces it (`Changed`): partitions garbage-collect, and on the metastore leader
it triggers catalog compaction.

Recovery (IGNITE-27346/27477): a node stopped for a while may find its stored watermark
below the earliest catalog version's activation (the catalog was compacted while it
was down). The watermark is raised to that activation on start, so nothing asks for a
catalog version that no longer exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TypeAlias

from sediment.actors.catalog.hlc import HybridTimestamp

DEFAULT_DATA_AVAILABILITY_MS = 600_000  # Ignite: 10 min
DEFAULT_UPDATE_INTERVAL_MS = 300_000  # Ignite: 5 min
DEFAULT_MAX_CLOCK_SKEW_MS = 500  # Ignite's default maxClockSkew


@dataclass(frozen=True, slots=True)
class LowWatermarkConfig:
    data_availability_ms: int = DEFAULT_DATA_AVAILABILITY_MS
    update_interval_ms: int = DEFAULT_UPDATE_INTERVAL_MS
    max_clock_skew_ms: int = DEFAULT_MAX_CLOCK_SKEW_MS

    def __post_init__(self) -> None:
        if self.data_availability_ms < 1 or self.update_interval_ms < 1:
            raise ValueError(f"low watermark intervals must be >= 1 ms: {self}")
        if self.max_clock_skew_ms < 0:
            raise ValueError(f"max clock skew must be >= 0 ms: {self}")


@dataclass(frozen=True)
class LowWatermarkState:
    config: LowWatermarkConfig
    lwm: HybridTimestamp | None = None
    candidate: HybridTimestamp | None = None  # waiting for locks below it
    locks: Mapping[str, HybridTimestamp] = field(default_factory=dict)


# ---- events -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Start:
    """Node start: the stored watermark (None: never set) and the activation of the
    earliest catalog version the node can read."""

    physical_ms: int
    stored: HybridTimestamp | None
    earliest_catalog: HybridTimestamp


@dataclass(frozen=True, slots=True)
class Tick:
    """The update interval passed; `now` is the node's hybrid time."""

    now: HybridTimestamp
    physical_ms: int


@dataclass(frozen=True, slots=True)
class Propose:
    """Another source (the cluster's agreed value, a test) proposes a watermark."""

    lwm: HybridTimestamp


@dataclass(frozen=True, slots=True)
class TryLock:
    lock_id: str
    ts: HybridTimestamp


@dataclass(frozen=True, slots=True)
class Unlock:
    lock_id: str


Event: TypeAlias = Start | Tick | Propose | TryLock | Unlock

# ---- effects ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Persist:
    lwm: HybridTimestamp


@dataclass(frozen=True, slots=True)
class Changed:
    lwm: HybridTimestamp


@dataclass(frozen=True, slots=True)
class LockResult:
    lock_id: str
    granted: bool


@dataclass(frozen=True, slots=True)
class SetTimer:
    at_physical_ms: int


Effect: TypeAlias = Persist | Changed | LockResult | SetTimer


def init(config: LowWatermarkConfig) -> LowWatermarkState:
    return LowWatermarkState(config)


def candidate_at(config: LowWatermarkConfig, now: HybridTimestamp) -> HybridTimestamp:
    return now.subtract_physical(config.data_availability_ms + config.max_clock_skew_ms)


def step(s: LowWatermarkState, event: Event) -> tuple[LowWatermarkState, list[Effect]]:
    if isinstance(event, Start):
        timer = SetTimer(event.physical_ms + s.config.update_interval_ms)
        stored = event.stored
        if stored is None:
            return s, [timer]
        if stored < event.earliest_catalog:
            raised = event.earliest_catalog
            return replace(s, lwm=raised), [Persist(raised), Changed(raised), timer]
        return replace(s, lwm=stored), [timer]
    if isinstance(event, Tick):
        s, effects = _offer(s, candidate_at(s.config, event.now))
        return s, [*effects, SetTimer(event.physical_ms + s.config.update_interval_ms)]
    if isinstance(event, Propose):
        return _offer(s, event.lwm)
    if isinstance(event, TryLock):
        if s.lwm is not None and event.ts < s.lwm:
            return s, [LockResult(event.lock_id, False)]
        return (replace(s, locks={**s.locks, event.lock_id: event.ts}),
                [LockResult(event.lock_id, True)])
    if event.lock_id not in s.locks:
        return s, []
    s = replace(s, locks={k: v for k, v in s.locks.items() if k != event.lock_id})
    return _try_set(s)


def _offer(s: LowWatermarkState,
           proposed: HybridTimestamp) -> tuple[LowWatermarkState, list[Effect]]:
    highest = max((t for t in (s.lwm, s.candidate) if t is not None), default=None)
    if highest is not None and proposed <= highest:
        return s, []
    return _try_set(replace(s, candidate=proposed))


def _try_set(s: LowWatermarkState) -> tuple[LowWatermarkState, list[Effect]]:
    c = s.candidate
    if c is None or any(ts < c for ts in s.locks.values()):
        return s, []
    return replace(s, lwm=c, candidate=None), [Persist(c), Changed(c)]


__all__ = [
    "Changed",
    "Effect",
    "Event",
    "LockResult",
    "LowWatermarkConfig",
    "LowWatermarkState",
    "Persist",
    "Propose",
    "SetTimer",
    "Start",
    "Tick",
    "TryLock",
    "Unlock",
    "candidate_at",
    "init",
    "step",
]
