"""The delete sensor (pure): when a branch deserves a staging compaction.

After lakeFS's `delete_sensor.go`: deletes are counted per (repository, branch) for the
branch's current staging token. The counter restarts when the token changes (tokens
change only when something seals: a commit or a compaction, and either leaves the
deleted entries out of the staging token). When the count reaches `threshold` a
trigger is queued and the counter goes back to 0. The queue is bounded
(`queue_size`, lakeFS's 1000): a trigger that finds it full is dropped, the counter
stays at the threshold, and the next delete tries again; nothing ever blocks the
writer. lakeFS's counting is kept exactly, its quirk too: the first delete seen for a
token only starts the counter, so a threshold of 1 triggers on the second delete.

Optionally (`sealed_threshold`) a branch with that many sealed tokens triggers once
per staging token, the seed's "number of sealed tokens" signal.

Whether the compaction then runs is not the sensor's call: the compactor claims the
branch with a SetIf on its CompactionStartTime (`branch.start_compaction`).

`step(state, event) -> (state, effects)`; the compactor takes triggers one at a time
(`Take`), so the queue is also the back-pressure between the two.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

BranchRef = tuple[str, str]  # (repository, branch)


@dataclass(frozen=True, slots=True)
class SensorConfig:
    threshold: int
    queue_size: int = 1000
    sealed_threshold: int | None = None

    def __post_init__(self) -> None:
        for name in ("threshold", "queue_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int: {v!r}")
        s = self.sealed_threshold
        if s is not None and (isinstance(s, bool) or not isinstance(s, int) or s < 1):
            raise ValueError(f"sealed_threshold must be a positive int or None: {s!r}")


@dataclass(frozen=True, slots=True)
class Trigger:
    repo: str
    branch: str
    token: str
    reason: Literal["deletes", "sealed"]


# ---- events ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CountDelete:
    """A delete was staged on `token`; `sealed` is how many sealed tokens the branch
    had when the writer read it."""

    repo: str
    branch: str
    token: str
    sealed: int = 0


@dataclass(frozen=True, slots=True)
class Take:
    """The compactor asks for the next trigger."""


@dataclass(frozen=True, slots=True)
class Close:
    """Stop counting (idempotent); queued triggers can still be taken."""


Event = CountDelete | Take | Close


# ---- effects --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Queued:
    trigger: Trigger


@dataclass(frozen=True, slots=True)
class Dropped:
    """The queue was full: lakeFS logs and drops; the counter will try again."""

    trigger: Trigger


@dataclass(frozen=True, slots=True)
class Taken:
    trigger: Trigger | None


Effect = Queued | Dropped | Taken


@dataclass(frozen=True, slots=True)
class SensorState:
    config: SensorConfig
    counters: Mapping[BranchRef, tuple[str, int]] = field(default_factory=dict)
    sealed_fired: Mapping[BranchRef, str] = field(default_factory=dict)
    queue: tuple[Trigger, ...] = ()
    closed: bool = False
    queued: int = 0
    dropped: int = 0


def initial(config: SensorConfig) -> SensorState:
    return SensorState(config)


def step(state: SensorState, event: Event) -> tuple[SensorState, list[Effect]]:
    if isinstance(event, Take):
        if not state.queue:
            return state, [Taken(None)]
        return replace(state, queue=state.queue[1:]), [Taken(state.queue[0])]
    if isinstance(event, Close):
        return replace(state, closed=True), []
    return _count(state, event)


def _count(state: SensorState, ev: CountDelete) -> tuple[SensorState, list[Effect]]:
    if state.closed:
        return state, []
    effects: list[Effect] = []
    state = _sealed(state, ev, effects)
    key = (ev.repo, ev.branch)
    counters = dict(state.counters)
    current = counters.get(key)
    if current is None or current[0] != ev.token:
        counters[key] = (ev.token, 1)  # a new token: the count starts over
        return replace(state, counters=counters), effects
    count = min(current[1] + 1, state.config.threshold)
    if count >= state.config.threshold:
        state, ok = _enqueue(state, Trigger(ev.repo, ev.branch, ev.token, "deletes"), effects)
        count = 0 if ok else count
    counters[key] = (ev.token, count)
    return replace(state, counters=counters), effects


def _sealed(state: SensorState, ev: CountDelete, effects: list[Effect]) -> SensorState:
    limit = state.config.sealed_threshold
    key = (ev.repo, ev.branch)
    if limit is None or ev.sealed < limit or state.sealed_fired.get(key) == ev.token:
        return state
    state, ok = _enqueue(state, Trigger(ev.repo, ev.branch, ev.token, "sealed"), effects)
    if not ok:
        return state
    return replace(state, sealed_fired={**state.sealed_fired, key: ev.token})


def _enqueue(state: SensorState, trigger: Trigger,
             effects: list[Effect]) -> tuple[SensorState, bool]:
    if len(state.queue) >= state.config.queue_size:
        effects.append(Dropped(trigger))
        return replace(state, dropped=state.dropped + 1), False
    effects.append(Queued(trigger))
    return replace(state, queue=(*state.queue, trigger), queued=state.queued + 1), True


__all__ = [
    "BranchRef",
    "Close",
    "CountDelete",
    "Dropped",
    "Effect",
    "Event",
    "Queued",
    "SensorConfig",
    "SensorState",
    "Take",
    "Taken",
    "Trigger",
    "initial",
    "step",
]
