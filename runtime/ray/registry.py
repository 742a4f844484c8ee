"""The cluster's registry actor: registered names, hosts, warm hosts, network rules.

It knows every host actor of the runtime (it starts them) and follows each through its
long-running `follow()` call, so a host that dies takes its names and its place as a
named host with it. Processes are not registered here: a host answers for its own
(`processes`), which keeps a spawn into an existing host free of registry traffic.

Starting a Ray actor costs a new worker process (most of a second here), which would
dominate restart latency. So the registry keeps `warm_pool` idle, already-started hosts
per logical node; a spawn of a process with a host of its own takes one (one call) and
the registry starts a replacement in the background. (Refilling only after a quiet
second was tried: a one_for_all restart then started every child but the first cold, one
after the other, and its supervisor missed a 5 s call in CI.)
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import ray

from ..pid import Pid
from .transport import ACTOR_MAX_CONCURRENCY, NAMESPACE, ClusterConfig


@dataclass
class _Host:
    id: str
    node: str
    name: str | None
    handle: Any


# ray.remote's overloads omit the actor options (max_concurrency) it accepts
@ray.remote(num_cpus=0, max_restarts=0, max_concurrency=ACTOR_MAX_CONCURRENCY)  # type: ignore[call-overload]
class Registry:
    def __init__(self, config: ClusterConfig) -> None:
        self.net_rules: Any = None
        self.config = config
        self.names: dict[str, Pid] = {}
        self.hosts: dict[str, _Host] = {}  # live hosts by id
        self.ever: dict[str, Any] = {}  # every host started (handles), for teardown
        self.named: dict[tuple[str, str], str] = {}  # (node, name) -> host id
        self._creating: dict[tuple[str, str], asyncio.Future[Any]] = {}
        self._followers: dict[str, asyncio.Task[Any]] = {}
        self.pool: dict[str, list[_Host]] = {node: [] for node in config.node_map}
        self._warming: dict[str, int] = {node: 0 for node in config.node_map}
        self._me: Any = None

    async def warm(self) -> dict[str, int]:
        """Fill the warm pools; returns their sizes (call once after creation)."""
        self._me = ray.get_runtime_context().current_actor
        for node in self.pool:
            self._replenish(node)
        return {node: len(p) for node, p in self.pool.items()}

    async def pooled(self) -> dict[str, list[str]]:
        """Ids of the warm hosts per node (for status and tests)."""
        return {node: [h.id for h in pool] for node, pool in self.pool.items()}

    async def warming(self) -> int:
        """Warm hosts still starting (a burst of spawns leaves Ray workers booting)."""
        return sum(self._warming.values())

    # --- hosts --------------------------------------------------------------------------

    async def host_up(self, host_id: str) -> Any:
        """A host starts serving: the network rules it must apply from now on."""
        return self.net_rules

    async def checkout(self, node: str) -> tuple[str, Any]:
        """An idle host on `node` for a process of its own: a warm one, else a new one."""
        pool = self.pool.get(node)
        host = pool.pop(0) if pool else None
        if node in self.pool:
            self._replenish(node)
        if host is None:
            host = await self._create(node, None)
        return host.id, host.handle

    async def host_for(self, node: str, name: str, stale: str | None = None) -> tuple[str, Any]:
        """The named host `name` on `node`, started if there is none (or only `stale`, a
        host a caller found dead)."""
        key = (node, name)
        current = self.named.get(key)
        if current is not None and current == stale:
            self._forget(current)
            current = None
        if current is not None and current in self.hosts:
            host = self.hosts[current]
            return host.id, host.handle
        waiting = self._creating.get(key)
        if waiting is None:
            waiting = asyncio.get_running_loop().create_future()
            self._creating[key] = waiting
            try:
                host = await self._create(node, name)
                self.named[key] = host.id
                waiting.set_result(host)
            except BaseException as exc:
                waiting.set_exception(exc)
                raise
            finally:
                del self._creating[key]
        made: _Host = await asyncio.shield(waiting)
        return made.id, made.handle

    async def _create(self, node: str, name: str | None) -> _Host:
        from .spawning import create_host  # spawning imports the host actor module

        me = self._me or ray.get_runtime_context().current_actor
        host_id, handle = create_host(self.config, node, name, me)
        host = _Host(host_id, node, name, handle)
        self.ever[host_id] = handle
        await handle.ping.remote()
        self.hosts[host_id] = host
        self._followers[host_id] = asyncio.get_running_loop().create_task(self._follow(host))
        return host

    def _replenish(self, node: str) -> None:
        if self._me is None:
            return
        while len(self.pool[node]) + self._warming[node] < self.config.warm_pool:
            self._warming[node] += 1
            asyncio.get_running_loop().create_task(self._warm_one(node))

    async def prewarm(self, node: str, count: int) -> int:
        """Fill `node`'s warm pool up to `count` hosts at once (above its usual size, for
        a burst of spawns about to come); answers the pool's size."""
        wanted = count - len(self.pool[node]) - self._warming[node]
        if wanted > 0:
            self._warming[node] += wanted
            await asyncio.gather(*(self._warm_one(node) for _ in range(wanted)))
        return len(self.pool[node])

    async def _warm_one(self, node: str) -> None:
        try:
            self.pool[node].append(await self._create(node, None))
        except Exception:  # noqa: BLE001 - a warm host that died is simply not pooled
            pass
        finally:
            self._warming[node] -= 1

    async def _follow(self, host: _Host) -> None:
        with contextlib.suppress(Exception):  # any failure means the host is gone
            await host.handle.follow.remote()
        self._forget(host.id)

    def _forget(self, host_id: str) -> None:
        host = self.hosts.pop(host_id, None)
        if host is None:
            return
        if host.name is not None and self.named.get((host.node, host.name)) == host_id:
            del self.named[(host.node, host.name)]
        pool = self.pool.get(host.node)
        if pool is not None and host in pool:
            pool.remove(host)
        for name, holder in list(self.names.items()):
            if holder.host == host_id:
                del self.names[name]

    async def set_net(self, rules: Any) -> list[Any]:
        """Record the runtime's network faults; answers the hosts to tell. A host started
        after this learns them from `host_up`, so none is missed."""
        self.net_rules = rules
        return [h.handle for h in self.hosts.values()]

    async def hosts_of(self, node: str | None = None) -> list[tuple[str, str | None, Any]]:
        """(id, name, handle) of the live hosts on `node` (every node: None)."""
        return [(h.id, h.name, h.handle) for h in self.hosts.values()
                if node is None or h.node == node]

    # --- names --------------------------------------------------------------------------

    async def register(self, name: str, pid: Pid) -> Pid | None:
        """Give `name` to `pid`; returns the current holder instead if another live
        process has it (a holder whose host says it ended gives it up)."""
        holder = self.names.get(name)
        if holder is not None and holder != pid and await self._alive(holder):
            return holder
        self.names[name] = pid
        return None

    async def _alive(self, pid: Pid) -> bool:
        host = self.hosts.get(pid.host)
        if host is None:
            return False
        try:
            return bool(await host.handle.alive.remote(pid.id))
        except Exception:  # noqa: BLE001 - a host that cannot answer is gone
            return False

    async def unregister(self, name: str, pid: Pid) -> None:
        if self.names.get(name) == pid:
            del self.names[name]

    async def release(self, pid: Pid) -> None:
        """`pid` ended: every name it held is free."""
        for name, holder in list(self.names.items()):
            if holder == pid:
                del self.names[name]

    async def whereis(self, name: str) -> Pid | None:
        return self.names.get(name)

    async def processes(self, node: str | None = None) -> list[Pid]:
        refs = [h.handle.processes.remote() for h in self.hosts.values()
                if node is None or h.node == node]
        out: list[Pid] = []
        for ref in refs:
            with contextlib.suppress(Exception):  # a host that died meanwhile
                out.extend(await ref)
        return out

    async def teardown(self) -> int:
        """Kill every host of the cluster; returns how many were still running."""
        running = len(self.hosts)
        for task in self._followers.values():
            task.cancel()
        for handle in self.ever.values():
            with contextlib.suppress(Exception):  # already gone
                ray.kill(handle)
        self.hosts.clear()
        self.ever.clear()
        self.names.clear()
        self.named.clear()
        return running


def registry_name(config: ClusterConfig) -> str:
    return f"{config.cluster}:registry"


def start_registry(config: ClusterConfig) -> Any:
    registry = Registry.options(  # type: ignore[attr-defined]
        name=registry_name(config), namespace=NAMESPACE, lifetime="detached",
        get_if_exists=True,
    ).remote(config)
    registry.warm.remote()
    return registry
