"""Registered names of the etcd wire processes."""

from __future__ import annotations


def etcd_name(node: str) -> str:
    """The etcd gRPC server of `node` (in the node's raft host)."""
    return f"etcd@{node}"


__all__ = ["etcd_name"]
