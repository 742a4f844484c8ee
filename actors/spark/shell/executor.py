"""The block tier's Spark executor: a merge run by the Spark bridge process.

It lives with the bridge, not in the block tier: the blocks' worker knows only the
`Executor` protocol (`actors/blocks/shell/executor.py`), and whoever configures a tier
(`BlocksConfig.executor`, `BlockTier.executor`, `BlocksCluster.start(executor=...)`)
passes this one in. The import of the bridge is at the top: the spark package depends
on the blocks (the bridge reads and writes their blocks), never the other way, so there
is no cycle, and pyspark itself is imported only inside a merge (`merge_job.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sediment.actors.blocks.errors import InvalidRows
from sediment.actors.blocks.jobs import AssignedJob, CompactedBlocks
from sediment.actors.blocks.meta import BlockMeta, compacted_block_id
from sediment.actors.spark.shell.bridge import MergeRequest, merge_via_bridge
from sediment.runtime.process import Process


@dataclass(frozen=True)
class SparkBridgeExecutor:
    """Run the merge in Spark through the bridge process (`actors/spark/shell/bridge.py`,
    `merge_via_bridge`: `Merge(MergeRequest)` -> the output `BlockMeta` or the
    bridge's typed error). The request carries what `run_job` passes to `merge_blocks`:
    the output id the job's token names, the level above, the job's compaction revision.
    The call is bounded by `timeout`; a timeout, a dead or busy bridge fails the job as a
    bad source does (the lease expiry counts it)."""

    timeout: float = 600.0

    async def __call__(self, ctx: Process, root: str, job: AssignedJob,
                       sources: tuple[BlockMeta, ...], created_at: float) -> CompactedBlocks:
        plan = job.plan
        if tuple(s.id for s in sources) != plan.source_blocks:
            raise InvalidRows(f"job {plan.name}: source metadata does not match the plan")
        block_id = compacted_block_id(plan.shard, plan.level, plan.source_blocks,
                                      job.state.token)
        request = MergeRequest(root, tuple(sources), block_id, plan.level + 1,
                               job.compaction_revision, created_at)
        output = await merge_via_bridge(ctx, request, self.timeout)
        return CompactedBlocks(plan.source_blocks, output)


__all__ = ["SparkBridgeExecutor"]
