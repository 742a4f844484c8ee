"""The block tier as users drive it from Python: start it, feed it level-0 blocks, read
history back, watch the compaction service work, and break its processes.

Per node, under the node's `rest_for_one` supervisor:
  the log tree with the metastore group's raft member (`node_children`), then
  `blocks_children`: the worker pool (a `simple_one_for_one` supervisor) and the blocks
  node (which runs the compaction service while the local member leads).

Why the raft member is the caller's business: a node has one WAL, segment writer and
log tree for all of its raft groups (the KV's, the metastore's, ...), so whoever composes
a node lists every group once in `node_children(node, groups)` and appends each tier's
children after it. `blocks_children` adds only the block tier's own processes; under
`rest_for_one` a restart of the metastore member restarts them after it.

`BlocksCluster.start(...)` composes a standalone block tier (on its own runtime or a
given one), fed by `client.add_level0(rows or blocks)`. A KV cluster's tier, fed by the
flusher from the KV's committed history, is composed by `tier.py`; its `BlocksCluster`
is then a view (`owns_runtime=False`) over the KV cluster's top supervisor.
"""

from __future__ import annotations

import functools
import os
import tempfile
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sediment.actors.blocks import block as blk
from sediment.actors.blocks import merge
from sediment.actors.blocks.errors import MetastoreError
from sediment.actors.blocks.jobs import PollRequest, Tombstone
from sediment.actors.blocks.meta import BlockMeta, shard_for_key
from sediment.actors.blocks.metastore import (
    AddBlocks,
    BlocksQuery,
    BlocksResult,
    FlushCursor,
    FlushCursorQuery,
    JobInfo,
    JobsQuery,
    JobsResult,
    PreparePlan,
    QueuesQuery,
    QueuesResult,
    SetCompactionRevision,
    TombstonesQuery,
    TombstonesResult,
    metastore,
)
from sediment.actors.blocks.planner import PlannerConfig, QueueStats
from sediment.actors.blocks.scheduler import SchedulerConfig
from sediment.actors.blocks.service import AddBlocksResult, MetastoreConfig
from sediment.actors.blocks.shell.config import BlocksConfig
from sediment.actors.blocks.shell.executor import Executor, PyarrowExecutor
from sediment.actors.blocks.shell.names import (
    METASTORE_GROUP,
    blocks_node_name,
    service_name,
    worker_pool_name,
)
from sediment.actors.blocks.shell.node import blocks_node
from sediment.actors.blocks.shell.pool import start_worker_pool
from sediment.actors.blocks.worker import WorkerConfig
from sediment.actors.log.shell.cluster import node_children, propose
from sediment.actors.log.shell.group_spec import GroupSpec
from sediment.actors.log.shell.names import RAFT_HOST, raft_name
from sediment.actors.log.shell.protocol import Query
from sediment.actors.mvcc_errors import ErrCompacted
from sediment.runtime import api
from sediment.runtime.common_calls import Status
from sediment.runtime.errors import CallError
from sediment.runtime.pid import Pid
from sediment.supervision import ChildSpec, Spawn, SupFlags, requests, start_top, supervisor

RAFT_CHILD = f"raft:{METASTORE_GROUP}"  # the metastore member's id in a node supervisor
POOL_CHILD = "compaction-workers"
NODE_CHILD = "blocks-node"


def metastore_spec(nodes: Sequence[str], data_dir: str, config: MetastoreConfig,
                   **group_options: Any) -> GroupSpec:
    """The metastore raft group: one member per node, each hosting the machine with
    `config` (only the leader's prepare steps read it; replicas apply explicit plans)."""
    machine = functools.partial(metastore, config=config)
    return GroupSpec(METASTORE_GROUP, tuple(nodes), data_dir, machine=machine,
                     **group_options)


def blocks_children(node: str, spec: GroupSpec, config: BlocksConfig) -> list[ChildSpec]:
    """The block tier's children of `node`'s supervisor, to follow the node's log
    children (which must include `spec`'s member when `node` is one of its nodes): the
    worker pool, then (on members only) the blocks node."""
    if spec.group != METASTORE_GROUP:
        raise ValueError(f"the metastore group is {METASTORE_GROUP!r}, got {spec.group!r}")
    if tuple(spec.nodes) != config.nodes:
        raise ValueError(f"config.nodes {config.nodes} are not the group's {spec.nodes}")
    children = [ChildSpec(POOL_CHILD, (start_worker_pool, (config,)), type="supervisor")]
    if node in spec.nodes:
        children.append(ChildSpec(NODE_CHILD, (Spawn(blocks_node, node=node,
                                                     name=blocks_node_name(node),
                                                     label=blocks_node_name(node),
                                                     host=RAFT_HOST),
                                               (config,))))
    return children


@dataclass
class BlocksCluster:
    """A running block tier: the runtime, the metastore group, the node processes'
    config, the top supervisor, and the shard count `add_level0` splits rows by."""

    rt: Any
    spec: GroupSpec
    config: BlocksConfig
    top: Pid
    shards: int = 4
    owns_runtime: bool = True

    @classmethod
    def start(cls, nodes: int | Sequence[str] = 3, data_dir: str | None = None,
              backend: str = "ray", runtime: Any = None, workers_per_node: int = 2,
              planner: PlannerConfig | None = None, scheduler: SchedulerConfig | None = None,
              worker: WorkerConfig | None = None, executor: Executor | None = None,
              shards: int = 4, top_node: str | None = None,
              tuning: Mapping[str, Any] | None = None, **group_options: Any) -> BlocksCluster:
        """Start the runtime (unless `runtime` is given) and every node's processes.
        `tuning`: further `BlocksConfig` fields (timeouts, intervals); `group_options`:
        the metastore group's `GroupSpec` fields (election timeout, snapshots, ...)."""
        names = tuple(nodes) if not isinstance(nodes, int) else tuple(
            f"n{i}" for i in range(1, nodes + 1))
        if not isinstance(shards, int) or isinstance(shards, bool) or shards < 1:
            raise ValueError(f"shards must be a positive int, got {shards!r}")
        data_dir = data_dir or tempfile.mkdtemp(prefix="sediment-blocks-")
        root = os.path.join(data_dir, "blocks")
        os.makedirs(root, exist_ok=True)
        blk.remove_temp_files(root)  # what interrupted writes left, before any write
        meta_config = MetastoreConfig(planner=planner or PlannerConfig(),
                                      scheduler=scheduler or SchedulerConfig())
        config = BlocksConfig(names, root, meta_config, worker or WorkerConfig(),
                              workers_per_node, executor or PyarrowExecutor(),
                              **dict(tuning or {}))
        spec = metastore_spec(names, os.path.join(data_dir, "raft"), meta_config,
                              **group_options)
        rt = runtime or api.start(backend, nodes=names)
        try:
            specs = [ChildSpec(f"node:{n}",
                               (Spawn(supervisor, node=n, label=f"blocks-node-sup:{n}",
                                      host=RAFT_HOST),
                                (SupFlags(strategy="rest_for_one", intensity=20, period=10),
                                 [*node_children(n, [spec]), *blocks_children(n, spec, config)])),
                               type="supervisor") for n in names]
            top = start_top(rt, SupFlags(intensity=20, period=10), specs, name="blocks",
                            node=top_node or names[0])
            cluster = cls(rt, spec, config, top, shards, owns_runtime=runtime is None)
            cluster.wait_ready()
        except BaseException:
            if runtime is None:
                rt.shutdown()
            raise
        return cluster

    # -- state ----------------------------------------------------------------------

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.spec.nodes

    @property
    def root(self) -> str:
        return self.config.root

    def client(self, timeout: float = 30.0) -> BlocksClient:
        return BlocksClient(self, timeout)

    def leader(self) -> str | None:
        """The member every live member that claims leadership names, if exactly one."""
        views = [self.node(n).raft_status() for n in self.nodes]
        leaders = {v["leader"] for v in views if v is not None and v["role"] == "leader"}
        return next(iter(leaders)) if len(leaders) == 1 else None

    def wait_ready(self, timeout: float = 120.0) -> str:
        """Block until a leader committed an entry of its term, its compaction service
        runs and every node's blocks processes are up; the leader's node."""
        deadline = time.monotonic() + timeout
        waited = 0.0
        while True:
            leader = self.leader()
            if (leader is not None and self.rt.whereis(service_name(leader)) is not None
                    and all(self.node(n).status() is not None for n in self.nodes)):
                # a read-only command: commits an entry of this term, changes nothing
                propose(self.rt, self.spec, PreparePlan(PollRequest()), timeout=timeout)
                return leader
            if waited > timeout or (self.rt.backend != "sim" and time.monotonic() > deadline):
                raise TimeoutError("the block tier did not become ready")
            self.rt.sleep(0.1)
            waited += 0.1

    # -- handles ----------------------------------------------------------------------

    def node(self, name: str) -> BlocksNodeHandle:
        if name not in self.nodes:
            raise KeyError(f"no node {name!r}; nodes are {self.nodes}")
        return BlocksNodeHandle(self, name)

    def workers(self) -> list[Pid]:
        """Every running compaction worker, node by node."""
        return [pid for n in self.nodes for pid in self.node(n).workers()]

    def worker_status(self, pid: Pid) -> dict[str, Any] | None:
        """A worker's view: jobs held (name -> token), counts, recent outcomes."""
        try:
            return self.rt.call(pid, Status(), timeout=5)  # type: ignore[no-any-return]
        except CallError:
            return None

    def holders(self, job: str) -> dict[Pid, int]:
        """The workers that believe they hold `job`, with their tokens."""
        out: dict[Pid, int] = {}
        for pid in self.workers():
            status = self.worker_status(pid)
            if status is not None and job in status["jobs"]:
                out[pid] = status["jobs"][job]
        return out

    def kill_worker(self, pid: Pid) -> None:
        """Kill one worker abruptly; its pool starts a fresh one."""
        if pid not in self.workers():
            raise KeyError(f"{pid} is not a compaction worker of this cluster")
        self.rt.kill(pid)

    def kill_leader(self) -> str:
        """Kill the metastore leader's raft member (its service goes with it); the node
        restarts it, and the group elects a leader. The killed member's node."""
        leader = self.leader()
        if leader is None:
            raise RuntimeError("the metastore has no leader to kill")
        self.node(leader).kill_process(RAFT_CHILD)
        return leader

    def service_status(self) -> dict[str, Any] | None:
        leader = self.leader()
        if leader is None:
            return None
        try:
            return self.rt.call(service_name(leader), Status(), timeout=5)  # type: ignore[no-any-return]
        except CallError:
            return None

    def stop(self) -> None:
        if self.owns_runtime:
            self.rt.shutdown()

    def __enter__(self) -> BlocksCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class BlocksNodeHandle:
    """One node's block processes, and ways to break them."""

    cluster: BlocksCluster
    name: str

    def _call(self, dest: Pid | str, request: Any) -> Any:
        try:
            return self.cluster.rt.call(dest, request, timeout=5)
        except CallError:
            return None

    def processes(self) -> dict[str, Pid | None]:
        """The node supervisor's children by id ("raft:metastore", "wal", "blocks-node",
        "compaction-workers", ...)."""
        children = self._call(self.cluster.top, requests.WhichChildren())
        sup = requests.child_pid(children or [], f"node:{self.name}")
        if sup is None:
            return {}
        return {c[0]: c[1] for c in self._call(sup, requests.WhichChildren()) or []}

    def raft_status(self) -> dict[str, Any] | None:
        return self._call(raft_name(METASTORE_GROUP, self.name), Status())  # type: ignore[no-any-return]

    def status(self) -> dict[str, Any] | None:
        """The blocks node's view (leader, term, whether it runs the service)."""
        return self._call(blocks_node_name(self.name), Status())  # type: ignore[no-any-return]

    def workers(self) -> list[Pid]:
        children = self._call(worker_pool_name(self.name), requests.WhichChildren())
        return [c[1] for c in children or [] if isinstance(c[1], Pid)]

    def kill(self) -> None:
        """Kill every process of the node at once (its top-level supervisor restarts it,
        unless the top supervisor ran there too)."""
        self.cluster.rt.kill_node(self.name)

    def kill_process(self, child: str) -> None:
        pid = self.processes().get(child)
        if pid is None:
            raise KeyError(f"{child!r} is not running on {self.name}")
        self.cluster.rt.kill(pid)


@dataclass
class BlocksClient:
    """Level-0 ingestion, history reads from the blocks, and the metastore's state.
    Commands go through the raft log (following the leader); queries read the leader's
    applied state. Errors are raised typed (`MetastoreError`, `BlockError`,
    `ErrCompacted`, ...); bad arguments raise TypeError/ValueError before anything is
    written or proposed."""

    cluster: BlocksCluster
    timeout: float = 30.0

    # -- commands ---------------------------------------------------------------------

    def add_level0(self, items: Sequence[blk.Row] | Sequence[BlockMeta]) -> AddBlocksResult:
        """Rows: written as one level-0 block per shard they fall in (by key), then added
        in one AddBlocks command; block metadata (already written): added as is."""
        given: tuple[object, ...] = tuple(items)
        metas = tuple(i for i in given if isinstance(i, BlockMeta))
        rows = tuple(i for i in given if isinstance(i, blk.Row))
        if not given:
            raise ValueError("add_level0 needs at least one row or block")
        if len(metas) != len(given) and len(rows) != len(given):
            raise TypeError("add_level0 takes only Rows or only BlockMetas")
        blocks = metas or self._write_level0(rows)
        return self._propose(AddBlocks(blocks))  # type: ignore[no-any-return]

    def _write_level0(self, rows: tuple[blk.Row, ...]) -> tuple[BlockMeta, ...]:
        by_shard: dict[int, list[blk.Row]] = {}
        for row in rows:
            if not isinstance(row.key, bytes) or not row.key:
                raise ValueError(f"a row's key must be non-empty bytes: {row.key!r}")
            by_shard.setdefault(shard_for_key(row.key, self.cluster.shards), []).append(row)
        now = self.cluster.rt.now()
        return tuple(blk.write_level0(self.cluster.root, shard, by_shard[shard], created_at=now)
                     for shard in sorted(by_shard))

    def set_compaction_revision(self, revision: int) -> int:
        """Merges from now on drop history below `revision` (forward only)."""
        if not isinstance(revision, int) or isinstance(revision, bool) or revision < 1:
            raise ValueError(f"a compaction revision is a positive int, got {revision!r}")
        return self._propose(SetCompactionRevision(revision))  # type: ignore[no-any-return]

    def _propose(self, command: Any) -> Any:
        _index, result = propose(self.cluster.rt, self.cluster.spec, command,
                                 timeout=self.timeout)
        if isinstance(result, Exception):
            raise result
        return result

    # -- the metastore's state --------------------------------------------------------

    def query(self, request: Any) -> Any:
        """A query of the leader's applied state (any member if none leads); its
        MetastoreError raised."""
        cluster = self.cluster
        waited = 0.0
        while True:
            leader = cluster.leader()
            for node in ([leader] if leader is not None else list(cluster.nodes)):
                try:
                    result = cluster.rt.call(raft_name(METASTORE_GROUP, node), Query(request),
                                             timeout=self.timeout)
                except CallError:
                    continue
                if isinstance(result, MetastoreError):
                    raise result
                return result
            if waited > self.timeout:
                raise TimeoutError("no metastore member answered the query")
            cluster.rt.sleep(0.1)
            waited += 0.1

    def blocks(self, shard: int | None = None) -> tuple[BlockMeta, ...]:
        result: BlocksResult = self.query(BlocksQuery(shard=shard))
        return result.blocks

    def jobs(self) -> tuple[JobInfo, ...]:
        result: JobsResult = self.query(JobsQuery())
        return result.jobs

    def queues(self) -> tuple[QueueStats, ...]:
        result: QueuesResult = self.query(QueuesQuery())
        return result.queues

    def tombstones(self) -> tuple[Tombstone, ...]:
        result: TombstonesResult = self.query(TombstonesQuery())
        return result.tombstones

    def compaction_revision(self) -> int:
        result: BlocksResult = self.query(BlocksQuery(max_revision=0))
        return result.compaction_revision

    def flush_cursor(self) -> FlushCursor:
        """The flushed-through revision and per-shard watermarks (the leader's applied
        state: at most the committed cursor)."""
        result: FlushCursor = self.query(FlushCursorQuery())
        return result

    def idle(self) -> bool:
        """No job in the schedule and no block waiting to be planned."""
        return not self.jobs() and not self.queues()

    # -- history reads ----------------------------------------------------------------

    def history(self, key: bytes, start: int | None = None,
                end: int | None = None) -> list[blk.Row]:
        """`key`'s rows with start <= revision <= end, from its shard's live blocks."""
        if not isinstance(key, bytes) or not key:
            raise ValueError(f"a key is non-empty bytes, got {key!r}")
        result: BlocksResult = self.query(
            BlocksQuery(shard=shard_for_key(key, self.cluster.shards)))
        return merge.read_key_history(self.cluster.root, result.blocks, key, start, end,
                                      compaction_revision=result.compaction_revision)

    def row_values(self, rows: Collection[tuple[bytes, int]],
                   at_least: int) -> dict[tuple[bytes, int], bytes | None]:
        """The values of history rows (key, revision) found in the live blocks of their
        shards (None: a delete); a row no block holds is absent. ErrCompacted(floor) if
        `at_least` is below the oldest revision the blocks answer for, with or without
        rows asked (one metastore read decides both, so a merge cannot slip between)."""
        result: BlocksResult = self.query(BlocksQuery())
        floor = merge.history_floor(result.blocks, result.compaction_revision)
        if at_least < floor:
            raise ErrCompacted(floor)
        by_shard: dict[int, set[tuple[bytes, int]]] = {}
        for key, revision in rows:
            by_shard.setdefault(shard_for_key(key, self.cluster.shards), set()).add(
                (key, revision))
        out: dict[tuple[bytes, int], bytes | None] = {}
        for shard, wanted in sorted(by_shard.items()):
            revisions = sorted({r for _, r in wanted})
            keys = {k for k, _ in wanted}
            blocks = [b for b in result.blocks if b.shard == shard
                      and b.overlaps_revisions(revisions[0], revisions[-1])
                      and any(b.may_hold_key(k) for k in keys)]
            table = merge.combine([blk.read_block(self.cluster.root, b) for b in blocks])
            table = table.filter(pc.is_in(table["revision"],
                                          value_set=pa.array(revisions, pa.int64())))
            for row in blk.table_rows(table):
                if (row.key, row.revision) in wanted:
                    out[(row.key, row.revision)] = row.value
        return out

    def keyspace_at(self, revision: int) -> list[tuple[bytes, bytes]]:
        """Every (key, value) that exists at `revision`, by key."""
        if not isinstance(revision, int) or isinstance(revision, bool) or revision < 0:
            raise ValueError(f"a revision is a non-negative int, got {revision!r}")
        result: BlocksResult = self.query(BlocksQuery())
        return merge.read_keyspace(self.cluster.root, result.blocks, revision,
                                   compaction_revision=result.compaction_revision)


__all__ = [
    "BlocksClient",
    "BlocksCluster",
    "BlocksNodeHandle",
    "blocks_children",
    "metastore_spec",
]
