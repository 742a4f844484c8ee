"""One node's tree in a tables cluster, in start order: the node's log processes with
its metastore member (`log/shell/cluster.py`), the supervisor of its partition members,
its table node, then one follower of the metastore leadership per process that runs
beside the leader (the catalog's compaction coordinator, the tables tier's index build
and rebalance drivers).

Under the node's `rest_for_one` supervisor a process restarts everything started after
it, so the order is the dependency order.
"""

from __future__ import annotations

from sediment.actors.log.shell.cluster import node_children
from sediment.actors.log.shell.group_spec import GroupSpec
from sediment.actors.log.shell.names import RAFT_HOST
from sediment.actors.log.shell.while_leading import LeaderChild, while_leading
from sediment.actors.tables.shell.cluster import table_node_child
from sediment.actors.tables.shell.node_state import TableNodeConfig
from sediment.actors.tables.shell.partition_members import parts_supervisor
from sediment.supervision import ChildSpec, Spawn, SupFlags, supervisor


def node_tree(node: str, spec: GroupSpec, config: TableNodeConfig,
              drivers: tuple[LeaderChild, ...]) -> list[ChildSpec]:
    """The node's log processes, partitions, table node, and one follower of the
    metastore leadership per process that runs beside the leader."""
    return [
        *node_children(node, [spec]),
        parts_supervisor(node),
        table_node_child(node, config),
        *(ChildSpec(f"{d.role}-follower", (Spawn(while_leading, node=node,
                                                 label=f"{d.role}-follower@{node}",
                                                 host=RAFT_HOST), (d,)))
          for d in drivers),
    ]


def node_supervisor(node: str, spec: GroupSpec, config: TableNodeConfig,
                    drivers: tuple[LeaderChild, ...]) -> ChildSpec:
    """The node's supervisor (`node:<name>` under the top one) over `node_tree`."""
    return ChildSpec(f"node:{node}", (Spawn(supervisor, node=node, label=f"tables-sup:{node}",
                                            host=RAFT_HOST),
                                      (SupFlags(strategy="rest_for_one", intensity=50,
                                                period=10),
                                       node_tree(node, spec, config, drivers))),
                     type="supervisor")


__all__ = ["node_supervisor", "node_tree"]
