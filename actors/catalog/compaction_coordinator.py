"""The catalog compaction coordinator (Ignite's CatalogCompactionRunner), as a pure step
core. Every node runs one; it acts only while its node is the coordinator, which is the
metastore group's leader (the shell feeds `CoordinatorChanged` from raft's leader-change
listener).

An iteration starts when the coordinator changes to this node or the low watermark
changes (and this node is the coordinator and has a low watermark), unless one is
running: one at a time, a trigger meanwhile is skipped (`Skipped`). It runs both of the
seed's processes off one round trip (IGNITE-22951):

- collect: `CollectLocalMinTimes` for this node and `RequestMinTimes` to every other
  node of the logical topology taken at the start, answers within `answer_timeout_ms`
  (Ignite: 10 s). A failed or missing answer ends the iteration (`failed`, `timeout`).
- replicas update: the minimum of the nodes' active-tx minimums goes back to every node
  (`PropagateTxTime`); each stores it in the partitions it leads, published after a
  flush (`actors/tables/min_tx_time.py`). Compaction therefore uses the times an
  earlier iteration published.
- compaction: the minimum of the nodes' minimum required times; the shell reads the
  local catalog and the assignments (`RequestView` -> `ViewReady`), `compaction_rules`
  decides, and on `Compact(v)` the core proposes Ignite's conditional snapshot
  (`ProposeCompaction` -> the catalog machine's `CompactCatalog(v)`).

Every answer names its iteration; anything from another iteration, or a timer of a
phase already left, is ignored, so the shell never cancels timers. `IterationEnded`
reports the outcome (for logs, status and the history checker).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, TypeAlias

from sediment.actors.catalog import compaction_rules
from sediment.actors.catalog.compaction_messages import MinTimesReply
from sediment.actors.catalog.compaction_rules import CompactionView
from sediment.actors.catalog.hlc import HybridTimestamp

ANSWER_TIMEOUT_MS = 10_000

Phase = Literal["collecting", "deciding", "compacting"]
Outcome = Literal[
    "compacted",  # the snapshot command applied and moved the snapshot
    "already_compacted",  # it applied but the snapshot was already there (harmless)
    "failed",  # a node's answer failed, or the snapshot command was refused
    "timeout",  # an answer or the snapshot command did not come in time
    compaction_rules.AbortReason,
]


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    node: str
    answer_timeout_ms: int = ANSWER_TIMEOUT_MS

    def __post_init__(self) -> None:
        if self.answer_timeout_ms < 1:
            raise ValueError(f"answer timeout must be >= 1 ms: {self.answer_timeout_ms}")


@dataclass(frozen=True)
class Iteration:
    id: int
    lwm: HybridTimestamp
    topology: frozenset[str]
    phase: Phase = "collecting"
    replies: Mapping[str, MinTimesReply] = field(default_factory=dict)
    min_required_time: HybridTimestamp | None = None
    version: int | None = None


@dataclass(frozen=True)
class CoordinatorState:
    config: CoordinatorConfig
    coordinator: str | None = None
    lwm: HybridTimestamp | None = None
    topology: frozenset[str] = frozenset()
    seq: int = 0
    iteration: Iteration | None = None

    @property
    def is_coordinator(self) -> bool:
        return self.coordinator == self.config.node


def init(config: CoordinatorConfig) -> CoordinatorState:
    return CoordinatorState(config)


# ---- events -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CoordinatorChanged:
    """The metastore leader changed to `node` (None: no leader known)."""

    node: str | None
    now_ms: int


@dataclass(frozen=True, slots=True)
class LowWatermarkChanged:
    lwm: HybridTimestamp
    now_ms: int


@dataclass(frozen=True, slots=True)
class TopologyChanged:
    nodes: frozenset[str]


@dataclass(frozen=True, slots=True)
class MinTimesReceived:
    reply: MinTimesReply


@dataclass(frozen=True, slots=True)
class MinTimesFailed:
    iteration: int
    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class TimerFired:
    iteration: int
    phase: Phase


@dataclass(frozen=True, slots=True)
class ViewReady:
    iteration: int
    view: CompactionView


@dataclass(frozen=True, slots=True)
class ViewFailed:
    """The shell could not read what the decision needs (assignments unavailable)."""

    iteration: int
    reason: str


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """The catalog machine's answer: saved True/False, or the command failed."""

    iteration: int
    saved: bool
    error: str = ""


Event: TypeAlias = (CoordinatorChanged | LowWatermarkChanged | TopologyChanged
                    | MinTimesReceived | MinTimesFailed | TimerFired | ViewReady
                    | ViewFailed | CompactionResult)

# ---- effects ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CollectLocalMinTimes:
    iteration: int


@dataclass(frozen=True, slots=True)
class RequestMinTimes:
    iteration: int
    node: str


@dataclass(frozen=True, slots=True)
class SetTimer:
    at_ms: int
    iteration: int
    phase: Phase


@dataclass(frozen=True, slots=True)
class PropagateTxTime:
    nodes: frozenset[str]
    ts: HybridTimestamp


@dataclass(frozen=True, slots=True)
class RequestView:
    iteration: int


@dataclass(frozen=True, slots=True)
class ProposeCompaction:
    iteration: int
    version: int


@dataclass(frozen=True, slots=True)
class Skipped:
    """A trigger while an iteration runs (Ignite: "already in progress, skipping")."""

    running: int


@dataclass(frozen=True, slots=True)
class IterationEnded:
    iteration: int
    outcome: Outcome
    detail: str = ""
    version: int | None = None


Effect: TypeAlias = (CollectLocalMinTimes | RequestMinTimes | SetTimer | PropagateTxTime
                     | RequestView | ProposeCompaction | Skipped | IterationEnded)

# ---- the step -----------------------------------------------------------------------


def step(s: CoordinatorState, event: Event,
         now_ms: int = 0) -> tuple[CoordinatorState, list[Effect]]:
    """One event; `now_ms` (the shell's clock) places new timers."""
    if isinstance(event, CoordinatorChanged):
        return _trigger(replace(s, coordinator=event.node), event.now_ms)
    if isinstance(event, LowWatermarkChanged):
        if s.lwm is not None and event.lwm <= s.lwm:
            return s, []
        return _trigger(replace(s, lwm=event.lwm), event.now_ms)
    if isinstance(event, TopologyChanged):
        return replace(s, topology=frozenset(event.nodes)), []
    it = s.iteration
    if it is None:
        return s, []
    if isinstance(event, MinTimesReceived):
        return _on_reply(s, it, event.reply, now_ms)
    if isinstance(event, MinTimesFailed):
        if event.iteration != it.id or it.phase != "collecting":
            return s, []
        return _end(s, it, "failed", f"{event.node}: {event.reason}")
    if isinstance(event, TimerFired):
        if event.iteration != it.id or event.phase != it.phase or it.phase == "deciding":
            return s, []
        if it.phase == "collecting":
            waiting = sorted(it.topology - set(it.replies))
            return _end(s, it, "timeout", f"no answer from {waiting}")
        return _end(s, it, "timeout", "the snapshot command did not answer", it.version)
    if isinstance(event, ViewReady):
        if event.iteration != it.id or it.phase != "deciding":
            return s, []
        return _decide(s, it, event.view, now_ms)
    if isinstance(event, ViewFailed):
        if event.iteration != it.id or it.phase != "deciding":
            return s, []
        return _end(s, it, "failed", event.reason)
    if event.iteration != it.id or it.phase != "compacting":
        return s, []
    if event.error:
        return _end(s, it, "failed", event.error, it.version)
    return _end(s, it, "compacted" if event.saved else "already_compacted", "", it.version)


def _trigger(s: CoordinatorState, now_ms: int) -> tuple[CoordinatorState, list[Effect]]:
    if s.lwm is None or not s.is_coordinator:
        return s, []
    if s.iteration is not None:
        return s, [Skipped(s.iteration.id)]
    topology = s.topology | {s.config.node}
    it = Iteration(s.seq + 1, s.lwm, topology)
    effects: list[Effect] = [CollectLocalMinTimes(it.id)]
    effects += [RequestMinTimes(it.id, n) for n in sorted(topology - {s.config.node})]
    effects.append(SetTimer(now_ms + s.config.answer_timeout_ms, it.id, "collecting"))
    return replace(s, seq=it.id, iteration=it), effects


def _on_reply(s: CoordinatorState, it: Iteration, reply: MinTimesReply,
              now_ms: int) -> tuple[CoordinatorState, list[Effect]]:
    if reply.iteration != it.id or it.phase != "collecting" or reply.node not in it.topology:
        return s, []
    it = replace(it, replies={**it.replies, reply.node: reply})
    if set(it.replies) != it.topology:
        return replace(s, iteration=it), []
    replies = it.replies.values()
    min_required = min(r.min_required_time for r in replies)
    tx_min = min(r.active_tx_min_time for r in replies)
    it = replace(it, phase="deciding", min_required_time=min_required)
    return replace(s, iteration=it), [PropagateTxTime(it.topology, tx_min), RequestView(it.id)]


def _decide(s: CoordinatorState, it: Iteration, view: CompactionView,
            now_ms: int) -> tuple[CoordinatorState, list[Effect]]:
    assert it.min_required_time is not None
    reported = {node: r.partitions for node, r in it.replies.items()}
    decision = compaction_rules.decide(view, it.min_required_time, it.lwm, reported, it.topology)
    if isinstance(decision, compaction_rules.Abort):
        return _end(s, it, decision.reason, decision.detail)
    it = replace(it, phase="compacting", version=decision.version)
    return replace(s, iteration=it), [
        ProposeCompaction(it.id, decision.version),
        SetTimer(now_ms + s.config.answer_timeout_ms, it.id, "compacting")]


def _end(s: CoordinatorState, it: Iteration, outcome: Outcome, detail: str,
         version: int | None = None) -> tuple[CoordinatorState, list[Effect]]:
    return replace(s, iteration=None), [IterationEnded(it.id, outcome, detail, version)]


__all__ = [
    "ANSWER_TIMEOUT_MS",
    "CollectLocalMinTimes",
    "CompactionResult",
    "CoordinatorChanged",
    "CoordinatorConfig",
    "CoordinatorState",
    "Effect",
    "Event",
    "Iteration",
    "IterationEnded",
    "LowWatermarkChanged",
    "MinTimesFailed",
    "MinTimesReceived",
    "Outcome",
    "PropagateTxTime",
    "ProposeCompaction",
    "RequestMinTimes",
    "RequestView",
    "SetTimer",
    "Skipped",
    "TimerFired",
    "TopologyChanged",
    "ViewFailed",
    "ViewReady",
    "init",
    "step",
]
