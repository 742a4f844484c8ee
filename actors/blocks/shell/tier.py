"""A KV cluster's block tier: what `Cluster.start(blocks=BlockTier(...))` composes.

On every KV node, beside the "kv" raft member and under the same node supervisor: the
"metastore" raft member (both groups share the node's WAL and log tree: the caller lists
them together in `node_children(node, [kv, metastore])`), the block tier's worker pool
and blocks node (the compaction service on the metastore leader), and the flush
follower, which runs the level-0 flusher beside the KV leader. The KV's compaction
coordinator is told to hold its compaction revision at or below the metastore's
flushed-through revision: the wiring layer (`sediment/wiring/cluster.py`) hands the KV
nodes `flush_hold.py`'s `flushed_through` as their `KvNodeConfig.flush_hold`, and the
tier the KV's history to flush as a `HistorySource` (`history_source.py`), so neither
package names the other.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sediment.actors.blocks import block as blk
from sediment.actors.blocks.flusher_core import FlushConfig
from sediment.actors.blocks.meta import FlushPolicy
from sediment.actors.blocks.planner import PlannerConfig
from sediment.actors.blocks.scheduler import SchedulerConfig
from sediment.actors.blocks.service import MetastoreConfig
from sediment.actors.blocks.shell.cluster import blocks_children, metastore_spec
from sediment.actors.blocks.shell.config import BlocksConfig
from sediment.actors.blocks.shell.executor import Executor, PyarrowExecutor
from sediment.actors.blocks.shell.flush_node import flush_node
from sediment.actors.blocks.shell.flusher import FlusherConfig
from sediment.actors.blocks.shell.history_source import HistorySource
from sediment.actors.blocks.shell.names import flush_node_name
from sediment.actors.blocks.worker import WorkerConfig
from sediment.actors.log.shell.group_spec import GroupSpec
from sediment.actors.log.shell.names import RAFT_HOST
from sediment.supervision import ChildSpec, Spawn

FLUSH_NODE_CHILD = "flush-node"


@dataclass(frozen=True)
class BlockTier:
    """What a KV cluster's block tier looks like. `flush`: when a shard's rows leave the
    hot store; `read_batch` / `max_pending_rows` / `flush_tick` / `flush_retry`: the
    flusher's reads, memory bound, tick and backoff; `tuning`: further `BlocksConfig`
    fields; `group_options`: the metastore group's `GroupSpec` fields."""

    shards: int = 4
    flush: FlushPolicy = field(default_factory=FlushPolicy)
    workers_per_node: int = 2
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    worker: WorkerConfig = field(default_factory=WorkerConfig)
    executor: Executor = field(default_factory=PyarrowExecutor)
    read_batch: int = 1000
    max_pending_rows: int = 20_000
    flush_tick: float = 0.5
    flush_retry: float = 1.0
    tuning: Mapping[str, Any] = field(default_factory=dict)
    group_options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TierParts:
    """The tier's pieces for one cluster: the metastore group, the block processes'
    config, the flusher's config and the shard count reads split keys by."""

    spec: GroupSpec
    blocks: BlocksConfig
    flusher: FlusherConfig
    shards: int


def tier_parts(nodes: Sequence[str], data_dir: str, tier: BlockTier,
               history: HistorySource) -> TierParts:
    """Check `tier` (ValueError/TypeError before anything starts) and lay it out under
    `data_dir`: the metastore group beside the KV's, the block store in `blocks/`;
    `history`: the committed history the flusher reads."""
    if not isinstance(tier, BlockTier):
        raise TypeError(f"blocks must be a BlockTier, got {type(tier).__name__}")
    names = tuple(nodes)
    flush = FlushConfig(tier.shards, tier.flush, tier.read_batch, tier.max_pending_rows,
                        tier.flush_retry)
    root = os.path.join(data_dir, "blocks")
    meta_config = MetastoreConfig(planner=tier.planner, scheduler=tier.scheduler)
    blocks = BlocksConfig(names, root, meta_config, tier.worker, tier.workers_per_node,
                          tier.executor, **dict(tier.tuning))
    flusher = FlusherConfig(names, root, flush, history, tick_interval=tier.flush_tick)
    spec = metastore_spec(names, data_dir, meta_config, **dict(tier.group_options))
    os.makedirs(root, exist_ok=True)
    blk.remove_temp_files(root)  # what interrupted writes left, before any write
    return TierParts(spec, blocks, flusher, tier.shards)


def tier_children(node: str, parts: TierParts) -> list[ChildSpec]:
    """The tier's children of `node`'s supervisor, after the node's log children (which
    must include the metastore member) and the KV node: the worker pool, the blocks
    node, the flush follower."""
    follower = ChildSpec(FLUSH_NODE_CHILD, (Spawn(flush_node, node=node,
                                                  name=flush_node_name(node),
                                                  label=flush_node_name(node),
                                                  host=RAFT_HOST),
                                            (parts.flusher,)))
    return [*blocks_children(node, parts.spec, parts.blocks), follower]


__all__ = ["FLUSH_NODE_CHILD", "BlockTier", "TierParts", "tier_children", "tier_parts"]
