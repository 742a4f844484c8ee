"""The compaction worker process: a thin shell over the pure worker core (`worker.py`).

The core decides when to poll, what to report, which jobs to start, keep, stop or give
up; this shell turns its effects into work and the outcomes back into events:

- time: a timer every `tick_interval` feeds `Tick(ctx.now())` (the worker's own clock,
  used by the core only for durations);
- `SendPoll`: a background task finds the leader's service and calls it
  (`locate.poll_service`); its outcome comes back as a message (`PollReply` /
  `PollFailed`);
- `Execute`: a background task per job fetches the sources' metadata, deletes the files
  of the tombstones the job carries, and runs the configured executor; the result comes
  back as `JobDone` / `JobFailed`;
- `Cancel`: the job's task is cancelled (its lease is gone);
- `Finished` / `Abandoned`: logged and kept in a short history for `Status()`.

The mailbox is never held by a merge or a call: they run in tasks (the merge itself in
a thread where the runtime has one, `offload.py`). Every event that may have made a
report ready is followed by a `Tick`, so results are reported at once.

Failpoints: `blocks.worker.pause` (after a message is taken, before it is handled: the
whole process stops, as under SIGSTOP, while its tasks run on),
`blocks.worker.before_merge` (a job's task, before it reads anything) and
`blocks.worker.before_report` (a poll that reports a finished job, before it is sent:
a report that arrives late).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from sediment import log
from sediment.actors.blocks import merge
from sediment.actors.blocks import worker as wk
from sediment.actors.blocks.jobs import AssignedJob, JobStatus, PollRequest, PollResponse
from sediment.actors.blocks.shell import locate
from sediment.actors.blocks.shell.config import BlocksConfig
from sediment.runtime.common_calls import Status, UnknownRequest
from sediment.runtime.core_driver import CoreDriver
from sediment.runtime.messages import Call
from sediment.runtime.offload import run_blocking
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.blocks.worker")

PAUSE = "blocks.worker.pause"
BEFORE_MERGE = "blocks.worker.before_merge"
BEFORE_REPORT = "blocks.worker.before_report"


@dataclass(frozen=True)
class _Tick:
    pass


@dataclass(frozen=True)
class _PollOutcome:
    seq: int
    response: PollResponse | None
    leader: str | None


@dataclass(frozen=True)
class _JobOutcome:
    event: wk.JobDone | wk.JobFailed


@dataclass
class _Worker:
    ctx: Process
    config: BlocksConfig
    leader: str | None = None  # the node whose service answered last
    poll: asyncio.Task[None] | None = None
    poll_seq: int = 0
    jobs: dict[tuple[str, int], asyncio.Task[None]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    recent: deque[tuple[str, str, int, str]] = field(default_factory=deque)

    def record(self, kind: str, name: str, token: int, detail: str = "") -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.recent.append((kind, name, token, detail))
        while len(self.recent) > self.config.recent:
            self.recent.popleft()


async def compaction_worker(ctx: Process, config: BlocksConfig) -> None:
    """Process entry: poll, merge and report until stopped."""
    w = _Worker(ctx, config)
    driver: CoreDriver[wk.WorkerState, wk.Event, wk.Effect] = CoreDriver(
        ctx, wk.step, wk.initial(config.worker))
    driver.on(wk.SendPoll, lambda effect: _send_poll(w, effect))
    driver.on(wk.Execute, lambda effect: _execute(w, effect))
    driver.on(wk.Cancel, lambda effect: _cancel(w, effect))
    driver.on(wk.Finished, lambda effect: _finished(w, effect))
    driver.on(wk.Abandoned, lambda effect: _abandoned(w, effect))

    async def to_events(msg: Any) -> list[wk.Event]:
        await ctx.failpoint(PAUSE)
        return _events(w, driver, msg)

    driver.arm_after(config.tick_interval, _Tick())
    _logger.info("compaction worker up", capacity=config.worker.capacity)
    try:
        await driver.serve(to_events)
    finally:
        for task in [w.poll, *w.jobs.values()]:
            if task is not None:
                task.cancel()


def _events(w: _Worker, driver: CoreDriver[wk.WorkerState, wk.Event, wk.Effect],
            msg: Any) -> list[wk.Event]:
    """The core events a message makes. Every event that may have made a report ready is
    followed by a Tick."""
    ctx = w.ctx
    if isinstance(msg, _Tick):
        driver.arm_after(w.config.tick_interval, _Tick())
        return [wk.Tick(ctx.now())]
    if isinstance(msg, _PollOutcome):
        if msg.seq != w.poll_seq:
            return []
        w.poll = None
        w.leader = msg.leader
        now = ctx.now()
        return [wk.PollFailed(now) if msg.response is None else wk.PollReply(now, msg.response),
                wk.Tick(now)]
    if isinstance(msg, _JobOutcome):
        w.jobs.pop((msg.event.name, msg.event.token), None)
        return [msg.event, wk.Tick(ctx.now())]
    if isinstance(msg, Call):
        if isinstance(msg.request, Status):
            ctx.reply(msg.from_, _status(w, driver.state))
        else:
            ctx.reply(msg.from_, UnknownRequest.of(msg.request))
    else:
        _logger.warning("compaction worker got an unexpected message", message=repr(msg)[:200])
    return []


def _status(w: _Worker, state: wk.WorkerState) -> dict[str, Any]:
    return {"node": w.ctx.self().node, "leader": w.leader, "polling": w.poll is not None,
            "jobs": {name: held.token for name, held in sorted(state.jobs.items())},
            "counts": dict(w.counts), "recent": list(w.recent)}


def _send_poll(w: _Worker, effect: wk.SendPoll) -> None:
    w.poll_seq += 1
    w.poll = asyncio.get_running_loop().create_task(
        _poll(w.ctx, w.config, effect.request, w.leader, w.poll_seq))


def _execute(w: _Worker, effect: wk.Execute) -> None:
    job = effect.job
    key = (job.plan.name, job.state.token)
    w.jobs[key] = asyncio.get_running_loop().create_task(_run(w.ctx, w.config, job, w.leader))
    w.record("started", *key, f"level {job.plan.level}, {len(job.plan.source_blocks)} blocks")


def _cancel(w: _Worker, effect: wk.Cancel) -> None:
    task = w.jobs.pop((effect.name, effect.token), None)
    if task is not None:
        task.cancel()
    w.record("cancelled", effect.name, effect.token, "no lease")
    _logger.info("job stopped: lease lost", job=effect.name, token=effect.token)


def _finished(w: _Worker, effect: wk.Finished) -> None:
    kind = "completed" if effect.accepted else "refused"
    w.record(kind, effect.name, effect.token)
    _logger.info(f"job report {kind}", job=effect.name, token=effect.token)


def _abandoned(w: _Worker, effect: wk.Abandoned) -> None:
    w.record("abandoned", effect.name, effect.token, effect.reason)
    _logger.warning("job abandoned", job=effect.name, token=effect.token,
                    reason=effect.reason[:300])


async def _poll(ctx: Process, config: BlocksConfig, request: PollRequest, hint: str | None,
                seq: int) -> None:
    try:
        if any(u.status == JobStatus.SUCCESS for u in request.status_updates):
            await ctx.failpoint(BEFORE_REPORT)
        response, leader = await locate.poll_service(ctx, config, request, hint)
    except Exception as err:  # noqa: BLE001 - a failed poll is an event for the core
        _logger.error("poll failed", error=f"{type(err).__name__}: {err}"[:300])
        response, leader = None, None
    if ctx.alive:
        ctx.send(ctx.self(), _PollOutcome(seq, response, leader))


async def _run(ctx: Process, config: BlocksConfig, job: AssignedJob, prefer: str | None) -> None:
    """One attempt at one job; any failure abandons it (the lease expiry counts it)."""
    plan, token = job.plan, job.state.token
    event: wk.JobDone | wk.JobFailed
    try:
        await ctx.failpoint(BEFORE_MERGE)
        sources = await locate.fetch_sources(ctx, config, plan, prefer)
        if not ctx.alive:
            return
        await _cleanup(config, job)
        result = await config.executor(ctx, config.root, job, sources, ctx.now())
        event = wk.JobDone(plan.name, token, result)
    except Exception as err:  # noqa: BLE001 - the seed has no failure report: abandon
        event = wk.JobFailed(plan.name, token, f"{type(err).__name__}: {err}")
    if ctx.alive:
        ctx.send(ctx.self(), _JobOutcome(event))


async def _cleanup(config: BlocksConfig, job: AssignedJob) -> None:
    """Delete the files of the tombstones the job carries (before the merge, so a
    failing merge does not strand them: the index no longer lists them)."""
    if not job.plan.tombstones:
        return
    try:
        removed = await run_blocking(merge.cleanup, config.root, job.plan.tombstones)
    except OSError as err:
        _logger.error("tombstone cleanup failed", job=job.plan.name, error=str(err)[:200])
        return
    _logger.info("tombstoned blocks deleted", job=job.plan.name,
                 tombstones=len(job.plan.tombstones), files=removed)


__all__ = ["BEFORE_MERGE", "BEFORE_REPORT", "PAUSE", "compaction_worker"]
