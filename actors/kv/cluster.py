"""The KV cluster as users drive it from Python: start it, talk to it, break it.

`Cluster.start(nodes=3, data_dir=..., backend="ray"|"sim")` starts, per node, the log
tree of the raft issue (log worker, segment writer, WAL, the "kv" raft member hosting
the SQLite machine) and after it the KV node process, all under the node's
`rest_for_one` supervisor. `cluster.client()` talks to whichever member leads (writes
and linearizable reads go through the log, following leader hints); `client.watch(...)`
opens a watcher session on a node (`watch_session.py`). Node handles kill and restart
nodes and processes.

The client checks every request (`validation.py`, against the cluster's `Limits`) before
it proposes it, so a bad request raises its typed error and never reaches the raft log;
every node's machine checks the same limits again when it applies.

`Cluster.start(..., blocks=BlockTier(...))` adds the block tier on the same nodes
(`actors/blocks/shell/tier.py`): committed history is flushed into level-0 blocks, the
KV's compaction is held at or below what is flushed, and reads below the KV's compact
revision (`range(..., revision=R)`, `history(...)`) are answered from the hot store's
row skeleton with the compacted values taken from the blocks (`history.py`), until
they fall below the blocks' own compaction (ErrCompacted, as before).
"""

from __future__ import annotations

import functools
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sediment.actors.blocks.shell.cluster import BlocksCluster
from sediment.actors.blocks.shell.tier import BlockTier, TierParts, tier_children, tier_parts
from sediment.actors.branches.shell.service import ServicesConfig, branches_child
from sediment.actors.etcd.names import ETCD_HOST, etcd_name
from sediment.actors.etcd.protocol import Endpoint
from sediment.actors.etcd.server import EtcdConfig, EtcdWire, etcd_server
from sediment.actors.kv import history as hist
from sediment.actors.kv import metrics as kv_metrics
from sediment.actors.kv import validation
from sediment.actors.kv.errors import ErrCompacted, ErrNotFlushed, KvError
from sediment.actors.kv.machine import netsy
from sediment.actors.kv.names import KV_GROUP, KV_HOST, kv_node_name
from sediment.actors.kv.node import KvNodeConfig, kv_node
from sediment.actors.kv.node_protocol import OpenWatcher
from sediment.actors.kv.queries import HistoryEvents, HistoryRange
from sediment.actors.kv.types import (
    Compact,
    Compare,
    DeleteRange,
    DeleteResult,
    Event,
    KeyValue,
    Put,
    PutResult,
    Range,
    RangeResult,
    Txn,
    TxnOp,
    TxnResult,
)
from sediment.actors.kv.validation import DEFAULT_LIMITS, Limits
from sediment.actors.kv.watch_session import Watch, WatchCanceled, WatchSession
from sediment.actors.log.shell.cluster import GroupClient, node_children
from sediment.actors.log.shell.group_spec import GroupSpec
from sediment.actors.log.shell.names import LOG_HOST, RAFT_HOST, raft_name
from sediment.actors.log.shell.protocol import Query
from sediment.runtime import api
from sediment.runtime.common_calls import Status
from sediment.runtime.errors import CallError
from sediment.runtime.pid import Pid
from sediment.supervision import ChildSpec, Spawn, SupFlags, requests, start_top, supervisor

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
              branches: ServicesConfig | None = None,
              **group_options: Any) -> Cluster:
        """Start the runtime (unless `runtime` is given) and every node's processes.
        `limits` go to every node's machine and to the clients. `top_node` is where the
        top supervisor runs (default: the first node); a runtime node outside the KV's
        keeps it alive when a whole KV node is killed. `blocks`: start the block tier
        on the same nodes (flusher, metastore, compaction service, workers). `etcd`:
        serve etcd's v3 gRPC API on every node (Ray only; `endpoints()` lists them).
        `branches`: the branch tier's services (`actors/branches/shell/service.py`: a
        follower on every node, under its node supervisor, runs the delete sensor, the
        staging compactor and the garbage collector while the node's KV member leads)."""
        if not isinstance(limits, Limits):
            raise TypeError(f"limits must be a Limits, got {type(limits).__name__}")
        names = tuple(nodes) if not isinstance(nodes, int) else tuple(
            f"n{i}" for i in range(1, nodes + 1))
        data_dir = data_dir or tempfile.mkdtemp(prefix="sediment-kv-")
        os.makedirs(data_dir, exist_ok=True)
        tier = None if blocks is None else tier_parts(names, data_dir, blocks)
        if etcd is not None and (runtime.backend if runtime is not None else backend) != "ray":
            raise ValueError("the etcd API needs the ray backend (the simulator has no sockets)")
        rt = runtime or api.start(backend, nodes=names)
        # the hosts the node trees will ask for, started at once: named ones (the KV node
        # and its watcher sessions share KV_HOST), and on each node one for each process
        # with an actor of its own (the segment writer; the top supervisor on its node)
        top = top_node or names[0]
        rt.prepare_hosts(((n, h) for n in names
                          for h in (RAFT_HOST, LOG_HOST, KV_HOST,
                                    *([ETCD_HOST] if etcd else []))),
                         spares={n: 1 + (n == top) for n in {*names, top}})
        machine = netsy if limits == DEFAULT_LIMITS else functools.partial(netsy, limits=limits)
        spec = GroupSpec(KV_GROUP, names, data_dir, machine=machine, **group_options)
        config = KvNodeConfig(names, compaction_interval=compaction_interval,
                              watcher_max_pending=watcher_max_pending, data_dir=data_dir,
                              flush_hold=tier is not None)
        wire = None if etcd is None else etcd.config(spec, limits)
        specs = [ChildSpec(f"node:{n}", (Spawn(supervisor, node=n, label=f"kv-node-sup:{n}",
                                               host=RAFT_HOST),
                                         (SupFlags(strategy="rest_for_one", intensity=20,
                                                   period=10),
                                         _children(n, spec, config, tier, wire, branches))),
                           type="supervisor") for n in names]
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
        views = [self._raft_status(n) for n in self.nodes]
        leaders = {v["leader"] for v in views if v is not None and v["role"] == "leader"}
        return next(iter(leaders)) if len(leaders) == 1 else None

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
        try:
            return self.rt.call(raft_name(KV_GROUP, node), Status(), timeout=5)  # type: ignore[no-any-return]
        except CallError:
            return None

    def stop(self) -> None:
        if self.owns_runtime:
            self.rt.shutdown()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _children(node: str, spec: GroupSpec, config: KvNodeConfig,
              tier: TierParts | None = None,
              wire: EtcdConfig | None = None,
              branches: ServicesConfig | None = None) -> list[ChildSpec]:
    """The log tree (with the metastore member beside the KV's when there is a block
    tier: one WAL per node), the KV node, the etcd server (in a host of its own), then
    the block tier's processes."""
    groups = [spec] if tier is None else [spec, tier.spec]
    kv = ChildSpec("kv-node", (Spawn(kv_node, node=node, name=kv_node_name(node),
                                     label=kv_node_name(node), host=KV_HOST), (config,)))
    server = [] if wire is None else [ChildSpec(
        "etcd", (Spawn(etcd_server, node=node, name=etcd_name(node), label=etcd_name(node),
                       host=ETCD_HOST), (wire,)))]
    return [*node_children(node, groups), kv, *server,
            *([] if tier is None else tier_children(node, tier)),
            *([] if branches is None else [branches_child(node, branches)])]


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
        try:
            return self.cluster.rt.call(kv_node_name(self.name), Status(), timeout=5)  # type: ignore[no-any-return]
        except CallError:
            return None

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


@dataclass
class Client:
    """etcd's KV API over the cluster; every call raises the typed KvError it got.
    `last_index` is the raft index of the last request that went through the log: its
    place in the history (a checker matches the answer with the log's entry there)."""

    cluster: Cluster
    timeout: float = 30.0
    last_index: int | None = None
    read_at: int | None = None  # the raft index the last linearizable read was served at

    def _propose(self, command: Any) -> Any:
        """Check the request, then propose it: a bad one never becomes a log entry."""
        with kv_metrics.counted("python", command):
            validation.check_request(command, self.cluster.limits)
            self.last_index = None
            index, result = self.cluster.group.propose(command, timeout=self.timeout)
            self.last_index = index
            if isinstance(result, Exception):
                raise result
            return result

    def _read(self, request: Range) -> Any:
        """A linearizable read by ReadIndex at the leader: no log entry (`last_index` stays
        None; `read_at` is the raft index its machine had applied when it answered, after
        everything committed before the read)."""
        with kv_metrics.counted("python", request):
            validation.check_request(request, self.cluster.limits)
            self.last_index = self.read_at = None
            self.read_at, result = self.cluster.group.read(request, timeout=self.timeout)
            if isinstance(result, Exception):
                raise result
            return result

    def put(self, key: bytes, value: bytes, prev_kv: bool = False) -> PutResult:
        return self._propose(Put(key, value, prev_kv))  # type: ignore[no-any-return]

    def delete(self, key: bytes, range_end: bytes | None = None,
               prev_kv: bool = False) -> DeleteResult:
        return self._propose(DeleteRange(key, range_end, prev_kv))  # type: ignore[no-any-return]

    def range(self, key: bytes, range_end: bytes | None = None, revision: int = 0,
              limit: int = 0, count_only: bool = False, keys_only: bool = False,
              serializable: bool = False, node: str | None = None) -> RangeResult:
        """Linearizable by default (ReadIndex at the leader); `serializable` reads
        one node's applied state (`node`, default the first). With a block tier, a
        revision below the KV's compact revision is answered from the blocks (see
        `_cold_range`) instead of ErrCompacted."""
        request = Range(key, range_end, revision, limit, count_only, keys_only)
        target = node or self.cluster.nodes[0]
        try:
            if not serializable:
                return self._read(request)  # type: ignore[no-any-return]
            validation.check_request(request, self.cluster.limits)
            return self._query_member(request, target)  # type: ignore[no-any-return]
        except ErrCompacted as err:
            if self.cluster.blocks is None or revision <= 0:
                raise
            return self._cold_range(request, err.compact_revision,
                                    target if serializable else None)

    def _cold_range(self, request: Range, compact_revision: int,
                    node: str | None) -> RangeResult:
        """A Range below the KV's compact revision: the member's row skeleton at that
        revision (which keys lived, their create/mod revision and version: value-only
        compaction keeps them), the compacted values from the blocks. Header revision:
        that member's head (the history below its compaction no longer changes)."""
        skeleton: hist.RangeSkeleton = self._query_member(HistoryRange(request), node)
        values = self._block_values(hist.range_needs(skeleton), request.revision,
                                    compact_revision)
        return hist.fill_range(skeleton, values)

    def history(self, key: bytes, range_end: bytes | None = None, start_revision: int = 1,
                end_revision: int | None = None, node: str | None = None) -> list[Event]:
        """Every change of [key, range_end) with start_revision <= revision <=
        end_revision (default head), by revision then key, as watch events (no prev_kv).
        Read from one member's applied state (`node`, default the leader); the part the
        KV compacted comes from the blocks. ErrCompacted below what either tier answers
        for, ErrFutureRev above head."""
        validation.check_range(key, range_end, self.cluster.limits)
        validation.check_revision(start_revision, "start_revision")
        if end_revision is not None:
            validation.check_revision(end_revision, "end_revision")
        request = HistoryEvents(start_revision, end_revision, key, range_end)
        skeleton: hist.EventsSkeleton = self._query_member(request, node)
        if start_revision >= skeleton.compact_revision and not skeleton.missing:
            return list(skeleton.events)
        values = self._block_values(hist.events_need(skeleton), start_revision,
                                    skeleton.compact_revision)
        return hist.fill_events(skeleton, values)

    def _block_values(self, rows: frozenset[hist.RowId], at: int,
                      compact_revision: int) -> dict[hist.RowId, bytes | None]:
        """The values of compacted rows from the blocks; a read at `at` below what the
        blocks answer for is ErrCompacted at the lowest revision either tier answers."""
        if self.cluster.blocks is None:
            raise ErrCompacted(compact_revision)
        try:
            return self.cluster.blocks.client(self.timeout).row_values(rows, at)
        except ErrCompacted as err:
            raise ErrCompacted(min(err.compact_revision, compact_revision)) from None

    def _query_member(self, request: Any, node: str | None) -> Any:
        """A query of one member's machine: `node`, or the leader first and then the
        others while they cannot be reached. Its KvError raised."""
        if node is not None:
            order = [node]
        else:
            leader = self.cluster.leader()
            order = sorted(self.cluster.nodes, key=lambda n: n != leader)
        last: Exception = KvError("no KV member answered")
        for target in order:
            try:
                reply = self.cluster.rt.call(raft_name(KV_GROUP, target), Query(request),
                                             timeout=self.timeout)
            except CallError as err:
                last = err
                continue
            if isinstance(reply, Exception):
                raise reply
            return reply
        raise last

    def get(self, key: bytes, revision: int = 0, serializable: bool = False) -> KeyValue | None:
        result = self.range(key, revision=revision, serializable=serializable)
        return result.kvs[0] if result.kvs else None

    def txn(self, compare: Sequence[Compare], success: Sequence[TxnOp] = (),
            failure: Sequence[TxnOp] = ()) -> TxnResult:
        # lists become tuples; anything else goes as is, for the check to refuse (tuple()
        # of a str or a dict would make it look like a txn)
        parts: list[Any] = [tuple(p) if isinstance(p, list) else p
                            for p in (compare, success, failure)]
        return self._propose(Txn(*parts))  # type: ignore[no-any-return]

    def compact(self, revision: int) -> Any:
        """etcd Compact. With a block tier, a revision above the flushed history is
        refused (ErrNotFlushed) before anything is proposed: the hot store would drop
        values no block holds yet. The cursor only moves forward, so a revision at or
        below it stays safe until the Compact applies."""
        command = Compact(revision)
        if self.cluster.blocks is not None:
            validation.check_request(command, self.cluster.limits)
            through = self.cluster.blocks.client(self.timeout).flush_cursor().through
            if revision > through:
                raise ErrNotFlushed(revision, through)
        return self._propose(command)

    def watch(self, key: bytes, range_end: bytes | None = None, start_revision: int = 0,
              prev_kv: bool = False, no_put: bool = False, no_delete: bool = False,
              progress_notify: bool = False, node: str | None = None,
              session: WatchSession | None = None) -> Watch:
        """A watch in a new session on `node` (default the first), or in `session`."""
        session = session or self.session(node)
        return session.watch(key, range_end, start_revision, prev_kv, no_put, no_delete,
                             progress_notify)

    def session(self, node: str | None = None) -> WatchSession:
        target = node or self.cluster.nodes[0]
        pid = self.cluster.rt.call(kv_node_name(target), OpenWatcher(), timeout=30)
        return WatchSession(self.cluster.rt, pid, target)

__all__ = ["BlockTier", "Client", "Cluster", "NodeHandle", "Watch", "WatchCanceled",
           "WatchSession"]
