"""Creating a process: a fresh detached actor, placed on its logical node's Ray node.

Each process incarnation is a new actor (a restarted child is a new pid, as in Erlang).
The driver spawns synchronously, processes asynchronously; both go through here.
"""

from __future__ import annotations

import uuid
from typing import Any

import ray
from ray.exceptions import RayTaskError

from ..errors import BadArgument
from ..kernel import ProcessFn, SpawnOpts
from ..pid import Pid
from .transport import ClusterConfig, actor_options


def _unwrap(exc: RayTaskError) -> BaseException:
    cause = exc.as_instanceof_cause()
    inner = getattr(cause, "cause", None)
    return inner if isinstance(inner, BaseException) else cause


def create_actor(config: ClusterConfig, node: str, registry: Any) -> Pid:
    """A new, idle process actor on `node` (its pid is fixed now)."""
    from .actor import ProcessActor  # the actor module imports this one

    pid = Pid(node, uuid.uuid4().hex[:12])
    handle = ProcessActor.options(**actor_options(config, pid)).remote(
        config, pid.node, pid.id, registry
    )
    return Pid(pid.node, pid.id, handle)


def _node(config: ClusterConfig, opts: SpawnOpts) -> str:
    node = opts.node or next(iter(config.node_map))
    if node not in config.node_map:
        raise BadArgument(f"unknown node {node!r}; this runtime has {list(config.node_map)}")
    return node


async def spawn_async(config: ClusterConfig, registry: Any, fn: ProcessFn,
                      args: tuple[Any, ...], opts: SpawnOpts, parent: Pid | None) -> Pid:
    node = _node(config, opts)
    pid = None
    if config.warm_pool:
        pid = await registry.checkout.remote(node)
    if pid is None:
        pid = create_actor(config, node, registry)
    try:
        await pid.handle.start.remote(fn, args, opts, parent)
    except RayTaskError as exc:
        ray.kill(pid.handle)
        raise _unwrap(exc) from None
    return pid


def spawn_sync(config: ClusterConfig, registry: Any, fn: ProcessFn, args: tuple[Any, ...],
               opts: SpawnOpts, parent: Pid | None, timeout: float = 120.0) -> Pid:
    node = _node(config, opts)
    pid = None
    if config.warm_pool:
        pid = ray.get(registry.checkout.remote(node), timeout=timeout)
    if pid is None:
        pid = create_actor(config, node, registry)
    try:
        ray.get(pid.handle.start.remote(fn, args, opts, parent), timeout=timeout)
    except RayTaskError as exc:
        ray.kill(pid.handle)
        raise _unwrap(exc) from None
    return pid
