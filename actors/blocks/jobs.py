"""Compaction jobs: their status, the seed's status state machine and communication
tables, and the values the planner, scheduler, workers and metastore exchange.

The seed (`seeds/003`, Job Status Description) gives a job five phases but stores only
three statuses: LeaseExpired ("abandoned") and Excluded ("faulty") are IN_PROGRESS jobs
whose lease has passed, told apart by the failure counter. `phase()` derives the phase
from the stored state and the current raft entry time; `TRANSITIONS` is the diagram.
`SCHEDULER_TO_WORKER` and `WORKER_TO_SCHEDULER` are the two communication tables; the
scheduler consults them to decide what a status report means, so the tables are the
rules, not documentation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Final, Literal

from sediment.actors.blocks.meta import BlockMeta


class JobStatus(IntEnum):
    """Pyroscope's CompactionJobStatus; the enum order is part of the priority order."""

    UNSPECIFIED = 0  # COMPACTION_STATUS_UNSPECIFIED: unassigned
    IN_PROGRESS = 1  # COMPACTION_STATUS_IN_PROGRESS: leased (or abandoned, or faulty)
    SUCCESS = 2  # COMPACTION_STATUS_SUCCESS: completed, removed from the schedule at once


class JobPhase(Enum):
    """The states of the seed's diagram."""

    UNASSIGNED = "Unassigned"
    IN_PROGRESS = "InProgress"
    SUCCESS = "Success"
    LEASE_EXPIRED = "LeaseExpired"  # abandoned job
    EXCLUDED = "Excluded"  # faulty job: failure threshold exceeded


JobEvent = Literal[
    "create",
    "assign",
    "complete",
    "lease_expires",
    "failure_threshold_exceeded",
    "reassign",
    "remove",
]

# The status each phase is stored as (the diagram's notes).
PHASE_STATUS: Final[Mapping[JobPhase, JobStatus]] = {
    JobPhase.UNASSIGNED: JobStatus.UNSPECIFIED,
    JobPhase.IN_PROGRESS: JobStatus.IN_PROGRESS,
    JobPhase.SUCCESS: JobStatus.SUCCESS,
    JobPhase.LEASE_EXPIRED: JobStatus.IN_PROGRESS,
    JobPhase.EXCLUDED: JobStatus.IN_PROGRESS,
}

# (from, event) -> to; None is the diagram's [*] (no job).
TRANSITIONS: Final[Mapping[tuple[JobPhase | None, JobEvent], JobPhase | None]] = {
    (None, "create"): JobPhase.UNASSIGNED,
    (JobPhase.UNASSIGNED, "assign"): JobPhase.IN_PROGRESS,
    (JobPhase.IN_PROGRESS, "complete"): JobPhase.SUCCESS,
    (JobPhase.IN_PROGRESS, "lease_expires"): JobPhase.LEASE_EXPIRED,
    (JobPhase.LEASE_EXPIRED, "failure_threshold_exceeded"): JobPhase.EXCLUDED,
    (JobPhase.LEASE_EXPIRED, "reassign"): JobPhase.IN_PROGRESS,
    (JobPhase.SUCCESS, "remove"): None,
}


class IllegalTransition(AssertionError):
    """A move the seed's diagram does not have: a scheduler bug, never input."""


def transition(phase: JobPhase | None, event: JobEvent) -> JobPhase | None:
    """The phase after `event`, or IllegalTransition."""
    try:
        return TRANSITIONS[(phase, event)]
    except KeyError:
        raise IllegalTransition(f"no transition {event!r} from {phase}") from None


# What a status means on the wire; None is "no status for this job" (no lease in the
# scheduler's answer). "not allowed" statuses are never sent; received, they are ignored.
WireMeaning = Literal["not_allowed", "lease_refresh", "stop", "completed"]

SCHEDULER_TO_WORKER: Final[Mapping[JobStatus | None, WireMeaning]] = {
    JobStatus.UNSPECIFIED: "not_allowed",
    JobStatus.IN_PROGRESS: "lease_refresh",  # refresh the new lease before its deadline
    JobStatus.SUCCESS: "not_allowed",
    None: "stop",  # no lease refresh from the scheduler: stop processing
}

WORKER_TO_SCHEDULER: Final[Mapping[JobStatus, WireMeaning]] = {
    JobStatus.UNSPECIFIED: "not_allowed",
    JobStatus.IN_PROGRESS: "lease_refresh",  # extend the lease if the worker still owns it
    JobStatus.SUCCESS: "completed",  # remove from the schedule, tell the planner
}


# ---- values ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobState:
    """Pyroscope's CompactionJobState. Times are raft entry timestamps; `token` is the raft
    index of the command that last assigned the job (or created it)."""

    name: str
    level: int
    status: JobStatus = JobStatus.UNSPECIFIED
    added_at: float = 0.0
    token: int = 0
    lease_expires_at: float = 0.0
    failures: int = 0


def is_failed(job: JobState, max_failures: int) -> bool:
    """Over the failure threshold (0 disables it): never reassigned again."""
    return max_failures > 0 and job.failures >= max_failures


def phase(job: JobState, now: float, max_failures: int) -> JobPhase:
    """The diagram state of a stored job at raft time `now`.

    The scheduler takes the "lease expires" edge only when it looks (in the assignment
    walk, seed: "the scheduler may revoke a job"); until then the owner's late refresh or
    completion is still accepted, as Pyroscope accepts it (TestSchedule_UpdateAssign).
    So LeaseExpired and Excluded name what the walk will do with the job: reassign it,
    or leave it parked at the bottom of its level."""
    if job.status == JobStatus.UNSPECIFIED:
        return JobPhase.UNASSIGNED
    if job.status == JobStatus.SUCCESS:
        return JobPhase.SUCCESS
    if now <= job.lease_expires_at:
        return JobPhase.IN_PROGRESS
    return JobPhase.EXCLUDED if is_failed(job, max_failures) else JobPhase.LEASE_EXPIRED


@dataclass(frozen=True, slots=True)
class Tombstone:
    """Source blocks of a completed job, replaced in the index at raft index `index` and
    time `added_at`; their files may be deleted once the cleanup delay has passed."""

    name: str
    shard: int
    blocks: tuple[str, ...]
    added_at: float
    index: int


@dataclass(frozen=True, slots=True)
class JobPlan:
    """Pyroscope's CompactionJobPlan: what to merge, and which tombstoned files the
    worker deletes along the way (cleanup rides on compaction jobs, as in Pyroscope)."""

    name: str
    shard: int
    level: int
    source_blocks: tuple[str, ...]
    tombstones: tuple[Tombstone, ...] = ()


@dataclass(frozen=True, slots=True)
class CompactedBlocks:
    """A job's result: the output block replaces exactly the job's source blocks."""

    source_blocks: tuple[str, ...]
    new_block: BlockMeta


@dataclass(frozen=True, slots=True)
class StatusUpdate:
    """Worker -> scheduler. SUCCESS carries the result; IN_PROGRESS refreshes the lease."""

    name: str
    token: int
    status: JobStatus
    compacted: CompactedBlocks | None = None


@dataclass(frozen=True, slots=True)
class PollRequest:
    """Pyroscope's PollCompactionJobsRequest: the worker's reports and free slots."""

    status_updates: tuple[StatusUpdate, ...] = ()
    capacity: int = 0


@dataclass(frozen=True, slots=True)
class AssignedJob:
    """A job handed to a worker: its state (token, lease) and plan, and the history
    compaction revision the merge applies."""

    state: JobState
    plan: JobPlan
    compaction_revision: int = 0


@dataclass(frozen=True, slots=True)
class NewJob:
    state: JobState
    plan: JobPlan


@dataclass(frozen=True, slots=True)
class CompletedJob:
    """A SUCCESS report accepted at prepare time. `enqueue`: the leader decided the output
    block's level is still compacted (planning config), so replicas need no config."""

    state: JobState
    compacted: CompactedBlocks
    enqueue: bool


@dataclass(frozen=True, slots=True)
class PlanUpdate:
    """Pyroscope's CompactionPlanUpdate plus where it was prepared: the leader's term and
    the index/time of the prepare entry (token and clock of every change in it)."""

    term: int
    prepared_index: int
    prepared_at: float
    new_jobs: tuple[NewJob, ...] = ()
    updated_jobs: tuple[JobState, ...] = ()
    assigned_jobs: tuple[AssignedJob, ...] = ()
    completed_jobs: tuple[CompletedJob, ...] = ()
    evicted_jobs: tuple[JobState, ...] = ()


@dataclass(frozen=True, slots=True)
class Lease:
    """Scheduler -> worker: an IN_PROGRESS status for one job (a new or renewed lease)."""

    name: str
    token: int
    lease_expires_at: float


@dataclass(frozen=True, slots=True)
class PollResponse:
    """What the worker gets once the plan is applied: full plans for new assignments,
    a lease for every job it may keep working on (a reported job without one must stop),
    the names of its completions that were accepted, and the raft time of the plan (so
    the worker can turn lease deadlines into durations without sharing a clock)."""

    now: float
    assigned: tuple[AssignedJob, ...] = ()
    leases: tuple[Lease, ...] = ()
    completed: tuple[str, ...] = ()


def changes_nothing(update: PlanUpdate) -> bool:
    """True if applying `update` would leave the schedule, queues and index as they are
    (a poll with no reports, no job to hand out and none to plan): the service answers it
    without proposing the apply, so an idle worker pool writes half as many entries."""
    return not (update.new_jobs or update.updated_jobs or update.assigned_jobs
                or update.completed_jobs or update.evicted_jobs)


def response_for(update: PlanUpdate) -> PollResponse:
    """The worker's answer for an applied plan (Pyroscope's compaction service)."""
    leases = [Lease(j.state.name, j.state.token, j.state.lease_expires_at)
              for j in update.assigned_jobs]
    leases += [Lease(s.name, s.token, s.lease_expires_at) for s in update.updated_jobs]
    return PollResponse(
        now=update.prepared_at,
        assigned=update.assigned_jobs,
        leases=tuple(leases),
        completed=tuple(c.state.name for c in update.completed_jobs),
    )


__all__ = [
    "PHASE_STATUS",
    "SCHEDULER_TO_WORKER",
    "TRANSITIONS",
    "WORKER_TO_SCHEDULER",
    "AssignedJob",
    "CompactedBlocks",
    "CompletedJob",
    "IllegalTransition",
    "JobEvent",
    "JobPhase",
    "JobPlan",
    "JobState",
    "JobStatus",
    "Lease",
    "NewJob",
    "PlanUpdate",
    "PollRequest",
    "PollResponse",
    "StatusUpdate",
    "Tombstone",
    "WireMeaning",
    "changes_nothing",
    "is_failed",
    "phase",
    "response_for",
    "transition",
]
