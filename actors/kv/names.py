"""Registered names of the KV's processes (one place, so every caller agrees)."""

from __future__ import annotations

KV_GROUP = "kv"  # the raft group that replicates the KV
WATCH_HOST = "watch"  # the named host of a node's watcher sessions (one actor for all of
# them on Ray: a session per watch stream must not cost a worker process's boot)


def kv_node_name(node: str) -> str:
    return f"kv-node@{node}"


def coordinator_name(node: str) -> str:
    return f"kv-coordinator@{node}"


__all__ = ["KV_GROUP", "WATCH_HOST", "coordinator_name", "kv_node_name"]
