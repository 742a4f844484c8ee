"""The table node's state and its small helpers (the process is `table_node.py`, its
transactions and reads `node_txs.py`).

What a node owns: its hybrid clock, its active RW transactions (`active_txs`) with the
coordinator core of each (`transactions.RwTx`), the collector of the minimum tx times
its partitions published, its low watermark (persisted in the node's data dir), and
the partition members it started. The catalog it reads from its local replica of the
metastore group (an in-host query of `raft:meta@<node>`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sediment.actors.catalog import catalog_log, cluster_lwm, hlc
from sediment.actors.catalog import low_watermark as lw
from sediment.actors.catalog.catalog_log import CatalogLog
from sediment.actors.catalog.descriptors import Catalog, ZonePartition
from sediment.actors.catalog.errors import CatalogError
from sediment.actors.catalog.hlc import ClockState, HybridTimestamp
from sediment.actors.catalog.machine import CatalogAtQuery, CatalogVersionQuery, Rejected
from sediment.actors.catalog.metastore_machine import AssignmentsQuery, ViewQuery
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Query
from sediment.actors.tables import active_txs, min_tx_time
from sediment.actors.tables import transactions as txn
from sediment.actors.tables.names import META_GROUP
from sediment.actors.tables.safe_time import SafeTime
from sediment.actors.tables.shell import named_pids
from sediment.actors.tables.shell.node_tasks import NodeTask
from sediment.actors.tables.shell.partition_members import PartitionOptions
from sediment.runtime.core_driver import CoreDriver
from sediment.runtime.messages import CallRef
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

# A writer's bounded wait on a live holder (seconds): far above one transaction's
# latency (tens of ms on sim, ~30 ms on Ray), so a holder that commits or rolls back
# promptly is waited for, and far below the clients' call timeouts, so a holder that
# stays pending (a long transaction, two writers waiting on each other) fails the
# writer within a second instead of holding it.
DEFAULT_LOCK_WAIT = 1.0


@dataclass(frozen=True)
class TableNodeConfig:
    nodes: tuple[str, ...]
    data_dir: str
    lwm: lw.LowWatermarkConfig = field(default_factory=lw.LowWatermarkConfig)
    ddl_delay_ms: int = 50  # Ignite's DelayDuration (activation = ts + delay)
    max_clock_skew_ms: int = 10  # callers wait this past activation (awaitVersionActivation)
    ensure_interval: float = 0.3  # seconds between checks for partition members to start
    partitions: PartitionOptions | None = None
    intent_wait: float = 0.05  # seconds before asking again about a live tx's intent
    max_intent_waits: int = 200
    # seconds a writer meeting a live, pending holder's intent or claim waits for it to
    # end before failing (intent_resolver.py; docs/catalog.md §4 says why this bound);
    # 0: no-wait, it fails at once
    lock_wait: float = DEFAULT_LOCK_WAIT
    safe_wait: float = 0.05  # seconds between clock requests of a read not yet safe
    max_safe_waits: int = 200
    # node -> milliseconds added to its physical clock: a skewed clock (tests, sim)
    clock_offsets_ms: tuple[tuple[str, int], ...] = ()


@dataclass
class NodeTx:
    """One RW transaction this node coordinates, and who waits on it."""

    core: txn.RwTx
    started: float
    waiting: CallRef | None = None  # the client's pending write or commit
    cleanups: int = 0  # cleanups sent and not yet applied
    outcome: str = "unknown"
    failure: CatalogError | None = None
    acks_due: int = 0  # writes of the client's request still unacknowledged, when > 1
    ack_error: CatalogError | None = None  # the first of them that failed


LwmDriver = CoreDriver[lw.LowWatermarkState, lw.Event, lw.Effect]
ClusterLwmDriver = CoreDriver[cluster_lwm.ClusterLwmState, cluster_lwm.Event, cluster_lwm.Effect]


@dataclass
class NodeState:
    ctx: Process
    config: TableNodeConfig
    clock: ClockState = field(default_factory=ClockState)
    txs: dict[str, NodeTx] = field(default_factory=dict)
    active: active_txs.ActiveTxs = field(default_factory=active_txs.ActiveTxs)
    collector: min_tx_time.MinTimeCollector = field(default_factory=min_tx_time.MinTimeCollector)
    lwm_subscribers: list[Pid] = field(default_factory=list)
    # the node's low watermark core (catalog/low_watermark.py) and the cluster's agreed
    # watermark that feeds it (catalog/cluster_lwm.py), each run by a CoreDriver whose
    # handlers `node_compaction.drive_lwm` registers
    lwm_core: LwmDriver = field(init=False)
    clwm_core: ClusterLwmDriver = field(init=False)
    assignments: Mapping[ZonePartition, frozenset[str]] = field(default_factory=dict)
    started: set[ZonePartition] = field(default_factory=set)
    tasks: dict[int, NodeTask] = field(default_factory=dict)  # task tag -> what it was for
    task_seq: int = 0
    tx_seq: int = 0
    incarnation: str = ""
    ended: list[dict[str, Any]] = field(default_factory=list)  # recent tx outcomes
    floor_sent: dict[ZonePartition, int] = field(default_factory=dict)  # rule 4
    safe: SafeTime | None = None  # what this node heard of the others' clocks (rule 5)
    offset_ms: int = 0  # config.clock_offsets_ms for this node

    def __post_init__(self) -> None:
        self.lwm_core = CoreDriver(self.ctx, lw.step, lw.init(self.config.lwm))
        self.clwm_core = CoreDriver(self.ctx, cluster_lwm.step, cluster_lwm.init(self.config.lwm))

    @property
    def lwm(self) -> lw.LowWatermarkState:
        return self.lwm_core.state

    @property
    def me(self) -> str:
        return self.ctx.self().node

    def physical_ms(self) -> int:
        return int(self.ctx.now() * 1000) + self.offset_ms

    def now(self) -> HybridTimestamp:
        self.clock, ts = hlc.now(self.clock, self.physical_ms())
        return ts

    def observe(self, ts: HybridTimestamp) -> None:
        self.clock, _ = hlc.update(self.clock, self.physical_ms(), ts)

    def next_tag(self, what: NodeTask) -> int:
        self.task_seq += 1
        self.tasks[self.task_seq] = what
        return self.task_seq

    def lwm_path(self) -> str:
        return os.path.join(self.config.data_dir, self.me, "low_watermark.json")


async def meta_query(s: NodeState, query: Any) -> Any:
    """A local read of this node's metastore replica."""
    reply = await named_pids.call(s.ctx, raft_name(META_GROUP, s.me), Query(query), timeout=10)
    if isinstance(reply, Rejected):
        raise reply.error
    return reply


async def catalog_at(s: NodeState, ts: HybridTimestamp) -> Catalog:
    cat = await meta_query(s, CatalogAtQuery(ts))
    assert isinstance(cat, Catalog)
    return cat


async def catalog_version(s: NodeState, version: int) -> Catalog:
    cat = await meta_query(s, CatalogVersionQuery(version))
    assert isinstance(cat, Catalog)
    return cat


async def assignments(s: NodeState) -> Mapping[ZonePartition, frozenset[str]]:
    found = await meta_query(s, AssignmentsQuery())
    assert isinstance(found, dict)
    return found


async def known_assignments(s: NodeState, groups: Any) -> None:
    """Refresh the node's copy of the assignments when it lacks one of `groups` (a
    zone created since it last looked)."""
    if any(g not in s.assignments for g in groups):
        s.assignments = await assignments(s)


async def catalog_log_now(s: NodeState) -> CatalogLog:
    log, _ = await meta_query(s, ViewQuery())
    assert isinstance(log, CatalogLog)
    return log


def active_versions(log: CatalogLog, since: HybridTimestamp,
                    now: HybridTimestamp) -> list[Catalog]:
    """The catalog versions active from `since` to `now` (those not compacted)."""
    first = catalog_log.catalog_at(log, max(since, log.snapshot.activation)).version
    last = catalog_log.active_version(log, now)
    return [catalog_log.catalog(log, v) for v in range(first, last + 1)]


def load_lwm(path: str) -> HybridTimestamp | None:
    try:
        with open(path) as f:
            return HybridTimestamp(int(json.load(f)["lwm"]))
    except FileNotFoundError:
        return None


def store_lwm(path: str, value: HybridTimestamp) -> None:
    """Durable before anyone hears of it (Ignite writes its vault before notifying)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"lwm": value.value}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


__all__ = ["ClusterLwmDriver", "LwmDriver", "NodeState", "NodeTx", "TableNodeConfig",
           "active_versions", "assignments", "catalog_at", "catalog_log_now",
           "catalog_version", "known_assignments", "load_lwm", "meta_query", "store_lwm"]
