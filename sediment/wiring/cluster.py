"""The cluster as users drive it from Python: start it, talk to it, break it.

`Cluster.start(nodes=3, data_dir=..., backend="ray"|"sim")` starts, per node, the log
tree of the raft issue (log worker, segment writer, WAL, the "kv" raft member hosting
the SQLite machine) and after it the KV node process, all under the node's
`rest_for_one` supervisor (`node_tree.py`). `cluster.client()` talks to whichever member
leads (`client.py`); `client.watch(...)` opens a watcher session on a node. Node
handles kill and restart nodes and processes.

`Cluster.start(..., blocks=BlockTier(...))` adds the block tier on the same nodes
(`actors/blocks/shell/tier.py`): committed history is flushed into level-0 blocks, and
the KV's compaction is held at or below what is flushed: this module hands the KV nodes
the tier's `flushed_through` as their hold, so the KV never names the metastore, and
the tier the KV's history as its flusher's `HistorySource` (`kv_history.py`), so the
block tier never names the KV.
`branches=` adds the branch services, `etcd=` the etcd v3 gRPC API.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sediment.actors.blocks.shell.cluster import BlocksCluster
from sediment.actors.blocks.shell.flush_hold import flushed_through
from sediment.actors.blocks.shell.tier import BlockTier, tier_parts
from sediment.actors.branches.shell.service import ServicesConfig
from sediment.actors.etcd.names import ETCD_HOST, etcd_name
from sediment.actors.etcd.shell.protocol import Endpoint
from sediment.actors.etcd.shell.server import EtcdConfig, EtcdWire
from sediment.actors.kv.shell import cluster as kv
from sediment.actors.kv.shell.node import KvNodeConfig
from sediment.actors.kv.types import Range
from sediment.actors.kv.validation import DEFAULT_LIMITS, Limits
from sediment.actors.log.shell.cluster import GroupClient
from sediment.actors.log.shell.group_spec import GroupSpec
from sediment.runtime import api
from sediment.runtime.errors import CallError
from sediment.runtime.pid import Pid
from sediment.supervision import SupFlags, requests, start_top
from sediment.wiring.client import Client
from sediment.wiring.kv_history import KV_HISTORY
from sediment.wiring.node_tree import node_supervisor

CONTROL_TIMEOUT = 60.0  # seconds for supervisor requests: stopping a node waits for its tree


@dataclass
class Cluster:
    """A running KV cluster: the runtime, the group's spec, the top supervisor, and the
    request limits its machines and clients share; `blocks`, its block tier (if any)."""

    rt: Any
    spec: GroupSpec
    config: KvNodeConfig
    top: Pid
    owns_runtime: bool = True
    limits: Limits = DEFAULT_LIMITS
    blocks: BlocksCluster | None = None
    etcd: EtcdConfig | None = None
    group: GroupClient = field(init=False)

    def __post_init__(self) -> None:
        self.group = GroupClient(self.rt, self.spec)

    @classmethod
    def start(cls, nodes: int | Sequence[str] = 3, data_dir: str | None = None,
              backend: str = "ray", compaction_interval: float = 60.0,
              watcher_max_pending: int = 1024, runtime: Any = None,
              limits: Limits = DEFAULT_LIMITS, top_node: str | None = None,
              blocks: BlockTier | None = None, etcd: EtcdWire | None = None,
              branches: ServicesConfig | None = None, progress_interval: float = 600.0,
              **group_options: Any) -> Cluster:
        """Start the runtime (unless `runtime` is given) and every node's processes.
        `limits` go to every node's machine and to the clients. `top_node` is where the
        top supervisor runs (default: the first node); a runtime node outside the KV's
        keeps it alive when a whole KV node is killed. `blocks`: start the block tier
        on the same nodes (flusher, metastore, compaction service, workers). `etcd`:
        serve etcd's v3 gRPC API on every node (Ray only; `endpoints()` lists them).
        `branches`: the branch tier's services (`actors/branches/shell/service.py`: a
        follower on every node, under its node supervisor, runs the delete sensor, the
        staging compactor and the garbage collector while the node's KV member leads).
        `progress_interval`: seconds between the progress notifies of a quiet watch that
        asked for them (etcd's --experimental-watch-progress-notify-interval, 10 min)."""
        if not isinstance(limits, Limits):
            raise TypeError(f"limits must be a Limits, got {type(limits).__name__}")
        names = tuple(nodes) if not isinstance(nodes, int) else tuple(
            f"n{i}" for i in range(1, nodes + 1))
        data_dir = data_dir or tempfile.mkdtemp(prefix="sediment-kv-")
        os.makedirs(data_dir, exist_ok=True)
        tier = None if blocks is None else tier_parts(names, data_dir, blocks, KV_HISTORY)
        if etcd is not None and (runtime.backend if runtime is not None else backend) != "ray":
            raise ValueError("the etcd API needs the ray backend (the simulator has no sockets)")
        rt = runtime or api.start(backend, nodes=names)
        # the hosts the node trees will ask for, started at once: named ones, and on each
        # node one for each process with an actor of its own (the segment writer; the
        # top supervisor on its node)
        top = top_node or names[0]
        rt.prepare_hosts(((n, h) for n in names
                          for h in (*kv.KV_HOSTS, *([ETCD_HOST] if etcd else []))),
                         spares={n: 1 + (n == top) for n in {*names, top}})
        spec = kv.kv_group(names, data_dir, limits, **group_options)
        config = KvNodeConfig(names, compaction_interval=compaction_interval,
                              watcher_max_pending=watcher_max_pending, data_dir=data_dir,
                              progress_interval=progress_interval,
                              flush_hold=None if tier is None else flushed_through)
        wire = None if etcd is None else etcd.config(spec, limits)
        specs = [node_supervisor(n, spec, config, tier, wire, branches) for n in names]
        top_sup = start_top(rt, SupFlags(intensity=20, period=10), specs, name="kv", node=top)
        tiered = None if tier is None else BlocksCluster(rt, tier.spec, tier.blocks, top_sup,
                                                         tier.shards, owns_runtime=False)
        cluster = cls(rt, spec, config, top_sup, owns_runtime=runtime is None, limits=limits,
                      blocks=tiered, etcd=wire)
        cluster.wait_ready()
        return cluster

    # -- handles ----------------------------------------------------------------------

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.spec.nodes

    def node(self, name: str) -> NodeHandle:
        if name not in self.nodes:
            raise KeyError(f"no node {name!r}; nodes are {self.nodes}")
        return NodeHandle(self, name)

    def client(self) -> Client:
        return Client(self)

    def leader(self) -> str | None:
        """The member every live member agrees leads, if any."""
        return kv.leader(self.rt, self.nodes)

    def wait_ready(self, timeout: float = 120.0) -> str:
        """Block until a leader has committed an entry of its term and every KV node is up."""
        deadline = time.monotonic() + timeout
        while True:
            leader = self.leader()
            if (leader is not None and all(self.node(n).status() is not None for n in self.nodes)
                    and all(self.endpoints().values())):
                barrier = Range(b"\0", count_only=True)  # commits an entry of this term
                self.group.propose(barrier, timeout=timeout)
                if self.blocks is not None:
                    self.blocks.wait_ready(timeout)
                return leader
            if time.monotonic() > deadline and self.rt.backend == "ray":
                raise TimeoutError("the KV cluster did not become ready")
            self.rt.sleep(0.1)

    def endpoints(self) -> dict[str, str]:
        """Each node's etcd endpoint URL ("" for a node whose server is down); empty
        without the etcd API."""
        out: dict[str, str] = {}
        if self.etcd is None:
            return out
        for node in self.nodes:
            try:
                out[node] = str(self.rt.call(etcd_name(node), Endpoint(), timeout=5))
            except CallError:
                out[node] = ""
        return out

    def _raft_status(self, node: str) -> dict[str, Any] | None:
        return kv.raft_status(self.rt, node)

    def stop(self) -> None:
        if self.owns_runtime:
            self.rt.shutdown()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class NodeHandle:
    """One node: its processes, and ways to break it."""

    cluster: Cluster
    name: str

    def _supervisor(self) -> Pid | None:
        children = self.cluster.rt.call(self.cluster.top, requests.WhichChildren(),
                                        timeout=CONTROL_TIMEOUT)
        return requests.child_pid(children, f"node:{self.name}")

    def processes(self) -> dict[str, Pid | None]:
        sup = self._supervisor()
        if sup is None:
            return {}
        children = self.cluster.rt.call(sup, requests.WhichChildren(), timeout=CONTROL_TIMEOUT)
        return {c[0]: c[1] for c in children}

    def status(self) -> dict[str, Any] | None:
        return kv.node_status(self.cluster.rt, self.name)

    def raft_status(self) -> dict[str, Any] | None:
        return self.cluster._raft_status(self.name)

    def kill(self) -> None:
        """Kill every process of the node at once (as if the machine died); its
        supervisor above restarts the node's tree from disk."""
        self.cluster.rt.kill_node(self.name)

    def kill_process(self, child: str) -> None:
        """Kill one process of the node ("raft:kv", "wal", "kv-node", ...)."""
        pid = self.processes().get(child)
        if pid is None:
            raise KeyError(f"{child!r} is not running on {self.name}")
        self.cluster.rt.kill(pid)

    def stop(self) -> None:
        """Stop the node's tree cleanly (it stays down until `restart`)."""
        self.cluster.rt.call(self.cluster.top, requests.TerminateChild(f"node:{self.name}"),
                             timeout=CONTROL_TIMEOUT)

    def restart(self) -> None:
        self.cluster.rt.call(self.cluster.top, requests.RestartChild(f"node:{self.name}"),
                             timeout=CONTROL_TIMEOUT)


__all__ = ["BlockTier", "Client", "Cluster", "NodeHandle"]
