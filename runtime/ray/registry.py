"""The cluster's registry actor: registered names, live processes, warm actors.

It follows every process through the long-running `run()` call, so a name is freed and
the process forgotten however the process ended (a normal exit, ray.kill, a lost node).
The table is also what teardown uses to leave no actor behind.

Starting a Ray actor costs a new worker process (most of a second here), which would
dominate restart latency. So the registry keeps `warm_pool` idle, already-started
process actors per logical node; a spawn takes one (one call) and the registry starts
a replacement in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import ray

from ..pid import Pid
from .transport import ACTOR_MAX_CONCURRENCY, NAMESPACE, ClusterConfig


@ray.remote(num_cpus=0, max_restarts=0, max_concurrency=ACTOR_MAX_CONCURRENCY)
class Registry:
    def __init__(self, config: ClusterConfig) -> None:
        self.net_rules: Any = None
        self.config = config
        self.names: dict[str, Pid] = {}
        self.procs: dict[str, Pid] = {}
        self.ever: dict[str, Pid] = {}  # every actor started, for teardown (zombies included)
        self._followers: dict[str, asyncio.Task[Any]] = {}
        self.pool: dict[str, list[Pid]] = {node: [] for node in config.node_map}
        self._warming: dict[str, int] = {node: 0 for node in config.node_map}
        self._me: Any = None

    async def warm(self) -> dict[str, int]:
        """Fill the warm pools; returns their sizes (call once after creation)."""
        self._me = ray.get_runtime_context().current_actor
        for node in self.pool:
            self._replenish(node)
        return {node: len(p) for node, p in self.pool.items()}

    async def pooled(self) -> dict[str, list[str]]:
        """Ids of the warm actors per node (for status and tests)."""
        return {node: [p.id for p in pool] for node, pool in self.pool.items()}

    async def warming(self) -> int:
        """Warm actors still starting (a burst of spawns leaves Ray workers booting)."""
        return sum(self._warming.values())

    async def checkout(self, node: str) -> Pid | None:
        """An idle process actor on `node`, or None when the pool is empty."""
        pool = self.pool.get(node)
        pid = pool.pop(0) if pool else None
        if node in self.pool:
            self._replenish(node)
        return pid

    def _replenish(self, node: str) -> None:
        if self._me is None:
            return
        while len(self.pool[node]) + self._warming[node] < self.config.warm_pool:
            self._warming[node] += 1
            asyncio.get_running_loop().create_task(self._warm_one(node))

    async def _warm_one(self, node: str) -> None:
        from .spawning import create_actor  # spawning imports the actor module

        pid = create_actor(self.config, node, self._me)
        self.ever[pid.id] = pid
        try:
            await pid.handle.ping.remote()
            self.pool[node].append(pid)
        except Exception:  # noqa: BLE001 - a warm actor that died is simply not pooled
            pass
        finally:
            self._warming[node] -= 1

    async def track(self, pid: Pid) -> Any:
        """Follow `pid`; answers the network faults it must apply from now on."""
        self._track(pid)
        return self.net_rules

    async def set_net(self, rules: Any) -> list[Pid]:
        """Record the runtime's network faults; answers the processes to tell. A process
        tracked after this learns them from `track`, so none is missed."""
        self.net_rules = rules
        return list(self.procs.values())

    def _track(self, pid: Pid) -> None:
        if pid.id not in self.procs and pid.id not in self._followers:
            self.procs[pid.id] = pid
            self.ever[pid.id] = pid
            self._followers[pid.id] = asyncio.get_running_loop().create_task(self._follow(pid))

    async def _follow(self, pid: Pid) -> None:
        with contextlib.suppress(Exception):  # any failure means the process is gone
            await pid.handle.run.remote()
        self.procs.pop(pid.id, None)
        for name, holder in list(self.names.items()):
            if holder == pid:
                del self.names[name]

    async def register(self, name: str, pid: Pid) -> Pid | None:
        """Give `name` to `pid`; returns the current holder instead if another has it."""
        self._track(pid)
        holder = self.names.get(name)
        if holder is not None and holder != pid:
            return holder
        self.names[name] = pid
        return None

    async def unregister(self, name: str, pid: Pid) -> None:
        if self.names.get(name) == pid:
            del self.names[name]

    async def whereis(self, name: str) -> Pid | None:
        return self.names.get(name)

    async def processes(self, node: str | None = None) -> list[Pid]:
        return [p for p in self.procs.values() if node is None or p.node == node]

    async def teardown(self) -> int:
        """Kill every process actor of the cluster; returns how many were still running."""
        running = len(self.procs)
        for pid in self.ever.values():
            with contextlib.suppress(Exception):  # already gone
                ray.kill(pid.handle)
        for task in self._followers.values():
            task.cancel()
        self.procs.clear()
        self.ever.clear()
        self.names.clear()
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
