"""A worker's way to the metastore: the leader's compaction service and block metadata.

The service is registered under the leader's node, so finding it is finding the leader:
the hint from the last answer first, else the members' own view (the local member
first, it is the cheapest to ask). Every round is bounded by timeouts, the rounds by
`locate_attempts`, with a capped exponential pause between them.

A poll is retried only when it was certainly not applied: the service said "not
leader" (the raft member refused the proposal) or could not be found. A timeout or a
service that died mid-call may have applied the plan; retrying would report the same
statuses twice, so it is a failed poll and the worker's core takes it from there.
"""

from __future__ import annotations

from typing import Any

from sediment import log
from sediment.actors.blocks.errors import BlockError
from sediment.actors.blocks.jobs import JobPlan, PollRequest, PollResponse
from sediment.actors.blocks.meta import BlockMeta
from sediment.actors.blocks.metastore import BlocksById, BlocksResult
from sediment.actors.blocks.shell.config import BlocksConfig
from sediment.actors.blocks.shell.names import METASTORE_GROUP, service_name
from sediment.actors.blocks.shell.service_protocol import Poll, Polled, PollNotLeader
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Query
from sediment.runtime.common_calls import Status
from sediment.runtime.errors import CallError
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.blocks.locate")


class SourcesUnavailable(BlockError):
    """No metastore member could give the metadata of a job's source blocks."""


def _local_first(ctx: Process, nodes: tuple[str, ...]) -> list[str]:
    me = ctx.self().node
    return sorted(nodes, key=lambda n: n != me)


async def leader_of(ctx: Process, config: BlocksConfig) -> str | None:
    """The node the first member that answers names as the metastore's leader."""
    for node in _local_first(ctx, config.nodes):
        try:
            status = await ctx.call(raft_name(METASTORE_GROUP, node), Status(),
                                    timeout=config.lookup_timeout)
        except CallError:
            continue
        leader = status.get("leader") if isinstance(status, dict) else None
        if leader in config.nodes:
            return str(leader)
    return None


async def find_service(ctx: Process, config: BlocksConfig,
                       hint: str | None) -> tuple[str, Pid] | None:
    """(leader node, service pid), or None after `locate_attempts` rounds."""
    pause, largest = config.locate_backoff
    for attempt in range(config.locate_attempts):
        node = hint if hint in config.nodes else await leader_of(ctx, config)
        hint = None
        if node is not None:
            pid = await ctx.whereis(service_name(node))
            if pid is not None:
                return node, pid
        if attempt + 1 < config.locate_attempts:
            await ctx.sleep(pause)
            pause = min(pause * 2, largest)
    return None


async def poll_service(ctx: Process, config: BlocksConfig, request: PollRequest,
                       hint: str | None) -> tuple[PollResponse | None, str | None]:
    """(the service's answer or None, the node that answered). Follows "not leader"
    hints; gives up after `locate_attempts` answers of that kind."""
    for _ in range(config.locate_attempts):
        found = await find_service(ctx, config, hint)
        if found is None:
            return None, None
        node, pid = found
        try:
            reply: Any = await ctx.call(pid, Poll(request), timeout=config.poll_timeout)
        except CallError as err:
            _logger.info("poll got no answer", service=node, error=str(err)[:200])
            return None, None
        if isinstance(reply, Polled) and isinstance(reply.response, PollResponse):
            return reply.response, node
        if isinstance(reply, PollNotLeader):
            hint = reply.hint if isinstance(reply.hint, str) else None
            continue
        _logger.info("poll refused", service=node, reply=repr(reply)[:200])
        return None, node
    return None, None


async def fetch_sources(ctx: Process, config: BlocksConfig, plan: JobPlan,
                        prefer: str | None) -> tuple[BlockMeta, ...]:
    """The metadata of the job's source blocks, in plan order. Any member that has them
    all answers the same (a block's metadata never changes); a lagging follower may
    not have them yet, so the member that served the poll is asked first.
    SourcesUnavailable if none answers."""
    order = _local_first(ctx, config.nodes)
    if prefer in order:
        order.remove(prefer)
        order.insert(0, prefer)
    query = BlocksById(plan.shard, plan.source_blocks)
    last: Any = None
    for node in order:
        try:
            reply = await ctx.call(raft_name(METASTORE_GROUP, node), Query(query),
                                   timeout=config.metadata_timeout)
        except CallError as err:
            last = err
            continue
        if isinstance(reply, BlocksResult):
            return reply.blocks
        last = reply
    raise SourcesUnavailable(f"job {plan.name}: no member gave its sources ({last!r:.200})")


__all__ = ["SourcesUnavailable", "fetch_sources", "find_service", "leader_of", "poll_service"]
