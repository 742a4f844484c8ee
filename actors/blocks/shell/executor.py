"""How a worker runs a merge: an executor is a picklable async callable chosen by config.

- `PyarrowExecutor` (the default): `merge.run_job` in this process, off its event loop.
- `SparkBridgeExecutor` (`actors/spark/shell/executor.py`): a thin adapter that asks the Spark
  bridge process (the named process answering `Merge(MergeRequest)` with what
  `merge.merge_blocks` returns) to run it. It lives in the spark package and the tier's
  config passes it in (`BlocksConfig.executor`, `BlockTier.executor`): the block tier
  imports no Spark module, so it depends on neither the bridge nor what the bridge
  imports (the branches' span merge). Measured with `python -X importtime`, importing
  the bridge costs ~0.1 s on top of this module's ~0.6-0.9 s (pyspark itself is imported
  only inside a merge), so the reason is the dependency's direction, not its weight.

Both raise the typed `BlockError`s of the merge (missing, corrupt, conflicting sources);
the worker turns any failure into an abandoned job. Neither decides anything about the
job: the output block id is the one the job's token names (`meta.compacted_block_id`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sediment.actors.blocks import merge
from sediment.actors.blocks.jobs import AssignedJob, CompactedBlocks
from sediment.actors.blocks.meta import BlockMeta
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


__all__ = ["Executor", "PyarrowExecutor"]
