"""The compaction service process: Pyroscope's PollCompactionJobs on the metastore leader.

The node's blocks process starts it (linked, registered as `service_name(node)`) when
the local raft member leads, and stops it when leadership goes. It decides nothing
itself; the metastore machine does (`service.prepare_plan` / `apply_plan`):

1. A worker calls `Poll(PollRequest)` (`service_protocol.py`). The service proposes
   `PreparePlan(request)` through its local raft member: the machine plans at that
   entry, whose index is the fencing token of every assignment and whose timestamp is
   the lease clock.
2. It proposes the returned `PlanUpdate` as `ApplyPlan`; every replica applies it
   (refused if the term changed in between) and the result is the worker's
   `PollResponse`: `Polled(response)`. A raft refusal passes on `PollNotLeader(hint)`;
   a refused plan or an unreachable member is `PollRefused(reason)`.

Polls are served one at a time, in arrival order, so no plan is prepared from a state
another plan is about to change. Polls that arrive meanwhile wait in a bounded queue;
past `max_pending_polls` they are answered `Busy()` at once. Lease expiry needs no
timer: an abandoned job is reassigned by the planning of the next poll.

Cleanup: every `cleanup_interval` the service reads the committed tombstones and
deletes the files of those whose cleanup delay has passed, measured on the raft clock
(the entry time of its latest plan, never its own clock). Jobs also carry due
tombstones to their workers (the planner's part, as in Pyroscope); deleting twice is
harmless, and the sweep reclaims files when no job comes along to carry them.

The same sweep collects garbage no index entry references (`orphans.py`): outputs of
fenced or failed attempts, level-0 files of a flusher that died before its AddBlocks
committed, temporary files and Spark scratch directories of interrupted writes. It
takes the next `orphan_batch` entries of the block store in turn, keeps those the local
state calls garbage, and deletes those a `FindOrphans` committed through the log still
calls garbage: a lagging replica's view never deletes anything.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from sediment import log
from sediment.actors.blocks import gc, merge
from sediment.actors.blocks import orphans as orph
from sediment.actors.blocks import planner as pl
from sediment.actors.blocks.errors import ErrMalformedCommand
from sediment.actors.blocks.jobs import (
    PlanUpdate,
    PollRequest,
    PollResponse,
    changes_nothing,
    response_for,
)
from sediment.actors.blocks.metastore import (
    ApplyPlan,
    FindOrphans,
    OrphansQuery,
    OrphanVerdicts,
    PreparePlan,
    TombstonesQuery,
    TombstonesResult,
)
from sediment.actors.blocks.shell.config import BlocksConfig
from sediment.actors.blocks.shell.names import METASTORE_GROUP
from sediment.actors.blocks.shell.service_protocol import (
    Busy,
    Poll,
    Polled,
    PollNotLeader,
    PollRefused,
)
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Done, Failed, NotLeader, Propose, Query, Reply
from sediment.runtime.common_calls import Status, UnknownRequest
from sediment.runtime.errors import CallError, ReceiveTimeout
from sediment.runtime.messages import Call
from sediment.runtime.offload import run_blocking
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.blocks.service")

AFTER_PREPARE = "blocks.service.after_prepare"  # failpoint: the plan is prepared, not applied


@dataclass(frozen=True)
class _Sweep:
    """The cleanup timer."""


@dataclass
class _Service:
    ctx: Process
    config: BlocksConfig
    term: int
    raft: Pid
    waiting: deque[Call] = field(default_factory=deque)
    raft_time: float | None = None  # entry time of the latest applied plan
    swept: set[str] = field(default_factory=set)  # tombstones whose files are gone
    served: int = 0
    idle: int = 0  # of those served, polls that changed nothing (no apply proposed)
    refused: int = 0
    deleted: int = 0
    gc_after: tuple[int, str] | None = None  # where the next orphan pass goes on
    orphans_deleted: dict[str, int] = field(default_factory=dict)  # by kind of entry
    recent_orphans: deque[str] = field(default_factory=deque)  # names of the last deleted


async def compaction_service(ctx: Process, config: BlocksConfig, term: int) -> None:
    """Process entry: serve polls for the leader of `term` until stopped."""
    node = ctx.self().node
    raft = await ctx.whereis(raft_name(METASTORE_GROUP, node))
    if raft is None:
        raise RuntimeError(f"the metastore raft member on {node} is not running")
    svc = _Service(ctx, config, term, raft)
    ctx.send_after(config.cleanup_interval, ctx.self(), _Sweep())
    _logger.info("compaction service up", term=term)
    while True:
        await _collect(svc)
        if svc.waiting:
            await _serve(svc, svc.waiting.popleft())


async def _collect(svc: _Service) -> None:
    """Take what the mailbox holds (waiting for one message if no poll is queued)."""
    ctx = svc.ctx
    if not svc.waiting:
        await _take(svc, await ctx.receive())
    while True:
        try:
            msg = await ctx.receive(timeout=0)
        except ReceiveTimeout:
            return
        await _take(svc, msg)


async def _take(svc: _Service, msg: Any) -> None:
    ctx = svc.ctx
    if isinstance(msg, _Sweep):
        await _sweep(svc)
        ctx.send_after(svc.config.cleanup_interval, ctx.self(), _Sweep())
        return
    if not isinstance(msg, Call):
        _logger.warning("compaction service got an unexpected message", message=repr(msg)[:200])
        return
    request = msg.request
    if isinstance(request, Poll):
        if not isinstance(request.request, PollRequest):
            ctx.reply(msg.from_, PollRefused(ErrMalformedCommand(
                f"a poll carries a PollRequest, got {type(request.request).__name__}")))
        elif len(svc.waiting) >= svc.config.max_pending_polls:
            ctx.reply(msg.from_, Busy())
        else:
            svc.waiting.append(msg)
    elif isinstance(request, Status):
        ctx.reply(msg.from_, {"node": ctx.self().node, "term": svc.term, "served": svc.served,
                              "idle": svc.idle, "refused": svc.refused, "waiting": len(svc.waiting),
                              "raft_time": svc.raft_time, "deleted_files": svc.deleted,
                              "orphans_deleted": dict(svc.orphans_deleted),
                              "recent_orphans": list(svc.recent_orphans)})
    else:
        ctx.reply(msg.from_, UnknownRequest.of(request))


async def _serve(svc: _Service, call: Call) -> None:
    """One poll: prepare, then apply, through the local raft member. A prepared update
    that changes nothing is answered without the apply (an idle pool's polls then write
    one entry each, not two); its prepare entry still moves the raft clock on."""
    ctx = svc.ctx
    prepared = await _propose(svc, PreparePlan(call.request.request))
    if not isinstance(prepared, Done) or not isinstance(prepared.result, PlanUpdate):
        svc.refused += 1
        ctx.reply(call.from_, _refusal(prepared))
        return
    await ctx.failpoint(AFTER_PREPARE)
    if changes_nothing(prepared.result):
        svc.idle += 1
        response = response_for(prepared.result)
    else:
        applied = await _propose(svc, ApplyPlan(prepared.result))
        if not isinstance(applied, Done) or not isinstance(applied.result, PollResponse):
            svc.refused += 1
            _logger.info("plan not applied", reply=repr(applied)[:200])
            ctx.reply(call.from_, _refusal(applied))
            return
        response = applied.result
    svc.served += 1
    svc.raft_time = response.now if svc.raft_time is None else max(svc.raft_time, response.now)
    ctx.reply(call.from_, Polled(response))


def _refusal(reply: Reply) -> PollNotLeader | PollRefused:
    """What a worker is told when a proposal did not give a plan or a response."""
    if isinstance(reply, Done):
        return PollRefused(reply.result)  # the machine's refusal (a MetastoreError)
    if isinstance(reply, NotLeader):
        return PollNotLeader(reply.hint)
    return PollRefused(reply)


async def _propose(svc: _Service, command: Any) -> Reply:
    """The raft server's answer (`Done`, `NotLeader`, `Failed`), never raising."""
    try:
        reply = await svc.ctx.call(svc.raft, Propose(command),
                                   timeout=svc.config.propose_timeout)
    except CallError as err:
        return Failed(f"raft_unavailable: {err}"[:200])
    if isinstance(reply, Done | NotLeader | Failed):
        return reply
    return Failed(f"unexpected_reply: {reply!r}"[:200])


async def _sweep(svc: _Service) -> None:
    await _sweep_tombstones(svc)
    await _sweep_orphans(svc)


async def _sweep_tombstones(svc: _Service) -> None:
    """Delete the files of committed tombstones whose cleanup delay passed (raft time)."""
    if svc.raft_time is None:
        return  # no raft clock reading in this term yet
    try:
        found = await svc.ctx.call(svc.raft, Query(TombstonesQuery()),
                                   timeout=svc.config.propose_timeout)
    except CallError:
        return
    if not isinstance(found, TombstonesResult):
        return
    svc.swept &= {t.name for t in found.tombstones}  # bounded by the index's tombstones
    due = [t for t in pl.due_tombstones(found.tombstones, svc.config.metastore.planner,
                                        svc.raft_time) if t.name not in svc.swept]
    if not due:
        return
    try:
        removed = await run_blocking(merge.cleanup, svc.config.root, due)
    except OSError as err:
        _logger.error("tombstone cleanup failed", error=str(err)[:200])
        return
    svc.swept.update(t.name for t in due)
    svc.deleted += removed
    _logger.info("tombstoned blocks deleted", tombstones=len(due), files=removed)


async def _sweep_orphans(svc: _Service) -> None:
    """One bounded pass of garbage collection (see the module docstring)."""
    try:
        listed = await run_blocking(gc.list_store, svc.config.root)
    except OSError as err:
        _logger.error("listing the block store failed", error=str(err)[:200])
        return
    batch, svc.gc_after = orph.next_batch(listed, svc.gc_after, svc.config.orphan_batch)
    suspects = await _garbage(svc, batch, committed=False)
    doomed = await _garbage(svc, suspects, committed=True)
    if not doomed:
        return
    try:
        removed = await run_blocking(gc.remove, svc.config.root, doomed)
    except OSError as err:
        _logger.error("orphan cleanup failed", error=str(err)[:200])
        return
    for f in removed:
        svc.orphans_deleted[f.kind] = svc.orphans_deleted.get(f.kind, 0) + 1
        svc.recent_orphans.append(f"shard-{f.shard}/{f.name}")
        while len(svc.recent_orphans) > svc.config.recent:
            svc.recent_orphans.popleft()
    _logger.info("orphan files deleted", files=len(removed),
                 ids=sorted({f.block_id for f in removed})[:20])


async def _garbage(svc: _Service, files: list[orph.StoreFile],
                   committed: bool) -> list[orph.StoreFile]:
    """The `files` the metastore calls garbage: through the log (`committed`), else by
    the local member's applied state. Nothing when it does not answer."""
    if not files:
        return []
    candidates = tuple(f.candidate for f in files)
    if committed:
        reply = await _propose(svc, FindOrphans(candidates))
        answer = reply.result if isinstance(reply, Done) else None
    else:
        try:
            answer = await svc.ctx.call(svc.raft, Query(OrphansQuery(candidates)),
                                        timeout=svc.config.propose_timeout)
        except CallError:
            return []
    if not isinstance(answer, OrphanVerdicts) or len(answer.verdicts) != len(files):
        return []
    return [f for f, v in zip(files, answer.verdicts, strict=True)
            if orph.deletable(f.kind, v)]


__all__ = ["AFTER_PREPARE", "compaction_service"]
