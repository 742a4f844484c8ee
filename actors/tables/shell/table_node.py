"""The table node: one process per node, in the node's raft host, that serves clients
and takes part in catalog compaction (docs/catalog.md §7 step 3). What it is asked and
what it answers: `node_protocol.py`.

It owns the node's hybrid clock, its RW transactions (`node_txs.py`), its low
watermark and the collector of its partitions' published minimum tx times. It:

- starts the node's members of the partition groups the metastore assigned to it
  (`node_partitions.py`: at start and every `ensure_interval`, so a restarted node
  starts them again);
- runs DDL when its node leads the metastore group: it stamps `ExecuteDdl.ts` from its
  clock, proposes, and answers once the new version is active plus the maximum clock
  skew (Ignite's awaitVersionActivation, rule 8);
- answers the compaction coordinator, stores the global active-tx minimum in the
  partitions it leads and follows the cluster's low watermark, proposing it while its
  node leads the metastore group (`node_compaction.py`, `catalog/cluster_lwm.py`);
- hands reads to reader processes (`node_reads.py`).

A call that fails is answered `Failed(a CatalogError)`; nothing changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sediment import log
from sediment.actors.catalog import catalog_log, cluster_lwm, ddl
from sediment.actors.catalog import low_watermark as lw
from sediment.actors.catalog.compaction_messages import PrepareUpdateTxBeginTime
from sediment.actors.catalog.descriptors import Catalog, IndexStatus
from sediment.actors.catalog.errors import (
    CatalogError,
    IndexNotFound,
    InvalidCommand,
    InvalidDdl,
    TableNotFound,
)
from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.actors.catalog.machine import DdlApplied, ExecuteDdl, Rejected, VersionsQuery
from sediment.actors.catalog.metastore_machine import LowWatermarkQuery
from sediment.actors.log.shell.names import RAFT_HOST, raft_name
from sediment.actors.log.shell.protocol import Propose, ReadIndex
from sediment.actors.tables import active_txs, index_range, partitioning
from sediment.actors.tables import safe_time as st
from sediment.actors.tables.errors import (
    IndexNotAvailable,
    ReadBelowLowWatermark,
    UnknownTransaction,
)
from sediment.actors.tables.names import META_GROUP
from sediment.actors.tables.partition_machine import IndexLookup
from sediment.actors.tables.shell import named_pids, node_txs, unique_writes
from sediment.actors.tables.shell import node_protocol as p
from sediment.actors.tables.shell import node_safe_time as nst
from sediment.actors.tables.shell import node_tasks as tasks
from sediment.actors.tables.shell.group_task import TaskDone, request_group, spawn_task
from sediment.actors.tables.shell.node_compaction import (
    LwmTick,
    drive_lwm,
    lwm_proposed,
    lwm_tick,
    min_times,
    prepare_tx_time,
)
from sediment.actors.tables.shell.node_partitions import ensure
from sediment.actors.tables.shell.node_reads import ReadPlan, reader
from sediment.actors.tables.shell.node_safe_time import ClockHeard, may_observe, start_clock
from sediment.actors.tables.shell.node_state import (
    NodeState,
    TableNodeConfig,
    catalog_at,
    catalog_log_now,
    catalog_version,
    known_assignments,
    load_lwm,
    meta_query,
)
from sediment.runtime.common_calls import Status
from sediment.runtime.errors import CallError
from sediment.runtime.messages import Call, CallRef, Down
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.tables.node")


@dataclass(frozen=True, slots=True)
class _Ensure:
    pass


@dataclass(frozen=True, slots=True)
class _Activated:
    client: CallRef
    reply: p.DdlActive


async def table_node(ctx: Process, config: TableNodeConfig) -> None:
    """Process entry."""
    s = NodeState(ctx, config)
    drive_lwm(s)
    s.offset_ms = dict(config.clock_offsets_ms).get(s.me, 0)
    # with the clock's offset: a cluster started again over the same files (a new
    # simulator, whose time starts at 0 again) must not reuse transaction ids
    s.incarnation = str(int(ctx.now() * 1_000_000) + s.offset_ms * 1000)
    s.safe = st.init(s.me, frozenset(config.nodes))
    await ctx.spawn(start_clock, s.me, config.nodes, ctx.self(), label="start-clock",
                    host=RAFT_HOST)
    await _catch_up(s)
    versions = await meta_query(s, VersionsQuery())
    # the cluster's committed watermark survives the node's own file (cluster_lwm.py)
    committed = await meta_query(s, LowWatermarkQuery())
    committed = committed if isinstance(committed, HybridTimestamp) else None
    stored = max((t for t in (load_lwm(s.lwm_path()), committed) if t is not None),
                 default=None)
    await s.lwm_core.run(lw.Start(s.physical_ms(), stored, versions.earliest_activation))
    await s.clwm_core.run(cluster_lwm.Committed(committed))
    await ensure(s)
    ctx.send_after(config.ensure_interval, ctx.self(), _Ensure())
    _logger.info("table node up", node=s.me, lwm=str(s.lwm.lwm), at=ctx.now())
    while True:
        msg = await ctx.receive()
        try:
            await _handle(s, msg)
        except CallError as err:  # a local member restarting: the next message retries
            _logger.warning("table node call failed", error=str(err)[:200])


async def _handle(s: NodeState, msg: Any) -> None:
    ctx = s.ctx
    if isinstance(msg, Call):
        try:
            reply = await _on_call(s, msg)
        except CatalogError as err:
            reply = p.Failed(err)
        if reply is not None:
            ctx.reply(msg.from_, reply)
    elif isinstance(msg, TaskDone):
        match s.tasks.pop(msg.tag, None):
            case tasks.TxMessage() as what:
                await node_txs.on_task(s, what, msg)
            case tasks.DdlProposal(client):
                await _ddl_done(s, client, msg)
            case tasks.UniqueRead() as what:
                await unique_writes.on_read(s, what, msg)
            case tasks.LwmProposal():
                await lwm_proposed(s, msg)
            case tasks.FloorAnnouncement(group) if not msg.ok:
                s.floor_sent.pop(group, None)  # not taken: the next look proposes again
            case _:  # a minimum time or garbage told, a floor taken, a stale tag
                pass
    elif isinstance(msg, ClockHeard):
        if may_observe(msg.ts, s.physical_ms(), s.config.max_clock_skew_ms):
            s.observe(msg.ts)
        if s.safe is not None:
            s.safe = st.heard(s.safe, msg.node, msg.incarnation, msg.ts)
    elif isinstance(msg, _Activated):
        ctx.reply(msg.client, msg.reply)
    elif isinstance(msg, _Ensure):
        await ensure(s)
        ctx.send_after(s.config.ensure_interval, ctx.self(), _Ensure())
    elif isinstance(msg, LwmTick):
        await lwm_tick(s)
    elif isinstance(msg, p.MinTimesAsk):
        await min_times(s, msg.request, msg.reply_to)
    elif isinstance(msg, PrepareUpdateTxBeginTime):
        await prepare_tx_time(s, msg.ts)
    elif isinstance(msg, Down):
        if msg.pid in s.lwm_subscribers:
            s.lwm_subscribers.remove(msg.pid)
    else:
        _logger.warning("table node got an unexpected message", message=repr(msg)[:200])


async def _on_call(s: NodeState, call: Call) -> Any:
    r = call.request
    if isinstance(r, p.Begin):
        return await node_txs.begin(s)
    if isinstance(r, p.Write):  # unique indexes: unique_writes.py
        return await unique_writes.write(s, call.from_, r.tx, r.table, r.row, False)
    if isinstance(r, p.Delete):
        return await unique_writes.write(s, call.from_, r.tx, r.table, r.key, True)
    if isinstance(r, p.Commit | p.Rollback):
        return await node_txs.commit(s, call.from_, r.tx, isinstance(r, p.Rollback))
    if isinstance(r, p.ReadRequest):
        return await _read(s, call, r)
    if isinstance(r, p.Ddl):
        return await _ddl(s, call, r.commands)
    if isinstance(r, p.Clock):
        # a reader elsewhere makes its read's timestamp safe (node_safe_time.py)
        if r.ts is not None and may_observe(r.ts, s.physical_ms(), s.config.max_clock_skew_ms):
            s.observe(r.ts)
        return nst.answer(s.me, float(s.incarnation), s.now())
    if isinstance(r, p.TxAlive):
        return node_txs.tx_alive(s, r.tx)
    if isinstance(r, p.TxsFinished) and isinstance(r.version, int):
        # the index build driver: has every RW transaction older than the version ended?
        return p.TxsFinishedAnswer(active_txs.finished_before(s.active, r.version))
    if isinstance(r, p.SubscribeLwm) and isinstance(r.pid, Pid):
        if r.pid not in s.lwm_subscribers:
            s.lwm_subscribers.append(r.pid)
            s.ctx.monitor(r.pid)
        return p.LwmNow(s.lwm.lwm)
    if isinstance(r, Status):
        return _status(s)
    raise InvalidCommand(f"table node request {repr(r)[:100]}")


CATCH_UP_POLLS = 200  # x 0.05 s: how long a starting node waits for its metastore replica


async def _catch_up(s: NodeState) -> None:
    """Wait (bounded) until the local metastore replica has applied what the leader had
    when we asked: a restarted node must not answer from a stale catalog or miss the
    assignments of zones created while it was down."""
    ok, _ = await request_group(s.ctx, META_GROUP, s.config.nodes,
                                ReadIndex(VersionsQuery()))
    if not ok:
        return
    target = None
    for _ in range(CATCH_UP_POLLS):
        try:
            status = await named_pids.call(s.ctx, raft_name(META_GROUP, s.me), Status(), 5)
        except CallError:
            status = {}
        if target is None:
            leader = status.get("leader")
            if leader is not None:
                try:
                    lead = await named_pids.call(s.ctx, raft_name(META_GROUP, leader),
                                                 Status(), 5)
                    target = lead.get("commit")
                except CallError:
                    pass
        if target is not None and status.get("applied", 0) >= target:
            return
        await s.ctx.sleep(0.05)
    _logger.warning("metastore replica did not catch up", node=s.me)


# ---- DDL ----------------------------------------------------------------------------


async def _ddl(s: NodeState, call: Call, commands: Any) -> Any:
    if not isinstance(commands, tuple) or not all(isinstance(c, ddl.DDL_TYPES) for c in commands):
        raise InvalidCommand(f"DDL commands {repr(commands)[:100]}")
    for c in commands:  # what only the cluster knows: how many nodes can hold replicas
        if isinstance(c, ddl.CreateZone | ddl.AlterZone) and isinstance(c.replicas, int) and (
                c.replicas > len(s.config.nodes)):
            raise InvalidDdl(f"zone {c.name}: {c.replicas} replicas on "
                             f"{len(s.config.nodes)} nodes")
    status = await named_pids.call(s.ctx, raft_name(META_GROUP, s.me), Status(), 10)
    if status.get("role") != "leader":
        return p.NotLeader(status.get("leader"))
    command = ExecuteDdl(commands, s.now(), s.config.ddl_delay_ms)
    tag = s.next_tag(tasks.DdlProposal(call.from_))
    await spawn_task(s.ctx, META_GROUP, (s.me,), (Propose(command),), tag)
    return None


async def _ddl_done(s: NodeState, client: CallRef, done: TaskDone) -> None:
    if not done.ok:
        s.ctx.reply(client, p.NotLeader(None))
        return
    result = done.results[0]
    if isinstance(result, Rejected):
        s.ctx.reply(client, p.Failed(result.error))
        return
    assert isinstance(result, DdlApplied)
    # awaitVersionActivation: answer once the version is active everywhere
    wait_ms = result.activation.physical + s.config.max_clock_skew_ms - s.physical_ms()
    reply = p.DdlActive(result.version, result.activation)
    if wait_ms <= 0:
        s.ctx.reply(client, reply)
    else:
        s.ctx.send_after(wait_ms / 1000, s.ctx.self(), _Activated(client, reply))
    await ensure(s)


# ---- reads --------------------------------------------------------------------------


async def _read(s: NodeState, call: Call, r: p.ReadRequest) -> Any:
    latest = await catalog_log_now(s)
    safe: nst.SafeRead | None = None
    if isinstance(r, p.TxRead):
        tx = s.txs.get(r.tx) if isinstance(r.tx, str) else None
        if tx is None:
            raise UnknownTransaction(str(r.tx))
        cat = await catalog_version(s, tx.core.catalog_version)
        tx_id, ts = tx.core.id, None
    else:
        ts = r.ts if isinstance(r.ts, HybridTimestamp) else None
        if ts is None:  # now, a millisecond back; served once safe (rule 5)
            ts = s.now().subtract_physical(1)
        if s.lwm.lwm is not None and ts < s.lwm.lwm:
            raise ReadBelowLowWatermark(ts, s.lwm.lwm)
        assert s.safe is not None
        safe = nst.SafeRead(s.safe, s.now(), s.ctx.self(), s.config.safe_wait,
                            s.config.max_safe_waits)
        cat = await catalog_at(s, ts)
        tx_id = None
    key = r.key if isinstance(r, p.Get | p.RoGet) else None
    lookup: IndexLookup | index_range.IndexRangeLookup | None = None
    if isinstance(r, p.RoLookup | p.TxLookup):
        lookup, table_name = _lookup(cat, r)
    elif isinstance(r, p.RoRange | p.TxRange):  # range and prefix lookups: index_range.py
        lookup, table_name = index_range.plan(cat, r.index, r.bounds)
    else:
        table_name = r.table
    if isinstance(r, p.TxLookup | p.TxRange) and lookup is not None and catalog_log.catalog(
            latest, latest.latest_version).index(lookup.index_id) is None:
        # dropped since the transaction began: its entries may be collected already
        raise IndexNotFound(str(r.index))
    table = cat.table_named(table_name)
    if table is None:
        raise TableNotFound(str(table_name))
    if key is not None:
        if not isinstance(key, tuple):
            raise InvalidCommand(f"a key is a tuple: {key!r}")
        groups: tuple[Any, ...] = (partitioning.group_of(cat, table, key),)
    else:
        zone = cat.zone(table.zone_id)
        assert zone is not None
        groups = tuple(g for g in cat.partitions() if g.zone_id == zone.id)
    await known_assignments(s, groups)
    plan = ReadPlan(table.id, groups, dict(s.assignments), key, ts, tx_id,
                    catalog_log.active_version(latest, s.now()), s.config.intent_wait,
                    s.config.max_intent_waits, safe, lookup)
    await s.ctx.spawn(reader, plan, call.from_, label="reader", host=RAFT_HOST)
    return None


def _lookup(cat: Catalog, r: p.RoLookup | p.TxLookup) -> tuple[IndexLookup, str]:
    """The partitions' query of an index lookup, and its table."""
    if not isinstance(r.values, tuple):
        raise InvalidCommand(f"an index lookup takes a tuple of values: {repr(r)[:100]}")
    index = cat.index_named(r.index) if isinstance(r.index, str) else None
    if index is None:
        raise IndexNotFound(str(r.index))
    if index.status is not IndexStatus.AVAILABLE:
        raise IndexNotAvailable(index.name, index.status.value)
    if len(r.values) != len(index.columns):
        raise InvalidCommand(f"index {index.name} has {len(index.columns)} columns, "
                             f"{len(r.values)} values given")
    table = cat.table(index.table_id)
    assert table is not None  # an index goes with its table
    return IndexLookup(index.id, table.id, index.columns, r.values), table.name


def _status(s: NodeState) -> dict[str, Any]:
    oldest = node_txs.oldest(s)
    unpublished = sorted(str(g) for g, t in s.collector.times.items() if t is None)
    return {"node": s.me, "lwm": s.lwm.lwm, "active_txs": len(s.txs),
            "oldest_tx": oldest, "partitions": sorted(str(g) for g in s.started),
            "published": {str(g): t for g, t in s.collector.times.items()},
            "unpublished": unpublished, "recent_txs": list(s.ended[-20:])}


__all__ = ["TableNodeConfig", "table_node"]
