"""One node's supervision tree: which tiers' processes a node runs, in start order.

Under the node's `rest_for_one` supervisor, a process restarts everything started after
it, so the order is the dependency order: the log tree first (one WAL per node for every
raft group on it: the KV's, and the metastore's when there is a block tier), then the
KV node, the etcd server (in a host of its own), the block tier's processes and the
branch services, which read through the KV.
"""

from __future__ import annotations

from sediment.actors.blocks.shell.tier import TierParts, tier_children
from sediment.actors.branches.shell.service import ServicesConfig, branches_child
from sediment.actors.etcd.names import ETCD_HOST, etcd_name
from sediment.actors.etcd.shell.server import EtcdConfig, etcd_server
from sediment.actors.kv.shell.cluster import kv_node_child
from sediment.actors.kv.shell.node import KvNodeConfig
from sediment.actors.log.shell.cluster import node_children
from sediment.actors.log.shell.group_spec import GroupSpec
from sediment.actors.log.shell.names import RAFT_HOST
from sediment.supervision import ChildSpec, Spawn, SupFlags, supervisor


def node_tree(node: str, spec: GroupSpec, config: KvNodeConfig,
              tier: TierParts | None = None,
              wire: EtcdConfig | None = None,
              branches: ServicesConfig | None = None) -> list[ChildSpec]:
    """The node's children: the log tree (with the metastore member beside the KV's
    when there is a block tier), the KV node, the etcd server, then the block tier's
    processes and the branch services."""
    groups = [spec] if tier is None else [spec, tier.spec]
    server = [] if wire is None else [ChildSpec(
        "etcd", (Spawn(etcd_server, node=node, name=etcd_name(node), label=etcd_name(node),
                       host=ETCD_HOST), (wire,)))]
    return [*node_children(node, groups), kv_node_child(node, config), *server,
            *([] if tier is None else tier_children(node, tier)),
            *([] if branches is None else [branches_child(node, branches)])]


def node_supervisor(node: str, spec: GroupSpec, config: KvNodeConfig,
                    tier: TierParts | None = None,
                    wire: EtcdConfig | None = None,
                    branches: ServicesConfig | None = None) -> ChildSpec:
    """The node's supervisor (`node:<name>` under the top one) over `node_tree`."""
    return ChildSpec(f"node:{node}", (Spawn(supervisor, node=node, label=f"kv-node-sup:{node}",
                                            host=RAFT_HOST),
                                      (SupFlags(strategy="rest_for_one", intensity=20,
                                                period=10),
                                       node_tree(node, spec, config, tier, wire, branches))),
                     type="supervisor")


__all__ = ["node_supervisor", "node_tree"]
