"""The compaction planner and scheduler (sediment.actors.blocks.planner, .scheduler,
.service, .worker), in the style of Pyroscope's schedule_test.go and plan_test.go.

Every planning step runs twice and must give the same answer (Pyroscope's
AssertIdempotent). Then a seeded simulation: a metastore log fed by flushes and by
workers that crash, pause, fail merges and report late, with leader changes and
concurrent polls; after every entry each level-0 block must be in exactly one live
block, and replicas fed the same log must reach the same state.
"""

from __future__ import annotations

import functools
import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import pytest

from sediment.actors.blocks import metastore as ms
from sediment.actors.blocks import planner as pl
from sediment.actors.blocks import service as svc
from sediment.actors.blocks import worker as wk
from sediment.actors.blocks.errors import (
    ErrInvalidPlan,
    ErrMalformedCommand,
    ErrStalePlan,
    ErrTermMismatch,
)
from sediment.actors.blocks.jobs import (
    PHASE_STATUS,
    SCHEDULER_TO_WORKER,
    TRANSITIONS,
    WORKER_TO_SCHEDULER,
    AssignedJob,
    CompactedBlocks,
    IllegalTransition,
    JobPhase,
    JobPlan,
    JobState,
    JobStatus,
    Lease,
    PlanUpdate,
    PollRequest,
    PollResponse,
    StatusUpdate,
    Tombstone,
    phase,
    transition,
)
from sediment.actors.blocks.meta import BlockMeta, compacted_block_id, level0_block_id
from sediment.actors.blocks.planner import LevelConfig, PlannerConfig, PlannerState, QueuedBlock
from sediment.actors.blocks.scheduler import (
    Schedule,
    SchedulerConfig,
    SchedulerState,
    level_queues,
)
from sediment.actors.log.raft.types import Entry

T = TypeVar("T")
UN, IP, OK = JobStatus.UNSPECIFIED, JobStatus.IN_PROGRESS, JobStatus.SUCCESS
LEASE = 10.0
CONFIG = SchedulerConfig(lease_duration=LEASE, max_failures=3, max_queue_size=0)


def twice(run: Callable[[], T]) -> T:
    """Pyroscope's AssertIdempotent: the step from the same state gives the same result."""
    first = run()
    assert run() == first
    return first


def sources(name: str) -> tuple[str, ...]:
    return (f"{name}-a", f"{name}-b")


def jobs_state(*jobs: JobState) -> SchedulerState:
    plans = {j.name: JobPlan(j.name, 0, j.level, sources(j.name)) for j in jobs}
    return SchedulerState({j.name: j for j in jobs}, plans)


def result_for(plan: JobPlan, token: int, **changes: Any) -> CompactedBlocks:
    block = BlockMeta(compacted_block_id(plan.shard, plan.level, plan.source_blocks, token),
                      plan.shard, plan.level + 1, 1, 9, b"a", b"z", 5, 100, 1.0)
    return CompactedBlocks(plan.source_blocks, replace(block, **changes))


# ---- the seed's tables ------------------------------------------------------------------


def test_the_status_state_machine_is_the_seeds_diagram() -> None:
    assert dict(TRANSITIONS) == {
        (None, "create"): JobPhase.UNASSIGNED,
        (JobPhase.UNASSIGNED, "assign"): JobPhase.IN_PROGRESS,
        (JobPhase.IN_PROGRESS, "complete"): JobPhase.SUCCESS,
        (JobPhase.IN_PROGRESS, "lease_expires"): JobPhase.LEASE_EXPIRED,
        (JobPhase.LEASE_EXPIRED, "failure_threshold_exceeded"): JobPhase.EXCLUDED,
        (JobPhase.LEASE_EXPIRED, "reassign"): JobPhase.IN_PROGRESS,
        (JobPhase.SUCCESS, "remove"): None,
    }
    assert dict(PHASE_STATUS) == {
        JobPhase.UNASSIGNED: UN, JobPhase.IN_PROGRESS: IP, JobPhase.SUCCESS: OK,
        JobPhase.LEASE_EXPIRED: IP, JobPhase.EXCLUDED: IP,
    }
    with pytest.raises(IllegalTransition):
        transition(JobPhase.UNASSIGNED, "complete")
    with pytest.raises(IllegalTransition):
        transition(JobPhase.EXCLUDED, "reassign")


def test_the_communication_tables_are_the_seeds() -> None:
    assert dict(SCHEDULER_TO_WORKER) == {
        UN: "not_allowed", IP: "lease_refresh", OK: "not_allowed", None: "stop"}
    assert dict(WORKER_TO_SCHEDULER) == {UN: "not_allowed", IP: "lease_refresh", OK: "completed"}


@pytest.mark.parametrize("job,now,expected", [
    (JobState("j", 0, UN), 100.0, JobPhase.UNASSIGNED),
    (JobState("j", 0, IP, lease_expires_at=10.0), 10.0, JobPhase.IN_PROGRESS),
    (JobState("j", 0, IP, lease_expires_at=10.0, failures=3), 5.0, JobPhase.IN_PROGRESS),
    (JobState("j", 0, IP, lease_expires_at=10.0), 10.5, JobPhase.LEASE_EXPIRED),
    (JobState("j", 0, IP, lease_expires_at=10.0, failures=2), 11.0, JobPhase.LEASE_EXPIRED),
    (JobState("j", 0, IP, lease_expires_at=10.0, failures=3), 11.0, JobPhase.EXCLUDED),
    (JobState("j", 0, OK), 0.0, JobPhase.SUCCESS),
])
def test_phase_of_a_stored_job(job: JobState, now: float, expected: JobPhase) -> None:
    assert phase(job, now, 3) == expected
    assert PHASE_STATUS[expected] == job.status


# ---- status reports (TestSchedule_Update_*) ---------------------------------------------


LEASED = jobs_state(JobState("1", 0, IP, token=1, lease_expires_at=0.0))


@pytest.mark.parametrize("update,expected", [
    pytest.param(StatusUpdate("1", 1, IP), JobState("1", 0, IP, token=1, lease_expires_at=LEASE),
                 id="owner renews"),
    pytest.param(StatusUpdate("1", 2, IP), JobState("1", 0, IP, token=1, lease_expires_at=LEASE),
                 id="a newer token also owns"),
    pytest.param(StatusUpdate("1", 0, IP), None, id="stale token is fenced"),
    pytest.param(StatusUpdate("0", 1, IP), None, id="job gone (completed elsewhere)"),
    pytest.param(StatusUpdate("1", 1, UN), None, id="UNSPECIFIED is not allowed"),
    pytest.param(StatusUpdate("1", 1, 7), None, id="unknown status"),  # type: ignore[arg-type]
])
def test_lease_renewal(update: StatusUpdate, expected: JobState | None) -> None:
    got = twice(lambda: Schedule(LEASED, CONFIG, token=1, now=0.0).update_job(update))
    assert got == expected


def test_lease_renewal_uses_the_entry_time_even_after_expiry() -> None:
    """An update after the deadline but before any reassignment still renews, and the
    token does not change (TestSchedule_UpdateAssign)."""
    state = jobs_state(*(JobState(n, 0, IP, token=1, lease_expires_at=0.0) for n in "123"))

    def run() -> tuple[list[JobState | None], Any]:
        s = Schedule(state, CONFIG, token=2, now=20.0)
        renewed = [s.update_job(StatusUpdate(n, 1, IP)) for n in "123"]
        return renewed, s.assign_job()

    renewed, assigned = twice(run)
    assert renewed == [JobState(n, 0, IP, token=1, lease_expires_at=30.0) for n in "123"]
    assert assigned is None


COMPLETED = jobs_state(JobState("1", 1, IP, token=1))
PLAN1 = COMPLETED.plans["1"]


@pytest.mark.parametrize("update,accepted", [
    pytest.param(StatusUpdate("1", 1, OK, result_for(PLAN1, 1)), True, id="owner completes"),
    pytest.param(StatusUpdate("1", 0, OK, result_for(PLAN1, 0)), False, id="not the owner"),
    pytest.param(StatusUpdate("1", 1, OK, None), False, id="no result"),
    pytest.param(StatusUpdate("1", 1, OK, CompactedBlocks(("x",), result_for(PLAN1, 1).new_block)),
                 False, id="other source blocks"),
    pytest.param(StatusUpdate("1", 1, OK, result_for(PLAN1, 1, level=1)), False,
                 id="output at the source level"),
    pytest.param(StatusUpdate("1", 1, OK, result_for(PLAN1, 1, shard=3)), False,
                 id="output in another shard"),
    pytest.param(StatusUpdate("1", 1, OK, result_for(PLAN1, 1, id="chosen-by-worker")), False,
                 id="output not named by the token"),
    pytest.param(StatusUpdate("1", 1, OK, result_for(PLAN1, 1, row_count=-1)), False,
                 id="invalid metadata"),
])
def test_job_completion(update: StatusUpdate, accepted: bool) -> None:
    def run() -> tuple[JobState | None, dict[str, CompactedBlocks]]:
        s = Schedule(COMPLETED, CONFIG, token=1, now=0.0)
        return s.update_job(update), dict(s.results)

    got, results = twice(run)
    if accepted:
        assert got == JobState("1", 1, OK, token=1)
        assert results == {"1": update.compacted}
    else:
        assert got is None and results == {}


def test_completion_whose_output_id_is_taken_is_refused() -> None:
    s = Schedule(COMPLETED, CONFIG, token=1, now=0.0, block_exists=lambda shard, bid: True)
    assert s.update_job(StatusUpdate("1", 1, OK, result_for(PLAN1, 1))) is None


@pytest.mark.parametrize("status", [IP, OK])
def test_reports_on_an_unassigned_job_are_refused(status: JobStatus) -> None:
    """The seed's diagram has no owner of an unassigned job and no Unassigned -> Success."""
    state = jobs_state(JobState("1", 0, UN, token=5))
    s = Schedule(state, CONFIG, token=6, now=0.0)
    assert s.update_job(StatusUpdate("1", 5, status, result_for(state.plans["1"], 5))) is None


# ---- assignment (TestSchedule_Assign / _ReAssign / _UpdateAssign) ------------------------


def assign_all(s: Schedule, limit: int = 100) -> list[JobState]:
    out = []
    for _ in range(limit):
        job = s.assign_job()
        if job is None:
            break
        out.append(job.state)
    return out


def test_assign_small_jobs_first() -> None:
    state = jobs_state(
        JobState("1", 1, UN), JobState("2", 0, UN), JobState("3", 0, UN),
        JobState("4", 0, IP), JobState("5", 0, IP),
    )

    def run() -> list[tuple[str, JobState, JobPlan]]:
        s = Schedule(state, CONFIG, token=1, now=0.0)
        got = []
        for _ in range(4):
            job = s.assign_job()
            if job is not None:
                got.append((job.state.name, job.state, job.plan))
        return got

    got = twice(run)
    assert [g[0] for g in got] == ["2", "3", "1"]
    for name, st, plan in got:
        assert (st.status, st.lease_expires_at, st.token) == (IP, LEASE, 1)
        assert plan == state.plans[name]


def test_reassign_abandoned_jobs_with_a_new_token_and_a_failure() -> None:
    now = 5.0
    state = jobs_state(
        JobState("1", 0, IP, token=1, lease_expires_at=1.0),
        JobState("2", 0, IP, token=1, lease_expires_at=1.0),
        JobState("3", 0, IP, token=1, lease_expires_at=1.0),
        JobState("4", 0, IP, token=1, lease_expires_at=10.0),  # lease still valid
        JobState("5", 0, IP, token=1, lease_expires_at=1.0, failures=1),
        JobState("6", 0, IP, token=1, lease_expires_at=1.0, failures=3),  # parked
    )
    lease = now + LEASE
    expected = [
        JobState("1", 0, IP, token=2, lease_expires_at=lease, failures=1),
        JobState("2", 0, IP, token=2, lease_expires_at=lease, failures=1),
        JobState("3", 0, IP, token=2, lease_expires_at=lease, failures=1),
        JobState("5", 0, IP, token=2, lease_expires_at=lease, failures=2),
    ]
    assert twice(lambda: assign_all(Schedule(state, CONFIG, token=2, now=now))) == expected


def test_a_completion_after_expiry_is_accepted_while_not_reassigned() -> None:
    state = jobs_state(*(JobState(n, 0, IP, token=1, lease_expires_at=0.0) for n in "123"))

    def run() -> tuple[list[bool], list[JobState]]:
        s = Schedule(state, CONFIG, token=2, now=20.0)
        done = [s.update_job(StatusUpdate(n, 1, OK, result_for(state.plans[n], 1))) is not None
                for n in "123"]
        return done, assign_all(s)

    assert twice(run) == ([True, True, True], [])


def test_an_abandoned_job_may_go_back_to_the_worker_that_asks_first() -> None:
    state = jobs_state(*(JobState(n, 0, IP, token=1, lease_expires_at=0.0) for n in "123"))
    got = twice(lambda: assign_all(Schedule(state, CONFIG, token=2, now=20.0)))
    assert [(j.name, j.token, j.lease_expires_at) for j in got] == [
        (n, 2, 30.0) for n in "123"]


def test_an_abandoned_higher_level_job_is_not_skipped_behind_an_owned_lower_one() -> None:
    """Pyroscope #3663: the walk goes on to level 1 when level 0 only has owned jobs."""
    state = jobs_state(
        JobState("a", 0, IP, token=1, lease_expires_at=100.0),
        JobState("b", 1, IP, token=1, lease_expires_at=1.0),
    )
    got = twice(lambda: assign_all(Schedule(state, CONFIG, token=2, now=5.0)))
    assert [j.name for j in got] == ["b"]


def test_parked_jobs_stop_their_level_but_not_the_next() -> None:
    state = jobs_state(
        JobState("p", 0, IP, token=1, lease_expires_at=1.0, failures=3),
        JobState("q", 1, UN),
    )
    assert [j.name for j in assign_all(Schedule(state, CONFIG, token=2, now=5.0))] == ["q"]


def test_reported_jobs_are_not_reassigned_in_the_same_step() -> None:
    state = jobs_state(JobState("1", 0, IP, token=1, lease_expires_at=0.0))
    s = Schedule(state, CONFIG, token=2, now=20.0)
    assert s.update_job(StatusUpdate("1", 1, IP)) is not None
    assert s.assign_job() is None


def test_queue_order_within_a_level() -> None:
    """TestJobQueue_order: status, failures, lease expiry, name."""
    jobs = [
        JobState("e", 0, IP, lease_expires_at=1.0, failures=3),
        JobState("d", 0, IP, lease_expires_at=5.0, failures=1),
        JobState("c", 0, IP, lease_expires_at=9.0),
        JobState("b", 0, IP, lease_expires_at=2.0),
        JobState("z", 0, UN),
        JobState("a", 0, UN),
        JobState("x", 1, UN),
    ]
    queues = level_queues(jobs_state(*jobs))
    assert [j.name for j in queues[0]] == ["a", "z", "b", "c", "d", "e"]
    assert [j.name for j in queues[1]] == ["x"]


# ---- adding and evicting (TestSchedule_Add / _QueueSizeLimit / _*Evict*) ---------------


def plan_named(name: str) -> JobPlan:
    return JobPlan(name, 0, 0, sources(name))


def test_add_jobs() -> None:
    def run() -> list[JobState | None]:
        s = Schedule(SchedulerState(), CONFIG, token=1, now=1.0)
        return [s.add_job(plan_named(n)) for n in "123"]

    assert twice(run) == [JobState(n, 0, UN, added_at=1.0, token=1) for n in "123"]


def test_queue_size_limit() -> None:
    config = replace(CONFIG, max_queue_size=2)

    def run() -> list[JobState | None]:
        s = Schedule(SchedulerState(), config, token=1, now=1.0)
        return [s.add_job(plan_named(n)) for n in "123"]

    assert twice(run) == [JobState("1", 0, UN, added_at=1.0, token=1),
                          JobState("2", 0, UN, added_at=1.0, token=1), None]


FAILED3 = [JobState(n, 0, IP, token=1, lease_expires_at=0.0, failures=3) for n in "123"]


def test_assign_then_evict() -> None:
    config = replace(CONFIG, max_queue_size=2)
    state = jobs_state(*FAILED3, JobState("4", 0, IP, token=1, lease_expires_at=0.0))

    def run() -> list[Any]:
        s = Schedule(state, config, token=2, now=20.0)
        steps: list[Any] = [s.evict_job()]  # only possible once nothing is assignable
        steps.append(s.assign_job().state.name)  # type: ignore[union-attr]
        steps.append(s.assign_job())
        steps += [s.evict_job(), s.evict_job(), s.evict_job()]
        return [x.name if isinstance(x, JobState) else x for x in steps]

    assert twice(run) == [None, "4", None, "1", "2", None]


@pytest.mark.parametrize("limit,evicted", [(2, ["1"]), (5, []), (0, [])],
                         ids=["over the limit", "under the limit", "no limit"])
def test_evict_only_over_the_limit(limit: int, evicted: list[str]) -> None:
    state = jobs_state(*FAILED3)
    config = replace(CONFIG, max_queue_size=limit)

    def run() -> list[str]:
        s = Schedule(state, config, token=2, now=20.0)
        assert s.assign_job() is None
        out = []
        for _ in range(3):
            job = s.evict_job()
            if job is not None:
                out.append(job.name)
        return out

    assert twice(run) == evicted


def test_jobs_that_are_not_parked_are_never_evicted() -> None:
    healthy = [JobState(n, 0, IP, token=1, lease_expires_at=100.0, failures=3) for n in "12"]
    state = jobs_state(*healthy, JobState("3", 0, UN))
    s = Schedule(state, replace(CONFIG, max_queue_size=1), token=2, now=20.0)
    assert s.evict_job() is None  # a failed job with a live lease is still someone's
    s.assign_job()
    assert s.evict_job() is None


# ---- the planner (plan_test.go) ---------------------------------------------------------

PLAN_CONFIG = PlannerConfig(
    levels=(LevelConfig(3, 0.0), LevelConfig(2, 0.0), LevelConfig(2, 0.0)),
    cleanup_batch_size=0,
)


def queues_of(entries: list[tuple[int, int]], start: int = 0,
              state: PlannerState | None = None) -> PlannerState:
    """(shard, level) per block; block i has id str(i) and raft index i."""
    state = state or PlannerState()
    for i, (shard, level) in enumerate(entries, start):
        state = pl.enqueue(state, shard, level, QueuedBlock(str(i), i, float(i)))
    return state


def planned(state: PlannerState, config: PlannerConfig = PLAN_CONFIG,
            now: float = 0.0) -> list[tuple[int, int, tuple[str, ...]]]:
    return twice(lambda: [(p.shard, p.level, p.source_blocks)
                          for p in pl.plan_jobs(state, config, now)])


def test_plan_same_level_in_the_order_batches_fill() -> None:
    entries = [(0, 0), (2, 0), (1, 0), (1, 0), (2, 0), (1, 0),  # S1 ready at 5
               (2, 0), (0, 0), (1, 0), (0, 0), (2, 0), (1, 0)]  # S2 at 6, S0 at 9
    state = queues_of(entries)
    assert planned(state) == [(1, 0, ("2", "3", "5")), (2, 0, ("1", "4", "6")),
                              (0, 0, ("0", "7", "9"))]
    state = queues_of([(2, 0), (1, 0), (2, 0)], start=12, state=state)
    assert planned(state) == [(1, 0, ("2", "3", "5")), (2, 0, ("1", "4", "6")),
                              (0, 0, ("0", "7", "9")), (1, 0, ("8", "11", "13")),
                              (2, 0, ("10", "12", "14"))]


def test_plan_lower_levels_first() -> None:
    state = queues_of([(2, 1), (1, 0), (1, 0), (2, 1), (1, 0)])
    assert planned(state) == [(1, 0, ("1", "2", "4")), (2, 1, ("0", "3"))]


def test_plan_empty_and_incomplete_queues() -> None:
    assert planned(PlannerState()) == []
    state = queues_of([(1, 1)])
    assert planned(state) == []
    assert planned(queues_of([(1, 1)], start=1, state=state)) == [(1, 1, ("0", "1"))]


def test_plan_after_blocks_left_the_queue() -> None:
    state = queues_of([(1, 0), (2, 0), (1, 0), (2, 0), (1, 0), (2, 0)])
    state = pl.remove(state, (1, 0), ["0", "4"])
    assert planned(state) == [(2, 0, ("1", "3", "5"))]
    state = queues_of([(1, 0), (1, 0), (1, 0)], start=6, state=state)
    assert planned(state) == [(2, 0, ("1", "3", "5")), (1, 0, ("2", "6", "7")), ]
    assert pl.remove(pl.remove(state, (2, 0), ["1", "3", "5"]), (1, 0), ["2", "6", "7", "8"]) \
        == PlannerState()


def test_plan_incomplete_groups_by_age_at_the_planning_time() -> None:
    """Unlike Pyroscope (age checked when a block is pushed), the planning entry's time
    decides, so the last block of a quiet shard does not wait for another push."""
    config = PlannerConfig(levels=(LevelConfig(5, 5.0), LevelConfig(5, 5.0)))
    state = PlannerState()
    for block_id, shard, at in [("1", 1, 10.0), ("2", 0, 20.0), ("3", 1, 30.0)]:
        state = pl.enqueue(state, shard, 0, QueuedBlock(block_id, int(block_id), at))
    assert planned(state, config, now=15.0) == []  # age 5 is not over 5
    assert planned(state, config, now=22.0) == [(1, 0, ("1", "3"))]
    assert planned(state, config, now=40.0) == [(0, 0, ("2",)), (1, 0, ("1", "3"))]


def test_plan_splits_by_input_bytes() -> None:
    config = PlannerConfig(levels=(LevelConfig(10, 0.0, max_bytes=100),))
    state = PlannerState()
    for i, size in enumerate([60, 50, 30, 30, 50]):
        state = pl.enqueue(state, 0, 0, QueuedBlock(str(i), i, 0.0, size))
    assert planned(state, config) == [(0, 0, ("0", "1")), (0, 0, ("2", "3", "4"))]


def test_blocks_above_the_last_level_are_never_planned() -> None:
    state = queues_of([(0, 3)] * 5)
    assert planned(state) == []


def test_due_tombstones_ride_on_low_level_jobs() -> None:
    config = PlannerConfig(levels=(LevelConfig(1, 0.0), LevelConfig(1, 0.0),
                                   LevelConfig(1, 0.0)),
                           cleanup_delay=100.0, cleanup_batch_size=2, cleanup_max_level=1)
    tombs = [Tombstone(f"t{i}", 0, (f"b{i}",), added_at=float(i * 10), index=i)
             for i in range(5)]
    state = queues_of([(0, 2), (0, 0), (0, 1), (0, 0)])

    def run() -> list[tuple[int, list[str]]]:
        return [(p.level, [t.name for t in p.tombstones])
                for p in pl.plan_jobs(state, config, now=125.0, tombstones=tombs)]

    # t0..t2 are due (added at <= 25); level 2 jobs carry none
    assert twice(run) == [(0, ["t0", "t1"]), (0, ["t2"]), (1, []), (2, [])]


# ---- prepare and apply (the two-step raft protocol) --------------------------------------

MS_CONFIG = svc.MetastoreConfig(
    planner=PlannerConfig(levels=(LevelConfig(2, 30.0), LevelConfig(2, 60.0)),
                          cleanup_delay=50.0),
    scheduler=SchedulerConfig(lease_duration=15.0, max_failures=3, max_queue_size=4),
)


def l0(shard: int, rev: int) -> BlockMeta:
    return BlockMeta(level0_block_id(shard, rev, rev), shard, 0, rev, rev, b"a", b"z", 1, 10,
                     0.0)


class Log:
    """A metastore applied entry by entry: the leader's view in these tests."""

    def __init__(self, config: svc.MetastoreConfig = MS_CONFIG) -> None:
        self.config = config
        self.state = ms.initial()
        self.entries: list[Entry] = []
        self.term = 1

    def append(self, command: Any, now: float) -> Any:
        entry = Entry(len(self.entries) + 1, self.term, now, command)
        self.entries.append(entry)
        self.state, result = ms.apply(self.state, self.config, entry)
        return result

    def poll(self, request: PollRequest, now: float) -> PollResponse:
        plan = self.append(ms.PreparePlan(request), now)
        assert isinstance(plan, PlanUpdate), plan
        response = self.append(ms.ApplyPlan(plan), now)
        assert isinstance(response, PollResponse), response
        return response


def test_a_poll_reports_first_assigns_then_plans() -> None:
    log = Log()
    log.append(ms.AddBlocks((l0(0, 1), l0(0, 2), l0(0, 3), l0(0, 4))), now=1.0)
    first = log.poll(PollRequest((), capacity=1), now=2.0)
    assert first.assigned == () and first.leases == ()  # planned now, assigned next poll
    assert len(log.state.scheduler.jobs) == 1
    second = log.poll(PollRequest((), capacity=1), now=3.0)
    (job,) = second.assigned
    assert job.state.token == 4 and job.state.lease_expires_at == 18.0  # prepare entry 4
    assert job.plan.source_blocks == (l0(0, 1).id, l0(0, 2).id)
    # the worker's renewal at 10 extends to 25; its completion replaces the blocks
    renewed = log.poll(PollRequest((StatusUpdate(job.plan.name, 4, IP),), 0), now=10.0)
    assert [(x.name, x.token, x.lease_expires_at) for x in renewed.leases] == [
        (job.plan.name, 4, 25.0)]
    done = StatusUpdate(job.plan.name, 4, OK, result_for(job.plan, 4))
    response = log.poll(PollRequest((done,), 0), now=11.0)
    assert response.completed == (job.plan.name,) and response.leases == ()
    live = {b.id for b in ms.query(log.state, ms.BlocksQuery(shard=0)).blocks}
    assert live == {l0(0, 3).id, l0(0, 4).id, result_for(job.plan, 4).new_block.id}
    assert job.plan.name not in log.state.scheduler.jobs
    tomb = log.state.index.tombstones[job.plan.name]
    assert tomb.blocks == job.plan.source_blocks and tomb.added_at == 11.0
    assert log.state.planner.queued((0, 1))[0].id == result_for(job.plan, 4).new_block.id


def test_preparing_a_plan_twice_gives_the_same_plan() -> None:
    log = Log()
    log.append(ms.AddBlocks(tuple(l0(s, 10 * s + r) for s in range(2) for r in range(1, 5))),
               now=1.0)
    log.poll(PollRequest((), capacity=3), now=2.0)
    state = log.state
    request = PollRequest((StatusUpdate("nobody", 1, IP),), capacity=3)
    plan = twice(lambda: svc.prepare_plan(state, MS_CONFIG, request, 9, 1, 40.0))
    assert len(plan.assigned_jobs) == 3 and len(plan.new_jobs) == 1  # 3 + 1 revoked slot
    assert log.state == state


def test_a_revoked_job_frees_its_slot() -> None:
    """A report the scheduler refuses (here a stale token) frees the reporter's slot: with
    capacity 0 it still gets one job, an abandoned one, with a new token and a failure."""
    log = Log()
    log.append(ms.AddBlocks(tuple(l0(0, r) for r in range(1, 5))), now=1.0)
    log.poll(PollRequest((), capacity=2), now=2.0)
    (a, _b) = log.poll(PollRequest((), capacity=2), now=3.0).assigned  # token 4, lease 18
    stale = StatusUpdate(a.plan.name, a.state.token - 1, IP)
    response = log.poll(PollRequest((stale,), capacity=0), now=20.0)  # prepared at 6
    (again,) = response.assigned
    assert (again.state.token, again.state.failures, again.state.lease_expires_at) == (6, 1, 35.0)
    assert [lease.name for lease in response.leases] == [again.plan.name]


def test_a_plan_from_another_term_is_rejected_and_changes_nothing() -> None:
    log = Log()
    log.append(ms.AddBlocks((l0(0, 1), l0(0, 2))), now=1.0)
    plan = log.append(ms.PreparePlan(PollRequest((), 1)), now=2.0)
    log.term = 2
    before = log.state
    result = log.append(ms.ApplyPlan(plan), now=3.0)
    assert result == ErrTermMismatch(1, 2)
    assert log.state == before


def test_a_plan_prepared_before_the_last_applied_plan_is_stale() -> None:
    log = Log()
    log.append(ms.AddBlocks((l0(0, 1), l0(0, 2))), now=1.0)
    log.poll(PollRequest((), 1), now=2.0)
    p1 = log.append(ms.PreparePlan(PollRequest((), 1)), now=3.0)
    p2 = log.append(ms.PreparePlan(PollRequest((), 1)), now=3.0)
    assert p1.assigned_jobs[0].state.name == p2.assigned_jobs[0].state.name  # same job twice
    assert isinstance(log.append(ms.ApplyPlan(p1), now=4.0), PollResponse)
    before = log.state
    assert isinstance(log.append(ms.ApplyPlan(p2), now=4.0), ErrStalePlan)
    assert log.state == before


def test_a_full_schedule_evicts_parked_jobs_only_for_new_work() -> None:
    config = replace(MS_CONFIG, scheduler=replace(MS_CONFIG.scheduler, max_queue_size=2))
    log = Log(config)
    log.append(ms.AddBlocks(tuple(l0(0, r) for r in range(1, 5))), now=1.0)
    log.poll(PollRequest((), 2), now=2.0)
    assert len(log.state.scheduler.jobs) == 2
    parked = {n: replace(j, status=IP, failures=3, lease_expires_at=3.0)
              for n, j in log.state.scheduler.jobs.items()}
    log.state = replace(log.state, scheduler=replace(log.state.scheduler, jobs=parked))
    log.append(ms.AddBlocks((l0(0, 5),)), now=4.0)
    assert log.poll(PollRequest((), 2), now=5.0).assigned == ()
    assert set(log.state.scheduler.jobs) == set(parked)  # nothing new to plan: no eviction
    log.append(ms.AddBlocks((l0(0, 6),)), now=6.0)
    log.poll(PollRequest((), 2), now=7.0)
    jobs = log.state.scheduler.jobs
    assert len(jobs) == 2 and len(set(jobs) & set(parked)) == 1  # one parked job made room
    # the evicted job's blocks stay live (never compacted again): nothing is lost
    live = {b.id for b in ms.query(log.state, ms.BlocksQuery(shard=0)).blocks}
    assert live == {l0(0, r).id for r in range(1, 7)}


@pytest.mark.parametrize("request_", [
    "not a request",
    PollRequest((), -1),
    PollRequest((StatusUpdate("j", 1, 9),), 1),  # type: ignore[arg-type]
    PollRequest([StatusUpdate("j", 1, IP)], 1),  # type: ignore[arg-type]
])
def test_malformed_polls_are_refused(request_: Any) -> None:
    log = Log()
    before = log.state
    assert isinstance(log.append(ms.PreparePlan(request_), now=1.0), ErrMalformedCommand)
    assert log.state == before


def test_a_plan_that_does_not_fit_the_state_is_refused() -> None:
    log = Log()
    log.append(ms.AddBlocks((l0(0, 1), l0(0, 2))), now=1.0)
    plan = log.append(ms.PreparePlan(PollRequest((), 1)), now=2.0)
    bad = replace(plan, new_jobs=plan.new_jobs * 2)
    assert isinstance(log.append(ms.ApplyPlan(bad), now=3.0), ErrInvalidPlan)
    ghost = replace(plan, updated_jobs=(JobState("ghost", 0, IP, token=1),))
    assert isinstance(log.append(ms.ApplyPlan(ghost), now=3.0), ErrInvalidPlan)
    assert isinstance(log.append(ms.ApplyPlan(plan), now=3.0), PollResponse)


# ---- the worker core ------------------------------------------------------------------------


def test_worker_polls_refreshes_at_half_the_lease_and_reports() -> None:
    config = wk.WorkerConfig(capacity=2, poll_interval=5.0)
    state, effects = wk.step(wk.initial(config), wk.Tick(100.0))
    assert effects == [wk.SendPoll(PollRequest((), 2))]
    assert wk.step(state, wk.Tick(101.0)) == (state, [])  # one poll at a time
    plan = JobPlan("j", 0, 0, ("a", "b"))
    job = AssignedJob(JobState("j", 0, IP, token=7, lease_expires_at=1015.0), plan, 3)
    reply = PollResponse(now=1000.0, assigned=(job,), leases=(Lease("j", 7, 1015.0),))
    state, effects = wk.step(state, wk.PollReply(102.0, reply))
    assert effects == [wk.Execute(job)]
    assert state.jobs["j"].refresh_at == 109.5  # half of the 15 s left, on its own clock
    assert wk.step(state, wk.Tick(105.0))[1] == []
    state, effects = wk.step(state, wk.Tick(109.5))
    assert effects == [wk.SendPoll(PollRequest((StatusUpdate("j", 7, IP),), 1))]
    reply = PollResponse(now=1010.0, leases=(Lease("j", 7, 1025.0),))
    state, effects = wk.step(state, wk.PollReply(110.0, reply))
    assert effects == [] and state.jobs["j"].refresh_at == 117.5
    result = result_for(plan, 7)
    state, _ = wk.step(state, wk.JobDone("j", 6, result))  # another attempt's result
    assert state.jobs["j"].result is None
    state, _ = wk.step(state, wk.JobDone("j", 7, result))
    state, effects = wk.step(state, wk.Tick(111.0))  # a result is reported at once
    assert effects == [wk.SendPoll(PollRequest((StatusUpdate("j", 7, OK, result),), 2))]
    state, effects = wk.step(state, wk.PollReply(112.0, PollResponse(1012.0, completed=("j",))))
    assert effects == [wk.Finished("j", 7, True)] and state.jobs == {}


def test_worker_stops_a_job_without_a_lease_and_abandons_failed_merges() -> None:
    config = wk.WorkerConfig(capacity=2)
    jobs = [AssignedJob(JobState(n, 0, IP, token=3, lease_expires_at=15.0),
                        JobPlan(n, 0, 0, (n,))) for n in "ab"]
    state, _ = wk.step(wk.initial(config), wk.Tick(0.0))
    state, _ = wk.step(state, wk.PollReply(0.0, PollResponse(0.0, assigned=tuple(jobs))))
    state, effects = wk.step(state, wk.JobFailed("b", 3, "CorruptBlock"))
    assert effects == [wk.Abandoned("b", 3, "CorruptBlock")]
    state, effects = wk.step(state, wk.Tick(8.0))
    assert effects == [wk.SendPoll(PollRequest((StatusUpdate("a", 3, IP),), 1))]
    reply = PollResponse(9.0, leases=(Lease("x", 1, 20.0),))
    state, effects = wk.step(state, wk.PollReply(9.0, reply))
    assert effects == [wk.Cancel("a", 3)] and state.jobs == {}
    state, _ = wk.step(state, wk.Tick(20.0))
    assert wk.step(state, wk.PollFailed(21.0))[0].polling is None


# ---- simulation -----------------------------------------------------------------------------

SIM_CONFIG = svc.MetastoreConfig(
    planner=PlannerConfig(
        levels=(LevelConfig(3, 20.0), LevelConfig(2, 60.0), LevelConfig(2, 120.0)),
        cleanup_delay=30.0,
    ),
    scheduler=SchedulerConfig(lease_duration=15.0, max_failures=3, max_queue_size=8),
)
SHARDS = 3


@dataclass
class SimWorker:
    name: str
    state: wk.WorkerState
    skew: float  # its clock is the leader's plus this: only durations may matter
    incarnation: int = 0
    alive: bool = True
    paused_until: float = 0.0
    polling: bool = False


@dataclass(order=True)
class Ev:
    at: float
    seq: int
    kind: str = field(compare=False)
    worker: int = field(compare=False, default=-1)
    data: Any = field(compare=False, default=None)


class Simulation:
    """A metastore log, flushes, and workers on a lossy, slow network with faults."""

    def __init__(self, seed: int, faults: bool = True) -> None:
        self.rng = random.Random(seed)
        self.faults = faults
        self.log = Log(SIM_CONFIG)
        self.now = 0.0
        self.seq = 0
        self.queue: list[Ev] = []
        self.lineage: dict[str, frozenset[str]] = {}
        self.originals: set[str] = set()  # every level-0 block ever added
        self.flushed: dict[int, int] = {s: 0 for s in range(SHARDS)}
        self.revision = 0
        self.fault_stats: dict[str, int] = {}
        self.stats = {"completed": 0, "fenced": 0, "term": 0, "stale": 0, "failed_merges": 0,
                      "reassigned": 0, "evicted": 0, "crashes": 0, "pauses": 0}
        self.workers = [SimWorker(f"w{i}", wk.initial(wk.WorkerConfig(capacity=2)),
                                  self.rng.uniform(-500, 500)) for i in range(3)]
        for i in range(len(self.workers)):
            self.at(self.rng.uniform(0, 1), "tick", i)
        self.at(1.0, "flush")

    def at(self, when: float, kind: str, worker: int = -1, data: Any = None) -> None:
        self.seq += 1
        heapq.heappush(self.queue, Ev(when, self.seq, kind, worker, data))

    # -- the metastore (the leader's shell) --

    def append(self, command: Any) -> Any:
        before = self.log.state
        result = self.log.append(command, self.now)
        if isinstance(command, ms.ApplyPlan) and isinstance(result, PollResponse):
            self.check_plan(before, command.update)
        check_invariants(self.log.state, self.lineage, self.originals)
        return result

    def check_plan(self, before: svc.MetastoreState, update: PlanUpdate) -> None:
        """Fencing and the diagram: what a committed plan may do to each job."""
        jobs, now, fails = before.scheduler.jobs, update.prepared_at, 3
        for a in update.assigned_jobs:
            old = jobs[a.state.name]
            ph = phase(old, now, fails)
            if ph == JobPhase.UNASSIGNED:
                assert transition(ph, "assign") == JobPhase.IN_PROGRESS
                assert a.state.failures == old.failures
            else:
                assert ph == JobPhase.LEASE_EXPIRED, (ph, old)
                assert transition(transition(JobPhase.IN_PROGRESS, "lease_expires"),
                                  "reassign") == JobPhase.IN_PROGRESS
                assert a.state.failures == old.failures + 1
                self.stats["reassigned"] += 1
            assert a.state.token == update.prepared_index > old.token
        for c in update.completed_jobs:
            old = jobs[c.state.name]
            assert old.status == IP and c.state.token == old.token
            assert c.compacted.new_block.id.endswith(f"-T{old.token}")
            lineage = frozenset().union(*(self.lineage[s] for s in c.compacted.source_blocks))
            self.lineage[c.compacted.new_block.id] = lineage
            self.stats["completed"] += 1
        for e in update.evicted_jobs:
            assert phase(jobs[e.name], now, fails) == JobPhase.EXCLUDED
            self.stats["evicted"] += 1
        for u in update.updated_jobs:
            assert jobs[u.name].status == IP and u.token == jobs[u.name].token

    def flush(self) -> None:
        blocks = []
        for shard in self.rng.sample(range(SHARDS), self.rng.randint(1, 2)):
            low = self.revision + 1
            self.revision += self.rng.randint(1, 5)
            block = BlockMeta(level0_block_id(shard, low, self.revision), shard, 0, low,
                              self.revision, b"a", b"z", self.revision - low + 1, 100,
                              self.now)
            blocks.append(block)
            self.lineage[block.id] = frozenset([block.id])
            self.originals.add(block.id)
        result = self.append(ms.AddBlocks(tuple(blocks)))
        assert isinstance(result, svc.AddBlocksResult), result
        if self.rng.random() < 0.2:  # a retried flush is answered, and changes nothing
            before = self.log.state
            again = self.append(ms.AddBlocks(tuple(blocks)))
            assert again == svc.AddBlocksResult((), tuple(b.id for b in blocks))
            assert self.log.state.index == before.index

    def serve(self, polls: list[tuple[int, PollRequest]]) -> None:
        """Prepare every poll, then apply each plan (more than one: concurrent polls)."""
        plans = [(w, self.append(ms.PreparePlan(req))) for w, req in polls]
        if self.faults and self.rng.random() < 0.05:
            self.log.term += 1  # a leader change between prepare and apply
            self.append(None)
        for w, plan in plans:
            assert isinstance(plan, PlanUpdate), plan
            response = self.append(ms.ApplyPlan(plan))
            if isinstance(response, ErrTermMismatch):
                self.stats["term"] += 1
            elif isinstance(response, ErrStalePlan):
                self.stats["stale"] += 1
            else:
                assert isinstance(response, PollResponse), response
            delay = self.rng.expovariate(1.0)
            if self.faults and self.rng.random() < 0.05:
                delay += self.rng.uniform(10, 40)  # a late answer
            if not isinstance(response, PollResponse) or (
                    self.faults and self.rng.random() < 0.03):
                self.at(self.now + 5.0, "poll_failed", w, self.workers[w].incarnation)
            else:
                self.at(self.now + delay, "reply", w, (self.workers[w].incarnation, response))

    # -- workers --

    def deliver(self, i: int, event: wk.Event) -> None:
        w = self.workers[i]
        w.state, effects = wk.step(w.state, event)
        for effect in effects:
            if isinstance(effect, wk.SendPoll):
                self.at(self.now + self.rng.uniform(0, 0.5), "poll", i,
                        (w.incarnation, effect.request))
            elif isinstance(effect, wk.Execute):
                self.execute(i, effect)
            elif isinstance(effect, wk.Finished) and not effect.accepted:
                self.stats["fenced"] += 1

    def execute(self, i: int, effect: wk.Execute) -> None:
        job, w = effect.job, self.workers[i]
        plan = job.plan
        found = ms.query(self.log.state, ms.BlocksById(plan.shard, plan.source_blocks))
        took = self.rng.uniform(1, 25)
        if not isinstance(found, ms.BlocksResult) or (self.faults and self.rng.random() < 0.1):
            event: wk.Event = wk.JobFailed(plan.name, job.state.token, "CorruptBlock")
            self.stats["failed_merges"] += 1
        else:
            out = BlockMeta(
                compacted_block_id(plan.shard, plan.level, plan.source_blocks, job.state.token),
                plan.shard, plan.level + 1, min(b.min_revision for b in found.blocks),
                max(b.max_revision for b in found.blocks), b"a", b"z",
                sum(b.row_count for b in found.blocks), 100, self.now)
            event = wk.JobDone(plan.name, job.state.token, CompactedBlocks(plan.source_blocks, out))
        self.at(self.now + took, "done", i, (w.incarnation, event))

    def fault(self) -> None:
        i = self.rng.randrange(len(self.workers))
        w = self.workers[i]
        if not w.alive:
            return
        if self.rng.random() < 0.5:  # crash: everything in flight is lost; back later
            self.stats["crashes"] += 1
            w.alive, w.incarnation = False, w.incarnation + 1
            w.state = wk.initial(w.state.config)
            self.at(self.now + self.rng.uniform(5, 60), "restart", i)
        else:  # pause (GC, stop-the-world): events wait until it resumes
            self.stats["pauses"] += 1
            w.paused_until = self.now + self.rng.uniform(5, 40)

    def concurrent_poll(self) -> bool:
        if not self.queue or self.queue[0].kind != "poll":
            return False
        nxt = self.queue[0]
        w = self.workers[nxt.worker]
        return w.alive and w.paused_until <= self.now and nxt.data[0] == w.incarnation

    def run(self, until: float) -> None:
        while self.queue and self.queue[0].at <= until:
            ev = heapq.heappop(self.queue)
            self.now = max(self.now, ev.at)
            w = self.workers[ev.worker] if ev.worker >= 0 else None
            if w is not None and w.paused_until > self.now and ev.kind != "restart":
                self.at(w.paused_until, ev.kind, ev.worker, ev.data)
                continue
            if ev.kind == "flush":
                if self.faults:
                    self.flush()
                    self.at(self.now + self.rng.uniform(1, 6), "flush")
                    if self.rng.random() < 0.02:
                        self.fault()
            elif ev.kind == "tick":
                if w is not None and w.alive:
                    self.deliver(ev.worker, wk.Tick(self.now + w.skew))
                self.at(self.now + 1.0, "tick", ev.worker)
            elif ev.kind == "restart":
                assert w is not None
                w.alive = True
            elif ev.kind == "poll":
                incarnation, request = ev.data
                assert w is not None
                if w.alive and incarnation == w.incarnation:
                    batch = [(ev.worker, request)]
                    if self.rng.random() < 0.1 and self.concurrent_poll():
                        other = heapq.heappop(self.queue)  # served together with this one
                        batch.append((other.worker, other.data[1]))
                    self.serve(batch)
            elif ev.kind in ("reply", "poll_failed", "done"):
                assert w is not None
                payload: Any
                incarnation, payload = ev.data if ev.kind != "poll_failed" else (ev.data, None)
                if not w.alive or incarnation != w.incarnation:
                    continue  # for a process that died
                local = self.now + w.skew
                if ev.kind == "reply":
                    self.deliver(ev.worker, wk.PollReply(local, payload))
                elif ev.kind == "poll_failed":
                    self.deliver(ev.worker, wk.PollFailed(local))
                else:
                    self.deliver(ev.worker, payload)


def check_invariants(state: svc.MetastoreState, lineage: dict[str, frozenset[str]],
                     originals: set[str]) -> None:
    """Every level-0 block is in exactly one live block; jobs and queues hold live ones."""
    live = [b for shard in state.index.shards.values() for b in shard.values()]
    seen: set[str] = set()
    for block in live:
        own = lineage[block.id]
        assert not seen & own, f"{block.id} duplicates {sorted(seen & own)}"
        seen |= own
    assert seen == originals, f"lost: {sorted(originals - seen)}"
    live_ids = {(b.shard, b.id) for b in live}
    in_jobs: set[str] = set()
    for plan in state.scheduler.plans.values():
        assert all((plan.shard, s) in live_ids for s in plan.source_blocks)
        assert not in_jobs & set(plan.source_blocks)
        in_jobs |= set(plan.source_blocks)
    for (shard, _level), queue in state.planner.queues.items():
        for q in queue:
            assert (shard, q.id) in live_ids and q.id not in in_jobs


SEEDS = range(12)


@functools.cache
def faulty_run(seed: int) -> Simulation:
    """The first 1200 simulated seconds of a seed: flushes, polls and faults."""
    sim = Simulation(seed)
    for t in range(1, 1200):
        sim.run(float(t))
        if sim.rng.random() < 0.01:
            sim.fault()
    sim.fault_stats = dict(sim.stats)
    return sim


@pytest.mark.parametrize("seed", SEEDS)
def test_simulated_workers_never_lose_or_duplicate_a_block(seed: int) -> None:
    sim = faulty_run(seed)
    # calm: no faults, no flushes, everyone alive; the backlog drains
    sim.faults = False
    for w in sim.workers:
        w.paused_until = 0.0
    sim.run(3000.0)
    state = sim.log.state
    assert sim.stats["completed"] > 10, sim.stats
    for job in state.scheduler.jobs.values():  # all that is left is parked
        assert job.failures >= 3, (job, sim.stats)
    for level in range(len(SIM_CONFIG.planner.levels)):
        ready = pl.ready_groups(state.planner, SIM_CONFIG.planner, level, sim.now)
        assert ready == [] or len(state.scheduler.jobs) >= 8, (level, ready)
    # replicas: the same log gives the same state, directly and through a snapshot
    replica = ms.metastore("", SIM_CONFIG)
    half = len(sim.log.entries) // 2
    for entry in sim.log.entries[:half]:
        replica.apply(entry)
    restored = ms.metastore("", SIM_CONFIG)
    restored.restore(replica.snapshot()[0], half, lambda i: None)
    for entry in sim.log.entries[half:]:
        replica.apply(entry)
        restored.apply(entry)
    assert replica.state == restored.state == state
    assert replica.snapshot() == restored.snapshot()


def test_the_simulation_exercises_its_faults_and_replays_exactly() -> None:
    totals: dict[str, int] = {}
    for seed in SEEDS:
        for k, v in faulty_run(seed).fault_stats.items():
            totals[k] = totals.get(k, 0) + v
    for k, v in totals.items():
        assert v > 0, (k, totals)
    a, b = Simulation(3), Simulation(3)
    a.run(400.0)
    b.run(400.0)
    assert a.log.entries == b.log.entries
