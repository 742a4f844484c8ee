"""The wiring layer: the one place that assembles a cluster from the actor packages.

The actor packages (`actors/kv`, `actors/blocks`, `actors/branches`, `actors/etcd`, the
log) each build only their own processes and know none of the others; what ties them
together lives here, above them all:

- `node_tree.py`: one node's supervision tree, in start order: the log tree (the KV's
  raft member, and the metastore's beside it when there is a block tier), the KV node,
  the etcd server, the block tier's processes, the branch services;
- `cluster.py`: `Cluster.start(...)` (the runtime, the hosts, every node's tree, and
  the values one tier hands another, such as the block tier's flushed-through revision
  as the KV compaction's hold) and the node handles that break and restart nodes;
- `client.py`: the KV's API over the whole cluster, with reads below the KV's
  compaction answered from the block tier;
- `tables.py`, `tables_node_tree.py`, `tables_transaction.py`: the tables cluster
  (`TablesCluster`: the metastore with the catalog, the partitions, the table nodes,
  the compaction coordinator and the drivers beside the metastore leader) and its
  transactions, from the parts in `actors/tables/shell/cluster.py`.

Users import `Cluster` from the top (`from sediment import Cluster`).
"""
