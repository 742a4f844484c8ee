"""The metastore's compaction service: the combined state of the index, the planner and
the scheduler, and the commands that change it.

Every function here is pure: (state, command fields, the raft entry's index/term/
timestamp) -> new state and result, or a `MetastoreError` raised before anything is
built (the machine turns it into a result). The config matters only where the leader
decides (prepare); what replicas apply is explicit in the plan, so replicas with another
planning config, or another version of the algorithm, still reach the same state.

Pyroscope's two-step protocol:
1. `prepare_plan` runs at a raft entry on the leader (Pyroscope's read-only
   GET_COMPACTION_PLAN_UPDATE, still through the log so it sees every earlier entry):
   status reports first (a revoked job frees a slot), then assignments up to the
   worker's capacity, then new jobs, evicting parked jobs while the schedule is full.
   The entry's index is the fencing token of every assignment and the entry's
   timestamp the clock of every lease.
2. `apply_plan` runs the plan on every replica (UPDATE_COMPACTION_PLAN{term, plan}):
   refused unless the entry's term is the term the plan was prepared in (a leader
   change in between) and unless the plan was prepared after the last applied plan (a
   second poll prepared concurrently would assign from a state the first one changed;
   Pyroscope avoids that with a mutex in the leader, here the log itself refuses it).

`add_blocks` is the ingestion command: level-0 metadata enters the index and the
compaction queue in one command, with the flusher's cursor (`flushed_through`), so a
flush and the cursor that records it commit together.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from sediment.actors.blocks import index as ix
from sediment.actors.blocks import planner as pl
from sediment.actors.blocks import scheduler as sc
from sediment.actors.blocks.errors import (
    ErrCompactionRevision,
    ErrInvalidBlock,
    ErrInvalidPlan,
    ErrMalformedCommand,
    ErrStalePlan,
    ErrTermMismatch,
)
from sediment.actors.blocks.jobs import (
    AssignedJob,
    CompletedJob,
    JobState,
    JobStatus,
    PlanUpdate,
    PollRequest,
    PollResponse,
    StatusUpdate,
    Tombstone,
    response_for,
)
from sediment.actors.blocks.meta import BlockMeta, Level0Name, check_meta, parse_block_id


@dataclass(frozen=True, slots=True)
class MetastoreConfig:
    """Planning and scheduling config, plus bounds on one command's size."""

    planner: pl.PlannerConfig = field(default_factory=pl.PlannerConfig)
    scheduler: sc.SchedulerConfig = field(default_factory=sc.SchedulerConfig)
    max_blocks_per_add: int = 1024
    max_status_updates: int = 1024
    max_orphan_candidates: int = 1024  # files one FindOrphans may ask about


@dataclass(frozen=True, slots=True)
class MetastoreState:
    """The replicated state. `compaction_revision`: the history compaction the merges
    apply (forward only); `last_plan_index`: the entry of the last applied plan;
    `flushed_through`: the flusher's durable cursor, every committed revision at or
    below it is in the index (forward only; the KV never compacts above it)."""

    index: ix.IndexState = field(default_factory=ix.IndexState)
    planner: pl.PlannerState = field(default_factory=pl.PlannerState)
    scheduler: sc.SchedulerState = field(default_factory=sc.SchedulerState)
    compaction_revision: int = 0
    last_plan_index: int = 0
    flushed_through: int = 0


@dataclass(frozen=True, slots=True)
class AddBlocksResult:
    """`added`: the ids made live; `already`: ids of identical blocks already live (a
    retried flush), left as they were; both in the command's order. `through`: the
    flushed-through revision after the command (0 when no flusher ever set it)."""

    added: tuple[str, ...]
    already: tuple[str, ...] = ()
    through: int = 0


# ---- ingestion ---------------------------------------------------------------


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def add_blocks(state: MetastoreState, config: MetastoreConfig, blocks: Any, index: int,
               now: float, through: Any = 0) -> tuple[MetastoreState, AddBlocksResult]:
    """Level-0 blocks into the index and the (shard, 0) queues, and the flushed-through
    cursor raised to `through` (never lowered), all or nothing. Without blocks the
    command only moves the cursor (a flusher whose rows were all flushed already)."""
    if not _int(through) or through < 0:
        raise ErrMalformedCommand(f"through must be a non-negative int, got {through!r}")
    least = 0 if through > 0 else 1
    if not isinstance(blocks, tuple) or not least <= len(blocks) <= config.max_blocks_per_add:
        raise ErrMalformedCommand(
            f"add_blocks takes a tuple of {least}..{config.max_blocks_per_add} BlockMeta"
        )
    for block in blocks:
        problem = check_meta(block)
        if problem is not None:
            raise ErrInvalidBlock(problem)
        if block.level != 0 or block.row_count == 0:
            raise ErrInvalidBlock(f"block {block.id}: only non-empty level-0 blocks are added")
        _check_level0_name(block)
    if len({b.id for b in blocks}) != len(blocks):
        raise ErrInvalidBlock("duplicate block ids in one command")
    fresh: list[BlockMeta] = []
    already: set[str] = set()
    watermark = dict(state.index.flushed)
    for block in sorted(blocks, key=lambda b: (b.shard, b.min_revision, b.id)):
        live = state.index.get(block.shard, block.id)
        if live == block:
            already.add(block.id)
            continue
        if live is not None:
            raise ErrInvalidBlock(f"block id {block.id} is in use by other metadata")
        if block.min_revision <= watermark.get(block.shard, 0):
            raise ErrInvalidBlock(
                f"block {block.id}: shard {block.shard} is flushed up to revision "
                f"{watermark.get(block.shard, 0)}"
            )
        watermark[block.shard] = block.max_revision
        fresh.append(block)
    queues = state.planner
    for block in fresh:
        queued = pl.QueuedBlock(block.id, index, now, block.size_bytes)
        queues = pl.enqueue(queues, block.shard, 0, queued)
    cursor = max(state.flushed_through, through)
    new = replace(state, index=ix.add_blocks(state.index, fresh), planner=queues,
                  flushed_through=cursor)
    added = {b.id for b in fresh}
    return new, AddBlocksResult(tuple(b.id for b in blocks if b.id in added),
                                tuple(b.id for b in blocks if b.id in already), cursor)


def _check_level0_name(block: BlockMeta) -> None:
    """A level-0 block may not take a name reserved for job outputs, nor a level-0 name
    other than its own: garbage collection reads a file's fate from its name
    (`orphans.py`), so the name must say what `add_blocks` checks."""
    name = parse_block_id(block.id)
    if name is None:
        return
    own = Level0Name(block.shard, block.min_revision, block.max_revision)
    if name != own:
        raise ErrInvalidBlock(f"block id {block.id} is not the name of shard {block.shard} "
                              f"revisions {block.min_revision}..{block.max_revision}")


def set_compaction_revision(state: MetastoreState, revision: Any) -> MetastoreState:
    """Move the history compaction revision forward (merges apply it from then on)."""
    if not _int(revision) or revision <= state.compaction_revision:
        raise ErrCompactionRevision(
            f"compaction revision {revision!r} is not above {state.compaction_revision}"
        )
    return replace(state, compaction_revision=revision)


# ---- prepare (leader) --------------------------------------------------------


def _check_request(request: Any, config: MetastoreConfig) -> PollRequest:
    if not isinstance(request, PollRequest):
        raise ErrMalformedCommand(f"expected a PollRequest, got {type(request).__name__}")
    if not _int(request.capacity) or request.capacity < 0:
        raise ErrMalformedCommand(f"capacity must be a non-negative int: {request.capacity!r}")
    updates = request.status_updates
    if not isinstance(updates, tuple) or len(updates) > config.max_status_updates:
        raise ErrMalformedCommand(f"status_updates: a tuple of <= {config.max_status_updates}")
    for u in updates:
        if not isinstance(u, StatusUpdate) or not isinstance(u.name, str) or not _int(u.token):
            raise ErrMalformedCommand("a status update needs a str name and an int token")
        if u.status not in tuple(JobStatus):
            raise ErrMalformedCommand(f"unknown job status {u.status!r}")
    return request


def prepare_plan(state: MetastoreState, config: MetastoreConfig, request: Any, index: int,
                 term: int, now: float) -> PlanUpdate:
    """The plan update for one worker poll, prepared at entry (index, term, now). Does not
    change `state`; the same inputs always give the same plan."""
    request = _check_request(request, config)
    schedule = sc.Schedule(state.scheduler, config.scheduler, token=index, now=now,
                           block_exists=lambda shard, bid: state.index.get(shard, bid) is not None)
    updated: dict[str, JobState] = {}
    completed: dict[str, CompletedJob] = {}
    revoked = 0
    for status in request.status_updates:
        new = schedule.update_job(status)
        if new is None:
            revoked += 1  # no lease: the worker stops, and its slot is free
        elif new.status == JobStatus.SUCCESS:
            updated.pop(new.name, None)
            done = schedule.results[new.name]
            enqueue = config.planner.compacts(done.new_block.level)
            completed[new.name] = CompletedJob(new, done, enqueue)
        else:
            completed.pop(new.name, None)
            updated[new.name] = new

    capacity = min(request.capacity + revoked, config.scheduler.max_capacity)
    for _ in range(capacity):
        if schedule.assign_job() is None:
            break

    tombstones = list(state.index.tombstones.values())
    jobs = pl.plan_jobs(state.planner, config.planner, now, tombstones)
    for _ in range(capacity):
        schedule.evict_job()
        plan = next(jobs, None)
        if plan is None:
            break
        schedule.evict_job(room=1)
        if schedule.add_job(plan) is None:
            break  # the schedule is full of jobs that may not be evicted

    assigned = tuple(AssignedJob(a.state, a.plan, state.compaction_revision)
                     for a in schedule.assigned)
    return PlanUpdate(
        term=term,
        prepared_index=index,
        prepared_at=now,
        new_jobs=tuple(schedule.added),
        updated_jobs=tuple(updated.values()),
        assigned_jobs=assigned,
        completed_jobs=tuple(completed.values()),
        evicted_jobs=tuple(schedule.evicted),
    )


# ---- apply (every replica) ---------------------------------------------------


def _check_plan(state: MetastoreState, update: PlanUpdate, index: int) -> None:
    """ErrInvalidPlan unless every change in `update` fits `state`. A plan prepared from
    this state always fits; this guards the replicas against a faulty proposer."""
    jobs, plans = state.scheduler.jobs, state.scheduler.plans
    if not update.prepared_index < index:
        raise ErrInvalidPlan(f"plan prepared at {update.prepared_index}, applied at {index}")
    named = [j.name for j in update.evicted_jobs] + [j.name for j in update.updated_jobs]
    named += [a.state.name for a in update.assigned_jobs]
    named += [c.state.name for c in update.completed_jobs]
    if len(set(named)) != len(named):
        raise ErrInvalidPlan("a job appears twice in one plan")
    for name in named:
        if name not in jobs:
            raise ErrInvalidPlan(f"job {name} is not in the schedule")
    renewed = [(j, JobStatus.IN_PROGRESS) for j in update.updated_jobs]
    renewed += [(c.state, JobStatus.SUCCESS) for c in update.completed_jobs]
    for job, status in renewed:
        if job.token != jobs[job.name].token or job.status != status:
            raise ErrInvalidPlan(f"job {job.name}: the report does not fit the schedule")
    for a in update.assigned_jobs:
        if (a.state.token != update.prepared_index or a.plan != plans[a.state.name]
                or a.state.status != JobStatus.IN_PROGRESS):
            raise ErrInvalidPlan(f"job {a.state.name}: assignment does not fit the schedule")
    queued: set[str] = set()
    for new in update.new_jobs:
        plan = new.plan
        fresh = JobState(plan.name, plan.level, JobStatus.UNSPECIFIED, added_at=update.prepared_at,
                         token=update.prepared_index)
        if new.state != fresh or plan.name in jobs:
            raise ErrInvalidPlan(f"new job {plan.name} clashes with the schedule")
        if pl.missing(state.planner, (plan.shard, plan.level), plan.source_blocks):
            raise ErrInvalidPlan(f"new job {plan.name}: source blocks are not queued")
        if queued.intersection(plan.source_blocks) or not plan.source_blocks:
            raise ErrInvalidPlan(f"new job {plan.name}: source blocks taken twice")
        queued.update(plan.source_blocks)
        for tomb in plan.tombstones:
            if state.index.tombstones.get(tomb.name) != tomb:
                raise ErrInvalidPlan(f"new job {plan.name}: unknown tombstone {tomb.name}")
    outputs: set[str] = set()
    for c in update.completed_jobs:
        plan = plans[c.state.name]
        problem = sc.check_result(
            plan, c.state.token, c.compacted,
            lambda shard, bid: state.index.get(shard, bid) is not None or bid in outputs,
        )
        if problem is not None:
            raise ErrInvalidPlan(f"job {plan.name}: {problem}")
        if any(state.index.get(plan.shard, b) is None for b in plan.source_blocks):
            raise ErrInvalidPlan(f"job {plan.name}: a source block is not live")
        outputs.add(c.compacted.new_block.id)


def apply_plan(state: MetastoreState, update: Any, index: int, term: int,
               now: float) -> tuple[MetastoreState, PollResponse]:
    """Apply a committed plan at entry (index, term, now) (Pyroscope's
    UpdateCompactionPlan): queues, schedule, tombstones handed out, then each completed
    job: tombstone its sources, queue its output, replace the sources in the index."""
    if not isinstance(update, PlanUpdate):
        raise ErrMalformedCommand(f"expected a PlanUpdate, got {type(update).__name__}")
    if update.term != term:
        raise ErrTermMismatch(update.term, term)
    if update.prepared_index <= state.last_plan_index:
        raise ErrStalePlan(
            f"plan prepared at {update.prepared_index}, last plan applied at "
            f"{state.last_plan_index}"
        )
    try:
        _check_plan(state, update, index)
    except (AttributeError, TypeError) as err:
        raise ErrInvalidPlan(f"malformed plan: {type(err).__name__}") from err

    queues = state.planner
    handed_out: list[str] = []
    for new in update.new_jobs:
        plan = new.plan
        queues = pl.remove(queues, (plan.shard, plan.level), plan.source_blocks)
        handed_out += [t.name for t in plan.tombstones]
    schedule = sc.apply_update(state.scheduler, update)
    blocks = ix.delete_tombstones(state.index, handed_out)
    for c in update.completed_jobs:
        plan = state.scheduler.plans[c.state.name]
        output = c.compacted.new_block
        blocks = ix.add_tombstone(
            blocks, Tombstone(plan.name, plan.shard, plan.source_blocks, now, index)
        )
        if c.enqueue:
            queued = pl.QueuedBlock(output.id, index, now, output.size_bytes)
            queues = pl.enqueue(queues, output.shard, output.level, queued)
        blocks = ix.replace_blocks(blocks, plan.shard, plan.source_blocks, output)
    new_state = replace(state, index=blocks, planner=queues, scheduler=schedule,
                        last_plan_index=index)
    return new_state, response_for(update)


__all__ = [
    "AddBlocksResult",
    "MetastoreConfig",
    "MetastoreState",
    "add_blocks",
    "apply_plan",
    "prepare_plan",
    "set_compaction_revision",
]
