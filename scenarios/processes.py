"""The processes a scenario run starts inside the runtime, on a node of its own.

They live on the runner's `client` node, which no fault touches (node kills and
partitions name KV nodes only), so they keep recording while the cluster breaks. Every
time is the runtime clock of that node (`ctx.now()`: virtual on `sim`), so operations of
different clients compare.

- `recorder`: buffers what the others report (operations, watch logs, cluster samples,
  log entries, the first hit of each failpoint the nemesis armed); the driver reads it
  all with `TakeDump()` and the hits with `FiredFailpoints()` (`recorder_protocol.py`).
  Bounded: past a limit it keeps a note instead (a truncated history must never be
  judged as complete).
- `traffic_client`: one Jepsen process: a request from the seed, one at a time, each
  recorded with its invoke and complete times and the raft index it got.
- `compactor`: client Compacts at random revisions in [last, head + ahead].

The watcher clients are in `watch_client.py`, the observers of the cluster (log tail,
monitor, trigger waits) in `observers.py`.

Outcomes follow Jepsen: a definite refusal (not the leader, no leader at all, a typed
KV error) is `fail`; a timeout or a dead server is `info` (it may have happened).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from sediment.actors.kv.names import KV_GROUP
from sediment.actors.kv.types import Compact, Range
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Done, Failed, NotLeader, Propose
from sediment.runtime.common_calls import Status, UnknownRequest
from sediment.runtime.errors import CallError, NoProc
from sediment.runtime.failpoints import FailpointHit
from sediment.runtime.messages import Call
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process
from sediment.scenarios import observe
from sediment.scenarios import recorder_protocol as rp
from sediment.scenarios.history import Failure, OpKind, Request, WatchLog
from sediment.scenarios.schema import Compactions, Traffic
from sediment.scenarios.traffic import RequestGenerator, compact_target

EVERY_KEY = (b"\0", b"\0")  # [\0, +inf): the final read covers every key
MAX_ATTEMPTS = 64  # proposals of one request (leader hints, elections) before giving up
RETRY_PAUSE = 0.05  # seconds between rounds when no member leads
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
    client_kind: str = "native"  # "grpc": sent over etcd's API (its answer has no index)


@dataclass(frozen=True)
class Missing:
    """A committed entry no member held in memory any more when the tail got to it.
    `mapped`: a member that had applied it said which revision it wrote (`revision`,
    None: it wrote none), so the revisions after it are still numbered right."""

    revision: int | None = None
    mapped: bool = False


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
    fired: dict[str, FailpointHit] = field(default_factory=dict)  # the nemesis's failpoints

    def full(self, what: str, n: int) -> bool:
        if n < LIMITS[what]:
            return False
        note = f"recorder limit reached: more than {LIMITS[what]} {what}"
        if note not in self.notes:
            self.notes.append(note)
        return True


async def recorder(ctx: Process) -> None:
    """Process entry: buffer reports until killed; answer the driver's calls
    (`recorder_protocol.py`)."""
    r = _Recorded()
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call):
            ctx.reply(msg.from_, _answer(r, msg.request))
        elif isinstance(msg, FailpointHit):  # a failpoint the nemesis armed (tag: fault)
            r.fired.setdefault(msg.tag, msg)
        elif isinstance(msg, rp.Report):
            _store(r, msg)


def _store(r: _Recorded, msg: rp.Report) -> None:
    if isinstance(msg, rp.OpDone):
        if not r.full("ops", len(r.ops)):
            rec = msg.record
            r.ops.append(rec)
            rev = getattr(rec.result, "revision", 0) if rec.outcome == "ok" else 0
            if isinstance(rev, int) and not isinstance(rec.request, Compact):
                r.head = max(r.head, rev)
    elif isinstance(msg, rp.WatchDone):
        w = msg.log
        if not r.full("watches", len(r.watches)) and not r.full(
                "responses", r.responses + len(w.responses)):
            r.watches.append(w)
            r.responses += len(w.responses)
    elif isinstance(msg, rp.Sampled):
        if not r.full("samples", len(r.samples)):
            r.samples.append(msg.view)
    elif isinstance(msg, rp.EntriesRead):
        for e in msg.entries:
            if not r.full("entries", len(r.entries)):
                r.entries[e.index] = e
    elif isinstance(msg, rp.SessionOpened):
        r.sessions[msg.client] = (msg.pid, msg.node)
    elif isinstance(msg, rp.Finished):
        r.done.add(msg.who)


def _answer(r: _Recorded, request: Any) -> Any:
    if isinstance(request, rp.HeadRevision):
        return r.head
    if isinstance(request, Status):
        outcomes = [op.outcome for op in r.ops]
        return {"ops": len(r.ops), "ok": outcomes.count("ok"), "fail": outcomes.count("fail"),
                "info": outcomes.count("info"), "watches": len(r.watches),
                "entries": len(r.entries), "done": sorted(r.done)}
    if isinstance(request, rp.Sessions):
        return dict(r.sessions)
    if isinstance(request, rp.FiredFailpoints):
        return dict(r.fired)
    if isinstance(request, rp.LastSample):
        return r.samples[-1] if r.samples else None
    if isinstance(request, rp.TakeDump):
        return Dump(tuple(r.ops), tuple(r.watches), tuple(r.samples),
                    tuple(r.entries[i] for i in sorted(r.entries)), tuple(r.notes))
    return UnknownRequest.of(request)


# ---- talking to the KV --------------------------------------------------------------------


class KvSession:
    """Proposes requests through whichever member leads, Jepsen-style outcomes."""

    def __init__(self, ctx: Process, nodes: tuple[str, ...], timeout: float,
                 first: int = 0) -> None:
        self.ctx, self.nodes, self.timeout = ctx, nodes, timeout
        self.cursor = first
        self.leader: str | None = None
        # each member's pid, looked up once (on Ray a lookup is a call to the registry
        # actor: one per request made it the busiest process of a run); forgotten when
        # a call finds the process gone
        self.members: dict[str, Pid] = {}

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
            pid = self.members.get(node) or await ctx.whereis(raft_name(KV_GROUP, node))
            if pid is None:  # the member is down: nothing was sent
                self.leader = None
                continue
            self.members[node] = pid
            try:
                reply = await ctx.call(pid, Propose(command), timeout=max(remaining, 0.001))
            except NoProc:  # it had ended (a restarted member has a new pid): not sent
                self.leader = None
                del self.members[node]
                continue
            except CallError as exc:  # it may have been proposed: indeterminate
                self.leader = None
                self.members.pop(node, None)
                return "info", Failure.of(exc), None
            if isinstance(reply, Done):
                self.leader = node
                if isinstance(reply.result, BaseException):
                    return "fail", Failure.of(reply.result), reply.index
                return "ok", reply.result, reply.index
            if isinstance(reply, NotLeader):
                hint = reply.hint
                self.leader = hint if hint in self.nodes and hint != node else None
                continue
            if isinstance(reply, Failed) and reply.reason == "Dropped":
                self.leader = None  # definitely not committed: safe to try again
                continue
            if isinstance(reply, Failed) and reply.reason == "bad_proposal":
                return "fail", Failure("BadProposal", repr(reply)[:200]), None
            return "info", Failure("UnknownReply", repr(reply)[:200]), None
        return "fail", Failure("Unavailable", "no member accepted the request in time"), None


def session(ctx: Process, nodes: tuple[str, ...], timeout: float, first: int = 0,
            client: str = "native") -> Any:
    """The session a traffic process talks through: native (raft members as processes)
    or `grpc` (every node's etcd API, `grpc_client.py`; Ray only)."""
    if client == "grpc":
        from sediment.scenarios.grpc_client import GrpcSession

        return GrpcSession(ctx, nodes, timeout, first)
    return KvSession(ctx, nodes, timeout, first)


async def _close(kv: Any) -> None:
    close = getattr(kv, "close", None)
    if close is not None:
        await close()


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
    client_kind: str = "native"  # the scenario's traffic.client


async def _prepare(kv: Any) -> None:
    prepare = getattr(kv, "prepare", None)
    if prepare is not None:
        await prepare()


async def traffic_client(ctx: Process, cfg: ClientConfig) -> None:
    """Process entry: after Go, requests until its end_t (at the scenario's rate)."""
    kv = session(ctx, cfg.nodes, cfg.op_timeout, cfg.client, cfg.client_kind)
    await _prepare(kv)  # a connection opened before the clock starts
    end_t = (await wait_for_go(ctx)).end_t
    gen = RequestGenerator(cfg.seed, cfg.client, cfg.traffic)
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
        ctx.send(cfg.recorder, rp.OpDone(await kv.request(cfg.client, kind, req)))
    await _close(kv)
    ctx.send(cfg.recorder, rp.Finished(f"client-{cfg.client}"))


@dataclass(frozen=True)
class CompactorConfig:
    client: int
    seed: int
    compactions: Compactions
    nodes: tuple[str, ...]
    recorder: Pid
    op_timeout: float
    client_kind: str = "native"


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
    kv = session(ctx, cfg.nodes, cfg.op_timeout, client=cfg.client_kind)
    await _prepare(kv)
    go = await wait_for_go(ctx)
    rng = random.Random(f"sediment-compact-{cfg.seed}")
    last = 0
    for at, spec in compaction_times(cfg.compactions, go.t0, go.end_t):
        wait = at - ctx.now()
        if wait > 0:
            await ctx.sleep(wait)
        head = await ctx.call(cfg.recorder, rp.HeadRevision(), timeout=30)
        if isinstance(spec, int):
            revision = spec
        elif spec == "head":
            revision = max(1, head)
        else:
            revision = compact_target(rng, last, head, cfg.compactions.ahead)
        rec = await kv.request(cfg.client, "compact", Compact(revision))
        ctx.send(cfg.recorder, rp.OpDone(rec))
        if rec.outcome == "ok":
            last = max(last, revision)
        elif isinstance(rec.result, Failure) and rec.result.compact_revision:
            last = max(last, rec.result.compact_revision)
    await _close(kv)
    ctx.send(cfg.recorder, rp.Finished("compactor"))


async def final_read(ctx: Process, client: int, nodes: tuple[str, ...], recorder: Pid,
                     timeout: float, attempts: int, client_kind: str = "native",
                     ) -> OpRecord | None:
    """Process entry: a linearizable read of every key, retried until one succeeds; each
    attempt is recorded. Returns the successful one."""
    kv = session(ctx, nodes, timeout, client=client_kind)
    try:
        for _ in range(attempts):
            rec: OpRecord = await kv.request(client, "range", Range(*EVERY_KEY))
            ctx.send(recorder, rp.OpDone(rec))
            if rec.outcome == "ok":
                return rec
            await ctx.sleep(RETRY_PAUSE * 4)
        return None
    finally:
        await _close(kv)


__all__ = [
    "ClientConfig",
    "CompactorConfig",
    "Dump",
    "Entry",
    "Go",
    "KvSession",
    "Missing",
    "OpRecord",
    "compaction_times",
    "compactor",
    "final_read",
    "recorder",
    "session",
    "traffic_client",
    "wait_for_go",
]
