"""The table node: one process per node, in the node's raft host, that serves clients
and takes part in catalog compaction (docs/catalog.md §7 step 3).

It owns the node's hybrid clock, its RW transactions (`node_txs.py`), its low
watermark and the collector of its partitions' published minimum tx times. It:

- starts the node's members of the partition groups the metastore assigned to it
  (checked at start and every `ensure_interval`, so a restarted node starts them again);
- runs DDL when its node leads the metastore group: it stamps `ExecuteDdl.ts` from its
  clock, proposes, and answers once the new version is active plus the maximum clock
  skew (Ignite's awaitVersionActivation, rule 8);
- answers the compaction coordinator's `MinTimesRequest` (`compaction_participant`):
  the minimum of its low watermark and the times its partitions published after a flush
  (read from the local members, rule 6), with its active-tx minimum;
- on `PrepareUpdateTxBeginTime` proposes `UpdateMinActiveTxTimeCmd` and then a flush to
  every partition it leads (`replicas_to_update`);
- advances its low watermark on its interval (persisted before it is announced) and
  tells its subscribers (the coordinator on the metastore leader);
- hands reads to reader processes (`node_reads.py`).

Requests (calls): ("ddl", commands), ("begin",), ("write", tx, table, row),
("delete", tx, table, key), ("get", tx, table, key), ("scan", tx, table),
("commit", tx), ("rollback", tx), ("ro_get", table, key, ts), ("ro_scan", table, ts),
("ro_lookup", index, values, ts) (the rows whose indexed columns equal `values`),
("ro_range", index, IndexRange, ts) (range and prefix lookups, `index_range.py`),
("tx_alive", tx), ("clock", ts) -> ("clock", node, incarnation, now) (rule 5,
`node_safe_time.py`), ("txs_finished", version), ("subscribe_lwm", pid) -> ("lwm", current
or None), ("status",).
Errors are answered ("error", a CatalogError); nothing changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sediment import log
from sediment.actors.catalog import catalog_log, compaction_participant, ddl
from sediment.actors.catalog import low_watermark as lw
from sediment.actors.catalog.compaction_messages import MinTimesRequest, PrepareUpdateTxBeginTime
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
from sediment.actors.catalog.metastore_machine import AssignmentsQuery, RebalancesQuery
from sediment.actors.log.shell.names import RAFT_HOST, raft_name
from sediment.actors.log.shell.protocol import Propose, Query, ReadIndex
from sediment.actors.tables import (
    active_txs,
    index_range,
    min_tx_time,
    named_pids,
    node_txs,
    partitioning,
    unique_writes,
)
from sediment.actors.tables import node_safe_time as nst
from sediment.actors.tables import safe_time as st
from sediment.actors.tables.errors import (
    IndexNotAvailable,
    ReadBelowLowWatermark,
    UnknownTransaction,
)
from sediment.actors.tables.group_task import TaskDone, request_group, spawn_task
from sediment.actors.tables.names import META_GROUP, partition_group
from sediment.actors.tables.node_reads import ReadPlan, reader
from sediment.actors.tables.node_safe_time import ClockHeard, may_observe, start_clock
from sediment.actors.tables.node_state import (
    NodeState,
    TableNodeConfig,
    active_versions,
    assignments,
    catalog_at,
    catalog_log_now,
    catalog_version,
    known_assignments,
    load_lwm,
    meta_query,
    store_lwm,
)
from sediment.actors.tables.partition import (
    CatalogCompactedCmd,
    GcCmd,
    UpdateMinActiveTxTimeCmd,
)
from sediment.actors.tables.partition_machine import (
    FlushCmd,
    IndexLookup,
    MinTxQuery,
    group_of_name,
)
from sediment.actors.tables.partition_members import (
    PartitionOptions,
    partition_spec,
    running_members,
    start_member,
    stop_member,
)
from sediment.runtime.errors import CallError
from sediment.runtime.messages import Call, Down
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.tables.node")


@dataclass(frozen=True, slots=True)
class _Ensure:
    pass


@dataclass(frozen=True, slots=True)
class _LwmTick:
    at_ms: int


@dataclass(frozen=True, slots=True)
class _Activated:
    client: Any
    reply: Any


async def table_node(ctx: Process, config: TableNodeConfig) -> None:
    """Process entry."""
    s = NodeState(ctx, config, lwm=lw.init(config.lwm))
    s.incarnation = str(int(ctx.now() * 1_000_000))
    s.offset_ms = dict(config.clock_offsets_ms).get(s.me, 0)
    s.safe = st.init(s.me, frozenset(config.nodes))
    await ctx.spawn(start_clock, s.me, config.nodes, ctx.self(), label="start-clock",
                    host=RAFT_HOST)
    await _catch_up(s)
    versions = await meta_query(s, VersionsQuery())
    await _lwm_event(s, lw.Start(s.physical_ms(), load_lwm(s.lwm_path()),
                                 versions.earliest_activation))
    await _ensure(s)
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
            reply = ("error", err)
        if reply is not None:
            ctx.reply(msg.from_, reply)
    elif isinstance(msg, TaskDone):
        what = s.tasks.pop(msg.tag, None)
        if isinstance(what, tuple) and what[0] == "tx":
            await node_txs.on_task(s, what, msg)
        elif isinstance(what, tuple) and what[0] == "ddl":
            await _ddl_done(s, what[1], msg)
        elif isinstance(what, tuple) and what[0] == unique_writes.TAG:
            await unique_writes.on_read(s, what, msg)
        elif isinstance(what, tuple) and what[0] == "floor" and not msg.ok:
            s.floor_sent.pop(what[1], None)  # not taken: the next look proposes again
    elif isinstance(msg, ClockHeard):
        if may_observe(msg.ts, s.physical_ms(), s.config.max_clock_skew_ms):
            s.observe(msg.ts)
        if s.safe is not None:
            s.safe = st.heard(s.safe, msg.node, msg.incarnation, msg.ts)
    elif isinstance(msg, _Activated):
        ctx.reply(msg.client, msg.reply)
    elif isinstance(msg, _Ensure):
        await _ensure(s)
        ctx.send_after(s.config.ensure_interval, ctx.self(), _Ensure())
    elif isinstance(msg, _LwmTick):
        await _lwm_event(s, lw.Tick(s.now(), s.physical_ms()))
    elif isinstance(msg, tuple) and len(msg) == 3 and isinstance(msg[1], MinTimesRequest):
        await _min_times(s, msg[1], msg[2])
    elif isinstance(msg, PrepareUpdateTxBeginTime):
        await _prepare_tx_time(s, msg.ts)
    elif isinstance(msg, Down):
        if msg.pid in s.lwm_subscribers:
            s.lwm_subscribers.remove(msg.pid)
    else:
        _logger.warning("table node got an unexpected message", message=repr(msg)[:200])


async def _on_call(s: NodeState, call: Call) -> Any:
    r = call.request
    kind = r[0] if isinstance(r, tuple) and r else None
    if kind == "begin":
        return await node_txs.begin(s)
    if kind in ("write", "delete") and len(r) == 4:  # unique indexes: unique_writes.py
        return await unique_writes.write(s, call.from_, r[1], r[2], r[3], kind == "delete")
    if kind in ("commit", "rollback") and len(r) == 2:
        return await node_txs.commit(s, call.from_, r[1], kind == "rollback")
    if kind in ("get", "scan", "ro_get", "ro_scan", "ro_lookup", "ro_range"):
        return await _read(s, call, kind, r)
    if kind == "ddl" and len(r) == 2:
        return await _ddl(s, call, r[1])
    if kind == "clock" and len(r) == 2:
        # a reader elsewhere makes its read's timestamp safe (node_safe_time.py)
        if may_observe(r[1], s.physical_ms(), s.config.max_clock_skew_ms):
            s.observe(r[1])
        return nst.answer(s.me, float(s.incarnation), s.now())
    if kind == "tx_alive" and len(r) == 2:
        return node_txs.tx_alive(s, r[1])
    if kind == "txs_finished" and len(r) == 2 and isinstance(r[1], int):
        # the index build driver: has every RW transaction older than the version ended?
        return ("txs_finished", active_txs.finished_before(s.active, r[1]))
    if kind == "subscribe_lwm" and len(r) == 2 and isinstance(r[1], Pid):
        if r[1] not in s.lwm_subscribers:
            s.lwm_subscribers.append(r[1])
            s.ctx.monitor(r[1])
        return ("lwm", s.lwm.lwm)
    if kind == "status":
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
            status = await named_pids.call(s.ctx, raft_name(META_GROUP, s.me), ("status",), 5)
        except CallError:
            status = {}
        if target is None:
            leader = status.get("leader")
            if leader is not None:
                try:
                    lead = await named_pids.call(s.ctx, raft_name(META_GROUP, leader),
                                                 ("status",), 5)
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
    status = await named_pids.call(s.ctx, raft_name(META_GROUP, s.me), ("status",), 10)
    if status.get("role") != "leader":
        return ("not_leader", status.get("leader"))
    command = ExecuteDdl(commands, s.now(), s.config.ddl_delay_ms)
    tag = s.next_tag(("ddl", call.from_))
    await spawn_task(s.ctx, META_GROUP, (s.me,), (Propose(command),), tag)
    return None


async def _ddl_done(s: NodeState, client: Any, done: TaskDone) -> None:
    if not done.ok:
        s.ctx.reply(client, ("not_leader", None))
        return
    result = done.results[0]
    if isinstance(result, Rejected):
        s.ctx.reply(client, ("error", result.error))
        return
    assert isinstance(result, DdlApplied)
    # awaitVersionActivation: answer once the version is active everywhere
    wait_ms = result.activation.physical + s.config.max_clock_skew_ms - s.physical_ms()
    reply = ("ok", result.version, result.activation)
    if wait_ms <= 0:
        s.ctx.reply(client, reply)
    else:
        s.ctx.send_after(wait_ms / 1000, s.ctx.self(), _Activated(client, reply))
    await _ensure(s)


# ---- partitions ---------------------------------------------------------------------


async def _ensure(s: NodeState) -> None:
    """Start the members of partitions assigned to this node that do not run yet; forget
    the partitions of dropped zones."""
    try:
        s.assignments = await assignments(s)
    except CallError:
        return
    await _stop_unassigned(s)
    await _announce_compaction(s)
    options = s.config.partitions or PartitionOptions(s.config.data_dir)
    for group, nodes in sorted(s.assignments.items(), key=lambda x: (x[0].zone_id,
                                                                      x[0].partition)):
        if s.me not in nodes or group in s.started:
            continue
        reply = await start_member(s.ctx, s.me, partition_spec(group, nodes, options))
        if reply[0] == "ok" or (reply[0] == "error" and isinstance(reply[1], tuple)
                                and reply[1][0] == "already_started"):
            s.started.add(group)
            s.collector = min_tx_time.add_partition(s.collector, group)
        else:
            _logger.warning("partition member did not start", group=str(group), reply=reply)


async def _announce_compaction(s: NodeState) -> None:
    """Tell the partitions this node leads how far the catalog was compacted
    (`CatalogCompactedCmd`), so they refuse commands under older versions (rule 4)."""
    earliest = (await meta_query(s, VersionsQuery())).earliest_version
    for group in sorted(s.started, key=str):
        nodes = tuple(sorted(s.assignments.get(group, ())))
        if (s.floor_sent.get(group, 0) >= earliest or not nodes
                or not await _leads(s, partition_group(group))):
            continue
        s.floor_sent[group] = earliest
        await spawn_task(s.ctx, partition_group(group), nodes,
                         (Propose(CatalogCompactedCmd(earliest)),),
                         s.next_tag(("floor", group)))


async def _stop_unassigned(s: NodeState) -> None:
    """A dropped zone's partitions (IGNITE-25867) and replicas a rebalance moved away no
    longer hold compaction back, and their members stop (their files stay on disk). A
    member no assignment names is stopped only when a linearizable read of the
    metastore agrees: a learner a rebalance just started here is named only by its
    pending record, which the local replica may not have applied yet."""
    for group in sorted(s.started | set(s.collector.times), key=str):
        if s.me not in s.assignments.get(group, ()):
            s.collector = min_tx_time.remove_partition(s.collector, group)
            s.started.discard(group)
    running = {group_of_name(g): g for g in await running_members(s.ctx, s.me)}
    orphans = [g for g in running if s.me not in s.assignments.get(g, ())]
    if not orphans:
        return
    ok, pending = await request_group(s.ctx, META_GROUP, s.config.nodes,
                                      ReadIndex(RebalancesQuery()))
    ok2, stable = await request_group(s.ctx, META_GROUP, s.config.nodes,
                                      ReadIndex(AssignmentsQuery()))
    if not (ok and ok2):
        return
    for group in orphans:
        target = pending[group].target if group in pending else frozenset()
        if s.me not in stable.get(group, ()) and s.me not in target:
            await stop_member(s.ctx, s.me, running[group])


async def _leads(s: NodeState, group_name: str) -> bool:
    try:
        status = await named_pids.call(s.ctx, raft_name(group_name, s.me), ("status",), 2)
    except CallError:
        return False
    return bool(status.get("role") == "leader")


# ---- catalog compaction: the participant --------------------------------------------


async def _min_times(s: NodeState, request: MinTimesRequest, reply_to: Pid) -> None:
    for group in list(s.collector.times):  # read what each partition published
        try:
            durable = await named_pids.call(s.ctx, raft_name(partition_group(group), s.me),
                                       Query(MinTxQuery()), timeout=2)
        except CallError:
            continue
        if isinstance(durable, HybridTimestamp):
            s.collector = min_tx_time.record(s.collector, group, durable)
    pending = await meta_query(s, RebalancesQuery())  # the pins of active rebalances
    rebalance_pin = min((p.pin for p in pending.values()), default=None)
    local = compaction_participant.local_min_time(s.lwm.lwm, s.collector.times, rebalance_pin)
    now = s.now()
    tx_min = active_txs.minimum_required_time(s.active, now, lambda v: now)
    version = active_txs.min_version(s.active)
    if version is not None:
        tx_min = (await catalog_version(s, version)).activation
    s.ctx.send(reply_to, ("min_times_reply", compaction_participant.reply(
        request.iteration, s.me, local, tx_min)))


async def _prepare_tx_time(s: NodeState, ts: HybridTimestamp) -> None:
    log_now = await catalog_log_now(s)
    versions = active_versions(log_now, ts, s.now())
    primary = {g: (s.me if await _leads(s, partition_group(g)) else None)
               for g in s.collector.times}
    for group in compaction_participant.replicas_to_update(versions, s.me, primary):
        nodes = tuple(sorted(s.assignments.get(group, ())))
        if not nodes:
            continue
        requests = (Propose(UpdateMinActiveTxTimeCmd(ts)), Propose(FlushCmd()))
        await spawn_task(s.ctx, partition_group(group), nodes, requests,
                         s.next_tag(("min_tx", group)))


# ---- low watermark ------------------------------------------------------------------


async def _lwm_event(s: NodeState, event: lw.Event) -> None:
    s.lwm, effects = lw.step(s.lwm, event)
    for e in effects:
        if isinstance(e, lw.Persist):
            store_lwm(s.lwm_path(), e.lwm)
        elif isinstance(e, lw.Changed):
            for pid in s.lwm_subscribers:
                s.ctx.send(pid, ("lwm_changed", e.lwm))
            await _collect_garbage(s, e.lwm)
        elif isinstance(e, lw.SetTimer):
            delay = max(0.0, (e.at_physical_ms - s.physical_ms()) / 1000)
            s.ctx.send_after(delay, s.ctx.self(), _LwmTick(e.at_physical_ms))


async def _collect_garbage(s: NodeState, lwm: HybridTimestamp) -> None:
    """On a new low watermark, propose `GcCmd` to the partitions this node leads: row
    versions no read at or above the watermark can see go, and so do the rows of tables
    dropped at or before it (those the retained catalog versions still name)."""
    try:
        log_now = await catalog_log_now(s)
        at_lwm = catalog_log.catalog_at(log_now, max(lwm, log_now.snapshot.activation))
    except CatalogError:
        return
    known = {t for v in range(log_now.earliest_version, log_now.latest_version + 1)
             for t in catalog_log.catalog(log_now, v).tables}
    dropped = frozenset(t for t in known
                        if t not in at_lwm.tables and t < at_lwm.object_id_gen)
    for group in sorted(s.collector.times, key=str):
        nodes = tuple(sorted(s.assignments.get(group, ())))
        if nodes and await _leads(s, partition_group(group)):
            await spawn_task(s.ctx, partition_group(group), nodes,
                             (Propose(GcCmd(lwm, dropped)),), s.next_tag(("gc", group)))


# ---- reads --------------------------------------------------------------------------


async def _read(s: NodeState, call: Call, kind: str, r: tuple[Any, ...]) -> Any:
    latest = await catalog_log_now(s)
    safe: nst.SafeRead | None = None
    if kind in ("get", "scan"):
        tx = s.txs.get(r[1]) if isinstance(r[1], str) else None
        if tx is None:
            raise UnknownTransaction(str(r[1]))
        cat = await catalog_version(s, tx.core.catalog_version)
        table_name, tx_id, ts = r[2], tx.core.id, None
        key = r[3] if kind == "get" and len(r) == 4 else None
    else:
        ts = r[-1] if isinstance(r[-1], HybridTimestamp) else None
        if ts is None:  # now, a millisecond back; served once safe (rule 5)
            ts = s.now().subtract_physical(1)
        if s.lwm.lwm is not None and ts < s.lwm.lwm:
            raise ReadBelowLowWatermark(ts, s.lwm.lwm)
        assert s.safe is not None
        safe = nst.SafeRead(s.safe, s.now(), s.ctx.self(), s.config.safe_wait,
                            s.config.max_safe_waits)
        cat = await catalog_at(s, ts)
        table_name, tx_id = r[1], None
        key = r[2] if kind == "ro_get" else None
    lookup: IndexLookup | index_range.IndexRangeLookup | None = None
    if kind == "ro_lookup":
        lookup, table_name = _lookup(cat, r)
    elif kind == "ro_range":  # ("ro_range", index, IndexRange, ts): index_range.py
        lookup, table_name = index_range.plan(cat, r[1], r[2] if len(r) == 4 else None)
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


def _lookup(cat: Catalog, r: tuple[Any, ...]) -> tuple[IndexLookup, str]:
    """("ro_lookup", index name, values, ts): the partitions' query and the table."""
    if len(r) != 4 or not isinstance(r[2], tuple):
        raise InvalidCommand(f"an index lookup is (index, values tuple, ts): {repr(r)[:100]}")
    index = cat.index_named(r[1]) if isinstance(r[1], str) else None
    if index is None:
        raise IndexNotFound(str(r[1]))
    if index.status is not IndexStatus.AVAILABLE:
        raise IndexNotAvailable(index.name, index.status.value)
    if len(r[2]) != len(index.columns):
        raise InvalidCommand(f"index {index.name} has {len(index.columns)} columns, "
                             f"{len(r[2])} values given")
    table = cat.table(index.table_id)
    assert table is not None  # an index goes with its table
    return IndexLookup(index.id, table.id, index.columns, r[2]), table.name


def _status(s: NodeState) -> dict[str, Any]:
    oldest = node_txs.oldest(s)
    unpublished = sorted(str(g) for g, t in s.collector.times.items() if t is None)
    return {"node": s.me, "lwm": s.lwm.lwm, "active_txs": len(s.txs),
            "oldest_tx": oldest, "partitions": sorted(str(g) for g in s.started),
            "published": {str(g): t for g, t in s.collector.times.items()},
            "unpublished": unpublished, "recent_txs": list(s.ended[-20:])}


__all__ = ["TableNodeConfig", "table_node"]
