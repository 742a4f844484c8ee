"""The metastore as a raft-hosted state machine: the block index and the compaction
service (planner + scheduler) in one replicated state, so every replica applies the same
plans (`actors/log/shell/hosted.py` describes the hosting contract).

Commands (`entry.command`):
- `AddBlocks(blocks, through)`: level-0 block metadata into the index and the
  compaction queue, and the flushed-through cursor raised to `through`, in one command;
  answers `AddBlocksResult`. A retried or replayed one changes nothing.
- `ReadFlushCursor()`: read-only, answers the `FlushCursor` at this entry (a flusher
  taking over reads where to resume through the log, so it sees every flush before it).
- `PreparePlan(request)`: a worker's poll (status reports + capacity), planned at this
  entry; read-only, answers the `PlanUpdate` the leader then proposes.
- `ApplyPlan(update)`: the plan prepared in the same term; answers the worker's
  `PollResponse`.
- `SetCompactionRevision(revision)`: the history compaction the merges apply, forward
  only; answers the revision.
- `FindOrphans(files)`: read-only, answers the `OrphanVerdicts` on (shard, block id)
  pairs at this entry (`orphans.py`: the leader's garbage collection deletes only what
  a committed entry calls garbage).
None is the leader's no-op. Every refusal is a `MetastoreError` returned as the result,
never raised, so a bad command changes nothing and cannot crash a replica; an unexpected
exception while executing a command is answered as `ErrMalformedCommand` (the type name
only, which is the same on every replica).

The state lives in memory; `snapshot()` is self-contained (the live index list is
empty) and byte-identical on replicas that applied the same entries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sediment.actors.blocks import codec
from sediment.actors.blocks import index as ix
from sediment.actors.blocks import orphans as orph
from sediment.actors.blocks import planner as pl
from sediment.actors.blocks import service as svc
from sediment.actors.blocks.errors import (
    ErrEntryNotAfterApplied,
    ErrMalformedCommand,
    ErrUnknownBlock,
    ErrUnknownCommand,
    MetastoreError,
)
from sediment.actors.blocks.jobs import JobState, PlanUpdate, PollRequest, Tombstone
from sediment.actors.blocks.meta import BlockMeta
from sediment.actors.blocks.service import MetastoreConfig, MetastoreState
from sediment.actors.log.raft.types import Entry

# ---- commands ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AddBlocks:
    """`through`: every committed KV revision at or below it is in the index once this
    command applies (0: the cursor does not move)."""

    blocks: tuple[BlockMeta, ...]
    through: int = 0


@dataclass(frozen=True, slots=True)
class ReadFlushCursor:
    pass


@dataclass(frozen=True, slots=True)
class PreparePlan:
    request: PollRequest


@dataclass(frozen=True, slots=True)
class ApplyPlan:
    update: PlanUpdate


@dataclass(frozen=True, slots=True)
class SetCompactionRevision:
    revision: int


@dataclass(frozen=True, slots=True)
class FindOrphans:
    """Block store entries by (shard directory, block id), judged at this entry."""

    files: tuple[orph.Candidate, ...]


Command = (AddBlocks | ReadFlushCursor | PreparePlan | ApplyPlan | SetCompactionRevision
           | FindOrphans)

# ---- queries -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BlocksQuery:
    """Live blocks of a shard (None: every shard) that may hold rows in [min_revision,
    max_revision] (of `key`, when given): what a history read consults."""

    shard: int | None = None
    min_revision: int = 0
    max_revision: int | None = None
    key: bytes | None = None


@dataclass(frozen=True, slots=True)
class BlocksById:
    """The metadata of a job's source blocks (a worker's "get block metadata")."""

    shard: int
    ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class JobsQuery:
    pass


@dataclass(frozen=True, slots=True)
class QueuesQuery:
    pass


@dataclass(frozen=True, slots=True)
class TombstonesQuery:
    pass


@dataclass(frozen=True, slots=True)
class FlushCursorQuery:
    """The flush cursor of this replica's applied state: a lower bound of the committed
    one, which is all the KV's compaction hold needs."""


@dataclass(frozen=True, slots=True)
class OrphansQuery:
    """`FindOrphans` on this replica's applied state: candidates only, never grounds to
    delete (the state may lag behind the log)."""

    files: tuple[orph.Candidate, ...]


@dataclass(frozen=True, slots=True)
class OrphanVerdicts:
    """One verdict per file asked about, in order; `entry`: the raft index judged at
    (None for a local query)."""

    entry: int | None
    verdicts: tuple[orph.Verdict, ...]


@dataclass(frozen=True, slots=True)
class FlushCursor:
    """`through`: every committed revision at or below it is in the index; `flushed`:
    (shard, highest revision flushed into it), by shard, for shards flushed past it."""

    through: int
    flushed: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class BlocksResult:
    blocks: tuple[BlockMeta, ...]
    compaction_revision: int


@dataclass(frozen=True, slots=True)
class JobInfo:
    state: JobState
    shard: int
    source_blocks: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class JobsResult:
    jobs: tuple[JobInfo, ...]


@dataclass(frozen=True, slots=True)
class QueuesResult:
    queues: tuple[pl.QueueStats, ...]


@dataclass(frozen=True, slots=True)
class TombstonesResult:
    tombstones: tuple[Tombstone, ...]


# ---- the pure machine --------------------------------------------------------


def initial() -> MetastoreState:
    return MetastoreState()


def _execute(
    state: MetastoreState, config: MetastoreConfig, entry: Entry
) -> tuple[MetastoreState, Any]:
    cmd = entry.command
    if cmd is None:
        return state, None
    if isinstance(cmd, AddBlocks):
        return svc.add_blocks(state, config, cmd.blocks, entry.index, entry.timestamp,
                              cmd.through)
    if isinstance(cmd, ReadFlushCursor):
        return state, flush_cursor(state)
    if isinstance(cmd, PreparePlan):
        plan = svc.prepare_plan(state, config, cmd.request, entry.index, entry.term,
                                entry.timestamp)
        return state, plan
    if isinstance(cmd, ApplyPlan):
        return svc.apply_plan(state, cmd.update, entry.index, entry.term, entry.timestamp)
    if isinstance(cmd, SetCompactionRevision):
        new = svc.set_compaction_revision(state, cmd.revision)
        return new, new.compaction_revision
    if isinstance(cmd, FindOrphans):
        return state, find_orphans(state, config, cmd.files, entry.index)
    raise ErrUnknownCommand(f"unknown command {type(cmd).__name__}")


def apply(
    state: MetastoreState, config: MetastoreConfig, entry: Entry
) -> tuple[MetastoreState, Any]:
    """(new state, result) for one committed entry; a refusal leaves `state` unchanged
    and is the result."""
    try:
        return _execute(state, config, entry)
    except MetastoreError as err:
        return state, err
    except MemoryError:
        raise
    except Exception as err:  # a malformed command: the same on every replica
        name = type(entry.command).__name__
        return state, ErrMalformedCommand(f"malformed {name}: {type(err).__name__}")


def find_orphans(state: MetastoreState, config: MetastoreConfig, files: Any,
                 entry: int | None) -> OrphanVerdicts:
    """The garbage verdicts on `files` at `entry`; ErrMalformedCommand for anything but
    a tuple of at most `max_orphan_candidates` (shard, block id) pairs."""
    limit = config.max_orphan_candidates
    if not isinstance(files, tuple) or len(files) > limit or not all(
            isinstance(f, tuple) and len(f) == 2 and isinstance(f[0], int)
            and not isinstance(f[0], bool) and f[0] >= 0 and isinstance(f[1], str)
            for f in files):
        raise ErrMalformedCommand(f"files: a tuple of <= {limit} (shard, block id) pairs")
    found = orph.verdicts(state.index, state.scheduler.jobs, entry, files)
    return OrphanVerdicts(entry, found)


def flush_cursor(state: MetastoreState) -> FlushCursor:
    return FlushCursor(state.flushed_through, tuple(sorted(state.index.flushed.items())))


def query(state: MetastoreState, request: Any,
          config: MetastoreConfig | None = None) -> Any:
    """A local read of the state; errors are returned, not raised."""
    try:
        return _query(state, request, config if config is not None else MetastoreConfig())
    except MetastoreError as err:
        return err
    except MemoryError:
        raise
    except Exception as err:
        return ErrMalformedCommand(f"malformed {type(request).__name__}: {type(err).__name__}")


def _query(state: MetastoreState, request: Any, config: MetastoreConfig) -> Any:
    if isinstance(request, OrphansQuery):
        return find_orphans(state, config, request.files, None)
    if isinstance(request, BlocksQuery):
        blocks = ix.live_blocks(state.index, request.shard, request.min_revision,
                                request.max_revision, request.key)
        return BlocksResult(blocks, state.compaction_revision)
    if isinstance(request, FlushCursorQuery):
        return flush_cursor(state)
    if isinstance(request, BlocksById):
        found = []
        for block_id in request.ids:
            block = state.index.get(request.shard, block_id)
            if block is None:
                raise ErrUnknownBlock(f"block {block_id} of shard {request.shard} is not live")
            found.append(block)
        return BlocksResult(tuple(found), state.compaction_revision)
    if isinstance(request, JobsQuery):
        plans = state.scheduler.plans
        jobs = tuple(
            JobInfo(job, plans[name].shard, plans[name].source_blocks)
            for name, job in sorted(state.scheduler.jobs.items())
        )
        return JobsResult(jobs)
    if isinstance(request, QueuesQuery):
        return QueuesResult(pl.queue_stats(state.planner))
    if isinstance(request, TombstonesQuery):
        tombs = sorted(state.index.tombstones.values(), key=lambda t: (t.index, t.name))
        return TombstonesResult(tuple(tombs))
    raise ErrUnknownCommand(f"unknown query {type(request).__name__}")


def status(state: MetastoreState) -> dict[str, Any]:
    return {
        "blocks": state.index.block_count(),
        "queued_blocks": state.planner.size(),
        "jobs": len(state.scheduler.jobs),
        "tombstones": len(state.index.tombstones),
        "compaction_revision": state.compaction_revision,
        "last_plan_index": state.last_plan_index,
        "flushed_through": state.flushed_through,
    }


# ---- the hosted machine ------------------------------------------------------


class MetastoreMachine:
    """One replica's metastore (a `HostedMachine`): the pure machine plus `applied`."""

    def __init__(self, group_dir: str = "", config: MetastoreConfig | None = None) -> None:
        self.group_dir = group_dir
        self.config = config if config is not None else MetastoreConfig()
        self.state = initial()
        self.applied = 0

    def apply(self, entry: Entry) -> Any:
        if entry.index <= self.applied:
            return ErrEntryNotAfterApplied(f"entry {entry.index} is not above {self.applied}")
        self.state, result = apply(self.state, self.config, entry)
        self.applied = entry.index
        return result

    def snapshot(self) -> tuple[bytes, list[int]]:
        return codec.encode(self.state, self.applied), []

    def restore(self, data: bytes, index: int,
                read_entry: Callable[[int], Entry | None] | Sequence[Entry] = ()) -> None:
        """Replace the state by the snapshot at `index` (it needs no live entries)."""
        state, applied = codec.decode(data)
        if applied < index:
            raise codec.RestoreError(f"snapshot at {applied} cannot stand for index {index}")
        self.state, self.applied = state, applied

    def query(self, request: Any) -> Any:
        return query(self.state, request, self.config)

    def status(self) -> dict[str, Any]:
        return {**status(self.state), "applied": self.applied}

    def background(self) -> bool:
        return False

    def has_background(self) -> bool:
        return False

    def close(self) -> None:
        pass


def metastore(group_dir: str, config: MetastoreConfig | None = None) -> MetastoreMachine:
    """The machine factory; picklable, and so is functools.partial(metastore, config=...)."""
    return MetastoreMachine(group_dir, config)


__all__ = [
    "AddBlocks",
    "ApplyPlan",
    "BlocksById",
    "BlocksQuery",
    "BlocksResult",
    "Command",
    "FlushCursor",
    "FlushCursorQuery",
    "FindOrphans",
    "JobInfo",
    "JobsQuery",
    "JobsResult",
    "MetastoreConfig",
    "MetastoreMachine",
    "MetastoreState",
    "OrphanVerdicts",
    "OrphansQuery",
    "PreparePlan",
    "QueuesQuery",
    "QueuesResult",
    "ReadFlushCursor",
    "SetCompactionRevision",
    "TombstonesQuery",
    "TombstonesResult",
    "apply",
    "find_orphans",
    "flush_cursor",
    "initial",
    "metastore",
    "query",
    "status",
]
