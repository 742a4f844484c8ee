"""Registered names of the log processes: one WAL per node, one raft server per group
per node. Peers find each other by name, so a restarted process is found again.

And the hosts they run in on each node: the raft host holds every raft member of the
node and its WAL (multi-raft: one fsync covers every group's appends, the messages two
nodes' members exchange travel together) with the node's supervisor; the log host holds
the groups' log workers (snapshots and compactions, off the raft host's loop)."""

from __future__ import annotations

RAFT_HOST = "raft"
LOG_HOST = "log"


def wal_name(node: str) -> str:
    return f"wal@{node}"


def segwriter_name(node: str) -> str:
    return f"segwriter@{node}"


def worker_name(group: str, node: str) -> str:
    return f"logworker:{group}@{node}"


def raft_name(group: str, node: str) -> str:
    return f"raft:{group}@{node}"
