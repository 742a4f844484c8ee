"""What runs on one node of the tables cluster, under its supervisor: the node's log
processes (`log/shell/cluster.py`), its partition members, its table node, and one
follower of the metastore leadership per process that runs beside the leader."""

from __future__ import annotations

from sediment.actors.log.shell.cluster import node_children
from sediment.actors.log.shell.group_spec import GroupSpec
from sediment.actors.log.shell.names import RAFT_HOST
from sediment.actors.log.shell.while_leading import LeaderChild, while_leading
from sediment.actors.tables.names import table_node_name
from sediment.actors.tables.node_state import TableNodeConfig
from sediment.actors.tables.partition_members import parts_supervisor
from sediment.actors.tables.table_node import table_node
from sediment.supervision import ChildSpec, Spawn


def node_tree(node: str, spec: GroupSpec, config: TableNodeConfig,
              drivers: tuple[LeaderChild, ...]) -> list[ChildSpec]:
    """The node's log processes, partitions, table node, and one follower of the
    metastore leadership per process that runs beside the leader (the compaction
    coordinator, the index build driver)."""
    return [
        *node_children(node, [spec]),
        parts_supervisor(node),
        ChildSpec("tables", (Spawn(table_node, node=node, name=table_node_name(node),
                                   label=table_node_name(node), host=RAFT_HOST), (config,))),
        *(ChildSpec(f"{d.role}-follower", (Spawn(while_leading, node=node,
                                                 label=f"{d.role}-follower@{node}",
                                                 host=RAFT_HOST), (d,)))
          for d in drivers),
    ]


__all__ = ["node_tree"]
