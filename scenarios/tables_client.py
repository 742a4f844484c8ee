"""A tables client of a scenario run (`cluster.tables`, `tables_tier.py`): one process
that, after the runner's Go and until the run's end, does RW transactions, read-only
reads and DDL on the tables cluster's table nodes at its rate, and records each in a
`tables/recorder.Recorder` of its own, which the tier asks for after the run
(`TakeRecords()` -> `ClientRecords`).

What it records is what it saw: a transaction's begin, its acknowledged writes, its
outcome and commit time; a read's timestamp and answer; a DDL's version and
activation. A transaction whose call failed (its node killed, a timeout) ends, in the
record, when it was last known to run (`tx_alive`): an under-estimate of its pin, so
the check can miss a violation, never invent one; its outcome stays unknown.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from sediment.actors.catalog import ddl
from sediment.actors.catalog.descriptors import Column
from sediment.actors.catalog.errors import CatalogError
from sediment.actors.tables.errors import UnknownTransaction
from sediment.actors.tables.names import table_node_name
from sediment.actors.tables.recorder import Recorder
from sediment.actors.tables.shell import node_protocol as p
from sediment.runtime.common_calls import UnknownRequest
from sediment.runtime.errors import CallError, ReceiveTimeout
from sediment.runtime.messages import Call
from sediment.runtime.process import Process
from sediment.scenarios.processes import wait_for_go
from sediment.scenarios.schema_tables import TablesSpec

TABLE = "T"
RECORDS_WAIT = 600.0  # seconds a finished client waits to be asked for its records
ALIVE_POLLS = 20  # x 0.2 s: how long a client asks whether a failed transaction still runs


@dataclass(frozen=True)
class ClientConfig:
    client: int
    seed: int
    spec: TablesSpec
    nodes: tuple[str, ...]
    table_id: int
    op_timeout: float


@dataclass(frozen=True)
class TakeRecords:
    """A call to a finished client: its records (it ends after answering)."""


@dataclass(frozen=True)
class ClientRecords:
    """What a client saw, and its counts of outcomes ("tx:ok", "ddl:CallTimeout", ...;
    each write of a transaction too: "write:ok", "write:WriteConflict", ...)."""

    recorder: Recorder
    outcomes: dict[str, int]


def client_name(client: int) -> str:
    return f"tables-client-{client}"


class _NoLeader(CatalogError):
    """No table node took the DDL (the metastore leader moving)."""


async def tables_client(ctx: Process, cfg: ClientConfig) -> None:
    """Process entry: operations after Go until the run's end, then its records."""
    end_t = (await wait_for_go(ctx)).end_t
    c = _Client(ctx, cfg)
    ops, weights = zip(*cfg.spec.mix.weights(), strict=True)
    period = 1.0 / cfg.spec.rate
    next_at = ctx.now() + period * c.rng.random()
    while ctx.now() < end_t:
        wait = next_at - ctx.now()
        if wait > 0:
            await ctx.sleep(wait)
        next_at = max(next_at + period, ctx.now())
        if ctx.now() >= end_t:
            break
        op = c.rng.choices(ops, weights)[0]
        try:
            await c.one(op)
            outcome = f"{op}:ok"
        except (CatalogError, CallError) as err:
            outcome = f"{op}:{type(err).__name__}"
        c.outcomes[outcome] = c.outcomes.get(outcome, 0) + 1
    while True:
        try:
            msg = await ctx.receive(lambda m: isinstance(m, Call), timeout=RECORDS_WAIT)
        except ReceiveTimeout:
            return
        match msg.request:
            case TakeRecords():
                ctx.reply(msg.from_, ClientRecords(c.rec, dict(c.outcomes)))
                return
            case other:
                ctx.reply(msg.from_, UnknownRequest.of(other))


class _Client:
    def __init__(self, ctx: Process, cfg: ClientConfig) -> None:
        self.ctx, self.cfg = ctx, cfg
        self.rng = random.Random(f"sediment-tables-{cfg.seed}-{cfg.client}")
        self.rec = Recorder()
        self.outcomes: dict[str, int] = {}
        self.n = 0
        self.leader_hint: str | None = None

    async def call(self, node: str, request: Any, factor: float = 1.0) -> Any:
        reply = await self.ctx.call(table_node_name(node), request,
                                    timeout=self.cfg.op_timeout * factor)
        if isinstance(reply, p.Failed):
            raise reply.error
        return reply

    def _count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    async def one(self, op: str) -> None:
        self.n += 1
        if op == "tx":
            await self.transaction()
        elif op == "read":
            await self.read()
        else:
            await self.add_column()

    async def transaction(self) -> None:
        node = self.rng.choice(self.cfg.nodes)
        began: p.Began = await self.call(node, p.Begin())
        tx_id, begin_ts = began.tx_id, began.ts
        self.rec.begin(tx_id, begin_ts, self.ctx.now())
        alive_at = self.ctx.now()
        unknown_at: float | None = None  # when the node first said it does not run it
        try:
            for _ in range(self.rng.randint(1, 3)):
                k = self.rng.randrange(self.cfg.spec.keys)
                row = {"k": k, "v": self.rng.randrange(1_000_000)}
                alive_at = self.ctx.now()
                try:
                    await self.call(node, p.Write(tx_id, TABLE, row))
                except CatalogError as err:  # a conflict: the transaction aborts at its end
                    self._count(f"write:{type(err).__name__}")
                    if isinstance(err, UnknownTransaction):
                        unknown_at = alive_at
                    break
                self._count("write:ok")
                self.rec.write(tx_id, (self.cfg.table_id, (k,)), row)
            finish = p.Commit(tx_id) if self.rng.random() < 0.9 else p.Rollback(tx_id)
            alive_at = self.ctx.now()
            ended: p.Ended = await self.call(node, finish, factor=2.0)
            committed, commit_ts = ended.committed, ended.commit_ts
        except CallError:
            self.rec.end(tx_id, "unknown", None, await self._last_alive(node, tx_id, alive_at))
            raise
        except UnknownTransaction:
            # Its coordinator restarted (a Begin answered by the old incarnation can
            # arrive after the node was killed and its transactions abandoned): no one
            # runs it since the node first said so; recovery decides its outcome.
            self.rec.end(tx_id, "unknown", None, alive_at if unknown_at is None else unknown_at)
            raise
        self.rec.end(tx_id, "committed" if committed else "aborted", commit_ts,
                     self.ctx.now())

    async def _last_alive(self, node: str, tx_id: str, since: float) -> float:
        """When the node was last seen running the transaction (bounded)."""
        last = since
        for _ in range(ALIVE_POLLS):
            asked = self.ctx.now()
            try:
                alive = await self.call(node, p.TxAlive(tx_id))
            except CallError:
                await self.ctx.sleep(0.2)
                continue
            if not alive:
                return last
            last = asked
            await self.ctx.sleep(0.2)
        return last

    async def read(self) -> None:
        node = self.rng.choice(self.cfg.nodes)
        k = self.rng.randrange(self.cfg.spec.keys)
        read: p.Rows = await self.call(node, p.RoGet(TABLE, (k,), None), factor=2.0)
        rows, read_ts = read.rows, read.ts
        assert read_ts is not None  # a read-only read has its timestamp
        self.rec.read(read_ts, (self.cfg.table_id, (k,)), rows[0][1] if rows else None,
                      self.ctx.now())

    async def add_column(self) -> None:
        command = ddl.AddColumn(TABLE, Column(f"c{self.cfg.client}_{self.n}", "int"))
        nodes = self.cfg.nodes
        for attempt in range(3 * len(nodes)):
            node = self.leader_hint or nodes[attempt % len(nodes)]
            self.leader_hint = None
            try:
                reply = await self.call(node, p.Ddl((command,)), factor=2.0)
            except CallError:
                reply = None
            if isinstance(reply, p.DdlActive):
                self.leader_hint = node
                self.rec.version(reply.version, reply.activation)
                return
            if isinstance(reply, p.NotLeader) and reply.hint in nodes:
                self.leader_hint = reply.hint
            await self.ctx.sleep(0.1)
        raise _NoLeader("no table node took the DDL")


__all__ = ["ClientConfig", "ClientRecords", "TakeRecords", "client_name", "tables_client"]
