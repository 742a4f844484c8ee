"""Partitioned tables with a versioned catalog, as users drive them from Python.

`TablesCluster.start(nodes=3, backend="sim")` starts, per node under its `rest_for_one`
supervisor: the log processes with the node's member of the metastore group (the
catalog and the assignments, `catalog/metastore_machine.py`), the supervisor of the
node's partition members, the table node (`table_node.py`) and the follower of the
metastore leadership that run, while the node leads, the compaction coordinator
(`catalog/shell/coordinator_process.py`) and the index build and rebalance drivers
(`tables_node_tree.py`). The top supervisor runs on a node of its own ("ctl"), so
killing any table node leaves it to restart that node. The tier's own parts (the
metastore group, the table node, its drivers) come from `actors/tables/shell/cluster.py`;
this module, in the wiring layer, puts them together with the log's and the catalog's.

    with TablesCluster.start(nodes=3, backend="sim") as c:
        c.create_zone("Z", partitions=4, replicas=2)
        c.create_table("T", "Z", [("k", "int", False), ("v", "str")], ["k"])
        tx = c.begin()
        tx.insert("T", {"k": 1, "v": "one"})
        tx.commit()
        c.get("T", (1,))                  # a read-only read now
        c.catalog_status()

Errors are the typed `CatalogError`s (`TableNotFound`, `TableExists`,
`CatalogVersionCompacted`, `WriteConflict`, ...), raised with nothing changed.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sediment.actors.catalog import ddl
from sediment.actors.catalog import low_watermark as lw
from sediment.actors.catalog.compaction_coordinator import ANSWER_TIMEOUT_MS
from sediment.actors.catalog.descriptors import Column, IndexStatus
from sediment.actors.catalog.errors import IndexNotFound, ZoneNotFound
from sediment.actors.catalog.hlc import HybridTimestamp
from sediment.actors.catalog.machine import (
    CatalogAtQuery,
    CatalogVersionQuery,
    Rejected,
    VersionsQuery,
)
from sediment.actors.catalog.metastore_machine import (
    AssignmentsQuery,
    LowWatermarkQuery,
    RebalancesQuery,
)
from sediment.actors.catalog.shell.coordinator_process import (
    CoordinatorProcessConfig,
    coordinator_process,
)
from sediment.actors.log.shell.cluster import GroupClient
from sediment.actors.log.shell.group_spec import GroupSpec
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Query
from sediment.actors.log.shell.while_leading import LeaderChild
from sediment.actors.tables.names import (
    COORDINATOR,
    INDEX_DRIVER,
    META_GROUP,
    REBALANCE_DRIVER,
    table_node_name,
)
from sediment.actors.tables.recorder import Recorder, poll_replay
from sediment.actors.tables.shell import node_protocol as p
from sediment.actors.tables.shell import unique_build
from sediment.actors.tables.shell.cluster import (
    TEST_ANSWER_TIMEOUT_MS,
    TEST_LWM,
    metastore_group,
    tier_drivers,
)
from sediment.actors.tables.shell.node_state import DEFAULT_LOCK_WAIT, TableNodeConfig
from sediment.actors.tables.shell.partition_members import PartitionOptions
from sediment.runtime import api
from sediment.runtime.common_calls import Status
from sediment.runtime.errors import CallError, CallExit, NoProc
from sediment.runtime.pid import Pid
from sediment.supervision import SupFlags, requests, start_top
from sediment.wiring.tables_node_tree import node_supervisor
from sediment.wiring.tables_read_only import ReadOnlyTransaction
from sediment.wiring.tables_transaction import Transaction

CONTROL_NODE = "ctl"


IGNITE_LWM = lw.LowWatermarkConfig()  # Ignite's defaults: 10 min, every 5 min


@dataclass
class TablesCluster:
    rt: Any
    spec: GroupSpec
    config: TableNodeConfig
    top: Pid
    owns_runtime: bool = True
    recorder: Recorder = field(default_factory=Recorder)
    timeout: float = 30.0
    # name -> pid found: the driver's calls skip the registry (named_pids.py says why)
    _pids: dict[str, Pid] = field(default_factory=dict, repr=False)

    @classmethod
    def start(cls, nodes: int | Sequence[str] = 3, backend: str = "sim",
              data_dir: str | None = None, seed: int = 0,
              lwm: lw.LowWatermarkConfig = IGNITE_LWM,
              answer_timeout_ms: int = ANSWER_TIMEOUT_MS,
              ddl_delay_ms: int = 50, election_timeout: tuple[float, float] = (1.0, 2.0),
              scale_down_after: float | None = None, runtime: Any = None,
              top_node: str = CONTROL_NODE,
              clock_offsets_ms: Mapping[str, int] | None = None,
              lock_wait: float = DEFAULT_LOCK_WAIT) -> TablesCluster:
        """The defaults are Ignite's: data availability 10 min, the low watermark
        updated every 5 min, the coordinator waiting 10 s for the nodes' answers (tests
        and scenarios pass `TEST_LWM` and `TEST_ANSWER_TIMEOUT_MS`: seconds).
        `scale_down_after`: seconds a node must be gone before its replicas move
        (None, as Ignite's default: they never move for a node leaving). `top_node`:
        where the top supervisor runs (a node of `runtime`'s, when one is given).
        `clock_offsets_ms`: node -> ms added to its table node's physical clock (a
        skewed clock). `lock_wait`: seconds a writer meeting a live, pending holder's
        intent or claim waits for it before failing (default 1 s, bounded; 0: no-wait,
        it fails at once)."""
        names = tuple(nodes) if not isinstance(nodes, int) else tuple(
            f"n{i}" for i in range(1, nodes + 1))
        data_dir = data_dir or tempfile.mkdtemp(prefix="sediment-tables-")
        if runtime is None:
            kwargs: dict[str, Any] = {"seed": seed} if backend == "sim" else {}
            rt = api.start(backend, nodes=(*names, CONTROL_NODE), **kwargs)
        else:
            rt = runtime
        spec = metastore_group(names, data_dir, election_timeout)
        partitions = PartitionOptions(data_dir, election_timeout)
        offsets = tuple(sorted((clock_offsets_ms or {}).items()))
        config = TableNodeConfig(names, data_dir, lwm=lwm, ddl_delay_ms=ddl_delay_ms,
                                 partitions=partitions, clock_offsets_ms=offsets,
                                 lock_wait=lock_wait)
        coordinator = LeaderChild(META_GROUP, "coordinator", COORDINATOR, coordinator_process,
                                  CoordinatorProcessConfig(names, answer_timeout_ms,
                                                           clock_offsets_ms=offsets))
        drivers = (coordinator, *tier_drivers(names, partitions, scale_down_after))
        specs = [node_supervisor(n, spec, config, drivers) for n in names]
        top = start_top(rt, SupFlags(intensity=50, period=10), specs, name="tables",
                        node=top_node)
        cluster = cls(rt, spec, config, top, owns_runtime=runtime is None)
        cluster.wait_ready()
        return cluster

    # ---- the cluster --------------------------------------------------------------------

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.spec.nodes

    def now(self) -> float:
        return float(self.rt.now())

    def leader(self) -> str | None:
        """The node whose metastore member leads (where DDL is stamped)."""
        for node in self.nodes:
            status = self.raft_status(node)
            if status is not None and status.get("role") == "leader":
                return node
        return None

    def raft_status(self, node: str, group: str = META_GROUP) -> dict[str, Any] | None:
        try:
            return self._call(raft_name(group, node), Status(), 5)  # type: ignore[no-any-return]
        except CallError:
            return None

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = self.now() + timeout
        while self.now() < deadline:
            if self.leader() is not None and all(self.node_status(n) is not None
                                                 for n in self.nodes):
                GroupClient(self.rt, self.spec).read(VersionsQuery(), timeout=timeout)
                return
            self.rt.sleep(0.1)
        raise TimeoutError("the tables cluster did not become ready")

    def node_status(self, node: str) -> dict[str, Any] | None:
        try:
            return self._call(table_node_name(node), Status(), 5)  # type: ignore[no-any-return]
        except CallError:
            return None

    def call(self, node: str, request: Any) -> Any:
        """A table node request; its typed error raised."""
        reply = self._call(table_node_name(node), request, self.timeout)
        if isinstance(reply, p.Failed):
            raise reply.error
        return reply

    def read(self, node: str, request: p.ReadRequest) -> tuple[list[Any], Any]:
        """A table node read: its rows [(key, row)] and the read's timestamp."""
        reply: p.Rows = self.call(node, request)
        return reply.rows, reply.ts

    def _call(self, name: str, request: Any, timeout: float) -> Any:
        """`rt.call(name, ...)` with the pid remembered (as `named_pids.NamedPids`: a
        process found gone is looked up again once)."""
        pid = self._pids.get(name)
        if pid is not None:
            try:
                return self.rt.call(pid, request, timeout=timeout)
            except (NoProc, CallExit) as err:
                self._pids.pop(name, None)
                fresh = self.rt.whereis(name)
                if fresh is None:
                    raise NoProc(f"no process registered as {name!r}") from err
                if fresh == pid:
                    raise
                pid = fresh
        else:
            pid = self.rt.whereis(name)
            if pid is None:
                raise NoProc(f"no process registered as {name!r}")
        self._pids[name] = pid
        try:
            return self.rt.call(pid, request, timeout=timeout)
        except (NoProc, CallExit):
            self._pids.pop(name, None)
            raise

    # ---- DDL ----------------------------------------------------------------------------

    def ddl(self, *commands: ddl.DdlCommand) -> tuple[int, HybridTimestamp]:
        """Run one DDL batch on the metastore leader's node; (version, activation), once
        active. Follows leader changes, bounded by `timeout`."""
        deadline = self.now() + self.timeout
        while True:
            node = self.leader()
            reply: Any = p.NotLeader(None)
            if node is not None:
                try:
                    reply = self.call(node, p.Ddl(tuple(commands)))
                except CallError:
                    reply = None
            if isinstance(reply, p.DdlActive):
                self.recorder.version(reply.version, reply.activation)
                return reply.version, reply.activation
            if self.now() > deadline:
                raise TimeoutError("no metastore leader took the DDL")
            self.rt.sleep(0.1)

    def create_zone(self, name: str, partitions: int = 8, replicas: int = 3) -> int:
        return self.ddl(ddl.CreateZone(name, partitions, replicas))[0]

    def alter_zone(self, name: str, replicas: int) -> int:
        """Change the zone's replica count (1..nodes; InvalidDdl otherwise, ZoneNotFound
        for a missing zone, nothing changed). The rebalance driver then moves replicas
        (`wait_rebalanced`)."""
        return self.ddl(ddl.AlterZone(name, replicas))[0]

    def assignments(self, node: str | None = None) -> dict[Any, frozenset[str]]:
        """The stable assignments, from a node's metastore replica."""
        return self._call(raft_name(META_GROUP, node or self.nodes[0]),  # type: ignore[no-any-return]
                            Query(AssignmentsQuery()), self.timeout)

    def rebalances(self, node: str | None = None) -> dict[Any, Any]:
        """The pending rebalances, from a node's metastore replica."""
        return self._call(raft_name(META_GROUP, node or self.nodes[0]),  # type: ignore[no-any-return]
                            Query(RebalancesQuery()), self.timeout)

    def wait_rebalanced(self, zone: str, timeout: float | None = None) -> None:
        """Wait (bounded) until every partition of the zone has its planned replica count
        and no rebalance is pending."""
        deadline = self.now() + (timeout or self.timeout)
        while True:
            z = self.catalog().zone_named(zone)
            if z is None:
                raise ZoneNotFound(zone)
            self.poll_rebalances()
            mine = {g: n for g, n in self.assignments().items() if g.zone_id == z.id}
            if (not any(g.zone_id == z.id for g in self.rebalances())
                    and all(len(n) == min(z.replicas, len(self.nodes)) for n in mine.values())):
                return
            if self.now() > deadline:
                raise TimeoutError(f"zone {zone} is still rebalancing: {mine}")
            self.rt.sleep(0.1)

    def drop_zone(self, name: str) -> int:
        return self.ddl(ddl.DropZone(name))[0]

    def create_table(self, name: str, zone: str, columns: Iterable[Column | Sequence[Any]],
                     primary_key: Sequence[str]) -> int:
        cols = tuple(c if isinstance(c, Column) else Column(*c) for c in columns)
        return self.ddl(ddl.CreateTable(name, zone, cols, tuple(primary_key)))[0]

    def add_column(self, table: str, column: Column | Sequence[Any]) -> int:
        col = column if isinstance(column, Column) else Column(*column)
        return self.ddl(ddl.AddColumn(table, col))[0]

    def drop_table(self, name: str) -> int:
        return self.ddl(ddl.DropTable(name))[0]

    def create_index(self, name: str, table: str, columns: Sequence[str],
                     unique: bool = False) -> int:
        """Register a secondary index (REGISTERED at the version returned); the index
        build driver then builds it (BUILDING, backfilled in every partition) and makes
        it AVAILABLE (`wait_index_available`). Until then it holds compaction back."""
        at = self.now()
        version = self.ddl(ddl.CreateIndex(name, table, tuple(columns), unique))[0]
        self.recorder.index_registered(name, version, at)
        return version

    def drop_index(self, name: str) -> int:
        at = self.now()
        version = self.ddl(ddl.DropIndex(name))[0]
        self.recorder.index_dropped(name, at)
        return version

    def catalog(self, node: str | None = None) -> Any:
        """The latest catalog version, from a node's replica."""
        latest = self.versions().latest_version
        reply = self._call(raft_name(META_GROUP, node or self.nodes[0]),
                             Query(CatalogVersionQuery(latest)), self.timeout)
        if isinstance(reply, Rejected):
            raise reply.error
        return reply

    def catalog_version(self, version: int, node: str | None = None) -> Any:
        """Catalog version `version` from a node's replica (`CatalogVersionCompacted`
        below the snapshot, `CatalogVersionNotFound` above the latest)."""
        reply = self._call(raft_name(META_GROUP, node or self.nodes[0]),
                           Query(CatalogVersionQuery(version)), self.timeout)
        if isinstance(reply, Rejected):
            raise reply.error
        return reply

    def index(self, name: str) -> Any:
        """The index's descriptor in the latest catalog; IndexNotFound if none."""
        found = self.catalog().index_named(name)
        if found is None:
            raise IndexNotFound(name)
        return found

    def wait_index_available(self, name: str, timeout: float | None = None) -> int:
        """Wait (bounded) until the index is AVAILABLE; the version that made it so."""
        deadline = self.now() + (timeout or self.timeout)
        while True:
            try:
                index = self.index(name)
            except IndexNotFound:  # a unique index over rows sharing values is dropped
                failed = unique_build.failure(self.index_driver_status(), name)
                if failed is None:
                    raise
                self.recorder.index_dropped(name, self.now())
                raise failed from None
            self.poll_indexes()
            if index.status is IndexStatus.AVAILABLE:
                return int(index.status_version)
            if self.now() > deadline:
                raise TimeoutError(f"index {name} is still {index.status.value}")
            self.rt.sleep(0.1)

    def catalog_at(self, ts: HybridTimestamp, node: str | None = None) -> Any:
        """The catalog version active at `ts` (CatalogVersionCompacted below the
        snapshot), from a node's replica."""
        reply = self._call(raft_name(META_GROUP, node or self.nodes[0]),
                             Query(CatalogAtQuery(ts)), self.timeout)
        if isinstance(reply, Rejected):
            raise reply.error
        return reply

    # ---- transactions and reads ---------------------------------------------------------

    def begin(self, node: str | None = None) -> Transaction:
        target = node or self.nodes[0]
        began: p.Began = self.call(target, p.Begin())
        tx = Transaction(self, target, began.tx_id, began.ts, began.version)
        self.recorder.begin(began.tx_id, began.ts, self.now())
        return tx

    def read_only(self, ts: HybridTimestamp | None = None,
                  node: str | None = None) -> ReadOnlyTransaction:
        """A read-only transaction: every read of it at `ts` (default: the first read's
        time), through `node`'s table node."""
        return ReadOnlyTransaction(self, node or self.nodes[0], ts)

    def get(self, table: str, key: tuple[Any, ...], ts: HybridTimestamp | None = None,
            node: str | None = None) -> dict[str, Any] | None:
        """A read-only read of one row at `ts` (default: now)."""
        return self.read_only(ts, node).get(table, key)

    def scan(self, table: str, ts: HybridTimestamp | None = None,
             node: str | None = None) -> list[dict[str, Any]]:
        return self.read_only(ts, node).scan(table)

    def lookup(self, index: str, values: Sequence[Any], ts: HybridTimestamp | None = None,
               node: str | None = None) -> list[dict[str, Any]]:
        """A read-only index lookup at `ts` (default: now): the rows whose indexed
        columns equal `values`, by primary key. The index must be AVAILABLE then
        (`IndexNotAvailable`)."""
        return self.read_only(ts, node).lookup(index, values)

    def range_lookup(self, index: str, lower: Sequence[Any] | None = None,
                     upper: Sequence[Any] | None = None, *, lower_inclusive: bool = True,
                     upper_inclusive: bool = True, ts: HybridTimestamp | None = None,
                     node: str | None = None) -> list[dict[str, Any]]:
        """A read-only range lookup at `ts` (default: now), rows in index order; each
        bound a prefix of the index's columns (`index_range.py`; None: unbounded)."""
        return self.read_only(ts, node).range_lookup(
            index, lower, upper, lower_inclusive=lower_inclusive,
            upper_inclusive=upper_inclusive)

    def prefix_lookup(self, index: str, prefix: Sequence[Any],
                      ts: HybridTimestamp | None = None,
                      node: str | None = None) -> list[dict[str, Any]]:
        """The rows whose first len(prefix) indexed columns equal `prefix`, in index
        order."""
        return self.read_only(ts, node).prefix_lookup(index, prefix)

    # ---- status -------------------------------------------------------------------------

    def coordinator_status(self) -> dict[str, Any] | None:
        try:
            return self.rt.call(COORDINATOR, Status(), timeout=5)  # type: ignore[no-any-return]
        except CallError:
            return None

    def index_driver_status(self) -> dict[str, Any] | None:
        try:
            return self.rt.call(INDEX_DRIVER, Status(), timeout=5)  # type: ignore[no-any-return]
        except CallError:
            return None

    def poll_indexes(self) -> None:
        self.recorder.poll_indexes(self.index_driver_status())

    def rebalance_driver_status(self) -> dict[str, Any] | None:
        try:
            return self.rt.call(REBALANCE_DRIVER, Status(), timeout=5)  # type: ignore[no-any-return]
        except CallError:
            return None

    def poll_rebalances(self) -> None:
        self.recorder.poll_rebalances(self.rebalance_driver_status(), self.now())

    def poll_replay(self) -> None:
        """Every partition member's replay-floor record since the last poll."""
        poll_replay(self.rt, self.recorder, self.assignments(), self.nodes, self.now())

    def poll(self) -> None:
        """Feed the recorder what the coordinator, the drivers and the metastore show
        now."""
        self.poll_indexes()
        self.poll_rebalances()
        self.poll_replay()
        self.recorder.poll(self.coordinator_status(), self.versions().earliest_version,
                           self.now())

    def cluster_lwm(self) -> HybridTimestamp | None:
        """The cluster's committed low watermark (a linearizable metastore read;
        `catalog/cluster_lwm.py`)."""
        value = GroupClient(self.rt, self.spec).read(LowWatermarkQuery(),
                                                     timeout=self.timeout)[1]
        return value if isinstance(value, HybridTimestamp) else None

    def versions(self) -> Any:
        return GroupClient(self.rt, self.spec).read(VersionsQuery(), timeout=self.timeout)[1]

    def catalog_status(self) -> dict[str, Any]:
        """The catalog's versions and log size, the coordinator's last iterations, and
        what each node holds compaction back with."""
        v = self.versions()
        return {"earliest_version": v.earliest_version,
                "earliest_activation": v.earliest_activation,
                "latest_version": v.latest_version, "latest_activation": v.latest_activation,
                "log_size": v.log_size, "leader": self.leader(),
                "coordinator": self.coordinator_status(),
                "index_builds": self.index_driver_status(),
                "rebalances": self.rebalance_driver_status(),
                "nodes": {n: self.node_status(n) for n in self.nodes}}

    # ---- faults -------------------------------------------------------------------------

    def kill_node(self, node: str) -> None:
        """Every process of the node at once; its supervisor restarts the node's tree."""
        self.rt.kill_node(node)
        self.recorder.abandon(node, self.now())

    def stop_node(self, node: str) -> None:
        self.rt.call(self.top, requests.TerminateChild(f"node:{node}"), timeout=60)
        self.recorder.abandon(node, self.now())

    def restart_node(self, node: str) -> None:
        self.rt.call(self.top, requests.RestartChild(f"node:{node}"), timeout=60)

    def stop(self) -> None:
        if self.owns_runtime:
            self.rt.shutdown()

    def __enter__(self) -> TablesCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["CONTROL_NODE", "IGNITE_LWM", "TEST_ANSWER_TIMEOUT_MS", "TEST_LWM",
           "ReadOnlyTransaction", "TablesCluster", "Transaction"]
