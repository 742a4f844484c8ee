"""The table node's partition members: which of the metastore's assignments run on this
node, started and stopped as the assignments change (`table_node.py` looks on start,
after DDL and every `ensure_interval`), and the catalog compaction floor told to the
partitions this node leads (rule 4)."""

from __future__ import annotations

from sediment import log
from sediment.actors.catalog.machine import VersionsQuery
from sediment.actors.catalog.metastore_machine import AssignmentsQuery, RebalancesQuery
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Propose, ReadIndex
from sediment.actors.tables import min_tx_time
from sediment.actors.tables.names import META_GROUP, partition_group
from sediment.actors.tables.partition import CatalogCompactedCmd
from sediment.actors.tables.partition_machine import group_of_name
from sediment.actors.tables.shell import named_pids
from sediment.actors.tables.shell.group_task import request_group, spawn_task
from sediment.actors.tables.shell.node_state import NodeState, assignments, meta_query
from sediment.actors.tables.shell.node_tasks import FloorAnnouncement
from sediment.actors.tables.shell.partition_members import (
    PartitionOptions,
    partition_spec,
    running_members,
    start_member,
    stop_member,
)
from sediment.runtime.common_calls import Status
from sediment.runtime.errors import CallError
from sediment.supervision import requests

_logger = log.get_logger("sediment.tables.node")


async def ensure(s: NodeState) -> None:
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
        if requests.is_running(reply):
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
                or not await leads(s, partition_group(group))):
            continue
        s.floor_sent[group] = earliest
        await spawn_task(s.ctx, partition_group(group), nodes,
                         (Propose(CatalogCompactedCmd(earliest)),),
                         s.next_tag(FloorAnnouncement(group)))


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


async def leads(s: NodeState, group_name: str) -> bool:
    """Whether this node's member of raft group `group_name` leads it now."""
    try:
        status = await named_pids.call(s.ctx, raft_name(group_name, s.me), Status(), 2)
    except CallError:
        return False
    return bool(status.get("role") == "leader")


__all__ = ["ensure", "leads"]
