"""A compaction worker as a pure step core (Pyroscope's compaction worker).

`step(state, event) -> (state, effects)`; the shell turns effects into calls (a poll to
the metastore leader, a merge in a process pool or Spark, a cancellation) and feeds the
outcomes back as events. Time is the worker's own clock, given in each event and used
only for durations: the scheduler's deadlines are raft entry times, so the worker turns
a lease into "refresh within half of what is left" using the plan time the response
carries (`PollResponse.now`), never comparing the two clocks.

One poll at a time. A poll sends a status for every job held (SUCCESS with the result
once the merge is done, IN_PROGRESS otherwise) and the free capacity (slots minus jobs
still running). It is sent when the poll interval has passed, when a job's lease is
half used, or as soon as a result is ready. The answer:
- a reported job with a lease keeps running (its refresh time moves on);
- a reported job without one is lost (reassigned, completed by someone else, or its
  report refused): the shell must stop it (`Cancel`) and drop its result;
- a SUCCESS report is done either way (`Finished` says whether it was accepted);
- new assignments start (`Execute`).
A failed merge (a missing or corrupt source block) is not reported: the seed has no
failure status. The job is dropped (`Abandoned`, for logs and metrics) and its lease
runs out, which the scheduler counts as a failure when it reassigns the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from sediment.actors.blocks.jobs import (
    SCHEDULER_TO_WORKER,
    AssignedJob,
    CompactedBlocks,
    JobStatus,
    PollRequest,
    PollResponse,
    StatusUpdate,
)


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Pyroscope: JobConcurrency slots (default NumCPU), a poll every 5 s."""

    capacity: int = 2
    poll_interval: float = 5.0

    def __post_init__(self) -> None:
        if self.capacity < 1 or self.poll_interval <= 0:
            raise ValueError(f"invalid worker config {self}")


@dataclass(frozen=True, slots=True)
class HeldJob:
    """A job this worker owns as far as it knows: `refresh_at` is on the worker's clock."""

    job: AssignedJob
    token: int
    refresh_at: float
    result: CompactedBlocks | None = None


@dataclass(frozen=True, slots=True)
class WorkerState:
    config: WorkerConfig
    jobs: Mapping[str, HeldJob] = field(default_factory=dict)
    polling: tuple[StatusUpdate, ...] | None = None  # the reports of the poll in flight
    next_poll_at: float = 0.0


def initial(config: WorkerConfig) -> WorkerState:
    return WorkerState(config)


# ---- events ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tick:
    now: float


@dataclass(frozen=True, slots=True)
class PollReply:
    now: float
    response: PollResponse


@dataclass(frozen=True, slots=True)
class PollFailed:
    """The poll got no answer (timeout, leader change, plan refused): nothing is known."""

    now: float


@dataclass(frozen=True, slots=True)
class JobDone:
    name: str
    token: int
    result: CompactedBlocks


@dataclass(frozen=True, slots=True)
class JobFailed:
    name: str
    token: int
    reason: str


Event = Tick | PollReply | PollFailed | JobDone | JobFailed

# ---- effects ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendPoll:
    request: PollRequest


@dataclass(frozen=True, slots=True)
class Execute:
    job: AssignedJob


@dataclass(frozen=True, slots=True)
class Cancel:
    """Stop working on the job: its lease is gone (SCHEDULER_TO_WORKER: no status)."""

    name: str
    token: int


@dataclass(frozen=True, slots=True)
class Finished:
    name: str
    token: int
    accepted: bool


@dataclass(frozen=True, slots=True)
class Abandoned:
    """A merge failed; the job is left to expire (the failure is visible here)."""

    name: str
    token: int
    reason: str


Effect = SendPoll | Execute | Cancel | Finished | Abandoned

# ---- step ------------------------------------------------------------------------------


def step(state: WorkerState, event: Event) -> tuple[WorkerState, list[Effect]]:
    match event:
        case Tick(now):
            return _tick(state, now)
        case PollReply(now, response):
            return _reply(state, now, response)
        case PollFailed(now):
            if state.polling is None:
                return state, []
            return replace(state, polling=None,
                           next_poll_at=now + state.config.poll_interval), []
        case JobDone(name, token, result):
            held = state.jobs.get(name)
            if held is None or held.token != token or held.result is not None:
                return state, []  # a run of a job this worker no longer holds
            return _with_job(state, name, replace(held, result=result)), []
        case JobFailed(name, token, reason):
            held = state.jobs.get(name)
            if held is None or held.token != token:
                return state, []
            jobs = dict(state.jobs)
            del jobs[name]
            return replace(state, jobs=jobs), [Abandoned(name, token, reason)]
    raise TypeError(f"unknown worker event {type(event).__name__}")


def _with_job(state: WorkerState, name: str, held: HeldJob) -> WorkerState:
    jobs = dict(state.jobs)
    jobs[name] = held
    return replace(state, jobs=jobs)


def running(state: WorkerState) -> int:
    """Jobs still merging (a finished job's slot is free)."""
    return sum(1 for h in state.jobs.values() if h.result is None)


def _tick(state: WorkerState, now: float) -> tuple[WorkerState, list[Effect]]:
    if state.polling is not None:
        return state, []
    held = [state.jobs[name] for name in sorted(state.jobs)]
    due = now >= state.next_poll_at or any(
        h.result is not None or now >= h.refresh_at for h in held
    )
    if not due:
        return state, []
    updates = tuple(
        StatusUpdate(h.job.plan.name, h.token, JobStatus.SUCCESS, h.result)
        if h.result is not None
        else StatusUpdate(h.job.plan.name, h.token, JobStatus.IN_PROGRESS)
        for h in held
    )
    capacity = max(0, state.config.capacity - running(state))
    return replace(state, polling=updates), [SendPoll(PollRequest(updates, capacity))]


def _refresh_at(now: float, response: PollResponse, lease_expires_at: float) -> float:
    return now + max(0.0, lease_expires_at - response.now) / 2


def _reply(state: WorkerState, now: float,
           response: PollResponse) -> tuple[WorkerState, list[Effect]]:
    if state.polling is None:
        return state, []  # an answer to a poll given up on
    leases = {lease.name: lease for lease in response.leases}
    completed = set(response.completed)
    jobs = dict(state.jobs)
    effects: list[Effect] = []
    for report in state.polling:
        held = jobs.get(report.name)
        if held is None or held.token != report.token:
            continue  # abandoned meanwhile
        lease = leases.get(report.name)
        owned = lease is not None and lease.token == held.token
        answer = SCHEDULER_TO_WORKER[JobStatus.IN_PROGRESS if owned else None]
        if report.status == JobStatus.SUCCESS:
            del jobs[report.name]
            effects.append(Finished(report.name, report.token, report.name in completed))
        elif answer == "lease_refresh" and lease is not None:
            jobs[report.name] = replace(
                held, refresh_at=_refresh_at(now, response, lease.lease_expires_at)
            )
        else:
            del jobs[report.name]
            effects.append(Cancel(report.name, held.token))
    for assigned in response.assigned:
        name = assigned.plan.name
        old = jobs.get(name)
        if old is not None:  # an attempt of ours was revoked and the job handed back
            effects.append(Cancel(name, old.token))
        jobs[name] = HeldJob(assigned, assigned.state.token,
                             _refresh_at(now, response, assigned.state.lease_expires_at))
        effects.append(Execute(assigned))
    new = replace(state, jobs=jobs, polling=None, next_poll_at=now + state.config.poll_interval)
    return new, effects


__all__ = [
    "Abandoned",
    "Cancel",
    "Effect",
    "Event",
    "Execute",
    "Finished",
    "HeldJob",
    "JobDone",
    "JobFailed",
    "PollFailed",
    "PollReply",
    "SendPoll",
    "Tick",
    "WorkerConfig",
    "WorkerState",
    "initial",
    "running",
    "step",
]
