"""Registered names and group ids of the table processes.

The catalog's metastore group is `META_GROUP`, with a member on every node. Each zone
partition is a raft group `part-<zone>-<partition>` with members on the nodes its
assignment names, all in the node's raft host. Per node: the table node
(`tables@<node>`) and the supervisor its partition members run under
(`parts-sup@<node>`). One compaction coordinator at a time, beside the metastore
leader (`catalog-coordinator`), and beside it the index build driver (`index-driver`) and
the rebalance driver (`rebalance-driver`)."""

from __future__ import annotations

from sediment.actors.catalog.descriptors import ZonePartition

META_GROUP = "meta"
COORDINATOR = "catalog-coordinator"
INDEX_DRIVER = "index-driver"
REBALANCE_DRIVER = "rebalance-driver"


def partition_group(group: ZonePartition) -> str:
    return f"part-{group.zone_id}-{group.partition}"


def table_node_name(node: str) -> str:
    return f"tables@{node}"


def parts_sup_name(node: str) -> str:
    return f"parts-sup@{node}"


__all__ = ["COORDINATOR", "INDEX_DRIVER", "META_GROUP", "REBALANCE_DRIVER", "partition_group",
           "parts_sup_name", "table_node_name"]
