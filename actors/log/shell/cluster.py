"""Starting raft groups as supervision trees: per node a WAL and the group members.

Each logical node gets a `rest_for_one` supervisor whose first child is the node's WAL
process and whose other children are the raft servers of the groups with a member on
that node: if the WAL dies, every raft server of the node restarts after it (they
depend on it); a raft server dying alone is restarted alone. The node supervisors sit
under one top supervisor (`one_for_one`).
"""

from __future__ import annotations

import time
from typing import Any

from sediment.actors.log.shell.group_spec import GroupSpec
from sediment.actors.log.shell.log_worker import log_worker
from sediment.actors.log.shell.names import (
    LOG_HOST,
    RAFT_HOST,
    raft_name,
    segwriter_name,
    wal_name,
    worker_name,
)
from sediment.actors.log.shell.protocol import Done, NotLeader, Propose, ReadIndex
from sediment.actors.log.shell.segment_writer import segment_writer
from sediment.actors.log.shell.server import raft_server
from sediment.actors.log.shell.wal_server import wal_server
from sediment.runtime.common_calls import Status
from sediment.runtime.errors import CallError
from sediment.runtime.pid import Pid
from sediment.supervision import ChildSpec, Spawn, SupFlags, start_top, supervisor


def node_children(node: str, groups: list[GroupSpec]) -> list[ChildSpec]:
    """Start order: the groups' log workers (each recovers its interrupted compactions),
    the segment writer, the WAL, then the raft servers. Under `rest_for_one` a crash
    restarts everything after the crashed process, so whatever read the disk before a
    recovery reads it again. The WAL and the raft servers share the node's raft host, the
    log workers its log host; the segment writer has an actor of its own."""
    return member_children(node, [g for g in groups if node in g.nodes])


def member_children(node: str, mine: list[GroupSpec]) -> list[ChildSpec]:
    """`node_children` for these groups, whether `node` is one of their bootstrap members
    or joins them later (`members.start_member`)."""
    max_size = max((g.wal_max_size for g in mine), default=64 * 1024 * 1024)
    wal_dir = mine[0].wal_dir(node) if mine else ""
    group_dirs = {g.group: (g.group_dir(node), g.segment_max_entries) for g in mine}
    children = [
        ChildSpec("segwriter", (Spawn(segment_writer, node=node, name=segwriter_name(node),
                                      label=segwriter_name(node)), (node, group_dirs))),
        ChildSpec("wal", (Spawn(wal_server, node=node, name=wal_name(node),
                                label=wal_name(node), host=RAFT_HOST), (wal_dir, max_size))),
    ]
    workers = [ChildSpec(
        f"worker:{g.group}",
        (Spawn(log_worker, node=node, name=worker_name(g.group, node),
               label=worker_name(g.group, node), host=LOG_HOST),
         (g.group, g.group_dir(node), g.num_minors, g.segment_max_entries)))
        for g in mine]
    servers = [ChildSpec(
        f"raft:{g.group}",
        (Spawn(raft_server, node=node, name=raft_name(g.group, node),
               label=raft_name(g.group, node), host=RAFT_HOST), (g,)))
        for g in mine]
    return workers + children + servers


def node_supervisor(node: str, children: list[ChildSpec]) -> ChildSpec:
    """The `rest_for_one` supervisor of one node's log processes."""
    return ChildSpec(f"node:{node}",
                     (Spawn(supervisor, node=node, label=f"log-node:{node}", host=RAFT_HOST),
                      (SupFlags(strategy="rest_for_one", intensity=20, period=10), children)),
                     type="supervisor")


def start_log_cluster(rt: Any, groups: list[GroupSpec], name: str = "log",
                      top_node: str | None = None) -> Pid:
    """Start every node's WAL and raft servers under one top supervisor, on `top_node`
    (default: the first member node). The top is linked to every node supervisor: a crash
    of the node it runs on ends every node's tree, so a test or deployment that kills
    whole member nodes puts it on a node of its own."""
    nodes = sorted({n for g in groups for n in g.nodes})
    specs = [node_supervisor(node, node_children(node, groups)) for node in nodes]
    return start_top(rt, SupFlags(intensity=20, period=10), specs, name=name,
                     node=top_node or nodes[0])


def propose(rt: Any, spec: GroupSpec, command: Any, timeout: float = 30.0) -> tuple[int, Any]:
    """Propose through whichever member leads, following leader hints; (index, result).

    Bounded by `timeout`; a member that is down or not leading is skipped.
    """
    return GroupClient(rt, spec).propose(command, timeout)


class GroupClient:
    """The driver's way into one raft group: it remembers which member led last time, so
    a request is one call to that member (no name lookup), and follows leader hints when
    leadership moved. Requests: `propose(command)` -> (index, result) once applied;
    `read(query)` -> (read index, the machine's answer), linearizable without a log
    entry."""

    def __init__(self, rt: Any, spec: GroupSpec) -> None:
        self.rt = rt
        self.spec = spec
        self.leader: Pid | None = None

    def propose(self, command: Any, timeout: float = 30.0) -> tuple[int, Any]:
        return self._request(Propose(command), timeout)

    def read(self, query: Any, timeout: float = 30.0) -> tuple[int, Any]:
        return self._request(ReadIndex(query), timeout)

    def _request(self, request: Propose | ReadIndex, timeout: float) -> tuple[int, Any]:
        rt, spec = self.rt, self.spec
        deadline = time.monotonic() + timeout if rt.backend == "ray" else None
        waited, hint = 0.0, None
        for attempt in range(10_000):
            target: Pid | str | None = self.leader
            if target is None:
                target = raft_name(spec.group, hint or spec.nodes[attempt % len(spec.nodes)])
            hint = None
            try:
                reply = rt.call(target, request, timeout=5)
            except CallError:
                reply = None  # down
            if isinstance(reply, Done):
                if isinstance(target, str):
                    self.leader = rt.whereis(target)
                return reply.index, reply.result
            self.leader = None
            if isinstance(reply, NotLeader) and reply.hint is not None:
                hint = reply.hint
                continue
            rt.sleep(0.05)
            waited += 0.05
            if (deadline is not None and time.monotonic() > deadline) or waited > timeout:
                break
        raise TimeoutError(f"no leader of {spec.group} answered within {timeout} s")


def status(rt: Any, spec: GroupSpec) -> dict[str, Any]:
    """Each member's view (role, term, commit, applied, keys); None for a member that is down."""
    out: dict[str, Any] = {}
    for node in spec.nodes:
        try:
            out[node] = rt.call(raft_name(spec.group, node), Status(), timeout=5)
        except CallError:
            out[node] = None
    return out
