"""The tables tier in a scenario run (`cluster.tables`, `schema_tables.py`): its cluster,
its clients, its timeline and what the catalog checks judge.

- `extra_nodes`: the runtime nodes the tier's cluster runs on (`t1`, `t2`, ...), added
  to the run's runtime beside the KV's;
- `TablesTier.start`: once the KV runs, the tables cluster (`sediment/wiring/tables.py`,
  its top supervisor on the runner's client node), zone `Z` and table `T`, and the
  tables clients (`tables_client.py`), waiting for their Go;
- `TablesTier.tick(t)`: called by the runner while the traffic runs (each of its
  sleeps): the clients' Go, the timeline's events that are due (index builds,
  rebalances, a dropped zone, a long transaction, kills and stops, each held or
  released as it asks), and a poll of the coordinator, the drivers and the partition
  members for the recorder every half second. A tick never waits on a process that a
  held failpoint stops;
- `TablesTier.collect()`: after recovery, every hold released and every stopped node
  restarted, the clients' records merged into the tier's recorder, and the checks:
  `catalog_compaction_safety`, `catalog_atomic_visibility` (docs/catalog.md section 6)
  and `tables_tier` (the tier worked: a compaction, a committed transaction, every
  event applied), with notes (coordinator outcomes, client outcomes, the events).

The driver-side calls (`TablesCluster`'s API) run on the runner's thread: on sim the
whole run stays a function of the seed.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sediment import log
from sediment.actors.catalog import ddl
from sediment.actors.catalog.errors import CatalogError
from sediment.actors.catalog.low_watermark import LowWatermarkConfig
from sediment.actors.catalog.machine import CatalogVersionQuery, CompactCatalog, Rejected
from sediment.actors.log.shell.applying import before_apply_point
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Query
from sediment.actors.tables.names import META_GROUP
from sediment.actors.tables.recorded_history import TxRecord
from sediment.actors.tables.recorder import Recorder
from sediment.actors.tables.shell.index_driver import BEFORE_AVAILABLE
from sediment.actors.tables.shell.node_state import load_lwm
from sediment.actors.tables.shell.rebalance_driver import BEFORE_RECORD
from sediment.runtime.common_calls import UnknownRequest
from sediment.runtime.errors import RuntimeErrorBase
from sediment.runtime.failpoints import FailpointHit
from sediment.runtime.pid import Pid
from sediment.scenarios.checkers.catalog_compaction import atomic_visibility, compaction_safety
from sediment.scenarios.checkers.result import CheckResult, passed, violated
from sediment.scenarios.processes import Go
from sediment.scenarios.schema_tables import TablesEvent, TablesSpec
from sediment.scenarios.tables_client import (
    ClientConfig,
    ClientRecords,
    TakeRecords,
    client_name,
    tables_client,
)
from sediment.wiring.tables import TEST_ANSWER_TIMEOUT_MS, TablesCluster, Transaction

_logger = log.get_logger("sediment.scenarios.tables_tier")

TIER_CHECK = "tables_tier"
POLL_EVERY = 0.5  # seconds of traffic between polls for the recorder
COLUMNS = [("k", "int", False), ("v", "int")]
LONG_TX_KEY = 1_000_000  # long transactions write above the clients' keys
_ERRORS = (RuntimeErrorBase, CatalogError, TimeoutError)


def extra_nodes(spec: TablesSpec | None) -> tuple[str, ...]:
    """The runtime nodes the tier needs beside the KV's (none without a tier)."""
    return () if spec is None else spec.node_names


@dataclass
class _Pending:
    """An event begun and not yet over: what to undo (or wait for) and when."""

    index: int
    event: TablesEvent
    until: float  # seconds of traffic
    point: str | None = None  # a failpoint armed everywhere, released at `until`
    tx: Transaction | None = None  # a long transaction, committed at `until`
    stopped: str | None = None  # a stopped node, restarted at `until`
    sink: Pid | None = None  # kill_leader mid_compaction: where the hits arrive


@dataclass
class TablesTier:
    rt: Any
    spec: TablesSpec
    data_dir: Path
    seed: int
    client_node: str
    host: str | None
    op_timeout: float
    duration: float  # the run's traffic, seconds
    cluster: TablesCluster | None = None
    clients: list[Pid] = field(default_factory=list)
    t0: float | None = None
    started: set[int] = field(default_factory=set)
    pending: list[_Pending] = field(default_factory=list)
    kills: list[tuple[str, float]] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    outcomes: dict[tuple[str, int, float], str] = field(default_factory=dict)
    last_poll: float = -POLL_EVERY

    # ---- start --------------------------------------------------------------------------

    def start(self) -> None:
        s = self.spec
        lwm = LowWatermarkConfig(data_availability_ms=int(s.data_availability * 1000),
                                 update_interval_ms=int(s.lwm_interval * 1000),
                                 max_clock_skew_ms=10)
        c = TablesCluster.start(nodes=s.node_names, data_dir=str(self.data_dir),
                                seed=self.seed, lwm=lwm, runtime=self.rt,
                                top_node=self.client_node, lock_wait=s.lock_wait,
                                answer_timeout_ms=TEST_ANSWER_TIMEOUT_MS)
        self.cluster = c
        c.create_zone("Z", partitions=s.partitions, replicas=s.replicas)
        c.create_table("T", "Z", COLUMNS, ["k"])
        table_id = c.catalog().table_named("T").id
        self.clients = [self.rt.spawn(
            tables_client, ClientConfig(i, self.seed, s, s.node_names, table_id,
                                        self.op_timeout),
            node=self.client_node, host=self.host, label=client_name(i))
            for i in range(s.clients)]

    @property
    def c(self) -> TablesCluster:
        assert self.cluster is not None
        return self.cluster

    # ---- the timeline ------------------------------------------------------------------

    def tick(self, t: float) -> None:
        """The runner's traffic has run `t` seconds: start, end and poll what is due."""
        if self.t0 is None:
            self.t0 = float(self.rt.now()) - t
            go = Go(self.t0, self.t0 + self.duration)
            for pid in self.clients:
                self.rt.send(pid, go)
        for p in list(self.pending):
            self._progress(p, t)
        for i, e in enumerate(self.spec.events):
            if i not in self.started and e.at <= t:
                self.started.add(i)
                self._begin(i, e, t)
        holding = any(p.sink is not None for p in self.pending)
        if not holding and t - self.last_poll >= POLL_EVERY:
            self.last_poll = t
            self.poll()

    def _note(self, t: float, what: str) -> None:
        self.log.append(f"{t:.2f} {what}")
        _logger.info("tables event", t=round(t, 3), what=what)

    def _node(self, pick: str) -> str:
        c = self.c
        rng = random.Random(f"sediment-tables-pick-{self.seed}-{len(self.log)}")
        if pick == "leader":
            return c.leader() or rng.choice(c.nodes)
        if pick == "idle":
            idle = [n for n in c.nodes if not (c.node_status(n) or {}).get("partitions")]
            return rng.choice(idle or list(c.nodes))
        if pick == "any":
            return rng.choice(c.nodes)
        return pick

    def _begin(self, i: int, e: TablesEvent, t: float) -> None:
        c, rt = self.c, self.rt
        p = _Pending(i, e, e.at + e.hold)
        try:
            if e.action == "create_index":
                if e.hold:
                    rt.arm_failpoint_everywhere(BEFORE_AVAILABLE, "pause")
                    p.point = BEFORE_AVAILABLE
                version = c.create_index(f"T_v{i}", "T", ["v"])
                self._note(t, f"create_index T_v{i} at version {version}"
                           + (f", held {e.hold:g} s" if e.hold else ""))
            elif e.action == "alter_zone":
                if e.hold:
                    rt.arm_failpoint_everywhere(BEFORE_RECORD, "pause")
                    p.point = BEFORE_RECORD
                version = c.alter_zone("Z", e.replicas)
                self._note(t, f"alter_zone Z replicas {e.replicas} at version {version}")
            elif e.action == "drop_zone":
                self._drop_zone(i, t)
            elif e.action == "long_transaction":
                node = self._node("any")
                p.tx = c.begin(node)
                p.tx.insert("T", {"k": LONG_TX_KEY + i, "v": i})
                self._note(t, f"long transaction {p.tx.id} at version "
                           f"{p.tx.catalog_version}")
            elif e.action == "kill_leader" and e.mid_compaction:
                p.sink = rt.spawn(_sink, node=self.client_node, host=self.host,
                                  label="tables-hits")
                p.point = before_apply_point(CompactCatalog)
                p.until = e.at + e.within
                rt.arm_failpoint_everywhere(p.point, "pause", notify=p.sink, tag=f"t{i}")
                self._note(t, "waiting for a leader to apply a compaction")
            elif e.action in ("kill_leader", "kill_node"):
                self._kill(self._node("leader" if e.action == "kill_leader" else e.node), t)
                return
            elif e.action == "stop_node":
                node = self._node(e.node)
                c.stop_node(node)
                self.kills.append((node, c.now()))
                p.stopped = node
                self._note(t, f"stopped {node} for {e.hold:g} s")
        except _ERRORS as err:
            self._error(t, f"event {i} {e.action}: {type(err).__name__}: {err}")
        if p.point or p.tx or p.stopped or p.sink:
            self.pending.append(p)

    def _kill(self, node: str, t: float) -> None:
        with contextlib.suppress(*_ERRORS):
            self._poll_outcomes()  # before its node takes them away
        self.c.kill_node(node)
        self.kills.append((node, self.c.now()))
        self._note(t, f"killed {node}")
        # the next poll reads through the metastore, which may wait out an election
        # now: events due before it (the next kill) come first
        self.last_poll = max(self.last_poll, t)

    def _error(self, t: float, what: str) -> None:
        self.errors.append(f"{t:.2f} {what}")
        self._note(t, what)

    def _drop_zone(self, i: int, t: float) -> None:
        c = self.c
        zone, table = f"Y{i}", f"U{i}"
        c.create_zone(zone, partitions=2, replicas=min(2, len(c.nodes)))
        c.create_table(table, zone, [("k", "int", False)], ["k"])
        tx = c.begin()
        tx.insert(table, {"k": 1})
        committed = tx.commit()
        version = c.ddl(ddl.DropTable(table), ddl.DropZone(zone))[0]
        self._note(t, f"zone {zone} with {table} (committed {committed}) dropped at "
                   f"version {version}")

    def _progress(self, p: _Pending, t: float) -> None:
        """A pending event: its hit (kill_leader mid-compaction), or its end."""
        rt = self.rt
        if p.sink is not None:
            hits = [m for m in rt.call(p.sink, SinkContents(), timeout=30)
                    if isinstance(m, FailpointHit)]
            if hits or t >= p.until:
                node = hits[0].pid.node if hits else None
                if node is None:
                    self._note(t, "no leader applied a compaction in time; killing the "
                               "leader now")
                else:
                    self._note(t, f"leader {node} held before applying a compaction")
                try:
                    if node is not None:
                        self._kill(node, t)
                finally:
                    assert p.point is not None
                    rt.release_failpoint_everywhere(p.point)
                    rt.kill(p.sink)
                    p.sink = p.point = None
                if node is None:
                    try:
                        self._kill(self._node("leader"), t)
                    except _ERRORS as err:
                        self._error(t, f"kill_leader: {type(err).__name__}: {err}")
                self.pending.remove(p)
            return
        if t < p.until:
            return
        self.end(p, t)

    def end(self, p: _Pending, t: float) -> None:
        self.pending.remove(p)
        if p.point is not None:
            self.rt.release_failpoint_everywhere(p.point)
            self._note(t, f"released {p.point}")
        if p.tx is not None:
            try:
                self._note(t, f"long transaction {p.tx.id} committed {p.tx.commit()}")
            except _ERRORS as err:
                self._note(t, f"long transaction {p.tx.id} not ended: {type(err).__name__}")
        if p.stopped is not None:
            try:
                past = self._past_stored_lwm(p.stopped)
                self.c.restart_node(p.stopped)
                self._note(t, f"restarted {p.stopped}{past}")
            except _ERRORS as err:
                self._error(t, f"restart {p.stopped}: {type(err).__name__}: {err}")

    def _past_stored_lwm(self, node: str) -> str:
        """Whether the catalog was compacted past the low watermark the stopped node
        stored (Ignite's ItNodeRecoveryAfterCatalogTruncatedAboveStoredLwmTest: on
        restart it must raise it to the earliest activation)."""
        stored = load_lwm(os.path.join(str(self.data_dir), node, "low_watermark.json"))
        try:
            earliest = self.c.versions().earliest_activation
        except _ERRORS:
            return ""
        if stored is None or earliest is None:
            return ""
        past = "yes" if stored < earliest else "no"
        return (f" (stored watermark {stored.value}, earliest activation "
                f"{earliest.value}: compacted past it {past})")

    # ---- the recorder ------------------------------------------------------------------

    def poll(self) -> None:
        """Feed the recorder: the coordinator's outcomes, pins, versions it missed."""
        c = self.c
        with contextlib.suppress(*_ERRORS):
            c.poll()
            self._poll_outcomes()
            self._fill_versions()

    def _poll_outcomes(self) -> None:
        """The coordinator's last outcomes (it keeps 64, and loses them with its node)."""
        status = self.c.coordinator_status() or {}
        for o in status.get("outcomes", ()):
            self.outcomes[(str(status.get("node")), int(status.get("term", 0)),
                           float(o["at"]))] = str(o["outcome"])

    def _fill_versions(self) -> None:
        """Versions whose DDL answer a client missed (a timeout): their activation from
        a replica, while it still has them (a missing version would make a transaction
        look older than it is)."""
        c = self.c
        latest = c.versions().latest_version
        known = c.recorder.versions
        for v in range(max(known) + 1, latest + 1):
            reply = self.rt.call(raft_name(META_GROUP, c.nodes[0]),
                                 Query(CatalogVersionQuery(v)), timeout=5)
            if not isinstance(reply, Rejected):
                known.setdefault(v, reply.activation)

    # ---- the end -----------------------------------------------------------------------

    def collect(self, t: float) -> tuple[list[CheckResult], list[str]]:
        """Release what is held, merge the clients' records, run the checks."""
        for p in list(self.pending):
            if p.sink is not None:
                p.until = t
                self._progress(p, t)
            else:
                self.end(p, t)
        c = self.c
        client_outcomes: dict[str, int] = {}
        for i, pid in enumerate(self.clients):
            try:
                answer = self.rt.call(pid, TakeRecords(), timeout=120)
            except RuntimeErrorBase as err:
                self._error(t, f"{client_name(i)} gave no records: {type(err).__name__}")
                continue
            if not isinstance(answer, ClientRecords):
                self._error(t, f"{client_name(i)} answered {answer!r:.100}")
                continue
            _merge(c.recorder, answer.recorder)
            for k, v in answer.outcomes.items():
                client_outcomes[k] = client_outcomes.get(k, 0) + v
        with contextlib.suppress(*_ERRORS):
            c.wait_ready(timeout=60)
        self.poll()
        for node, at in self.kills:
            for tx_id, tx in c.recorder.txs.items():
                if tx_id.startswith(f"{node}:") and tx.end is None and tx.start <= at:
                    tx.end = at
        history = c.recorder.history()
        checks = [compaction_safety(history), atomic_visibility(history),
                  self._tier_check(history, client_outcomes)]
        counts: dict[str, int] = {}
        for o in self.outcomes.values():
            counts[o] = counts.get(o, 0) + 1
        pins: dict[str, int] = {}
        for pin in history.pins:
            pins[pin.kind] = pins.get(pin.kind, 0) + 1
        notes = [f"tables coordinator outcomes: {_counts(counts)}",
                 f"tables pins: {_counts(pins)}",
                 f"tables clients: {_counts(client_outcomes)}",
                 f"tables transactions: {_tx_counts(history.txs)}",
                 f"tables catalog: {_versions(c)}",
                 *(f"tables event: {line}" for line in self.log)]
        return checks, notes

    def _tier_check(self, history: Any, client_outcomes: dict[str, int]) -> CheckResult:
        problems = list(self.errors)
        if not any(x.outcome == "committed" for x in history.txs):
            problems.append("no transaction committed")
        if not history.compactions:
            problems.append("the catalog was never compacted")
        if not history.reads:
            problems.append("no read-only read was answered")
        if problems:
            return violated(TIER_CHECK, problems[0], details=problems[1:])
        return passed(TIER_CHECK, f"{len(history.txs)} transactions, {len(history.reads)} "
                      f"reads, {len(history.compactions)} compactions, "
                      f"{len(self.spec.events)} events")


@dataclass(frozen=True)
class SinkContents:
    """A call to a `_sink`: the list of what arrived so far."""


async def _sink(ctx: Any) -> None:
    """Keep what arrives; `SinkContents()` answers the list so far."""
    from sediment.runtime.messages import Call

    got: list[Any] = []
    while True:
        msg = await ctx.receive()
        if not isinstance(msg, Call):
            got.append(msg)
            continue
        match msg.request:
            case SinkContents():
                ctx.reply(msg.from_, list(got))
            case other:
                ctx.reply(msg.from_, UnknownRequest.of(other))


def _merge(into: Recorder, rec: Recorder) -> None:
    for v, a in rec.versions.items():
        into.versions.setdefault(v, a)
    into.txs.update(rec.txs)
    into.reads.extend(rec.reads)


def _tx_counts(txs: Iterable[TxRecord]) -> str:
    """Transactions by outcome (aborted: rolled back or refused), and the writes each
    outcome's transactions had acknowledged (an aborted one's are work thrown away)."""
    counts: dict[str, int] = {}
    for tx in txs:
        counts[tx.outcome] = counts.get(tx.outcome, 0) + 1
        key = f"writes in {tx.outcome}"
        counts[key] = counts.get(key, 0) + len(tx.writes)
    return _counts(counts)


def _versions(c: TablesCluster) -> str:
    try:
        v = c.versions()
    except _ERRORS as err:
        return f"unreadable ({type(err).__name__})"
    return f"earliest version {v.earliest_version}, latest {v.latest_version}, " \
           f"log size {v.log_size}"


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"


__all__ = ["TIER_CHECK", "SinkContents", "TablesTier", "extra_nodes"]
