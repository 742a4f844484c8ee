"""A node's pool of compaction workers: a `simple_one_for_one` supervisor of
`workers_per_node` identical workers.

Started through a start function, so the node's supervisor gets the pool's supervisor
as its child and a restart of the pool starts all its workers again. A worker that
dies is restarted alone (its jobs' leases run out and are reassigned, as for any lost
worker); the pool gives up, and lets the node's supervisor decide, after
`POOL_INTENSITY` restarts in `POOL_PERIOD` seconds.
"""

from __future__ import annotations

from sediment.actors.blocks.shell.compaction_worker import compaction_worker
from sediment.actors.blocks.shell.config import BlocksConfig
from sediment.actors.blocks.shell.names import worker_pool_name
from sediment.actors.log.shell.names import RAFT_HOST
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process
from sediment.supervision import (
    ChildSpec,
    Spawn,
    SupFlags,
    requests,
    start_function,
    start_link,
)

POOL_INTENSITY = 20
POOL_PERIOD = 10.0
WORKER_SHUTDOWN = 5.0  # seconds a stopping worker gets before it is killed


def worker_spec(config: BlocksConfig, node: str) -> ChildSpec:
    """The pool's template: one compaction worker on `node`."""
    start = Spawn(compaction_worker, label=f"compaction-worker@{node}")
    return ChildSpec("compaction-worker", (start, (config,)), shutdown=WORKER_SHUTDOWN)


@start_function
async def start_worker_pool(ctx: Process, config: BlocksConfig) -> Pid:
    """Start the pool's supervisor (linked to the caller, a node supervisor) on the
    caller's node, then its workers; the pool's pid."""
    node = ctx.self().node
    flags = SupFlags(strategy="simple_one_for_one", intensity=POOL_INTENSITY,
                     period=POOL_PERIOD)
    pool = await start_link(ctx, flags, [worker_spec(config, node)], node=node,
                            name=worker_pool_name(node), host=RAFT_HOST)
    for _ in range(config.workers_per_node):
        reply = await ctx.call(pool, requests.StartChild(()), timeout=60)
        if not isinstance(reply, requests.ChildStarted):
            raise RuntimeError(f"a compaction worker did not start: {reply!r:.200}")
    return pool


__all__ = ["start_worker_pool", "worker_spec"]
