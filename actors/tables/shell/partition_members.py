"""Starting a node's members of partition raft groups while the node runs.

A zone's partitions appear when a DDL batch creates the zone, long after the node's log
processes started, so their members are not in the node's static supervision tree.
Each member is a small `rest_for_one` supervisor (the group's log worker, then its raft
server: a worker restart restarts the server, which holds the worker's pid) started
under the node's partitions supervisor (`parts-sup@<node>`, `one_for_one`), in the
node's raft host beside the node's WAL. The node's segment writer learns the group
when the raft server asks for its refs. Every member of a group bootstraps with the
same voters, the assignment the metastore recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sediment.actors.catalog.descriptors import ZonePartition
from sediment.actors.log.shell.group_spec import GroupSpec
from sediment.actors.log.shell.log_worker import log_worker
from sediment.actors.log.shell.names import LOG_HOST, RAFT_HOST, raft_name, worker_name
from sediment.actors.log.shell.server import raft_server
from sediment.actors.tables.names import partition_group, parts_sup_name
from sediment.actors.tables.partition_machine import PartitionFactory
from sediment.actors.tables.shell import named_pids
from sediment.runtime.errors import NoProc
from sediment.runtime.process import Process
from sediment.supervision import ChildSpec, Spawn, SupFlags, requests, supervisor


@dataclass(frozen=True)
class PartitionOptions:
    """Raft options of every partition group (small snapshots: a flush each)."""

    data_dir: str
    election_timeout: tuple[float, float] = (1.0, 2.0)
    heartbeat_interval: float = 0.1
    snapshot_every: int = 64


def partition_spec(group: ZonePartition, nodes: frozenset[str],
                   options: PartitionOptions) -> GroupSpec:
    return GroupSpec(partition_group(group), tuple(sorted(nodes)), options.data_dir,
                     election_timeout=options.election_timeout,
                     heartbeat_interval=options.heartbeat_interval,
                     snapshot_every=options.snapshot_every,
                     machine=PartitionFactory(group))


def parts_supervisor(node: str) -> ChildSpec:
    """The node's supervisor of partition members (empty at start)."""
    return ChildSpec("parts", (Spawn(supervisor, node=node, name=parts_sup_name(node),
                                     label=parts_sup_name(node), host=RAFT_HOST),
                               (SupFlags(strategy="one_for_one", intensity=50, period=10), [])),
                     type="supervisor")


def member_spec(node: str, spec: GroupSpec) -> ChildSpec:
    g = spec.group
    children = [
        ChildSpec("worker", (Spawn(log_worker, node=node, name=worker_name(g, node),
                                   label=worker_name(g, node), host=LOG_HOST),
                             (g, spec.group_dir(node), spec.num_minors,
                              spec.segment_max_entries))),
        ChildSpec("raft", (Spawn(raft_server, node=node, name=raft_name(g, node),
                                 label=raft_name(g, node), host=RAFT_HOST), (spec,))),
    ]
    return ChildSpec(g, (Spawn(supervisor, node=node, label=f"member:{g}@{node}",
                               host=RAFT_HOST),
                         (SupFlags(strategy="rest_for_one", intensity=20, period=10), children)),
                     type="supervisor")


async def start_member(ctx: Process, node: str, spec: GroupSpec) -> Any:
    """Start this node's member of `spec`'s group (no-op if it runs); the reply."""
    try:
        return await named_pids.call(ctx, parts_sup_name(node),
                                     requests.StartChild(member_spec(node, spec)), 30)
    except NoProc:
        return requests.SupervisorError("no partitions supervisor")


async def running_members(ctx: Process, node: str) -> list[str]:
    """The groups this node's partitions supervisor runs a member of."""
    try:
        which = await named_pids.call(ctx, parts_sup_name(node), requests.WhichChildren(), 30)
    except NoProc:
        return []
    return [cid for cid, _, _ in which if isinstance(cid, str)]


async def stop_member(ctx: Process, node: str, group: str) -> None:
    """Stop and forget this node's member of `group` (its replica moved away, or its
    zone was dropped). Its files stay on disk."""
    for request in (requests.TerminateChild(group), requests.DeleteChild(group)):
        try:
            await named_pids.call(ctx, parts_sup_name(node), request, 30)
        except NoProc:
            return


__all__ = ["PartitionOptions", "member_spec", "partition_spec", "parts_supervisor",
           "running_members", "start_member", "stop_member"]
