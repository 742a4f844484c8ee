"""The watcher client of a scenario run: one watch over the traffic keys on one node.

It is opened when the scenario says, slow or paused as it says, resumed where it got to
when its stream ends (as an etcd client does), and finally bookmarked at the last
revision. Every response and the stream's end go to the run's recorder (`processes.py`).
Like the other run processes it lives on the runner's `client` node. With `client: grpc`
its watches go over an etcd Watch stream to the node's endpoint (`grpc_watch.py`)
instead of a watch session process on the node.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import Any

from sediment.actors.kv import watch_protocol as wp
from sediment.actors.kv.names import kv_node_name
from sediment.actors.kv.shell import session_protocol as sp
from sediment.actors.kv.shell.node_protocol import OpenWatcher
from sediment.runtime.common_calls import Status
from sediment.runtime.errors import CallError, ReceiveTimeout
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process
from sediment.scenarios import recorder_protocol as rp
from sediment.scenarios.grpc_watch import GrpcWatchStream
from sediment.scenarios.history import WatchLog, WatchResponse
from sediment.scenarios.observers import STATUS_TIMEOUT
from sediment.scenarios.processes import wait_for_go
from sediment.scenarios.run_protocol import FinishWatch
from sediment.scenarios.schema import WatcherSpec
from sediment.scenarios.traffic import KEY_PREFIX, KEYSPACE_END

WATCH_POLL = 0.1  # seconds a watcher client waits for its next responses
PROGRESS_EVERY = 1.0  # seconds between the progress requests of a watcher client
FINISH_POLLS = 400  # polls of a watcher client waiting for its final bookmark
MAX_WATCH_RETRIES = 200  # failed (re)opens of one watcher client


@dataclass(frozen=True)
class WatcherConfig:
    client: int
    spec: WatcherSpec
    node: str
    recorder: Pid
    transport: str = "native"  # or "grpc": etcd's Watch stream (Ray only)


class SessionLost(Exception):
    """The watch stream broke or did not answer (as a CallError of a session)."""


class _NativeSession:
    """A watch session process on the node (the KV's own protocol)."""

    def __init__(self, ctx: Process, pid: Pid) -> None:
        self.ctx, self.pid = ctx, pid

    async def create(self, request: wp.CreateWatch) -> Any:
        return await self.ctx.call(self.pid, request, timeout=5)

    async def next(self, wait: float) -> Any:
        return await self.ctx.call(self.pid, sp.Next(wait), timeout=wait + 5)

    async def progress(self) -> None:
        await self.ctx.call(self.pid, wp.RequestProgress(), timeout=5)

    async def close(self) -> None:
        with contextlib.suppress(CallError):
            await self.ctx.call(self.pid, sp.Close(), timeout=STATUS_TIMEOUT)

    async def abandon(self) -> None:
        self.ctx.send(self.pid, sp.Close())


class _GrpcSession:
    """An etcd Watch stream to the node's endpoint (`grpc_watch.py`)."""

    def __init__(self, stream: GrpcWatchStream) -> None:
        self.stream = stream

    async def create(self, request: wp.CreateWatch) -> Any:
        answer = await self.stream.create(request)
        if answer is None:
            raise SessionLost(self.stream.ended or "no created response")
        return answer

    async def next(self, wait: float) -> Any:
        return await self.stream.next(wait)

    async def progress(self) -> None:
        if not await self.stream.progress():
            raise SessionLost(self.stream.ended or "progress request not sent")

    async def close(self) -> None:
        await self.stream.close()

    async def abandon(self) -> None:
        await self.stream.close()


@dataclass
class _Watching:
    """A watcher client's state: its session, its open watch's log, where to resume."""

    ctx: Process
    cfg: WatcherConfig
    session: _NativeSession | _GrpcSession | None = None
    log: WatchLog | None = None
    watch_id: int | None = None
    resume_at: int = 0  # the start of the next watch (0: from now)
    finish_head: int | None = None  # set by the driver: bookmark this revision, then end
    t0: float = 0.0  # the run's start (the driver's Go)
    bookmarked: int = 0
    failures: int = 0
    sessions: int = 0  # sessions opened so far: the token of the next open
    next_progress: float = 0.0

    def end(self, reason: str, compact_revision: int = 0) -> None:
        """The open watch ended: report its log, resume after what it got."""
        if self.log is None:
            return
        log = replace(self.log, end_t=self.ctx.now(), end_reason=reason,
                      compact_revision=compact_revision)
        self.ctx.send(self.cfg.recorder, rp.WatchDone(log))
        self.resume_at = resume_point(log)
        self.log, self.watch_id = None, None

    def respond(self, revision: int, events: tuple[Any, ...] = ()) -> None:
        if self.log is not None:
            self.log = replace(self.log, responses=(
                *self.log.responses, WatchResponse(self.ctx.now(), revision, events)))


def resume_point(log: WatchLog) -> int:
    """Where a client resumes a watch that ended: after the last revision it got (event
    or progress), above a compaction that canceled it, else at its own start."""
    seen = [e.kv.mod_revision for r in log.responses for e in r.events]
    seen += [r.revision for r in log.responses if not r.events]
    start = log.start or 0
    at = max(seen) + 1 if seen else start
    if log.end_reason == "compacted":
        at = max(at, log.compact_revision + 1)
    return at


async def _status(ctx: Process, node: str, name: str) -> dict[str, Any] | None:
    try:
        answer = await ctx.call(name, Status(), timeout=STATUS_TIMEOUT)
    except CallError:
        return None
    return answer if isinstance(answer, dict) else None


async def _resolve_start(ctx: Process, spec: WatcherSpec, node: str) -> int:
    if not isinstance(spec.start, str):
        return spec.start
    if spec.start == "now":
        return 0
    status = await _status(ctx, node, kv_node_name(node))
    compact = int(status.get("compact_revision", 0)) if status else 0
    if spec.start == "compact":
        return max(compact, 1)
    if spec.start == "below_compact":
        return max(compact - 1, 1)
    return compact + 1


async def watcher_client(ctx: Process, cfg: WatcherConfig) -> None:
    """Process entry: see the module doc. Ends after the driver's `FinishWatch(head)` once
    a progress notification at or above head arrived (or its polls ran out)."""
    w = _Watching(ctx, cfg)
    w.t0 = (await wait_for_go(ctx)).t0
    wait = w.t0 + cfg.spec.open_at - ctx.now()
    if wait > 0:
        await _sleep_watching(w, wait)
    if w.finish_head is None:
        w.resume_at = await _resolve_start(ctx, cfg.spec, cfg.node)
        await _watch_loop(w)
    if w.log is not None:  # still open at the end: reported as open
        ctx.send(cfg.recorder, rp.WatchDone(w.log))
    if w.session is not None:
        await w.session.close()
    ctx.send(cfg.recorder, rp.Finished(f"watcher-{cfg.client}"))


async def _sleep_watching(w: _Watching, seconds: float) -> None:
    """Sleep, but wake for the driver's finish message."""
    try:
        msg = await w.ctx.receive(lambda m: isinstance(m, FinishWatch), timeout=seconds)
        w.finish_head = msg.head
    except ReceiveTimeout:
        pass


async def _finish_message(w: _Watching) -> None:
    try:
        msg = await w.ctx.receive(lambda m: isinstance(m, FinishWatch), timeout=0)
    except ReceiveTimeout:
        return
    w.finish_head = msg.head


async def _watch_loop(w: _Watching) -> None:
    ctx, spec = w.ctx, w.cfg.spec
    finish_polls = 0
    while True:
        if w.finish_head is None:
            await _finish_message(w)
        if w.finish_head is not None:
            if w.bookmarked >= w.finish_head and w.log is not None:
                return
            finish_polls += 1
            if finish_polls > FINISH_POLLS or w.failures > MAX_WATCH_RETRIES:
                return
        elif spec.pause_at is not None and _paused(w):
            until = w.t0 + (spec.resume_at if spec.resume_at is not None else 1e18)
            await _sleep_watching(w, min(until - ctx.now(), 0.5))
            continue
        if w.log is None and not await _open(w):
            w.failures += 1
            if w.failures > MAX_WATCH_RETRIES:
                return
            await _sleep_watching(w, 0.1)
            continue
        await _poll(w)


def _paused(w: _Watching) -> bool:
    spec = w.cfg.spec
    t = w.ctx.now() - w.t0
    assert spec.pause_at is not None
    return spec.pause_at <= t and (spec.resume_at is None or t < spec.resume_at)


async def _open(w: _Watching) -> bool:
    """(Re)open the session if needed and create the watch at `resume_at`; False when
    it could not be created (retried later). A watch refused as compacted is logged
    (created and canceled at once) and resumed above the compaction."""
    ctx, cfg = w.ctx, w.cfg
    try:
        if w.session is None:
            w.session = await _open_session(w)
        spec = cfg.spec
        request = wp.CreateWatch(KEY_PREFIX, KEYSPACE_END, w.resume_at, None, spec.prev_kv,
                                 "no_put" in spec.filters, "no_delete" in spec.filters)
        w.log = WatchLog(0, cfg.client, KEY_PREFIX, KEYSPACE_END, w.resume_at, ctx.now(),
                         spec.prev_kv, request.no_put, request.no_delete)
        answer = await w.session.create(request)
    except (CallError, SessionLost):
        await _abandon(w)
        if w.log is not None:
            w.end("lost")
        return False
    if isinstance(answer, wp.Created):
        assert w.log is not None
        w.log = replace(w.log, created_t=ctx.now(), effective_start=answer.start_revision)
        w.watch_id = answer.watch_id
        w.next_progress = ctx.now() + PROGRESS_EVERY
        return True
    if isinstance(answer, wp.Canceled):
        w.end(answer.reason, answer.compact_revision)
        return False
    w.end("error")
    return False


async def _open_session(w: _Watching) -> _NativeSession | _GrpcSession:
    ctx, cfg = w.ctx, w.cfg
    if cfg.transport == "grpc":
        stream = GrpcWatchStream(ctx, cfg.node)
        if not await stream.open():
            raise SessionLost(f"no etcd endpoint on {cfg.node}")
        return _GrpcSession(stream)
    pid = await ctx.call(kv_node_name(cfg.node), OpenWatcher(ctx.self(), w.sessions),
                         timeout=5)
    w.sessions += 1  # a retry after a lost reply reuses the token: same session
    ctx.send(cfg.recorder, rp.SessionOpened(cfg.client, pid, cfg.node))
    return _NativeSession(ctx, pid)


async def _abandon(w: _Watching) -> None:
    """Give up on an unreachable session; ask it to close (if it still runs, its watches
    would hold the cluster's compaction back) and open a new one next time."""
    if w.session is not None:
        await w.session.abandon()
    w.session = None


async def _poll(w: _Watching) -> None:
    ctx = w.ctx
    assert w.session is not None
    try:
        if w.finish_head is not None or ctx.now() >= w.next_progress:
            await w.session.progress()
            w.next_progress = ctx.now() + PROGRESS_EVERY
        reply = await w.session.next(WATCH_POLL)
    except (CallError, SessionLost):
        await _abandon(w)
        w.end("lost")
        return
    for r in reply.responses:
        await _response(w, r)
    if isinstance(reply, sp.Closed):
        if isinstance(w.session, _GrpcSession):
            await w.session.close()
        w.session = None
        w.end(str(reply.reason))


async def _response(w: _Watching, r: Any) -> None:
    if isinstance(r, wp.Deliver) and r.watch_id == w.watch_id:
        w.respond(r.revision, tuple(r.events))
        if w.cfg.spec.slow:
            await w.ctx.sleep(w.cfg.spec.slow)
    elif isinstance(r, wp.Progress) and r.watch_id in (w.watch_id, wp.BROADCAST_ID):
        w.respond(r.revision)
        if r.watch_id == wp.BROADCAST_ID:
            w.bookmarked = max(w.bookmarked, r.revision)
    elif isinstance(r, wp.Canceled) and r.watch_id == w.watch_id:
        if _refused_on_the_wire(w, r):
            assert w.log is not None
            w.log = replace(w.log, created_t=None, effective_start=None)
        w.end(r.reason, r.compact_revision)


def _refused_on_the_wire(w: _Watching, r: wp.Canceled) -> bool:
    """etcd's Watch stream answers a start at or below the compaction (the admission
    floor, here) with a created response and then the compacted cancel, where the native
    session refuses the create: a compacted cancel before any other response of a watch
    that asked for such a start is that refusal, and the watch was never live. (A live
    watch canceled before its first response looks the same on etcd's wire, so over gRPC
    `compaction_safe` cannot tell the two apart; runs with native sessions can.)"""
    log = w.log
    return (w.cfg.transport == "grpc" and log is not None and not log.responses
            and r.reason == "compacted" and bool(log.start_revision)
            and r.compact_revision >= log.start_revision)


__all__ = ["FinishWatch", "WatcherConfig", "resume_point", "watcher_client"]
