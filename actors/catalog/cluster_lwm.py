"""The cluster's one low watermark: advanced by the metastore leader, followed by every
node (a pure step core per node).

Each node's low watermark used to advance on its own clock. Here one value is agreed:
on every update interval the node whose metastore member leads (the compaction
coordinator's node) proposes `now - (data availability + max clock skew)` to the
metastore group (`AdvanceLowWatermark`, applied only if it moves the value forward), and
every node, leader or not, reads the committed value from its metastore replica and
adopts it (`Adopt`: the shell offers it to the node's `low_watermark` core, which still
waits above its local read locks, persists, then announces). The value never moves
backwards (the machine refuses a lower one, this core ignores one), and a restarted
node takes the committed value from the metastore, so it survives the loss of the
node's own file.

One proposal is in flight at a time; a failed or lost one is simply retried at the next
interval (the command is conditional, so a late duplicate is harmless).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypeAlias

from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.actors.catalog.low_watermark import LowWatermarkConfig, candidate_at


@dataclass(frozen=True)
class ClusterLwmState:
    config: LowWatermarkConfig
    committed: HybridTimestamp | None = None  # the highest committed value seen
    in_flight: HybridTimestamp | None = None  # our proposal not answered yet


# ---- events -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tick:
    """The update interval passed; `leading`: this node's metastore member leads."""

    now: HybridTimestamp
    physical_ms: int
    leading: bool


@dataclass(frozen=True, slots=True)
class Committed:
    """The metastore's committed value (a replica read, or a proposal's answer)."""

    lwm: HybridTimestamp | None


@dataclass(frozen=True, slots=True)
class ProposalDone:
    """Our proposal was answered: `committed` is the value the metastore holds after it
    (None: not answered: no leader, a timeout)."""

    committed: HybridTimestamp | None


Event: TypeAlias = Tick | Committed | ProposalDone

# ---- effects ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProposeLwm:
    lwm: HybridTimestamp


@dataclass(frozen=True, slots=True)
class ReadCommitted:
    """Read the committed value from the local metastore replica (then `Committed`)."""


@dataclass(frozen=True, slots=True)
class Adopt:
    lwm: HybridTimestamp


@dataclass(frozen=True, slots=True)
class SetTimer:
    at_physical_ms: int


Effect: TypeAlias = ProposeLwm | ReadCommitted | Adopt | SetTimer


def init(config: LowWatermarkConfig) -> ClusterLwmState:
    return ClusterLwmState(config)


def step(s: ClusterLwmState, event: Event) -> tuple[ClusterLwmState, list[Effect]]:
    if isinstance(event, Tick):
        effects: list[Effect] = [ReadCommitted()]
        candidate = candidate_at(s.config, event.now)
        if event.leading and s.in_flight is None and (
                s.committed is None or candidate > s.committed):
            s = replace(s, in_flight=candidate)
            effects.append(ProposeLwm(candidate))
        effects.append(SetTimer(event.physical_ms + s.config.update_interval_ms))
        return s, effects
    if isinstance(event, ProposalDone):
        s = replace(s, in_flight=None)
    return _seen(s, event.lwm if isinstance(event, Committed) else event.committed)


def _seen(s: ClusterLwmState,
          value: HybridTimestamp | None) -> tuple[ClusterLwmState, list[Effect]]:
    if value is None or (s.committed is not None and value <= s.committed):
        return s, []
    return replace(s, committed=value), [Adopt(value)]


__all__ = ["Adopt", "ClusterLwmState", "Committed", "Effect", "Event", "ProposalDone",
           "ProposeLwm", "ReadCommitted", "SetTimer", "Tick", "init", "step"]
