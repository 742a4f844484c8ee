"""Registered names of the block tier's processes (one place, so every caller agrees).

The metastore is its own raft group; its members are the log shell's raft servers
(`raft_name(METASTORE_GROUP, node)`). Workers are children of a simple_one_for_one
pool and have no names: they find the service by the leader's node.
"""

from __future__ import annotations

METASTORE_GROUP = "metastore"  # the raft group that replicates the block index and schedule


def blocks_node_name(node: str) -> str:
    """The per-node process that follows the metastore's leadership."""
    return f"blocks-node@{node}"


def service_name(node: str) -> str:
    """The compaction service; registered only while `node` leads the metastore."""
    return f"compaction-service@{node}"


def worker_pool_name(node: str) -> str:
    """The node's simple_one_for_one supervisor of compaction workers."""
    return f"compaction-workers@{node}"


def flush_node_name(node: str) -> str:
    """The per-node process that follows the KV group's leadership for the flusher."""
    return f"flush-node@{node}"


def flusher_name(node: str) -> str:
    """The level-0 flusher; registered only while `node` leads the KV group."""
    return f"flusher@{node}"


__all__ = ["METASTORE_GROUP", "blocks_node_name", "flush_node_name", "flusher_name",
           "service_name", "worker_pool_name"]
