"""A watcher process: one client session holding many watches (the shell of watch_core).

Its node process spawns it and feeds it NewRevisions(revision, events) and
NewFloor(revision) (`node_protocol.py`); it admits each new watch through the node (the
one place that decides admission against compaction notices) before the core sees it,
reads history from the local machine for replays, and reports each watch's position back
to the node so the cluster minimum (and so compaction) can move on.

The client pulls: `Next(max_wait)` answers every response queued so far (waiting up to
max_wait for the first), and pulling is the acknowledgement the core's flow control
counts. A client that stops pulling while events keep coming gets the stream closed
(never a gap). The calls and their answers: `session_protocol.py`. A plain `Close()`
message closes it too (a client giving up on a session it cannot reach still frees it),
and a session opened for an owner process ends when the owner does: a session nobody
can pull from would otherwise hold its watches, and so the cluster's compaction, back
for good.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from sediment import log
from sediment.actors.kv import metrics as kv_metrics
from sediment.actors.kv import watch_core as wc
from sediment.actors.kv import watch_protocol as wp
from sediment.actors.kv.errors import ErrCompacted, KvError
from sediment.actors.kv.shell import reads
from sediment.actors.kv.shell import session_protocol as sp
from sediment.actors.kv.shell.node_protocol import (
    Admit,
    NewFloor,
    NewRevisions,
    WatchEnded,
    WatchPositions,
)
from sediment.runtime.common_calls import UnknownRequest
from sediment.runtime.core_driver import CoreDriver
from sediment.runtime.messages import Call, Down
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.kv.watcher")

WatchDriver = CoreDriver[wc.WatcherState, wp.WatcherEvent, wp.Effect]


@dataclass
class _Watcher:
    ctx: Process
    node: Pid
    raft: Pid
    driver: WatchDriver  # the core's state and the events still to step
    outbox: list[Any] = field(default_factory=list)
    parked: Any = None  # the From of a waiting `Next` call
    reported: dict[int, int] = field(default_factory=dict)
    tick_at: float | None = None
    closed: str | None = None
    next_id: int = 0  # the next auto watch id: never reused in a session
    owner: Pid | None = None  # the client process the session ends with, if any

    @property
    def state(self) -> wc.WatcherState:
        return self.driver.state


@dataclass(frozen=True)
class _NextTimeout:
    ref: Any


@dataclass(frozen=True)
class _Tick:
    at: float


async def watcher(ctx: Process, node: Pid, raft: Pid, committed: int, floor: int,
                  max_pending: int, progress_interval: float,
                  owner: Pid | None = None) -> None:
    """Process entry: serve one session until it is closed, or its node or owner goes
    away."""
    config = wc.WatcherConfig(max_pending=max_pending, progress_interval=progress_interval)
    driver: WatchDriver = CoreDriver(ctx, wc.step, wc.init(config, committed, floor, ctx.now()))
    w = _Watcher(ctx, node, raft, driver, owner=owner)
    driver.on(wp.Deliver, lambda effect: _to_client(w, effect))
    driver.on(wp.Progress, lambda effect: _to_client(w, effect))
    driver.on(wp.Canceled, lambda effect: _to_client(w, effect))
    driver.on(wp.FetchHistory, lambda effect: _fetch(w, effect))
    driver.on(wp.CloseWatcher, lambda effect: _close(w, effect.reason))
    driver.ignore(wp.Created, wp.Rejected)  # answers to the call that stepped them
    driver.after_step(lambda effects: _answer_if_parked(w))
    ctx.monitor(node)
    if owner is not None:
        ctx.monitor(owner)
    while w.closed is None:
        msg = await ctx.receive()
        await _handle(w, msg)
        await driver.drain(while_=lambda: w.closed is None)
        _report(w)
        _schedule_tick(w)
    kv_metrics.watch_session_closed(ctx.self().node, w.closed)
    if w.parked is not None:
        ctx.reply(w.parked, sp.Closed(w.closed, _take(w)))


async def _handle(w: _Watcher, msg: Any) -> None:
    if isinstance(msg, NewRevisions):
        event = (wp.Committed(msg.revision, msg.events) if msg.events is not None
                 else wp.Advanced(msg.revision))
        w.driver.post(event)
    elif isinstance(msg, NewFloor):
        w.driver.post(wp.FloorRaised(msg.revision))
    elif isinstance(msg, sp.Close):
        w.closed = "client"
    elif isinstance(msg, Call):
        await _on_call(w, msg)
    elif isinstance(msg, _NextTimeout):
        if w.parked is not None and w.parked == msg.ref:
            _answer_parked(w, [])
    elif isinstance(msg, _Tick):
        w.tick_at = None
        w.driver.post(wp.Tick(w.ctx.now()))
    elif isinstance(msg, Down) and msg.pid == w.node:
        w.closed = "node_down"
    elif isinstance(msg, Down) and msg.pid == w.owner:
        w.closed = "owner_down"


async def _on_call(w: _Watcher, call: Call) -> None:
    ctx, req = w.ctx, call.request
    if isinstance(req, wp.CreateWatch):
        ctx.reply(call.from_, await _create(w, req))
    elif isinstance(req, wp.CancelWatch):
        effects = await _step(w, req)
        ctx.reply(call.from_, _answer(effects, wp.Canceled))
    elif isinstance(req, wp.RequestProgress):
        await _step(w, wp.RequestProgress())
        ctx.reply(call.from_, sp.Acked())
    elif isinstance(req, sp.Next):
        if w.parked is not None:  # one reader per session: the older call gets nothing
            _answer_parked(w, [])
        if w.outbox or req.max_wait <= 0:
            ctx.reply(call.from_, sp.Responses(_take(w)))
        else:
            ctx.send_after(req.max_wait, ctx.self(), _NextTimeout(call.from_))
            w.parked = call.from_
    elif isinstance(req, sp.Positions):
        ctx.reply(call.from_, sp.SessionPositions(w.state.committed, w.state.floor,
                                                  wc.positions(w.state)))
    elif isinstance(req, sp.Close):
        w.closed = "client"
        ctx.reply(call.from_, sp.Responses(_take(w)))
    else:
        ctx.reply(call.from_, UnknownRequest.of(req))


async def _create(w: _Watcher, request: wp.CreateWatch) -> Any:
    """Admission at the node first (it also resolves "from now"), then the core. The
    request came off the wire: its fields are checked by the core."""
    wid = request.watch_id if request.watch_id is not None else _free_id(w)
    if wid in w.state.watches:
        effects = await _step(w, request)
        return _answer(effects, wp.Rejected)
    start = request.start_revision
    key = (str(w.ctx.self()), wid)
    verdict = await w.ctx.call(w.node, Admit(key, start if start >= 0 else 0), timeout=30)
    if isinstance(verdict, ErrCompacted):
        return wp.Canceled(wid, "compacted", verdict.compact_revision)
    if not hasattr(verdict, "start_revision"):
        return sp.SessionError(verdict)
    asked = replace(request, watch_id=wid,
                    start_revision=start if start < 0 else verdict.start_revision)
    effects = await _step(w, asked)
    answer = _answer(effects, wp.Created, wp.Rejected, wp.Canceled)
    if not isinstance(answer, wp.Created):
        w.ctx.send(w.node, WatchEnded(w.ctx.self(), wid))
    elif start == 0:
        # "from now" is the node's now, which may be ahead of this session's (its news
        # of the revisions between is still on the way): the header says the revision
        # the watch starts after, as etcd's does, or a client that resumes from the
        # header would believe it was told of revisions it never sees
        answer = replace(answer, revision=max(answer.revision, answer.start_revision - 1))
    return answer


def _free_id(w: _Watcher) -> int:
    """etcd's watchStream: auto ids count up and are never reused in a session. The id is
    picked here (admission needs it before the core sees the request) and handed to the
    core as an explicit id, which does not move the core's counter: so the shell keeps its
    own, consumed even when the watch is refused. Reusing an id after a cancel or a
    refusal let a client confuse the old watch with the new one (found by the sim
    fault history: two watch records under one id)."""
    wid = max(w.next_id, w.state.next_watch_id)
    while wid in w.state.watches:
        wid += 1
    w.next_id = wid + 1
    return wid


async def _step(w: _Watcher, event: wp.WatcherEvent) -> list[Any]:
    """One core step now (for a call that answers with its effects); a history fetch's
    answer is queued as the next event."""
    return await w.driver.step(event)


def _to_client(w: _Watcher, effect: wp.Deliver | wp.Progress | wp.Canceled) -> None:
    """Client-bound effects queue in the outbox (answered to a waiting pull once the
    step is done)."""
    w.outbox.append(effect)
    if isinstance(effect, wp.Canceled):
        w.ctx.send(w.node, WatchEnded(w.ctx.self(), effect.watch_id))
        kv_metrics.watch_canceled(w.ctx.self().node, effect.reason)


def _close(w: _Watcher, reason: str) -> None:
    w.closed = reason


def _answer_if_parked(w: _Watcher) -> None:
    if w.outbox and w.parked is not None:
        _answer_parked(w, _take(w))


async def _fetch(w: _Watcher, f: wp.FetchHistory) -> wp.WatcherEvent:
    found = await reads.watch_history(w.ctx, w.raft, f.from_revision, f.to_revision, f.key,
                                      f.range_end, f.prev_kv)
    if isinstance(found, KvError):
        return wp.FetchFailed(f.fetch_id, found)
    events = reads.as_events(found)
    if events is None:
        return wp.FetchFailed(f.fetch_id, KvError(f"history read failed: {found!r}"[:200]))
    return _cut(f, events)


def _cut(f: wp.FetchHistory, events: tuple[Any, ...]) -> wp.HistoryFetched:
    """The answer cut after the whole revision that reaches the fetch's budget."""
    if len(events) <= f.limit:
        return wp.HistoryFetched(f.fetch_id, f.to_revision, events)
    last = events[max(f.limit, 1) - 1].kv.mod_revision
    kept = tuple(e for e in events if e.kv.mod_revision <= last)
    return wp.HistoryFetched(f.fetch_id, last, kept)


def _answer_parked(w: _Watcher, responses: list[Any]) -> None:
    w.ctx.reply(w.parked, sp.Responses(responses))
    w.parked = None


def _take(w: _Watcher) -> list[Any]:
    """Everything queued for the client; handing it over acknowledges the deliveries."""
    out, w.outbox = w.outbox, []
    seqs = [r.seq for r in out if isinstance(r, wp.Deliver)]
    if seqs:  # stepped by the main loop: an ack may let the next replay fetch go out
        w.driver.post(wp.Ack(max(seqs)))
    return out


def _answer(effects: list[Any], *kinds: type) -> Any:
    for effect in effects:
        if isinstance(effect, kinds):
            return effect
    return sp.Acked()


def _report(w: _Watcher) -> None:
    """Tell the node how far each watch got (only what changed)."""
    positions = wc.positions(w.state)
    changed = {wid: rev for wid, rev in positions.items() if w.reported.get(wid) != rev}
    w.reported = positions
    if changed:
        w.ctx.send(w.node, WatchPositions(w.ctx.self(), changed))


def _schedule_tick(w: _Watcher) -> None:
    due = wc.wakeup_at(w.state)
    if due is None or (w.tick_at is not None and w.tick_at <= due):
        return
    w.tick_at = due
    w.ctx.send_at(due, w.ctx.self(), _Tick(due))


__all__ = ["watcher"]
