"""Registered names of the KV's processes (one place, so every caller agrees)."""

from __future__ import annotations

KV_GROUP = "kv"  # the raft group that replicates the KV


def kv_node_name(node: str) -> str:
    return f"kv-node@{node}"


def coordinator_name(node: str) -> str:
    return f"kv-coordinator@{node}"


__all__ = ["KV_GROUP", "coordinator_name", "kv_node_name"]
