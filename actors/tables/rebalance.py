"""Moving a partition's replicas (Ignite's distribution-zone rebalance), as a pure step
core per partition.

A rebalance starts when a zone's replica count changes or a node leaves the topology
(`plan`): the partition's stable assignment becomes the rendezvous placement over the
nodes now in the topology. It is a raft membership change done safely:

1. ADDING: every new node joins as a learner (a non-voting member);
2. CATCHING_UP: wait until every learner has caught up with the leader's log;
3. PROMOTING: the learners become voters, in one configuration change;
4. REMOVING: the replicas no longer in the target leave, one at a time;
5. DONE: the target is recorded as the stable assignment.

Each rebalance is pinned to the catalog version it was planned at (the zone definition
it moves replicas for): until it ends, catalog compaction must keep that version, so
`min_required_time` over active rebalances is folded into every node's local minimum
(Ignite's RebalanceMinimumRequiredTimeProvider, IGNITE-23059). A failure (a learner
that cannot be added, a node gone mid-way) cancels the rebalance; the stable assignment
is unchanged and a new plan can start over.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TypeAlias

from sediment.actors.catalog.descriptors import Catalog, ZonePartition
from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.actors.tables import partitioning


class Step(enum.Enum):
    ADDING = "adding"
    CATCHING_UP = "catching_up"
    PROMOTING = "promoting"
    REMOVING = "removing"
    DONE = "done"
    CANCELLED = "cancelled"


ACTIVE_STEPS = (Step.ADDING, Step.CATCHING_UP, Step.PROMOTING, Step.REMOVING)


@dataclass(frozen=True)
class Rebalance:
    group: ZonePartition
    catalog_version: int
    pin: HybridTimestamp  # activation of catalog_version
    stable: frozenset[str]
    target: frozenset[str]
    step: Step = Step.ADDING
    added: frozenset[str] = frozenset()
    caught_up: frozenset[str] = frozenset()
    removed: frozenset[str] = frozenset()
    reason: str = ""

    @property
    def learners(self) -> frozenset[str]:
        return self.target - self.stable

    @property
    def leaving(self) -> frozenset[str]:
        return self.stable - self.target

    @property
    def active(self) -> bool:
        return self.step in ACTIVE_STEPS


# ---- effects and events -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AddLearner:
    group: ZonePartition
    node: str


@dataclass(frozen=True, slots=True)
class AwaitCatchUp:
    group: ZonePartition
    node: str


@dataclass(frozen=True, slots=True)
class PromoteLearners:
    group: ZonePartition
    nodes: frozenset[str]


@dataclass(frozen=True, slots=True)
class RemoveReplica:
    group: ZonePartition
    node: str


@dataclass(frozen=True, slots=True)
class RecordStable:
    """Write the new stable assignment (in the metastore)."""

    group: ZonePartition
    nodes: frozenset[str]
    catalog_version: int


Effect: TypeAlias = AddLearner | AwaitCatchUp | PromoteLearners | RemoveReplica | RecordStable


@dataclass(frozen=True, slots=True)
class LearnerAdded:
    node: str


@dataclass(frozen=True, slots=True)
class LearnerCaughtUp:
    node: str


@dataclass(frozen=True, slots=True)
class Promoted:
    pass


@dataclass(frozen=True, slots=True)
class ReplicaRemoved:
    node: str


@dataclass(frozen=True, slots=True)
class Failed:
    reason: str


Event: TypeAlias = LearnerAdded | LearnerCaughtUp | Promoted | ReplicaRemoved | Failed

# ---- planning -----------------------------------------------------------------------


def plan(catalog: Catalog, stable: Mapping[ZonePartition, frozenset[str]],
         topology: Iterable[str]) -> dict[ZonePartition, frozenset[str]]:
    """For every partition of every zone of `catalog` whose placement over `topology`
    differs from its stable assignment: the target assignment."""
    nodes = sorted(set(topology))
    out: dict[ZonePartition, frozenset[str]] = {}
    for zone in catalog.zones.values():
        for group, target in partitioning.assign(zone, nodes).items():
            if target and stable.get(group) != target:
                out[group] = target
    return out


def start(group: ZonePartition, stable: frozenset[str], target: frozenset[str],
          catalog: Catalog) -> tuple[Rebalance, list[Effect]]:
    if not target:
        raise ValueError(f"a rebalance of {group} to no replicas")
    r = Rebalance(group, catalog.version, catalog.activation, stable, target)
    if not r.learners:
        return _removing(replace(r, step=Step.REMOVING))
    return r, [AddLearner(group, n) for n in sorted(r.learners)]


def step(r: Rebalance, event: Event) -> tuple[Rebalance, list[Effect]]:
    """One event. Events that do not fit the current step are ignored (a late or
    duplicated answer), except a failure, which cancels any active rebalance."""
    if not r.active:
        return r, []
    if isinstance(event, Failed):
        return replace(r, step=Step.CANCELLED, reason=event.reason), []
    if r.step is Step.ADDING and isinstance(event, LearnerAdded) and event.node in r.learners:
        r = replace(r, added=r.added | {event.node})
        if r.added == r.learners:
            return (replace(r, step=Step.CATCHING_UP),
                    [AwaitCatchUp(r.group, n) for n in sorted(r.learners)])
        return r, []
    if (r.step is Step.CATCHING_UP and isinstance(event, LearnerCaughtUp)
            and event.node in r.learners):
        r = replace(r, caught_up=r.caught_up | {event.node})
        if r.caught_up == r.learners:
            return replace(r, step=Step.PROMOTING), [PromoteLearners(r.group, r.learners)]
        return r, []
    if r.step is Step.PROMOTING and isinstance(event, Promoted):
        return _removing(replace(r, step=Step.REMOVING))
    if r.step is Step.REMOVING and isinstance(event, ReplicaRemoved) and event.node in r.leaving:
        return _removing(replace(r, removed=r.removed | {event.node}))
    return r, []


def _removing(r: Rebalance) -> tuple[Rebalance, list[Effect]]:
    left = sorted(r.leaving - r.removed)
    if left:
        return r, [RemoveReplica(r.group, left[0])]
    return replace(r, step=Step.DONE), [RecordStable(r.group, r.target, r.catalog_version)]


def min_required_time(rebalances: Iterable[Rebalance]) -> HybridTimestamp | None:
    """The oldest catalog activation an active rebalance is pinned to (None: none)."""
    return min((r.pin for r in rebalances if r.active), default=None)


__all__ = [
    "ACTIVE_STEPS",
    "AddLearner",
    "AwaitCatchUp",
    "Effect",
    "Event",
    "Failed",
    "LearnerAdded",
    "LearnerCaughtUp",
    "Promoted",
    "PromoteLearners",
    "Rebalance",
    "RecordStable",
    "RemoveReplica",
    "ReplicaRemoved",
    "Step",
    "min_required_time",
    "plan",
    "start",
    "step",
]
