"""The compaction job scheduler (Pyroscope's scheduler): Small Job First with leases
and fencing tokens from the raft log.

State: every job's `JobState` and `JobPlan`. A prepare step opens a `Schedule` at a raft
entry (its index is the fencing token of every assignment it makes, its timestamp the
clock of every lease); the schedule never changes the state, it collects updates that
the metastore turns into a `PlanUpdate`. `apply_update` is what every replica runs once
the plan is committed.

Priority (per level, lowest level first): status in enum order (unassigned before in
progress), then failures, then lease expiry, then name. Assignment walks a level's
queue: an unassigned job is assigned; an in-progress job over the failure threshold
means only parked jobs are left at this level (they sort last), so the walk moves to the
next level; an abandoned job (lease passed at the entry time) is reassigned with a new
token and failures + 1; a job with a live lease is skipped. Jobs touched by this step's
status reports are not considered (Pyroscope's `nextAssignment`).

Status reports follow the seed's worker-to-scheduler table: only the owner (token >=
the job's token) of an in-progress job may refresh its lease or complete it; anything
else gets no lease, which tells the worker to stop. A completion must carry an output
block that replaces exactly the job's source blocks. Pyroscope also accepts reports for
a job that is still unassigned; the seed's diagram has no Unassigned -> Success move and
no owner for an unassigned job, so here such reports are refused.

Queue limit (Pyroscope #3892): a new job is declined when the schedule is full, and only
parked jobs (failure threshold exceeded and lease passed: the diagram's Excluded) are
evicted, from the top of each level's remaining queue, as in Pyroscope's `EvictJob`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from sediment.actors.blocks.jobs import (
    WORKER_TO_SCHEDULER,
    AssignedJob,
    CompactedBlocks,
    JobPhase,
    JobPlan,
    JobState,
    JobStatus,
    NewJob,
    PlanUpdate,
    StatusUpdate,
    is_failed,
    phase,
)
from sediment.actors.blocks.meta import check_meta, compacted_block_id

BlockExists = Callable[[int, str], bool]  # (shard, block id) -> in the index


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Pyroscope's flags: lease 15 s, 3 failures, 10,000 jobs (0 disables the last two).
    `max_capacity` bounds the slots one poll may ask for (a bounded prepare step)."""

    lease_duration: float = 15.0
    max_failures: int = 3
    max_queue_size: int = 10_000
    max_capacity: int = 256

    def __post_init__(self) -> None:
        if self.lease_duration <= 0 or self.max_failures < 0 or self.max_queue_size < 0:
            raise ValueError(f"invalid scheduler config {self}")
        if self.max_capacity < 1:
            raise ValueError("max_capacity must be positive")


@dataclass(frozen=True, slots=True)
class SchedulerState:
    """name -> state and name -> plan of every job in the schedule (same keys)."""

    jobs: Mapping[str, JobState] = field(default_factory=dict)
    plans: Mapping[str, JobPlan] = field(default_factory=dict)


def priority(job: JobState) -> tuple[int, int, float, str]:
    """Within a level: status (enum order), failures, lease expiry, name."""
    return (int(job.status), job.failures, job.lease_expires_at, job.name)


def level_queues(state: SchedulerState) -> dict[int, list[JobState]]:
    """level -> its jobs in priority order."""
    levels: dict[int, list[JobState]] = {}
    for job in state.jobs.values():
        levels.setdefault(job.level, []).append(job)
    for queue in levels.values():
        queue.sort(key=priority)
    return levels


def check_result(plan: JobPlan, token: int, compacted: CompactedBlocks | None,
                 block_exists: BlockExists) -> str | None:
    """Why `compacted` is not an acceptable result of `plan` run under `token`, or None.
    The output id must be the one the token names, so no two attempts share a file."""
    if not isinstance(compacted, CompactedBlocks):
        return "a completion must carry the compacted blocks"
    if tuple(compacted.source_blocks) != plan.source_blocks:
        return "the result's source blocks are not the job's"
    block = compacted.new_block
    problem = check_meta(block)
    if problem is not None:
        return problem
    if block.shard != plan.shard or block.level != plan.level + 1:
        return f"output block {block.id} is not shard {plan.shard} level {plan.level + 1}"
    if block.id != compacted_block_id(plan.shard, plan.level, plan.source_blocks, token):
        return f"output block id {block.id} is not the one token {token} names"
    if block_exists(block.shard, block.id):
        return f"output block id {block.id} is already in the index"
    return None


class Schedule:
    """One prepare step's view of the schedule (Pyroscope's `schedule`).

    Local and mutable, never shared: it copies the level queues lazily, records what it
    would change in `updates`, and leaves the `SchedulerState` alone. Every decision
    depends only on (state, config, token, now, the calls made), so running the same
    step twice gives the same plan."""

    def __init__(self, state: SchedulerState, config: SchedulerConfig, token: int, now: float,
                 block_exists: BlockExists = lambda _shard, _id: False) -> None:
        self.state = state
        self.config = config
        self.token = token
        self.now = now
        self.block_exists = block_exists
        self.updates: dict[str, JobState] = {}
        self.results: dict[str, CompactedBlocks] = {}
        self.assigned: list[AssignedJob] = []
        self.added: list[NewJob] = []
        self.evicted: list[JobState] = []
        by_level = level_queues(state)
        self._levels = sorted(by_level)
        # Reversed priority order: the best job of a level is at the end (pop / append).
        self._queues = {level: list(reversed(q)) for level, q in by_level.items()}

    # ---- status reports --------------------------------------------------------------

    def update_job(self, status: StatusUpdate) -> JobState | None:
        """The job's new state after a worker's report, or None: no lease, stop working
        (job gone, stale token, not in progress, status not allowed, bad result)."""
        job = self.state.jobs.get(status.name)
        if job is None or job.token > status.token or job.status != JobStatus.IN_PROGRESS:
            return None
        meaning = WORKER_TO_SCHEDULER.get(status.status)
        if meaning == "lease_refresh":
            new = replace(job, lease_expires_at=self._lease())
            self.results.pop(job.name, None)
        elif meaning == "completed":
            plan = self.state.plans[job.name]
            problem = check_result(plan, status.token, status.compacted, self.block_exists)
            if problem is not None:
                return None
            assert status.compacted is not None
            new = replace(job, status=JobStatus.SUCCESS)
            self.results[job.name] = status.compacted
        else:
            return None
        self.updates[job.name] = new
        return new

    # ---- assignment ------------------------------------------------------------------

    def assign_job(self) -> AssignedJob | None:
        """The next job to hand to the polling worker, or None."""
        job = self._next_assignment()
        if job is None:
            return None
        self.updates[job.name] = job
        assigned = AssignedJob(job, self.state.plans[job.name])
        self.assigned.append(assigned)
        return assigned

    def _next_assignment(self) -> JobState | None:
        for level in self._levels:
            queue = self._queues[level]
            while queue:
                job = queue.pop()
                if job.name in self.updates:
                    continue  # reported on in this step: owned or completed already
                if job.status == JobStatus.UNSPECIFIED:
                    return self._assign(job, failures=job.failures)
                if job.status != JobStatus.IN_PROGRESS:
                    continue
                if is_failed(job, self.config.max_failures):
                    queue.append(job)  # only parked jobs below: next level
                    break
                if self.now > job.lease_expires_at:  # abandoned: revoke and reassign
                    return self._assign(job, failures=job.failures + 1)
        return None

    def _assign(self, job: JobState, failures: int) -> JobState:
        return replace(job, status=JobStatus.IN_PROGRESS, lease_expires_at=self._lease(),
                       token=self.token, failures=failures)

    def _lease(self) -> float:
        return self.now + self.config.lease_duration

    # ---- queue limit -----------------------------------------------------------------

    def _size(self) -> int:
        return len(self.state.jobs) - len(self.evicted) + len(self.added)

    def evict_job(self, room: int = 0) -> JobState | None:
        """A parked job to drop while the schedule (plus `room` jobs about to be added)
        is over the limit, or None. Looks at the top of each level's remaining queue."""
        limit = self.config.max_queue_size
        if limit == 0 or self._size() + room <= limit:
            return None
        for level in self._levels:
            queue = self._queues[level]
            while queue and queue[-1].name in self.updates:
                queue.pop()  # reported on in this step: not a candidate
            if not queue:
                continue
            job = queue[-1]
            if phase(job, self.now, self.config.max_failures) == JobPhase.EXCLUDED:
                queue.pop()
                self.evicted.append(job)
                return job
        return None

    def add_job(self, plan: JobPlan) -> JobState | None:
        """The state of a newly planned job, or None when the schedule is full."""
        limit = self.config.max_queue_size
        if limit and self._size() >= limit:
            return None
        if plan.name in self.state.jobs or any(n.plan.name == plan.name for n in self.added):
            return None
        state = JobState(plan.name, plan.level, JobStatus.UNSPECIFIED, added_at=self.now,
                         token=self.token)
        self.added.append(NewJob(state, plan))
        return state


def apply_update(state: SchedulerState, update: PlanUpdate) -> SchedulerState:
    """Every replica's part of a committed plan (Pyroscope's UpdateSchedule): evicted
    jobs go, new jobs come, renewed and assigned states are stored, completed jobs go."""
    jobs = dict(state.jobs)
    plans = dict(state.plans)
    for job in update.evicted_jobs:
        jobs.pop(job.name, None)
        plans.pop(job.name, None)
    for new in update.new_jobs:
        jobs[new.state.name] = new.state
        plans[new.plan.name] = new.plan
    for updated in update.updated_jobs:
        jobs[updated.name] = updated
    for assigned in update.assigned_jobs:
        jobs[assigned.state.name] = assigned.state
    for completed in update.completed_jobs:
        jobs.pop(completed.state.name, None)
        plans.pop(completed.state.name, None)
    return SchedulerState(jobs, plans)


__all__ = [
    "BlockExists",
    "Schedule",
    "SchedulerConfig",
    "SchedulerState",
    "apply_update",
    "check_result",
    "level_queues",
    "priority",
]
