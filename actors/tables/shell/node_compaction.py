"""The table node's part in catalog compaction and garbage collection (docs/catalog.md
§7 step 3): it answers the coordinator's `MinTimesAsk` (`compaction_participant`), on
`PrepareUpdateTxBeginTime` stores the global active-tx minimum in the partitions it
leads, and follows the cluster's low watermark (`cluster_lwm`: proposed by the node
whose metastore member leads, committed in the metastore, adopted by every node), its
own copy persisted before it is announced, telling its subscribers and proposing
`GcCmd` to the partitions it leads."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sediment.actors.catalog import catalog_log, cluster_lwm, compaction_participant
from sediment.actors.catalog import low_watermark as lw
from sediment.actors.catalog.compaction_messages import MinTimesRequest
from sediment.actors.catalog.errors import CatalogError
from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.actors.catalog.metastore_machine import (
    AdvanceLowWatermark,
    LowWatermarkAdvanced,
    LowWatermarkQuery,
    RebalancesQuery,
)
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Propose, Query
from sediment.actors.tables import active_txs, min_tx_time
from sediment.actors.tables.names import META_GROUP, partition_group
from sediment.actors.tables.partition import GcCmd, UpdateMinActiveTxTimeCmd
from sediment.actors.tables.partition_machine import FlushCmd, MinTxQuery
from sediment.actors.tables.shell import named_pids
from sediment.actors.tables.shell.group_task import TaskDone, spawn_task
from sediment.actors.tables.shell.node_partitions import leads
from sediment.actors.tables.shell.node_protocol import LwmChanged
from sediment.actors.tables.shell.node_state import (
    NodeState,
    active_versions,
    catalog_log_now,
    catalog_version,
    meta_query,
    store_lwm,
)
from sediment.actors.tables.shell.node_tasks import GarbageCollection, LwmProposal, MinTxTimeUpdate
from sediment.runtime.errors import CallError
from sediment.runtime.pid import Pid


@dataclass(frozen=True, slots=True)
class LwmTick:
    """The low watermark's timer (a message to the node itself)."""

    at_ms: int


async def min_times(s: NodeState, request: MinTimesRequest, reply_to: Pid) -> None:
    """Answer the coordinator: the minimum of the low watermark and the times the
    partitions published after a flush (read from the local members, rule 6), with the
    active-tx minimum."""
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
    s.ctx.send(reply_to, compaction_participant.reply(request.iteration, s.me, local, tx_min))


async def prepare_tx_time(s: NodeState, ts: HybridTimestamp) -> None:
    """Propose `UpdateMinActiveTxTimeCmd(ts)` and then a flush to every partition this
    node leads (`replicas_to_update`)."""
    log_now = await catalog_log_now(s)
    versions = active_versions(log_now, ts, s.now())
    primary = {g: (s.me if await leads(s, partition_group(g)) else None)
               for g in s.collector.times}
    for group in compaction_participant.replicas_to_update(versions, s.me, primary):
        nodes = tuple(sorted(s.assignments.get(group, ())))
        if not nodes:
            continue
        requests = (Propose(UpdateMinActiveTxTimeCmd(ts)), Propose(FlushCmd()))
        await spawn_task(s.ctx, partition_group(group), nodes, requests,
                         s.next_tag(MinTxTimeUpdate(group)))


def drive_lwm(s: NodeState) -> None:
    """Register how the node carries out its two watermark cores' effects (both run on
    `CoreDriver`s, `NodeState.lwm_core` and `clwm_core`). The node's own core: persist,
    then announce (tell the subscribers, collect garbage), its timer. The cluster's:
    read the committed value (a `Committed` follow-up), propose one, adopt one (the
    node's own core steps `Propose` at once: it still waits above local read locks), its
    timer."""
    own, cluster = s.lwm_core, s.clwm_core
    own.on(lw.Persist, lambda e: store_lwm(s.lwm_path(), e.lwm))
    own.on(lw.Changed, lambda e: _announce(s, e.lwm))
    own.on(lw.SetTimer, lambda e: _arm(s, e.at_physical_ms))
    cluster.on(cluster_lwm.ReadCommitted, lambda e: _read_committed(s))
    cluster.on(cluster_lwm.ProposeLwm, lambda e: spawn_task(
        s.ctx, META_GROUP, (s.me,), (Propose(AdvanceLowWatermark(e.lwm)),),
        s.next_tag(LwmProposal())))
    cluster.on(cluster_lwm.Adopt, lambda e: own.run(lw.Propose(e.lwm)))
    cluster.on(cluster_lwm.SetTimer, lambda e: _arm(s, e.at_physical_ms))


async def lwm_tick(s: NodeState) -> None:
    """The update interval: the leader proposes, every node reads the committed value."""
    leading = await leads(s, META_GROUP)
    await s.clwm_core.run(cluster_lwm.Tick(s.now(), s.physical_ms(), leading))


async def lwm_proposed(s: NodeState, done: TaskDone) -> None:
    result = done.results[0] if done.ok and done.results else None
    committed = result.lwm if isinstance(result, LowWatermarkAdvanced) else None
    await s.clwm_core.run(cluster_lwm.ProposalDone(committed))


async def _read_committed(s: NodeState) -> cluster_lwm.Committed | None:
    try:
        committed = await meta_query(s, LowWatermarkQuery())
    except CallError:
        return None  # the local replica restarting: the next tick reads again
    return cluster_lwm.Committed(committed if isinstance(committed, HybridTimestamp) else None)


async def _announce(s: NodeState, lwm: HybridTimestamp) -> None:
    for pid in s.lwm_subscribers:
        s.ctx.send(pid, LwmChanged(lwm))
    await _collect_garbage(s, lwm)


def _arm(s: NodeState, at_physical_ms: int) -> None:
    delay = max(0.0, (at_physical_ms - s.physical_ms()) / 1000)
    s.ctx.send_after(delay, s.ctx.self(), LwmTick(at_physical_ms))


async def _collect_garbage(s: NodeState, lwm: HybridTimestamp) -> None:
    """On a new low watermark, propose `GcCmd` to the partitions this node leads: row
    versions no read at or above the watermark can see go, and so do the rows of tables
    and the claim rows and entries of indexes dropped at or before it (those the
    retained catalog versions still name; a table's indexes go with it)."""
    try:
        log_now = await catalog_log_now(s)
        at_lwm = catalog_log.catalog_at(log_now, max(lwm, log_now.snapshot.activation))
    except CatalogError:
        return
    retained = [catalog_log.catalog(log_now, v)
                for v in range(log_now.earliest_version, log_now.latest_version + 1)]

    def dropped(now: Mapping[int, object], ids: Iterable[int]) -> frozenset[int]:
        return frozenset(i for i in ids if i not in now and i < at_lwm.object_id_gen)

    command = GcCmd(lwm, dropped(at_lwm.tables, {t for c in retained for t in c.tables}),
                    dropped(at_lwm.indexes, {i for c in retained for i in c.indexes}))
    for group in sorted(s.collector.times, key=str):
        nodes = tuple(sorted(s.assignments.get(group, ())))
        if nodes and await leads(s, partition_group(group)):
            await spawn_task(s.ctx, partition_group(group), nodes,
                             (Propose(command),), s.next_tag(GarbageCollection(group)))


__all__ = ["LwmTick", "drive_lwm", "lwm_proposed", "lwm_tick", "min_times",
           "prepare_tx_time"]
