"""Starting the branch tier's processes: the delete sensor, the staging compactor and
the garbage collector under one `rest_for_one` supervisor (the compactor depends on
the sensor), registered by name so writers and callers find them, beside the KV
leader.

Placement (DESIGN.md: one sensor per cluster, beside the compaction coordinator): a
follower per KV node (`branches_node`, `actors/log/shell/while_leading.py`) runs the
pair exactly while the node's KV raft member leads, for that term. When the leadership
moves, the old node's pair is killed (a compaction in flight stops where it is: the
branch reads the same, and the new compactor redoes it, `recovery.py`) and the new
leader's follower starts a pair once the names are free. Two compactors at once would
be safe anyway (every step is a SetIf), the names keep it to one.

A cluster started with `Cluster.start(..., branches=ServicesConfig(...))` runs each
follower under its KV node's supervisor (`branches_child`, last of the node's
children): a node killed whole takes only its own follower, and the node's restart
brings it back. `start_branch_services` adds them to a running cluster instead, under
their own `one_for_one` supervisor (`TOP_NAME`) on the node given (default the KV's
first; if that whole node dies, every follower goes with it). A follower whose raft
member is restarting waits for it. `follow_leader=False` keeps the pair on that node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sediment import log
from sediment.actors.branches.sensor import SensorConfig
from sediment.actors.branches.shell.compactor import CompactorConfig, compactor_process
from sediment.actors.branches.shell.gc_process import GC_NAME, GcConfig, gc_process
from sediment.actors.branches.shell.names import COMPACTOR_NAME, SENSOR_NAME
from sediment.actors.branches.shell.sensor import SensorProcessConfig, sensor_process
from sediment.actors.kv.names import KV_GROUP
from sediment.actors.log.shell.names import RAFT_HOST, raft_name
from sediment.actors.log.shell.while_leading import LeaderChild, while_leading
from sediment.runtime.common_calls import Status, UnknownRequest
from sediment.runtime.errors import CallError
from sediment.runtime.messages import Call
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process
from sediment.supervision import ChildSpec, Spawn, SupFlags, start_link, start_top

_logger = log.get_logger("sediment.branches.service")

TOP_NAME = "branches"
NAME_WAIT = 0.2  # seconds between looks at the names a dying pair still holds
MAX_NAME_WAITS = 600  # then the start fails (and the follower restarts it)
RAFT_WAIT = 0.5
MAX_RAFT_WAITS = 240


def services_name(node: str) -> str:
    return f"branches-services@{node}"


def follower_name(node: str) -> str:
    return f"branches-node@{node}"


@dataclass(frozen=True)
class ServicesConfig:
    sensor: SensorConfig
    compactor: CompactorConfig
    gc: GcConfig | None = field(default_factory=GcConfig)  # None: no periodic collection


NAMES = (SENSOR_NAME, COMPACTOR_NAME, GC_NAME)


def service_children(sensor: SensorConfig, compactor: CompactorConfig, node: str,
                     gc: GcConfig | None = None) -> list[ChildSpec]:
    children = [
        ChildSpec("sensor", (Spawn(sensor_process, node=node, name=SENSOR_NAME,
                                   label=SENSOR_NAME), (SensorProcessConfig(sensor),))),
        ChildSpec("compactor", (Spawn(compactor_process, node=node, name=COMPACTOR_NAME,
                                      label=COMPACTOR_NAME), (compactor,)), shutdown=30.0),
    ]
    if gc is not None:
        children.append(ChildSpec("gc", (Spawn(gc_process, node=node, name=GC_NAME,
                                               label=GC_NAME), (compactor, gc)), shutdown=30.0))
    return children


FLAGS = SupFlags(strategy="rest_for_one", intensity=20, period=10)


async def services(ctx: Process, config: ServicesConfig, term: int) -> None:
    """The pair for one leadership term: waits until no other pair holds the names,
    starts their supervisor (linked: killing this process ends them), then answers
    Status() with its term and node."""
    node = ctx.self().node
    for _ in range(MAX_NAME_WAITS):
        if all([await ctx.whereis(name) is None for name in NAMES]):
            break
        await ctx.sleep(NAME_WAIT)
    else:
        raise RuntimeError("the branch services' names stayed taken")
    sup = await start_link(ctx, FLAGS, service_children(config.sensor, config.compactor, node,
                                                        config.gc), node=node)
    _logger.info("branch services up", node=node, term=term)
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call) and isinstance(msg.request, Status):
            ctx.reply(msg.from_, {"node": node, "term": term, "supervisor": sup})
        elif isinstance(msg, Call):
            ctx.reply(msg.from_, UnknownRequest.of(msg.request))


async def branches_node(ctx: Process, config: ServicesConfig) -> None:
    """Process entry, one per KV node: the pair while the node's KV member leads."""
    me = ctx.self().node
    for _ in range(MAX_RAFT_WAITS):  # a raft member being restarted by its node
        if await ctx.whereis(raft_name(KV_GROUP, me)) is not None:
            break
        await ctx.sleep(RAFT_WAIT)
    await while_leading(ctx, LeaderChild(KV_GROUP, "services", services_name(me), services,
                                         config))


def branches_child(node: str, config: ServicesConfig) -> ChildSpec:
    """The follower of `node` as a child of the KV cluster's node supervisor
    (`Cluster.start(..., branches=config)`): it lives and dies with its node's tree, so
    a node killed whole takes only its own follower, and its restart brings it back."""
    return ChildSpec("branches", (Spawn(branches_node, node=node, name=follower_name(node),
                                        label=follower_name(node), host=RAFT_HOST),
                                  (config,)))


def start_branch_services(rt: Any, sensor: SensorConfig, compactor: CompactorConfig,
                          node: str | None = None, follow_leader: bool = True,
                          gc: GcConfig | None = None) -> Pid:
    """Start the sensor, the compactor and the garbage collector (`gc`, default
    `GcConfig()`) beside the KV leader, or on `node` with `follow_leader=False`; the
    top supervisor's pid."""
    where = node or compactor.kv_nodes[0]
    gc = gc or GcConfig()
    if not follow_leader:
        return start_top(rt, FLAGS, service_children(sensor, compactor, where, gc),
                         name=TOP_NAME, node=where)
    config = ServicesConfig(sensor, compactor, gc)
    followers = [ChildSpec(f"node:{n}", (Spawn(branches_node, node=n, name=follower_name(n),
                                               label=follower_name(n), host=RAFT_HOST),
                                         (config,)))
                 for n in compactor.kv_nodes]
    return start_top(rt, SupFlags(strategy="one_for_one", intensity=50, period=30), followers,
                     name=TOP_NAME, node=where)


def where_services_run(rt: Any, nodes: tuple[str, ...]) -> dict[str, Any]:
    """Each node's follower status (tests, operators): leader, term, the pair's pid."""
    out: dict[str, Any] = {}
    for n in nodes:
        try:
            out[n] = rt.call(follower_name(n), Status(), timeout=10)
        except CallError as err:
            out[n] = ("error", type(err).__name__)
    return out


__all__ = ["TOP_NAME", "ServicesConfig", "branches_child", "branches_node", "follower_name",
           "services", "services_name", "service_children", "start_branch_services",
           "where_services_run"]
