"""The Ray backend's driver API: the cluster as seen from ordinary Python.

Starts (or joins, with `address`/`RAY_ADDRESS`) a Ray instance, maps logical nodes onto
Ray nodes (distinct ones when the cluster has several), and starts the registry actor.
Processes run in host actors (`host.py`): one of their own, or a named host they share
on their node. Every call is synchronous and bounded by a timeout.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import secrets
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from ..api import ProcessFailed, Runtime, outcome
from ..errors import BadArgument, CallTimeout, NoProc
from ..failpoints import Failpoint, check_point
from ..kernel import DEFAULT_CALL_TIMEOUT, ProcessFn
from ..messages import ExitSignal, FailpointSignal, KillSignal, MessageSignal, SuspendSignal
from ..pid import Pid
from ..reasons import KILL, NOPROC
from ..sim.network import Network
from ..validation import check_host, make_spawn_opts
from .registry import registry_name, start_registry
from .spawning import start_sync
from .transport import (
    NAMESPACE,
    ClusterConfig,
    Transport,
    call_result,
    classify_death,
    death_error,
)

DRIVER = Pid("driver", "driver")
WARM_POLL = 0.1  # seconds between looks at the warm pools in wait_warm


def channel_token() -> str:
    """The token of a new runtime's direct channels between hosts (channels.py), or ""
    when SEDIMENT_CHANNELS=ray asks for Ray calls only (to compare the two)."""
    mode = os.environ.get("SEDIMENT_CHANNELS", "tcp")
    if mode not in ("tcp", "ray"):
        raise BadArgument(f"SEDIMENT_CHANNELS must be tcp or ray, got {mode!r}")
    return secrets.token_hex(16) if mode == "tcp" else ""


def ensure_ray(address: str | None = None) -> None:
    """Connect to Ray once per driver: `address`, else RAY_ADDRESS, else a local instance."""
    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "error")
    ray.init(address=address or os.environ.get("RAY_ADDRESS") or None, namespace=NAMESPACE,
             logging_level=logging.ERROR, log_to_driver=False, include_dashboard=False)


def place_nodes(nodes: tuple[str, ...]) -> dict[str, str]:
    """Logical node -> Ray node id; round-robin over alive Ray nodes when there are several."""
    alive = sorted(n["NodeID"] for n in ray.nodes()  # type: ignore[no-untyped-call]
                   if n.get("Alive"))
    if len(alive) <= 1:
        return {node: "" for node in nodes}
    return {node: alive[i % len(alive)] for i, node in enumerate(nodes)}


class RayRuntime(Runtime):
    """Processes in Ray host actors; this object is the driver's handle on them."""

    backend = "ray"

    def __init__(self, nodes: tuple[str, ...] | list[str] = ("n1", "n2", "n3"),
                 cluster: str | None = None, address: str | None = None,
                 reap_delay: float = 2.0, warm_pool: int = 1,
                 default_host: str | None = None) -> None:
        if not nodes:
            raise BadArgument("a runtime needs at least one node")
        if default_host is not None:
            check_host(default_host)
        ensure_ray(address)
        self.nodes = tuple(nodes)
        if warm_pool < 0:
            raise BadArgument(f"warm_pool must be >= 0, got {warm_pool}")
        self.config = ClusterConfig(cluster or f"c{uuid.uuid4().hex[:8]}",
                                    place_nodes(self.nodes), reap_delay, warm_pool,
                                    default_host or None, channel_token())
        self.registry = start_registry(self.config)
        self.transport = Transport(self.config, f"driver-{uuid.uuid4().hex[:8]}")
        self.net = Network(random.Random(), cross_node_delay=(0.0, 0.0))
        self._net_depth = 0  # open network_change blocks
        self._net_dirty = False  # rules changed inside them, not pushed yet

    @property
    def cluster(self) -> str:
        return self.config.cluster

    def _resolve(self, dest: Pid | str) -> Pid | None:
        if isinstance(dest, Pid):
            return dest
        if isinstance(dest, str):
            return self.whereis(dest)
        raise BadArgument(f"expected a Pid or a registered name, got {dest!r}")

    def spawn(self, fn: ProcessFn, *args: Any, node: str | None = None, name: str | None = None,
              trap_exit: bool = False, mailbox_capacity: int | None = None,
              label: str | None = None, failpoints: dict[str, Failpoint] | None = None,
              host: str | None = None) -> Pid:
        opts = make_spawn_opts(node or self.nodes[0], None, name, trap_exit, mailbox_capacity,
                               label, failpoints, host)
        target = self.config.default_host if host is None else host
        assert opts.node is not None
        return start_sync(self.config, self.registry, fn, args, opts, opts.node, target or None)

    def run(self, fn: ProcessFn, *args: Any, node: str | None = None,
            timeout: float = 60.0, host: str | None = None) -> Any:
        pid = self.spawn(fn, *args, node=node, host=host)
        try:
            handle = self.transport.handle(pid)
            if handle is None:
                raise ProcessFailed(pid, NOPROC)
            ended = ray.get(handle.run.remote(pid.id), timeout=timeout)
        except GetTimeoutError:
            self.kill(pid)
            raise CallTimeout(f"{pid} did not finish within {timeout} s") from None
        except RayActorError as exc:
            raise ProcessFailed(pid, classify_death(exc)) from None
        return outcome(pid, ended.reason, ended.result)

    def send(self, dest: Pid | str, msg: Any) -> None:
        pid = self._resolve(dest)
        if pid is not None:
            self.transport.submit(pid, MessageSignal(msg))

    def call(self, dest: Pid | str, request: Any,
             timeout: float | None = DEFAULT_CALL_TIMEOUT) -> Any:
        pid = self._resolve(dest)
        ref = None if pid is None else self.transport.submit_call(pid, request)
        if pid is None or ref is None:
            raise NoProc(f"no process {dest}")
        try:
            answer = ray.get(ref, timeout=timeout)
        except GetTimeoutError:
            raise CallTimeout(f"call to {pid} timed out after {timeout} s") from None
        except RayActorError as exc:
            raise death_error(pid, classify_death(exc)) from None
        return call_result(pid, answer)

    def exit(self, pid: Pid, reason: Any) -> None:
        if reason == KILL:
            self.kill(pid)
        else:
            self.transport.submit(pid, ExitSignal(DRIVER, reason, from_link=False))

    def kill(self, pid: Pid) -> None:
        """A process with a host of its own: ray.kill of its actor. One sharing a host:
        only it ends (killed), the host and the others in it go on."""
        if "~" in pid.host:
            self.transport.submit(pid, KillSignal())
            return
        handle = self.transport.handle(pid)
        if handle is not None:
            ray.kill(handle)

    def kill_node(self, node: str) -> list[Pid]:
        """ray.kill of every host on the node: every process in them ends at once."""
        self._node(node)
        victims: list[Pid] = ray.get(self.registry.processes.remote(node), timeout=30)
        hosts = ray.get(self.registry.hosts_of.remote(node), timeout=30)
        for _id, _name, handle in hosts:
            with contextlib.suppress(Exception):
                ray.kill(handle)
        return victims

    def kill_host(self, node: str, host: str) -> list[Pid]:
        check_host(host)
        self._node(node)
        hosts = [h for h in ray.get(self.registry.hosts_of.remote(node), timeout=30)
                 if h[1] == host]
        victims: list[Pid] = []
        for _id, _name, handle in hosts:
            with contextlib.suppress(Exception):
                victims.extend(ray.get(handle.processes.remote(), timeout=30))
            with contextlib.suppress(Exception):
                ray.kill(handle)
        return victims

    def partition(self, side_a: list[str], side_b: list[str]) -> None:
        """Cut the nodes apart: messages and call requests across the cut are lost."""
        self.net.partition([self._node(n) for n in side_a], [self._node(n) for n in side_b])
        self._push_net()

    def heal(self) -> None:
        self.net.heal()
        self._push_net()

    def set_faults(self, src: str, dst: str, *, delay: tuple[float, float] | None = None,
                   drop: float = 0.0) -> None:
        """Delay and/or drop messages from node `src` to `dst` ('*' for every node)."""
        self.net.set_faults(self._node(src), dst if dst == "*" else self._node(dst),
                            delay=delay, drop=drop)
        self._push_net()

    def clear_faults(self) -> None:
        self.net.clear_faults()
        self._push_net()

    def _node(self, node: str) -> str:
        if node not in self.nodes:
            raise BadArgument(f"unknown node {node!r}; this runtime has {list(self.nodes)}")
        return node

    def wait_warm(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while ray.get(self.registry.warming.remote(), timeout=30) > 0:
            if time.monotonic() >= deadline:
                return False
            time.sleep(WARM_POLL)
        return True

    def prepare_hosts(self, hosts: Iterable[tuple[str, str]],
                      spares: Mapping[str, int] | None = None, timeout: float = 120.0) -> None:
        wanted = list(dict.fromkeys((self._node(node), name) for node, name in hosts))
        warm = {self._node(node): count for node, count in (spares or {}).items()}
        ray.get([*(self.registry.host_for.remote(node, name) for node, name in wanted),
                 *(self.registry.prewarm.remote(node, count) for node, count in warm.items())],
                timeout=timeout)

    @contextlib.contextmanager
    def network_change(self) -> Iterator[None]:
        self._net_depth += 1
        try:
            yield
        finally:
            self._net_depth -= 1
            if self._net_depth == 0 and self._net_dirty:
                self._push_net()

    def _push_net(self) -> None:
        """Every process applies the new rules before this returns (inside a
        `network_change` block: once, when it ends)."""
        if self._net_depth:
            self._net_dirty = True
            return
        self._net_dirty = False
        rules = self.net.rules()
        hosts: list[Any] = ray.get(self.registry.set_net.remote(rules), timeout=30)
        refs = [handle.set_net.remote(rules) for handle in hosts]
        for ref in refs:
            with contextlib.suppress(RayActorError):  # a process that ended meanwhile
                ray.get(ref, timeout=30)

    def whereis(self, name: str) -> Pid | None:
        pid: Pid | None = ray.get(self.registry.whereis.remote(name), timeout=30)
        return pid

    def processes(self) -> list[Pid]:
        pids: list[Pid] = ray.get(self.registry.processes.remote(), timeout=30)
        return pids

    def is_alive(self, pid: Pid) -> bool:
        handle = self.transport.handle(pid)
        if handle is None:
            return False
        try:
            return bool(ray.get(handle.alive.remote(pid.id), timeout=30))
        except RayActorError:
            return False

    def arm_failpoint(self, pid: Pid, name: str, action: str, *, count: int | None = 1,
                      seconds: float | None = None, notify: Pid | None = None,
                      tag: str = "") -> None:
        self.transport.submit(pid, FailpointSignal(name, Failpoint(action, count, seconds,
                                                                   notify, tag)))

    def release_failpoint(self, pid: Pid, name: str) -> None:
        self.transport.submit(pid, FailpointSignal(name, None))

    def arm_failpoint_everywhere(self, name: str, action: str, *, seconds: float | None = None,
                                 notify: Pid | None = None, tag: str = "") -> None:
        self.net.arm_everywhere(check_point(name), Failpoint(action, None, seconds, notify, tag))
        self._push_net()

    def release_failpoint_everywhere(self, name: str) -> None:
        self.net.release_everywhere(check_point(name))
        self._push_net()

    def suspend(self, pid: Pid) -> None:
        self.transport.submit(pid, SuspendSignal(True))

    def resume(self, pid: Pid) -> None:
        self.transport.submit(pid, SuspendSignal(False))

    def set_clock_skew(self, node: str, seconds: float) -> None:
        self.net.set_skew(self._node(node), seconds)
        self._push_net()

    def sleep(self, seconds: float) -> None:
        if seconds < 0:
            raise BadArgument(f"sleep needs seconds >= 0, got {seconds}")
        time.sleep(seconds)

    def now(self) -> float:
        return time.monotonic()

    def shutdown(self) -> None:
        """Kill every host actor of this runtime, then its registry."""
        _teardown(self.registry)


def _teardown(registry: Any) -> None:
    try:
        ray.get(registry.teardown.remote(), timeout=60)
    finally:
        ray.kill(registry)


def teardown_cluster(cluster: str) -> bool:
    """Kill every host actor of the runtime named `cluster` (`Runtime.cluster`), then its
    registry, from any driver on the same Ray (hosts and registry are detached: a driver
    killed before its `shutdown` leaves them running). False if it is gone already."""
    try:
        registry = ray.get_actor(registry_name(ClusterConfig(cluster)), namespace=NAMESPACE)
    except ValueError:
        return False
    _teardown(registry)
    return True
