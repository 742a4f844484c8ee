"""Registered names of the log processes: one WAL per node, one raft server per group
per node. Peers find each other by name, so a restarted process is found again."""

from __future__ import annotations


def wal_name(node: str) -> str:
    return f"wal@{node}"


def segwriter_name(node: str) -> str:
    return f"segwriter@{node}"


def worker_name(group: str, node: str) -> str:
    return f"logworker:{group}@{node}"


def raft_name(group: str, node: str) -> str:
    return f"raft:{group}@{node}"
