"""Creating hosts and starting processes in them, from a host or from the driver.

A process with a host of its own takes an idle, already-started host from its node's
warm pool (one registry call) and starts in it (one call to that host). A process that
joins a named host on its node ("raft" on n1) finds that host through the registry
(cached by the spawner) and starts in it; a spawn into the host the spawner itself runs
in needs no Ray call at all (`HostKernel.spawn`).
"""

from __future__ import annotations

import uuid
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from ..errors import BadArgument, NoProc
from ..kernel import ProcessFn, SpawnOpts
from ..pid import Pid
from .transport import ClusterConfig, actor_options

START_ATTEMPTS = 3  # a named host that died under a spawn is looked up again


def new_host_id(node: str, name: str | None) -> str:
    """A cluster-unique host id; a named host's id holds '~' (its processes are killed
    one by one, never by ray.kill of the whole host)."""
    tag = uuid.uuid4().hex[:10]
    return f"{node}~{name}~{tag}" if name else tag


def create_host(config: ClusterConfig, node: str, name: str | None,
                registry: Any) -> tuple[str, Any]:
    """A new, idle host actor on `node`: (its id, its handle)."""
    from .host import HostActor  # the actor module imports this one

    host_id = new_host_id(node, name)
    # ray.remote's stubs do not model an actor class's .options (it is an ActorClass)
    handle = HostActor.options(**actor_options(config, node, host_id)).remote(  # type: ignore[attr-defined]
        config, node, host_id, name, registry)
    return host_id, handle


def check_node(config: ClusterConfig, node: str) -> None:
    if node not in config.node_map:
        raise BadArgument(f"unknown node {node!r}; this runtime has {list(config.node_map)}")


def _unwrap(exc: RayTaskError) -> BaseException:
    cause = exc.as_instanceof_cause()  # type: ignore[no-untyped-call]
    inner = getattr(cause, "cause", None)
    return inner if isinstance(inner, BaseException) else cause


async def start_remote(config: ClusterConfig, registry: Any, cache: dict[tuple[str, str], Any],
                       fn: ProcessFn, args: tuple[Any, ...], opts: SpawnOpts,
                       parent: Pid | None, node: str, host: str | None) -> Pid:
    """Start a process in a host other than the caller's (from inside a host)."""
    check_node(config, node)
    stale = None
    for _ in range(START_ATTEMPTS):
        if host:
            entry = cache.get((node, host))
            if entry is None or entry[0] == stale:
                entry = await registry.host_for.remote(node, host, stale)
                cache[(node, host)] = entry
        else:
            entry = await registry.checkout.remote(node)
        host_id, handle = entry
        try:
            pid: Pid = await handle.start.remote(fn, args, opts, parent)
            return Pid(pid.node, pid.id, handle, pid.host)  # pids travel without handles
        except RayTaskError as exc:
            if not host:
                ray.kill(handle)
            raise _unwrap(exc) from None
        except RayActorError:
            cache.pop((node, host or ""), None)
            stale = host_id
            if not host:
                raise NoProc(f"the new process's host on {node} died before it started") from None
    raise NoProc(f"host {host!r} on {node} did not start the process")


def start_sync(config: ClusterConfig, registry: Any, fn: ProcessFn, args: tuple[Any, ...],
               opts: SpawnOpts, node: str, host: str | None, timeout: float = 120.0) -> Pid:
    """Start a process from the driver."""
    check_node(config, node)
    stale = None
    for _ in range(START_ATTEMPTS):
        if host:
            host_id, handle = ray.get(registry.host_for.remote(node, host, stale),
                                      timeout=timeout)
        else:
            host_id, handle = ray.get(registry.checkout.remote(node), timeout=timeout)
        try:
            pid: Pid = ray.get(handle.start.remote(fn, args, opts, None), timeout=timeout)
            return Pid(pid.node, pid.id, handle, pid.host)  # pids travel without handles
        except RayTaskError as exc:
            if not host:
                ray.kill(handle)
            raise _unwrap(exc) from None
        except RayActorError:
            stale = host_id
            if not host:
                raise NoProc(f"the new process's host on {node} died before it started") from None
    raise NoProc(f"host {host!r} on {node} did not start the process")
