"""The processes a scenario run starts inside the runtime, on a node of its own.

They live on the runner's `client` node, which no fault touches (node kills and
partitions name KV nodes only), so they keep recording while the cluster breaks. Every
time is the runtime clock of that node (`ctx.now()`: virtual on `sim`), so operations of
different clients compare.

- `recorder`: buffers what the others report (operations, watch logs, cluster samples,
  log entries); the driver reads it all with ("dump",). Bounded: past a limit it keeps a
  note instead (a truncated history must never be judged as complete).
- `traffic_client`: one Jepsen process: a request from the seed, one at a time, each
  recorded with its invoke and complete times and the raft index it got.
- `compactor`: client Compacts at random revisions in [last, head + ahead].
- `watcher_client`: one watch over the traffic keys on one node, opened when the scenario
  says, slow or paused as it says, resumed where it got to when its stream ends (as an
  etcd client does), and finally bookmarked at the last revision.
- `log_tail`: reads every committed raft entry while members still hold it in memory:
  the committed history, so the watch checks know every event and indeterminate
  operations get their place in the log.
- `monitor`: samples every member's status for the timeline (leaders, compaction).
- `wait_for`: polls the cluster until a protocol moment (`observe.holds`) is under way.

Outcomes follow Jepsen: a definite refusal (not the leader, no leader at all, a typed
KV error) is `fail`; a timeout or a dead server is `info` (it may have happened).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import dataclass, field, replace
from typing import Any

from sediment.actors.kv import watch_protocol as wp
from sediment.actors.kv.names import KV_GROUP, kv_node_name
from sediment.actors.kv.types import Compact, Range
from sediment.actors.log.shell.codec import from_stored
from sediment.actors.log.shell.names import raft_name, wal_name
from sediment.runtime.errors import CallError, ReceiveTimeout
from sediment.runtime.messages import Call
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process
from sediment.scenarios import observe
from sediment.scenarios.history import Failure, OpKind, Request, WatchLog, WatchResponse
from sediment.scenarios.schema import Compactions, Traffic, Trigger, WatcherSpec
from sediment.scenarios.traffic import KEY_PREFIX, KEYSPACE_END, RequestGenerator, compact_target

EVERY_KEY = (b"\0", b"\0")  # [\0, +inf): the final read covers every key
STATUS_TIMEOUT = 1.0  # seconds for one status answer while probing
MAX_ATTEMPTS = 64  # proposals of one request (leader hints, elections) before giving up
RETRY_PAUSE = 0.05  # seconds between rounds when no member leads
MAX_PENDING_READ = 32  # unapplied leader entries read per probe
TAIL_BATCH = 256  # entries per report of the log tail
TAIL_PARALLEL = 32  # entries the tail reads at once (before a snapshot drops them)
WATCH_POLL = 0.1  # seconds a watcher client waits for its next responses
PROGRESS_EVERY = 1.0  # seconds between the progress requests of a watcher client
FINISH_POLLS = 400  # polls of a watcher client waiting for its final bookmark
MAX_WATCH_RETRIES = 200  # failed (re)opens of one watcher client
LIMITS = {"ops": 200_000, "watches": 10_000, "responses": 1_000_000, "samples": 50_000,
          "entries": 1_000_000}


# ---- records ------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpRecord:
    """One finished client operation (result: the answer, a Failure, or None)."""

    client: int
    kind: OpKind
    request: Request
    invoke_t: float
    complete_t: float
    outcome: str
    result: Any
    index: int | None


@dataclass(frozen=True)
class Missing:
    """A committed entry no member held in memory any more when the tail got to it."""


@dataclass(frozen=True)
class Entry:
    """A committed raft entry as the tail read it (command None: the leader's no-op)."""

    index: int
    command: Any
    seen_t: float


@dataclass(frozen=True)
class Dump:
    ops: tuple[OpRecord, ...]
    watches: tuple[WatchLog, ...]
    samples: tuple[observe.ClusterView, ...]
    entries: tuple[Entry, ...]
    notes: tuple[str, ...]


# ---- the recorder -------------------------------------------------------------------------


@dataclass
class _Recorded:
    ops: list[OpRecord] = field(default_factory=list)
    watches: list[WatchLog] = field(default_factory=list)
    responses: int = 0
    samples: list[observe.ClusterView] = field(default_factory=list)
    entries: dict[int, Entry] = field(default_factory=dict)
    sessions: dict[int, tuple[Pid, str]] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    head: int = 0  # the highest header revision any operation got

    def full(self, what: str, n: int) -> bool:
        if n < LIMITS[what]:
            return False
        note = f"recorder limit reached: more than {LIMITS[what]} {what}"
        if note not in self.notes:
            self.notes.append(note)
        return True


async def recorder(ctx: Process) -> None:
    """Process entry: buffer reports until killed; answer the driver's calls."""
    r = _Recorded()
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call):
            ctx.reply(msg.from_, _answer(r, msg.request))
        elif isinstance(msg, tuple) and msg:
            _store(r, msg)


def _store(r: _Recorded, msg: tuple[Any, ...]) -> None:
    tag = msg[0]
    if tag == "op" and not r.full("ops", len(r.ops)):
        rec: OpRecord = msg[1]
        r.ops.append(rec)
        rev = getattr(rec.result, "revision", 0) if rec.outcome == "ok" else 0
        if isinstance(rev, int) and not isinstance(rec.request, Compact):
            r.head = max(r.head, rev)
    elif tag == "watch" and not r.full("watches", len(r.watches)):
        w: WatchLog = msg[1]
        if not r.full("responses", r.responses + len(w.responses)):
            r.watches.append(w)
            r.responses += len(w.responses)
    elif tag == "sample" and not r.full("samples", len(r.samples)):
        r.samples.append(msg[1])
    elif tag == "entries":
        for e in msg[1]:
            if not r.full("entries", len(r.entries)):
                r.entries[e.index] = e
    elif tag == "session":
        r.sessions[msg[1]] = (msg[2], msg[3])
    elif tag == "done":
        r.done.add(msg[1])


def _answer(r: _Recorded, request: Any) -> Any:
    kind = request[0] if isinstance(request, tuple) and request else request
    if kind == "head":
        return r.head
    if kind == "status":
        outcomes = [op.outcome for op in r.ops]
        return {"ops": len(r.ops), "ok": outcomes.count("ok"), "fail": outcomes.count("fail"),
                "info": outcomes.count("info"), "watches": len(r.watches),
                "entries": len(r.entries), "done": sorted(r.done)}
    if kind == "sessions":
        return dict(r.sessions)
    if kind == "last_sample":
        return r.samples[-1] if r.samples else None
    if kind == "dump":
        return Dump(tuple(r.ops), tuple(r.watches), tuple(r.samples),
                    tuple(r.entries[i] for i in sorted(r.entries)), tuple(r.notes))
    return ("error", ("unknown_request", request))


# ---- talking to the KV --------------------------------------------------------------------


class KvSession:
    """Proposes requests through whichever member leads, Jepsen-style outcomes."""

    def __init__(self, ctx: Process, nodes: tuple[str, ...], timeout: float,
                 first: int = 0) -> None:
        self.ctx, self.nodes, self.timeout = ctx, nodes, timeout
        self.cursor = first
        self.leader: str | None = None

    def _next_node(self) -> str:
        if self.leader is not None:
            return self.leader
        node = self.nodes[self.cursor % len(self.nodes)]
        self.cursor += 1
        return node

    async def request(self, client: int, kind: OpKind, req: Request) -> OpRecord:
        invoke = self.ctx.now()
        outcome, result, index = await self._propose(req)
        return OpRecord(client, kind, req, invoke, self.ctx.now(), outcome, result, index)

    async def _propose(self, command: Request) -> tuple[str, Any, int | None]:
        ctx = self.ctx
        deadline = ctx.now() + self.timeout
        for attempt in range(MAX_ATTEMPTS):
            remaining = deadline - ctx.now()
            if remaining <= 0:
                break
            if attempt and attempt % len(self.nodes) == 0 and self.leader is None:
                await ctx.sleep(min(RETRY_PAUSE, remaining))
            node = self._next_node()
            pid = await ctx.whereis(raft_name(KV_GROUP, node))
            if pid is None:  # the member is down: nothing was sent
                self.leader = None
                continue
            try:
                reply = await ctx.call(pid, ("propose", command), timeout=max(remaining, 0.001))
            except CallError as exc:  # it may have been proposed: indeterminate
                self.leader = None
                return "info", Failure.of(exc), None
            tag = reply[0] if isinstance(reply, tuple) and reply else None
            if tag == "ok":
                self.leader = node
                _, index, result = reply
                if isinstance(result, BaseException):
                    return "fail", Failure.of(result), index
                return "ok", result, index
            if tag == "not_leader":
                hint = reply[1]
                self.leader = hint if hint in self.nodes and hint != node else None
                continue
            if tag == "error" and len(reply) > 1 and reply[1] == "Dropped":
                self.leader = None  # definitely not committed: safe to try again
                continue
            if tag == "error" and len(reply) > 1 and reply[1] == "bad_proposal":
                return "fail", Failure("BadProposal", repr(reply)[:200]), None
            return "info", Failure("UnknownReply", repr(reply)[:200]), None
        return "fail", Failure("Unavailable", "no member accepted the request in time"), None


# ---- traffic ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Go:
    """The driver's start signal to every traffic process, sent once all of them run
    (spawning dozens of processes takes seconds on Ray; the run's clock starts after)."""

    t0: float
    end_t: float


async def wait_for_go(ctx: Process) -> Go:
    go = await ctx.receive(lambda m: isinstance(m, Go), timeout=GO_TIMEOUT)
    assert isinstance(go, Go)
    return go


GO_TIMEOUT = 600.0  # seconds a traffic process waits for the driver to start the run


@dataclass(frozen=True)
class ClientConfig:
    client: int
    seed: int
    traffic: Traffic
    nodes: tuple[str, ...]
    recorder: Pid
    op_timeout: float


async def traffic_client(ctx: Process, cfg: ClientConfig) -> None:
    """Process entry: after Go, requests until its end_t (at the scenario's rate)."""
    end_t = (await wait_for_go(ctx)).end_t
    gen = RequestGenerator(cfg.seed, cfg.client, cfg.traffic)
    kv = KvSession(ctx, cfg.nodes, cfg.op_timeout, first=cfg.client)
    period = 1.0 / cfg.traffic.rate if cfg.traffic.rate else 0.0
    # clients start spread over one period so that they overlap rather than march
    next_at = ctx.now() + period * random.Random(f"{cfg.seed}-{cfg.client}").random()
    while ctx.now() < end_t:
        if period:
            wait = next_at - ctx.now()
            if wait > 0:
                await ctx.sleep(wait)
            next_at = max(next_at + period, ctx.now())
            if ctx.now() >= end_t:
                break
        kind, req = gen.next()
        ctx.send(cfg.recorder, ("op", await kv.request(cfg.client, kind, req)))
    ctx.send(cfg.recorder, ("done", f"client-{cfg.client}"))


@dataclass(frozen=True)
class CompactorConfig:
    client: int
    seed: int
    compactions: Compactions
    nodes: tuple[str, ...]
    recorder: Pid
    op_timeout: float


def compaction_times(c: Compactions, start_t: float, end_t: float) -> list[tuple[float, Any]]:
    """(time, revision spec) of every client Compact of the run."""
    if c.every is not None:
        out = []
        k = 1
        while start_t + c.every * k < end_t:
            out.append((start_t + c.every * k, "random"))
            k += 1
        return out
    return sorted((start_t + x.at, x.revision) for x in c.at if start_t + x.at < end_t)


async def compactor(ctx: Process, cfg: CompactorConfig) -> None:
    """Process entry: the scenario's client Compacts."""
    go = await wait_for_go(ctx)
    rng = random.Random(f"sediment-compact-{cfg.seed}")
    kv = KvSession(ctx, cfg.nodes, cfg.op_timeout)
    last = 0
    for at, spec in compaction_times(cfg.compactions, go.t0, go.end_t):
        wait = at - ctx.now()
        if wait > 0:
            await ctx.sleep(wait)
        head = await ctx.call(cfg.recorder, ("head",), timeout=30)
        if isinstance(spec, int):
            revision = spec
        elif spec == "head":
            revision = max(1, head)
        else:
            revision = compact_target(rng, last, head, cfg.compactions.ahead)
        rec = await kv.request(cfg.client, "compact", Compact(revision))
        ctx.send(cfg.recorder, ("op", rec))
        if rec.outcome == "ok":
            last = max(last, revision)
        elif isinstance(rec.result, Failure) and rec.result.compact_revision:
            last = max(last, rec.result.compact_revision)
    ctx.send(cfg.recorder, ("done", "compactor"))


async def final_read(ctx: Process, client: int, nodes: tuple[str, ...], recorder: Pid,
                     timeout: float, attempts: int) -> OpRecord | None:
    """Process entry: a linearizable read of every key, retried until one succeeds; each
    attempt is recorded. Returns the successful one."""
    kv = KvSession(ctx, nodes, timeout)
    for _ in range(attempts):
        rec = await kv.request(client, "range", Range(*EVERY_KEY))
        ctx.send(recorder, ("op", rec))
        if rec.outcome == "ok":
            return rec
        await ctx.sleep(RETRY_PAUSE * 4)
    return None


# ---- watches ------------------------------------------------------------------------------


@dataclass(frozen=True)
class WatcherConfig:
    client: int
    spec: WatcherSpec
    node: str
    recorder: Pid


@dataclass
class _Watching:
    """A watcher client's state: its session, its open watch's log, where to resume."""

    ctx: Process
    cfg: WatcherConfig
    session: Pid | None = None
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
        self.ctx.send(self.cfg.recorder, ("watch", log))
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
        answer = await ctx.call(name, ("status",), timeout=STATUS_TIMEOUT)
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
    """Process entry: see the module doc. Ends after the driver's ("finish", head) once
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
        ctx.send(cfg.recorder, ("watch", w.log))
    if w.session is not None:
        with contextlib.suppress(CallError):
            await ctx.call(w.session, ("close",), timeout=STATUS_TIMEOUT)
    ctx.send(cfg.recorder, ("done", f"watcher-{cfg.client}"))


async def _sleep_watching(w: _Watching, seconds: float) -> None:
    """Sleep, but wake for the driver's finish message."""
    try:
        msg = await w.ctx.receive(lambda m: isinstance(m, tuple) and m[:1] == ("finish",),
                                  timeout=seconds)
        w.finish_head = int(msg[1])
    except ReceiveTimeout:
        pass


async def _finish_message(w: _Watching) -> None:
    try:
        msg = await w.ctx.receive(lambda m: isinstance(m, tuple) and m[:1] == ("finish",),
                                  timeout=0)
    except ReceiveTimeout:
        return
    w.finish_head = int(msg[1])


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
            w.session = await ctx.call(kv_node_name(cfg.node),
                                       ("open_watcher", ctx.self(), w.sessions), timeout=5)
            w.sessions += 1  # a retry after a lost reply reuses the token: same session
            ctx.send(cfg.recorder, ("session", cfg.client, w.session, cfg.node))
        spec = cfg.spec
        request = wp.CreateWatch(KEY_PREFIX, KEYSPACE_END, w.resume_at, None, spec.prev_kv,
                                 "no_put" in spec.filters, "no_delete" in spec.filters)
        w.log = WatchLog(0, cfg.client, KEY_PREFIX, KEYSPACE_END, w.resume_at, ctx.now(),
                         spec.prev_kv, request.no_put, request.no_delete)
        answer = await ctx.call(w.session, ("create", request), timeout=5)
    except CallError:
        _abandon(w)
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


def _abandon(w: _Watching) -> None:
    """Give up on an unreachable session; ask it to close (if it still runs, its watches
    would hold the cluster's compaction back) and open a new one next time."""
    if w.session is not None:
        w.ctx.send(w.session, ("close",))
    w.session = None


async def _poll(w: _Watching) -> None:
    ctx = w.ctx
    assert w.session is not None
    try:
        if w.finish_head is not None or ctx.now() >= w.next_progress:
            await ctx.call(w.session, ("progress",), timeout=5)
            w.next_progress = ctx.now() + PROGRESS_EVERY
        reply = await ctx.call(w.session, ("next", WATCH_POLL), timeout=WATCH_POLL + 5)
    except CallError:
        _abandon(w)
        w.end("lost")
        return
    responses = reply[2] if reply[0] == "closed" else reply[1]
    for r in responses:
        await _response(w, r)
    if reply[0] == "closed":
        w.session = None
        w.end(str(reply[1]))


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
        w.end(r.reason, r.compact_revision)


# ---- observing the cluster ----------------------------------------------------------------


async def _gather(ctx: Process, calls: list[tuple[str, Any]]) -> list[Any]:
    async def one(name: str, request: Any) -> Any:
        try:
            return await ctx.call(name, request, timeout=STATUS_TIMEOUT)
        except CallError:
            return None
    return list(await asyncio.gather(*(one(n, r) for n, r in calls)))


async def view(ctx: Process, nodes: tuple[str, ...], read_log: bool = False,
               kv: bool = True) -> observe.ClusterView:
    """Every member's status at once (without `kv`, only the raft servers'); with
    `read_log`, the Compact entries the leader has not applied yet."""
    asked = ctx.now()  # every answer comes after this: a floor seen low was low then
    calls = [(raft_name(KV_GROUP, n), ("status",)) for n in nodes]
    if kv:
        calls += [(kv_node_name(n), ("status",)) for n in nodes]
    answers = await _gather(ctx, calls)
    members = tuple(observe.member(n, _dict(answers[i]),
                                   _dict(answers[len(nodes) + i]) if kv else None)
                    for i, n in enumerate(nodes))
    out = observe.ClusterView(asked, members)
    leader = out.leader()
    if read_log and leader is not None and leader.last_index > leader.applied:
        hi = min(leader.last_index, leader.applied + MAX_PENDING_READ)
        name = raft_name(KV_GROUP, leader.node)
        got = await _gather(ctx, [(name, ("read", i)) for i in range(leader.applied + 1, hi + 1)])
        pending = tuple(r[1].revision for r in got if isinstance(r, tuple) and r[0] == "ok"
                        and isinstance(r[1], Compact))
        out = replace(out, pending_compacts=pending)
    return out


def _dict(x: Any) -> dict[str, Any] | None:
    return x if isinstance(x, dict) else None


async def wait_for(ctx: Process, nodes: tuple[str, ...], trigger: Trigger, deadline: float,
                   interval: float) -> tuple[bool, float, str, str | None]:
    """Process entry: poll until `trigger` holds or `deadline`; (hit, time, what was seen,
    the leader then: the member a `leader` target means, without asking again)."""
    last = None
    while True:
        last = await view(ctx, nodes, observe.needs_log(trigger), observe.needs_kv(trigger))
        hit = observe.holds(trigger, last)
        if hit or ctx.now() + interval >= deadline:
            leader = last.leader()
            return hit, ctx.now(), observe.describe(last), leader.node if leader else None
        await ctx.sleep(interval)


@dataclass(frozen=True)
class TailConfig:
    nodes: tuple[str, ...]
    recorder: Pid
    interval: float


async def log_tail(ctx: Process, cfg: TailConfig) -> None:
    """Process entry: report committed entries in order until ("stop", upto) and every
    entry up to `upto` was reported."""
    next_index, stop_at = 1, None
    while True:
        try:
            msg = await ctx.receive(lambda m: isinstance(m, tuple) and m[:1] == ("stop",),
                                    timeout=0)
            stop_at = int(msg[1])
        except ReceiveTimeout:
            pass
        if stop_at is not None and next_index > stop_at:
            ctx.send(cfg.recorder, ("done", "tail"))
            return
        current = await view(ctx, cfg.nodes, kv=False)
        members = sorted((m for m in current.members if m.up), key=lambda m: -m.commit)
        commit = members[0].commit if members else 0
        if stop_at is not None:
            commit = min(commit, stop_at)
        batch: list[Entry] = []
        while next_index <= commit and len(batch) < TAIL_BATCH:
            hi = min(commit, next_index + TAIL_PARALLEL - 1)
            batch += await asyncio.gather(*(_read_entry(ctx, i, members)
                                            for i in range(next_index, hi + 1)))
            next_index = hi + 1
        if batch:
            ctx.send(cfg.recorder, ("entries", batch))
        if next_index > commit:
            await ctx.sleep(cfg.interval)


async def _read_entry(ctx: Process, index: int,
                      members: list[observe.MemberView]) -> Entry:
    for m in members:
        if m.commit < index:
            break
        try:
            reply = await ctx.call(raft_name(KV_GROUP, m.node), ("read", index),
                                   timeout=STATUS_TIMEOUT)
        except CallError:
            continue
        if isinstance(reply, tuple) and reply[0] == "ok":
            return Entry(index, reply[1], ctx.now())
    for m in members:  # gone from memory after a snapshot: the WAL may still hold it
        try:
            stored = await ctx.call(wal_name(m.node), ("read", KV_GROUP, index),
                                    timeout=STATUS_TIMEOUT)
        except CallError:
            continue
        if stored is not None and not isinstance(stored, tuple):
            return Entry(index, from_stored(stored).command, ctx.now())
    return Entry(index, Missing(), ctx.now())


@dataclass(frozen=True)
class MonitorConfig:
    nodes: tuple[str, ...]
    recorder: Pid
    interval: float


async def monitor(ctx: Process, cfg: MonitorConfig) -> None:
    """Process entry: a cluster sample every `interval` until ("stop",)."""
    while True:
        ctx.send(cfg.recorder, ("sample", await view(ctx, cfg.nodes)))
        try:
            await ctx.receive(lambda m: m == ("stop",), timeout=cfg.interval)
            ctx.send(cfg.recorder, ("done", "monitor"))
            return
        except ReceiveTimeout:
            pass


__all__ = [
    "ClientConfig",
    "CompactorConfig",
    "Dump",
    "Entry",
    "KvSession",
    "Missing",
    "MonitorConfig",
    "OpRecord",
    "TailConfig",
    "WatcherConfig",
    "compaction_times",
    "compactor",
    "final_read",
    "log_tail",
    "monitor",
    "recorder",
    "resume_point",
    "traffic_client",
    "view",
    "wait_for",
    "watcher_client",
]
