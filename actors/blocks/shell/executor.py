"""How a worker runs a merge: an executor is a picklable async callable chosen by config.

- `PyarrowExecutor` (the default): `merge.run_job` in this process, off its event loop.
- `SparkBridgeExecutor`: a thin adapter that asks the Spark bridge process (the named
  process answering `Merge(MergeRequest)` with what `merge.merge_blocks` returns)
  to run it; the Spark modules are imported only when it runs.

Both raise the typed `BlockError`s of the merge (missing, corrupt, conflicting sources);
the worker turns any failure into an abandoned job. Neither decides anything about the
job: the output block id is the one the job's token names (`meta.compacted_block_id`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sediment.actors.blocks import merge
from sediment.actors.blocks.errors import InvalidRows
from sediment.actors.blocks.jobs import AssignedJob, CompactedBlocks
from sediment.actors.blocks.meta import BlockMeta, compacted_block_id
from sediment.runtime.offload import run_blocking
from sediment.runtime.process import Process


class Executor(Protocol):
    async def __call__(self, ctx: Process, root: str, job: AssignedJob,
                       sources: tuple[BlockMeta, ...], created_at: float) -> CompactedBlocks:
        """Merge the job's `sources` (metadata in plan order) under the block store `root`."""
        ...


@dataclass(frozen=True)
class PyarrowExecutor:
    """In-process merge with pyarrow, in a thread where the runtime has one."""

    async def __call__(self, ctx: Process, root: str, job: AssignedJob,
                       sources: tuple[BlockMeta, ...], created_at: float) -> CompactedBlocks:
        return await run_blocking(merge.run_job, root, job, sources, created_at)


@dataclass(frozen=True)
class SparkBridgeExecutor:
    """Run the merge in Spark through the bridge process (`actors/spark/bridge.py`,
    `merge_via_bridge`: `Merge(MergeRequest)` -> the output `BlockMeta` or the
    bridge's typed error). The request carries what `run_job` passes to `merge_blocks`:
    the output id the job's token names, the level above, the job's compaction revision.
    The call is bounded by `timeout`; a timeout, a dead or busy bridge fails the job as a
    bad source does (the lease expiry counts it)."""

    timeout: float = 600.0

    async def __call__(self, ctx: Process, root: str, job: AssignedJob,
                       sources: tuple[BlockMeta, ...], created_at: float) -> CompactedBlocks:
        from sediment.actors.spark.bridge import MergeRequest, merge_via_bridge

        plan = job.plan
        if tuple(s.id for s in sources) != plan.source_blocks:
            raise InvalidRows(f"job {plan.name}: source metadata does not match the plan")
        block_id = compacted_block_id(plan.shard, plan.level, plan.source_blocks,
                                      job.state.token)
        request = MergeRequest(root, tuple(sources), block_id, plan.level + 1,
                               job.compaction_revision, created_at)
        output = await merge_via_bridge(ctx, request, self.timeout)
        return CompactedBlocks(plan.source_blocks, output)


__all__ = ["Executor", "PyarrowExecutor", "SparkBridgeExecutor"]
