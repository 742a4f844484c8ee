"""The Spark bridge: the one process of the cluster that runs merges on Spark.

Why a process: a Spark-on-Ray session costs 20-40 s and ~2 GB to start (DESIGN.md §7),
so the cluster keeps one, started lazily by the first job and reused by every later one,
and compaction workers reach it by name (`BRIDGE_NAME`) with a call
(`bridge_protocol.py`):

- `Merge(MergeRequest)` -> `Merged(BlockMeta)` | `JobFailed(typed exception)`. A bad
  request is answered at once (BadBridgeRequest); a merge that fails (a missing or
  corrupt source, a conflict, Spark itself) is answered with the merge's typed error and
  counted as a failure; nothing replaces the sources either way (`merge_job`).
- `MergeRanges(RangeMergeRequest)` -> `Merged(RangeMergeResult)` | `JobFailed(typed
  exception)`: the branch tier's metarange merge as spans (`branches/spark_merge.py`),
  in the same session and queue.
- Status() -> a `BridgeStatus`, answered while a job runs: the job runs off the
  process's loop (`offload`, default `asyncio.to_thread`), so the mailbox keeps moving.
- `Stop()` -> `Stopped()`: queued jobs are refused (BridgeStopped), the running one is
  cancelled in Spark and answered, the session is stopped, the process ends.

One job at a time: Spark parallelises inside a job, and the session is sized for one.
Up to `max_queued` more wait in order; beyond that a request is refused (BridgeBusy)
rather than queued without bound. The simulator has no threads: on `sim`, pass
`offload=run_inline` (the job then runs on the process's loop and blocks it).
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Final, TypeVar

from sediment import metrics
from sediment.actors.blocks.errors import BlockError
from sediment.actors.blocks.meta import BlockMeta, check_meta
from sediment.actors.branches.errors import BranchesError
from sediment.actors.branches.span_merge import (
    RangeMergeRequest,
    RangeMergeResult,
    check_range_request,
)
from sediment.actors.spark import session as spark_session_module
from sediment.actors.spark.merge_job import SparkMergeFailed, spark_merge
from sediment.actors.spark.session import SparkSettings, SparkUnavailable
from sediment.actors.spark.shell.bridge_protocol import (
    JobFailed,
    JobOutcome,
    Merge,
    Merged,
    MergeRanges,
    Stop,
    Stopped,
)
from sediment.log import get_logger
from sediment.runtime.common_calls import Status
from sediment.runtime.messages import Call, CallRef
from sediment.runtime.process import Process

_log = get_logger("sediment.spark.bridge")

BRIDGE_NAME: Final = "spark_bridge"
DEFAULT_MAX_QUEUED: Final = 8

MERGES: Final = metrics.Counter("spark_merges", "Spark bridge merge requests by outcome",
                                ("outcome",))

SessionFactory = Callable[[SparkSettings], Any]
Offload = Callable[[Callable[[], Any]], Awaitable[Any]]
"""Runs a blocking function without blocking the process: `asyncio.to_thread`."""
_T = TypeVar("_T")
_R = TypeVar("_R")  # the result type a bridge job answers


class BridgeError(Exception):
    """The bridge refused a request; it changed nothing."""


class BadBridgeRequest(BridgeError):
    """A request the bridge does not know, or a merge request with malformed fields."""


class BridgeBusy(BridgeError):
    """A job is running and the queue is full: retry later."""


class BridgeStopped(BridgeError):
    """The bridge is stopping: it takes no more jobs."""


@dataclass(frozen=True, slots=True)
class MergeRequest:
    """`merge_blocks`'s arguments: merge `sources` (one shard, metadata from the index)
    under `root` into block `block_id` at `level`, applying `compaction_revision`."""

    root: str
    sources: tuple[BlockMeta, ...]
    block_id: str
    level: int
    compaction_revision: int
    created_at: float


@dataclass(frozen=True, slots=True)
class BridgeStatus:
    """`session`: "not started", "running" or "stopping"; `running`: the output block id
    of the job in flight; counts since the bridge started."""

    session: str
    running: str | None
    queued: int
    completed: int
    failed: int
    refused: int


def check_request(request: object) -> str | None:
    """Why `request` is not a well-formed MergeRequest, or None (it crossed a process
    boundary: every field is checked here, before a job is queued)."""
    if not isinstance(request, MergeRequest):
        return f"not a MergeRequest: {type(request).__name__}"
    if not isinstance(request.root, str) or not request.root:
        return f"root must be a non-empty str, got {request.root!r}"
    if not isinstance(request.sources, tuple) or not request.sources:
        return "sources must be a non-empty tuple of BlockMeta"
    for source in request.sources:
        problem = check_meta(source)
        if problem is not None:
            return f"source: {problem}"
    if not isinstance(request.block_id, str) or check_meta(
            replace(request.sources[0], id=request.block_id)) is not None:
        return f"bad output block id {request.block_id!r}"
    for name in ("level", "compaction_revision"):
        value = getattr(request, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return f"{name} must be a non-negative int, got {value!r}"
    created: object = request.created_at
    if not isinstance(created, int | float) or isinstance(created, bool) \
            or not math.isfinite(created):
        return f"created_at must be a finite number, got {request.created_at!r}"
    return None


AnyRequest = MergeRequest | RangeMergeRequest


def _label(request: AnyRequest) -> str:
    return request.block_id if isinstance(request, MergeRequest) else request.label


def _size(result: object) -> int:
    """Rows of a block merged, entries written by a metarange merge."""
    if isinstance(result, RangeMergeResult):
        return result.stats.entries_written
    return int(getattr(result, "row_count", 0))


async def run_inline(job: Callable[[], _T]) -> _T:
    """Run the job on the process's own loop (the simulator has no threads)."""
    return job()


@dataclass(frozen=True, slots=True)
class _JobDone:
    """The running job's outcome, posted to the bridge's own mailbox."""

    serial: int
    outcome: JobOutcome


@dataclass(frozen=True, slots=True)
class _Health:
    """Time to look at the running job: its Spark executors, its age."""

    serial: int


@dataclass(frozen=True, slots=True)
class _Running:
    serial: int
    from_: CallRef
    request: AnyRequest
    task: asyncio.Task[None]
    started: float


@dataclass(slots=True)
class _Bridge:
    settings: SparkSettings
    session_factory: SessionFactory
    session_stopper: Callable[[], None]
    offload: Offload
    max_queued: int
    job_timeout: float = 900.0
    health_interval: float = 5.0
    spark: Any = None
    broken: bool = False  # the session lost its executors or hung: replaced before next use
    executor_grace: float = 30.0  # no executor this long (a new session gets its own) = lost
    no_executor_since: float | None = None
    queue: deque[tuple[CallRef, AnyRequest]] = field(default_factory=deque)
    running: _Running | None = None
    stop_from: CallRef | None = None
    serial: int = 0
    completed: int = 0
    failed: int = 0
    refused: int = 0

    def status(self) -> BridgeStatus:
        if self.stop_from is not None:
            session = "stopping"
        else:
            session = "not started" if self.spark is None else "running"
        running = None if self.running is None else _label(self.running.request)
        return BridgeStatus(session, running, len(self.queue), self.completed, self.failed,
                            self.refused)

    def session(self) -> Any:
        """The Spark session, started on first use (in the job's thread); a broken one is
        stopped and replaced (RayDP starts a new app, with new executors)."""
        if self.broken and self.spark is not None:
            _log.warning("replacing the Spark session")
            try:
                self.session_stopper()
            except Exception as exc:  # noqa: BLE001 - a new session is started either way
                _log.warning("stopping the broken Spark session failed", error=str(exc))
            self.spark = None
        self.broken = False
        if self.spark is None:
            self.spark = self.session_factory(self.settings)
        return self.spark

    def executors(self) -> int | None:
        """Live Spark executors of the session (None: unknown). RayDP does not restart an
        executor actor that died: a job then waits for one forever."""
        if self.spark is None:
            return None
        try:
            infos = self.spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
            return max(0, len(infos) - 1)  # the driver is listed too
        except Exception:  # noqa: BLE001 - local sessions, a session being stopped
            return None

    def job(self, request: AnyRequest) -> Callable[[], BlockMeta | RangeMergeResult]:
        if isinstance(request, RangeMergeRequest):
            from sediment.actors.branches.spark_merge import spark_apply

            ranges = request
            return lambda: spark_apply(self.session(), ranges)

        def merge() -> BlockMeta:
            return spark_merge(self.session(), request.root, request.sources,
                               block_id=request.block_id, level=request.level,
                               compaction_revision=request.compaction_revision,
                               created_at=request.created_at)
        return merge


async def spark_bridge(ctx: Process, settings: SparkSettings | None = None,
                       session_factory: SessionFactory | None = None,
                       session_stopper: Callable[[], None] | None = None,
                       max_queued: int = DEFAULT_MAX_QUEUED,
                       offload: Offload | None = None, job_timeout: float = 900.0,
                     health_interval: float = 5.0) -> None:
    """Process entry: register as `BRIDGE_NAME` and serve merges until `Stop()`.

    `session_factory(settings)` gives the session (default `session.spark_session`,
    Spark on Ray); `session_stopper()` ends it (default `session.stop_spark`); tests
    inject a local-mode session and a stopper that leaves it running. Positional, as
    `spawn` passes arguments; on Ray they must pickle (module-level functions).
    A running job is checked every `health_interval` s: when its session has no live
    executor left, or it has run `job_timeout` s, its Spark jobs are cancelled (the
    caller gets SparkMergeFailed) and the session is replaced before the next job."""
    if not isinstance(max_queued, int) or max_queued < 0:
        raise ValueError(f"max_queued must be a non-negative int, got {max_queued!r}")
    bridge = _Bridge(settings or SparkSettings(),
                     session_factory or spark_session_module.spark_session,
                     session_stopper or spark_session_module.stop_spark,
                     offload or asyncio.to_thread, max_queued, job_timeout, health_interval)
    await ctx.register(BRIDGE_NAME)
    _log.info("spark bridge up", max_queued=max_queued)
    try:
        while True:
            msg = await ctx.receive()
            if isinstance(msg, Call):
                _on_call(ctx, bridge, msg)
            elif isinstance(msg, _JobDone):
                _on_done(ctx, bridge, msg)
            elif isinstance(msg, _Health):
                _on_health(ctx, bridge, msg)
            else:
                _log.warning("spark bridge got an unexpected message", message=repr(msg)[:200])
            if bridge.stop_from is not None and bridge.running is None:
                await _stop(ctx, bridge)
                return
    finally:
        if bridge.running is not None and not bridge.running.task.done():
            bridge.running.task.cancel()


def _on_call(ctx: Process, bridge: _Bridge, call: Call) -> None:
    request = call.request
    if isinstance(request, Status):
        ctx.reply(call.from_, bridge.status())
    elif isinstance(request, Merge):
        _on_merge(ctx, bridge, call.from_, request.request, check_request)
    elif isinstance(request, MergeRanges):
        _on_merge(ctx, bridge, call.from_, request.request, check_range_request)
    elif isinstance(request, Stop):
        _on_stop(ctx, bridge, call.from_)
    else:
        _refuse(ctx, bridge, call.from_, BadBridgeRequest(f"unknown request {request!r:.200}"))


def _refuse(ctx: Process, bridge: _Bridge, from_: CallRef, error: BridgeError) -> None:
    bridge.refused += 1
    MERGES.inc(tags={"outcome": "refused"})
    _log.warning("spark bridge refused a request", error=str(error))
    ctx.reply(from_, JobFailed(error))


def _on_merge(ctx: Process, bridge: _Bridge, from_: CallRef, request: Any,
              check: Callable[[object], str | None]) -> None:
    problem = check(request)
    if problem is not None:
        _refuse(ctx, bridge, from_, BadBridgeRequest(problem))
    elif bridge.stop_from is not None:
        _refuse(ctx, bridge, from_, BridgeStopped("the Spark bridge is stopping"))
    elif bridge.running is None:
        _start(ctx, bridge, from_, request)
    elif len(bridge.queue) < bridge.max_queued:
        bridge.queue.append((from_, request))
    else:
        _refuse(ctx, bridge, from_, BridgeBusy(
            f"a merge is running and {bridge.max_queued} are queued"))


def _start(ctx: Process, bridge: _Bridge, from_: CallRef, request: AnyRequest) -> None:
    bridge.serial += 1
    serial, job = bridge.serial, bridge.job(request)
    _log.info("spark merge started", block=_label(request))

    async def run() -> None:
        try:
            outcome: JobOutcome = Merged(await bridge.offload(job))
        except Exception as exc:  # noqa: BLE001 - every failure is answered, typed
            outcome = JobFailed(_typed(exc))
        ctx.send(ctx.self(), _JobDone(serial, outcome))

    task = asyncio.get_running_loop().create_task(run())
    bridge.running = _Running(serial, from_, request, task, ctx.now())
    ctx.send_after(bridge.health_interval, ctx.self(), _Health(serial))


def _on_health(ctx: Process, bridge: _Bridge, health: _Health) -> None:
    running = bridge.running
    if running is None or running.serial != health.serial or bridge.broken:
        return
    now, executors = ctx.now(), bridge.executors()
    if executors != 0:
        bridge.no_executor_since = None
    elif bridge.no_executor_since is None:
        bridge.no_executor_since = now
    lost = (bridge.no_executor_since is not None
            and now - bridge.no_executor_since > bridge.executor_grace)
    age = now - running.started
    if lost or age > bridge.job_timeout:
        why = "no live Spark executor" if lost else f"running for {age:.0f} s"
        bridge.no_executor_since = None
        _log.error("cancelling the Spark merge; the session will be replaced",
                   block=_label(running.request), why=why)
        bridge.broken = True
        try:
            bridge.spark.sparkContext.cancelAllJobs()
        except Exception as exc:  # noqa: BLE001 - best effort: the job ends either way
            _log.warning("could not cancel the running Spark job", error=str(exc))
        return
    ctx.send_after(bridge.health_interval, ctx.self(), _Health(health.serial))


def _typed(exc: Exception) -> Exception:
    """An error a caller in another process can receive and tell apart."""
    if isinstance(exc, BlockError | BranchesError | BridgeError | SparkUnavailable):
        return exc
    return SparkMergeFailed(f"{type(exc).__name__}: {exc}"[:1000])


def _on_done(ctx: Process, bridge: _Bridge, done: _JobDone) -> None:
    running = bridge.running
    if running is None or running.serial != done.serial:
        return
    bridge.running = None
    request = running.request
    outcome = done.outcome
    if isinstance(outcome, Merged):
        bridge.completed += 1
        MERGES.inc(tags={"outcome": "ok"})
        _log.info("spark merge finished", block=_label(request), rows=_size(outcome.result))
    else:
        bridge.failed += 1
        MERGES.inc(tags={"outcome": "failed"})
        _log.error("spark merge failed", block=_label(request),
                   error=f"{type(outcome.error).__name__}: {outcome.error}")
    ctx.reply(running.from_, done.outcome)
    if bridge.queue and bridge.stop_from is None:
        next_from, next_request = bridge.queue.popleft()
        _start(ctx, bridge, next_from, next_request)


def _on_stop(ctx: Process, bridge: _Bridge, from_: CallRef) -> None:
    if bridge.stop_from is not None:
        ctx.reply(from_, JobFailed(BridgeStopped("the Spark bridge is already stopping")))
        return
    bridge.stop_from = from_
    while bridge.queue:
        queued_from, _ = bridge.queue.popleft()
        _refuse(ctx, bridge, queued_from, BridgeStopped("the Spark bridge is stopping"))
    if bridge.running is not None and bridge.spark is not None:
        try:
            bridge.spark.sparkContext.cancelAllJobs()
        except Exception as exc:  # noqa: BLE001 - best effort: the job ends either way
            _log.warning("could not cancel the running Spark job", error=str(exc))


async def _stop(ctx: Process, bridge: _Bridge) -> None:
    """Stop the session (if one was started) and answer the stop call."""
    if bridge.spark is not None:
        try:
            await bridge.offload(bridge.session_stopper)
        except Exception as exc:  # noqa: BLE001 - the process ends either way
            _log.warning("stopping Spark failed", error=str(exc))
        bridge.spark = None
    _log.info("spark bridge stopped", completed=bridge.completed, failed=bridge.failed)
    if bridge.stop_from is not None:
        ctx.reply(bridge.stop_from, Stopped())


async def merge_via_bridge(ctx: Process, request: MergeRequest,
                           timeout: float | None) -> BlockMeta:
    """Run `request` on the cluster's Spark bridge: the output block's metadata, or the
    bridge's typed error raised (BlockError for the merge, BridgeError for a refusal,
    SparkUnavailable); CallTimeout / NoProc from the call itself. A merge whose call
    timed out may still finish: retrying with the same block id is safe (an existing
    block with the same rows is kept and returned)."""
    return await _ask(ctx, Merge(request), BlockMeta, timeout)


async def merge_ranges_via_bridge(ctx: Process, request: RangeMergeRequest,
                                  timeout: float | None) -> RangeMergeResult:
    """Run a metarange merge on the cluster's Spark bridge: its result, or the bridge's
    typed error raised (BranchesError for the merge, BridgeError for a refusal,
    SparkUnavailable); CallTimeout / NoProc from the call itself. Retrying is safe:
    every file is content-addressed and written create-if-absent."""
    return await _ask(ctx, MergeRanges(request), RangeMergeResult, timeout)


async def _ask(ctx: Process, request: Merge | MergeRanges, result: type[_R],
               timeout: float | None) -> _R:
    """One job on the bridge: its result of type `result`, or its typed error raised."""
    reply = await ctx.call(BRIDGE_NAME, request, timeout=timeout)
    if isinstance(reply, Merged) and isinstance(reply.result, result):
        return reply.result
    if isinstance(reply, JobFailed) and isinstance(reply.error, Exception):
        raise reply.error
    raise BridgeError(f"unexpected reply from the Spark bridge: {reply!r:.200}")


__all__ = [
    "BRIDGE_NAME",
    "BadBridgeRequest",
    "BridgeBusy",
    "BridgeError",
    "BridgeStatus",
    "BridgeStopped",
    "MergeRequest",
    "check_request",
    "merge_ranges_via_bridge",
    "merge_via_bridge",
    "run_inline",
    "spark_bridge",
]
