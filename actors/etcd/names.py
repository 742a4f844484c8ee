"""Registered names of the etcd wire processes."""

from __future__ import annotations


def etcd_name(node: str) -> str:
    """The etcd gRPC server of `node` (in the node's ETCD_HOST)."""
    return f"etcd@{node}"


# The host of each node's etcd server: a Ray actor of its own, so the gRPC work (about
# half a millisecond of CPU per request) runs beside the raft host's instead of in its
# loop; a request reaches the members over the hosts' direct channel.
ETCD_HOST = "etcd"


__all__ = ["ETCD_HOST", "etcd_name"]
