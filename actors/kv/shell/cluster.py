"""The KV's own part of a cluster: its raft group, its node process, and what a handle
asks of them.

A cluster is assembled above the actor packages, in the wiring layer
(`sediment/wiring/`: `Cluster`, its client and node handles), from these parts and the
other tiers' (`actors/blocks/shell/tier.py`, `actors/branches/shell/service.py`, the etcd
API). Nothing here knows those tiers, so the KV can be read, tested and changed alone:
with a block tier the KV nodes are given their compaction hold as a value
(`KvNodeConfig.flush_hold`), not by naming the metastore.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sediment.actors.kv.machine import netsy
from sediment.actors.kv.names import KV_GROUP, KV_HOST, kv_node_name
from sediment.actors.kv.shell.node import KvNodeConfig, kv_node
from sediment.actors.kv.shell.node_protocol import OpenWatcher
from sediment.actors.kv.shell.watch_session import WatchSession
from sediment.actors.kv.validation import DEFAULT_LIMITS, Limits
from sediment.actors.log.shell.group_spec import GroupSpec
from sediment.actors.log.shell.names import LOG_HOST, RAFT_HOST, raft_name
from sediment.runtime.common_calls import Status
from sediment.runtime.errors import CallError
from sediment.supervision import ChildSpec, Spawn

# the named hosts a KV node's processes run in (the KV node and its watcher sessions
# share KV_HOST); a cluster starts them at once, before the node trees ask for them
KV_HOSTS = (RAFT_HOST, LOG_HOST, KV_HOST)


def kv_group(names: Sequence[str], data_dir: str, limits: Limits = DEFAULT_LIMITS,
             **group_options: Any) -> GroupSpec:
    """The "kv" raft group: the SQLite machine on every node, checking `limits` again
    when it applies (the clients check them before they propose)."""
    machine = netsy if limits == DEFAULT_LIMITS else functools.partial(netsy, limits=limits)
    return GroupSpec(KV_GROUP, tuple(names), data_dir, machine=machine, **group_options)


def kv_node_child(node: str, config: KvNodeConfig) -> ChildSpec:
    """The KV node process (watches, the compaction coordinator on the leader), in its
    node's tree after the log tree it reads."""
    return ChildSpec("kv-node", (Spawn(kv_node, node=node, name=kv_node_name(node),
                                       label=kv_node_name(node), host=KV_HOST), (config,)))


def raft_status(rt: Any, node: str) -> dict[str, Any] | None:
    """The node's "kv" raft member's view; None when it does not answer."""
    try:
        return rt.call(raft_name(KV_GROUP, node), Status(), timeout=5)  # type: ignore[no-any-return]
    except CallError:
        return None


def node_status(rt: Any, node: str) -> dict[str, Any] | None:
    """The node's KV node process's view; None when it does not answer."""
    try:
        return rt.call(kv_node_name(node), Status(), timeout=5)  # type: ignore[no-any-return]
    except CallError:
        return None


def leader(rt: Any, nodes: Sequence[str]) -> str | None:
    """The member every live member agrees leads, if any."""
    views = [raft_status(rt, n) for n in nodes]
    leaders = {v["leader"] for v in views if v is not None and v["role"] == "leader"}
    return next(iter(leaders)) if len(leaders) == 1 else None


def open_session(rt: Any, node: str) -> WatchSession:
    """A new watcher session on `node`'s KV node."""
    pid = rt.call(kv_node_name(node), OpenWatcher(), timeout=30)
    return WatchSession(rt, pid, node)


__all__ = ["KV_HOSTS", "kv_group", "kv_node_child", "leader", "node_status", "open_session",
           "raft_status"]
