"""The compaction planner (Pyroscope's compactor): per (shard, level) block queues and
the jobs they turn into.

Blocks enter a queue in arrival (raft) order: level-0 blocks when they are added, a
job's output block when the job completes. A queue is cut, from its oldest block, into
groups of the level's `max_blocks` (or fewer once `max_bytes` is reached); a complete
group is a job. The last, incomplete group becomes a job too once its oldest block is
older than the level's `max_age` at the planning entry's time, so a shard that went
quiet is still compacted.

Pyroscope decides the age flush when a block is pushed (so a quiet queue waits for the
next push, see its `flushOldest`); here readiness is evaluated at planning time against
the planning entry's timestamp, which is an input like any other, so the result is
still the same on every replica. Jobs are offered level by level
(lowest first, Small Job First), and within a level in the order they became ready (the
raft index of a group's last block), which is the order Pyroscope's batch list has.

Planning is pure and does not change the state: `plan_jobs` yields the jobs a prepare
step may create; only when the prepared plan is applied does `remove` take their source
blocks out of the queues (Pyroscope's NewPlan / UpdatePlan split). Cleanup rides on
jobs as in Pyroscope: a job of a level in [cleanup_min_level, cleanup_max_level] carries
up to `cleanup_batch_size` tombstones whose cleanup delay has passed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from sediment.actors.blocks.jobs import JobPlan, Tombstone
from sediment.actors.blocks.meta import job_name

QueueKey = tuple[int, int]  # (shard, level)


@dataclass(frozen=True, slots=True)
class LevelConfig:
    """A level's job thresholds: blocks per job, seconds before an incomplete group is
    compacted anyway (0: never), input bytes per job (0: no limit; Pyroscope #5410)."""

    max_blocks: int
    max_age: float
    max_bytes: int = 0

    def __post_init__(self) -> None:
        if self.max_blocks < 1 or self.max_age < 0 or self.max_bytes < 0:
            raise ValueError(f"invalid level config {self}")


DEFAULT_LEVELS: tuple[LevelConfig, ...] = (
    LevelConfig(max_blocks=20, max_age=36.0),  # L0: 20 blocks / 36 s
    LevelConfig(max_blocks=10, max_age=720.0),  # L1: 10 blocks / 12 min
    LevelConfig(max_blocks=10, max_age=3 * 3600.0),  # L2: 10 blocks / 3 h
)


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    """Pyroscope's compactor defaults. Blocks of a level >= len(levels) are final: they
    are never queued (their level is the maximum compaction level)."""

    levels: tuple[LevelConfig, ...] = DEFAULT_LEVELS
    cleanup_delay: float = 15 * 60.0
    cleanup_batch_size: int = 2
    cleanup_min_level: int = 0
    cleanup_max_level: int = 1

    def __post_init__(self) -> None:
        if self.cleanup_delay < 0 or self.cleanup_batch_size < 0:
            raise ValueError(f"invalid cleanup config {self}")

    def compacts(self, level: int) -> bool:
        """Whether blocks of `level` are queued for compaction."""
        return 0 <= level < len(self.levels)


@dataclass(frozen=True, slots=True)
class QueuedBlock:
    """A block waiting in a queue: the raft index and time of the command that queued it."""

    id: str
    index: int
    appended_at: float
    size_bytes: int = 0


@dataclass(frozen=True, slots=True)
class PlannerState:
    """(shard, level) -> its blocks in arrival order. Treat as immutable: changes copy."""

    queues: Mapping[QueueKey, tuple[QueuedBlock, ...]] = field(default_factory=dict)

    def queued(self, key: QueueKey) -> tuple[QueuedBlock, ...]:
        return self.queues.get(key, ())

    def size(self) -> int:
        return sum(len(q) for q in self.queues.values())


def enqueue(state: PlannerState, shard: int, level: int, block: QueuedBlock) -> PlannerState:
    """`block` appended to its queue. Duplicate ids are the caller's to prevent (the
    index refuses a block id it already holds)."""
    queues = dict(state.queues)
    queues[(shard, level)] = (*queues.get((shard, level), ()), block)
    return PlannerState(queues)


def remove(state: PlannerState, key: QueueKey, ids: Sequence[str]) -> PlannerState:
    """The queue without `ids` (ids not in it are ignored); an emptied queue is dropped."""
    gone = set(ids)
    kept = tuple(b for b in state.queued(key) if b.id not in gone)
    queues = dict(state.queues)
    if kept:
        queues[key] = kept
    else:
        queues.pop(key, None)
    return PlannerState(queues)


def missing(state: PlannerState, key: QueueKey, ids: Sequence[str]) -> list[str]:
    """The ids that are not in the queue `key`."""
    present = {b.id for b in state.queued(key)}
    return [i for i in ids if i not in present]


def _groups(
    blocks: Sequence[QueuedBlock], cfg: LevelConfig
) -> Iterator[tuple[bool, list[QueuedBlock]]]:
    """(complete, group) in queue order; only the last group may be incomplete."""
    group: list[QueuedBlock] = []
    size = 0
    for block in blocks:
        group.append(block)
        size += block.size_bytes
        if len(group) >= cfg.max_blocks or (cfg.max_bytes and size >= cfg.max_bytes):
            yield True, group
            group, size = [], 0
    if group:
        yield False, group


def ready_groups(state: PlannerState, config: PlannerConfig, level: int,
                 now: float) -> list[tuple[int, list[QueuedBlock]]]:
    """(shard, group) of every job ready at `level`, in the order they became ready."""
    cfg = config.levels[level]
    found: list[tuple[int, int, list[QueuedBlock]]] = []
    for (shard, lvl), blocks in state.queues.items():
        if lvl != level:
            continue
        for complete, group in _groups(blocks, cfg):
            aged = cfg.max_age > 0 and now - group[0].appended_at > cfg.max_age
            if complete or aged:
                found.append((group[-1].index, shard, group))
    found.sort(key=lambda f: (f[0], f[1]))
    return [(shard, group) for _, shard, group in found]


def due_tombstones(tombstones: Sequence[Tombstone], config: PlannerConfig,
                   now: float) -> list[Tombstone]:
    """Tombstones whose cleanup delay has passed at `now`, oldest first."""
    due = [t for t in tombstones if now - t.added_at >= config.cleanup_delay]
    due.sort(key=lambda t: (t.index, t.name))
    return due


def plan_jobs(state: PlannerState, config: PlannerConfig, now: float,
              tombstones: Sequence[Tombstone] = ()) -> Iterator[JobPlan]:
    """The jobs ready at raft time `now`, lowest level first; each due tombstone is handed
    to one job at most. Lazy: a prepare step takes as many as it has room for."""
    cleanup = iter(due_tombstones(tombstones, config, now))
    for level in range(len(config.levels)):
        for shard, group in ready_groups(state, config, level, now):
            ids = tuple(b.id for b in group)
            carried: list[Tombstone] = []
            batch = config.cleanup_batch_size
            if batch and config.cleanup_min_level <= level <= config.cleanup_max_level:
                for tomb in cleanup:
                    carried.append(tomb)
                    if len(carried) >= batch:
                        break
            yield JobPlan(job_name(shard, level, ids), shard, level, ids, tuple(carried))


@dataclass(frozen=True, slots=True)
class QueueStats:
    shard: int
    level: int
    blocks: int
    oldest_appended_at: float
    newest_appended_at: float


def queue_stats(state: PlannerState) -> tuple[QueueStats, ...]:
    """One line per non-empty queue, by (level, shard)."""
    out = [
        QueueStats(shard, level, len(q), min(b.appended_at for b in q),
                   max(b.appended_at for b in q))
        for (shard, level), q in state.queues.items() if q
    ]
    out.sort(key=lambda s: (s.level, s.shard))
    return tuple(out)


__all__ = [
    "DEFAULT_LEVELS",
    "LevelConfig",
    "PlannerConfig",
    "PlannerState",
    "QueueKey",
    "QueueStats",
    "QueuedBlock",
    "due_tombstones",
    "enqueue",
    "missing",
    "plan_jobs",
    "queue_stats",
    "ready_groups",
    "remove",
]
