"""The tables tier's own part of a cluster: the metastore group, the table node, the
drivers that run beside the metastore leader, and the test low watermark.

A tables cluster is assembled above the actor packages, in the wiring layer
(`sediment/wiring/tables.py`: `TablesCluster`, its transactions and each node's tree),
from these parts, the log's (`log/shell/cluster.py`: a node's log processes) and the
catalog's compaction coordinator (`catalog/shell/coordinator_process.py`). Nothing here starts a
runtime or a supervision tree, so the tier's processes can be read and tested alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from sediment.actors.catalog import low_watermark as lw
from sediment.actors.catalog.metastore_machine import MetastoreFactory
from sediment.actors.log.shell.group_spec import GroupSpec
from sediment.actors.log.shell.names import RAFT_HOST
from sediment.actors.log.shell.while_leading import LeaderChild
from sediment.actors.tables.names import INDEX_DRIVER, META_GROUP, REBALANCE_DRIVER, table_node_name
from sediment.actors.tables.shell.index_driver import IndexDriverConfig, index_driver
from sediment.actors.tables.shell.node_state import TableNodeConfig
from sediment.actors.tables.shell.partition_members import PartitionOptions
from sediment.actors.tables.shell.rebalance_driver import RebalanceDriverConfig, rebalance_driver
from sediment.actors.tables.shell.table_node import table_node
from sediment.supervision import ChildSpec, Spawn

# the tests' and scenarios' low watermark: seconds, where Ignite's default is minutes
TEST_LWM = lw.LowWatermarkConfig(data_availability_ms=1_000, update_interval_ms=300,
                                 max_clock_skew_ms=10)
# and their coordinator's wait for the nodes' minimum times (Ignite's: 10 s)
TEST_ANSWER_TIMEOUT_MS = 2_000


def metastore_group(names: Sequence[str], data_dir: str,
                    election_timeout: tuple[float, float]) -> GroupSpec:
    """The metastore raft group (the catalog, the assignments, the cluster low watermark:
    `catalog/metastore_machine.py`), one member on every node."""
    return GroupSpec(META_GROUP, tuple(names), data_dir, election_timeout=election_timeout,
                     snapshot_every=256, machine=MetastoreFactory(tuple(names)))


def table_node_child(node: str, config: TableNodeConfig) -> ChildSpec:
    """The table node (`table_node.py`), in its node's tree after the node's log
    processes and partition members."""
    return ChildSpec("tables", (Spawn(table_node, node=node, name=table_node_name(node),
                                      label=table_node_name(node), host=RAFT_HOST), (config,)))


def tier_drivers(names: Sequence[str], partitions: PartitionOptions,
                 scale_down_after: float | None) -> tuple[LeaderChild, ...]:
    """The tier's processes that run while their node's metastore member leads: the
    index build driver and the rebalance driver."""
    nodes = tuple(names)
    return (LeaderChild(META_GROUP, "index-driver", INDEX_DRIVER, index_driver,
                        IndexDriverConfig(nodes)),
            LeaderChild(META_GROUP, "rebalance-driver", REBALANCE_DRIVER, rebalance_driver,
                        RebalanceDriverConfig(nodes, partitions,
                                              scale_down_after=scale_down_after)))


__all__ = ["TEST_ANSWER_TIMEOUT_MS", "TEST_LWM", "metastore_group", "table_node_child",
           "tier_drivers"]
