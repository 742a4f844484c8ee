"""Registered names of the KV's processes (one place, so every caller agrees)."""

from __future__ import annotations

KV_GROUP = "kv"  # the raft group that replicates the KV
KV_HOST = "kv"  # the named host of a node's KV node and its watcher sessions: one actor on
# Ray (a session per watch stream must not cost a worker process's boot, and the node's
# fan-out of applied changes to its sessions stays in memory)


def kv_node_name(node: str) -> str:
    return f"kv-node@{node}"


def coordinator_name(node: str) -> str:
    return f"kv-coordinator@{node}"


__all__ = ["KV_GROUP", "KV_HOST", "coordinator_name", "kv_node_name"]
