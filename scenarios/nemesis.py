"""The nemesis: the shell that applies a scenario's fault timeline to a cluster.

The timeline is pure and lives in `fault_plan.py` (`plan`, `check_supported`,
re-exported here).

`Injector` applies one step to a running `Cluster` through the runtime's driver API and
returns what it did (the resolved node and process, for the timeline). Targets named by
role are resolved when the fault fires: `leader` is the member leading then (for a fault
that waited for a protocol moment, the leader that wait saw or held at its breakpoint:
asking again takes a round of calls, longer than some moments last on Ray; otherwise
`find_leader`, which the runner answers by asking every member at once), `follower` one
of the others, a process of the role a breakpoint holds (a compaction worker, the
coordinator) the held one, a role without a node a node drawn from the run's seeded `rng`.
Semantics, both backends:

- kill_process: the process is killed (as a crash); its supervisor restarts it (and, by
  `rest_for_one`, everything started after it on its node). With `until` it is kept
  down until then, with everything after it: the node's supervisor stops them.
  A coordinator or watcher has no supervisor child of its own: killing the coordinator
  takes its linked KV node with it (both restart); a watcher's client reopens its watch.
- kill_node: every process of the node dies at once; the node's tree restarts from disk
  at once, or at `until` (kept down until then).
- restart_process / restart_node: what is kept down starts again; a running process or
  node is stopped and started (a clean restart).
- partition: the KV nodes on each side cannot talk (the runner's own node is never cut);
  `until` heals that partition only.
- delay, drop: on both directions of `between`, or of every pair of KV nodes.
- failpoint: armed on the resolved process (on Ray and sim alike); `until` disarms it.
- heal: every partition, delay and drop goes.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sediment import log
from sediment.actors.kv.names import KV_GROUP, coordinator_name, kv_node_name
from sediment.actors.log.shell.names import raft_name, segwriter_name, wal_name, worker_name
from sediment.runtime.errors import RuntimeErrorBase
from sediment.runtime.pid import Pid
from sediment.scenarios import tier
from sediment.scenarios.fault_plan import Step, UnsupportedScenario, check_supported, plan
from sediment.scenarios.schema import (
    ArmFailpoint,
    ClockSkew,
    Delay,
    Drop,
    Fault,
    Heal,
    KillNode,
    KillProcess,
    Partition,
    PauseProcess,
    ProcessTarget,
    RestartNode,
    RestartProcess,
    ResumeProcess,
)
from sediment.scenarios.schema_blocks import TIER_ROLES
from sediment.scenarios.schema_branches import SPARK_ROLE
from sediment.supervision import requests

_logger = log.get_logger("sediment.scenarios.nemesis")

CHILD_OF_ROLE = {
    "leader": "raft:kv", "follower": "raft:kv", "kv_node": "kv-node", "wal": "wal",
    "segment_writer": "segwriter", "log_worker": "worker:kv",
}
# each role's registered name: the registry answers at once, while a node supervisor
# that is restarting its children answers which_children only when it is done (seconds
# on Ray, after a node was killed)
NAME_OF_ROLE: dict[str, Callable[[str], str]] = {
    "leader": lambda n: raft_name(KV_GROUP, n), "follower": lambda n: raft_name(KV_GROUP, n),
    "kv_node": kv_node_name, "wal": wal_name, "segment_writer": segwriter_name,
    "log_worker": lambda n: worker_name(KV_GROUP, n),
}
NAME_WAIT, NAME_POLL = 2.0, 0.1  # seconds: how long and how often to look a name up again
# seconds a failpoint armed by name waits for the name to be registered again: its process
# may be restarting (after an earlier crash failpoint, a restart takes seconds on Ray)
ARM_NAME_WAIT = 10.0


# ---- the shell ----------------------------------------------------------------------------


@dataclass
class _Done:
    """What one applied fault changed, so that its end can undo exactly that."""

    nodes_down: list[str] = field(default_factory=list)
    children_down: list[tuple[str, list[str]]] = field(default_factory=list)  # node, ids
    partition: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    links: list[tuple[str, str]] = field(default_factory=list)
    failpoint: tuple[Pid, str] | None = None
    paused: Pid | None = None
    skewed: str | None = None  # the node whose clock this fault shifted


def fired_tag(i: int) -> str:
    """The tag a fault's failpoint is armed with: its hit names the fault."""
    return f"faults[{i}]"


class Injector:
    """Applies steps to `cluster` (a `sediment.wiring.cluster.Cluster`); `sessions` lists the
    watch sessions of the run (client -> (watcher pid, node))."""

    def __init__(self, cluster: Any, rng: random.Random,
                 sessions: Callable[[], dict[int, tuple[Pid, str]]],
                 find_leader: Callable[[], str | None] | None = None,
                 notify: Pid | None = None) -> None:
        self.cluster, self.rt, self.rng = cluster, cluster.rt, rng
        self.notify = notify  # told when an armed failpoint fires (the run's recorder)
        self.find_leader = find_leader or cluster.leader  # the KV leader now, or None
        self.nodes: tuple[str, ...] = tuple(cluster.nodes)
        self.sessions = sessions
        self.done: dict[int, _Done] = {}
        self.partitions: dict[int, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        self.links: dict[int, list[tuple[str, str, tuple[float, float] | None, float]]] = {}
        self.armed: list[tuple[int, Pid, str, str]] = []  # crash failpoints: fault, pid, ...
        self.paused: dict[Pid, ProcessTarget] = {}  # suspended processes, in pause order
        self.known_leader: str | None = None  # while applying: the leader a wait just saw
        self.held: tuple[str, Pid] | None = None  # while applying: (role, pid) held there
        self.avoid: Pid | None = None  # while applying: a process a crash failpoint took

    # -- resolving targets --

    def _leader(self) -> str | None:
        if self.known_leader is not None:
            return self.known_leader
        leader = self.find_leader()
        return leader if isinstance(leader, str) else None

    def node_ref(self, ref: str) -> str:
        if ref == "leader":
            return self._leader() or self.rng.choice(self.nodes)
        if ref == "follower":
            leader = self._leader()
            return self.rng.choice([n for n in self.nodes if n != leader] or list(self.nodes))
        return ref

    def process(self, t: ProcessTarget) -> tuple[Pid | None, str, str | None]:
        """(pid, node, supervisor child id or None) of a target, now."""
        if t.name is not None:
            pid = self.rt.whereis(t.name)
            node = pid.node if pid is not None else (t.node or "?")
            child = None
            if pid is not None and node in self.nodes:
                child = next((c for c, p in self._children(node).items() if p == pid), None)
            return pid, node, child
        role = t.role or "kv_node"
        held = self.held
        if (held is not None and held[0] == role and role not in CHILD_OF_ROLE
                and t.node in (None, held[1].node)):
            return held[1], held[1].node, None  # a worker the breakpoint holds
        if role in TIER_ROLES:  # the block tier's processes (scenarios/tier.py)
            return tier.resolve(self.cluster, self.rng, role, t.node, self._children)
        if role in ("leader", "coordinator"):
            node = t.node or self.node_ref("leader")
        elif role == "follower":
            node = self.node_ref("follower") if t.node is None else t.node
        elif role == "watcher":
            return self._watcher(t.node)
        else:
            node = t.node or self.rng.choice(self.nodes)
        if role == "coordinator":
            return self.rt.whereis(coordinator_name(node)), node, None
        child = CHILD_OF_ROLE[role]
        pid = self._registered(NAME_OF_ROLE[role](node))
        if pid is None:  # not registered (yet): its supervisor knows when it has started it
            pid = self._children(node).get(child)
        return pid, node, child

    def _registered(self, name: str) -> Pid | None:
        """The name's holder; a process a node restart is starting registers within
        moments, while its supervisor answers only once every child runs (12 s on Ray
        once), so the registry is asked again for up to NAME_WAIT first."""
        waited = 0.0
        while True:
            pid: Pid | None = self.rt.whereis(name)
            if pid is not None or waited >= NAME_WAIT:
                return pid
            self.rt.sleep(NAME_POLL)
            waited += NAME_POLL

    def _watcher(self, node: str | None) -> tuple[Pid | None, str, str | None]:
        found = sorted(self.sessions().items())
        pids = [(p, n) for _, (p, n) in found if node is None or n == node]
        if not pids:
            return None, node or "?", None
        pid, where = self.rng.choice(pids)
        return pid, where, None

    def _node_supervisor(self, node: str) -> Pid | None:
        which = self.rt.call(self.cluster.top, requests.WhichChildren(), timeout=30)
        return requests.child_pid(which, f"node:{node}")

    def _children(self, node: str) -> dict[str, Pid | None]:
        try:
            sup = self._node_supervisor(node)
            if sup is None:
                return {}
            return {c[0]: c[1] for c in self.rt.call(sup, requests.WhichChildren(), timeout=30)}
        except RuntimeErrorBase:
            return {}

    # -- applying --

    def apply(self, i: int, fault: Fault, leader: str | None = None,
              held: tuple[str, Pid] | None = None, avoid: Pid | None = None) -> dict[str, Any]:
        """Start fault `i`; returns the detail for the timeline. `leader`: the KV leader
        as a trigger's wait just saw it (a `leader` target then needs no lookup);
        `held`: (role, pid) of the process a trigger's breakpoint holds, which a target
        of that role (a compaction worker) then is; `avoid`: a process an earlier crash
        failpoint fired in, which a failpoint armed by name must not land on (it dies)."""
        self.known_leader, self.held, self.avoid = leader, held, avoid
        try:
            return self._apply(i, fault)
        finally:
            self.known_leader, self.held, self.avoid = None, None, None

    def _apply(self, i: int, fault: Fault) -> dict[str, Any]:
        done = _Done()
        self.done[i] = done
        a = fault.action
        if isinstance(a, KillProcess | RestartProcess):
            return self._process_fault(a, fault.until is not None, done)
        if isinstance(a, KillNode):
            node = self.node_ref(a.node)
            self.rt.kill_node(node)
            if fault.until is not None:
                self._stop_node(node)
                done.nodes_down.append(node)
            return {"node": node}
        if isinstance(a, RestartNode):
            return self._restart_nodes(a)
        if isinstance(a, Partition):
            if a.isolate is not None:
                away = self.node_ref(a.isolate)
                sides: tuple[tuple[str, ...], tuple[str, ...]] = (
                    (away,), tuple(n for n in self.nodes if n != away))
            else:
                assert a.sides is not None
                sides = a.sides
            self.partitions[i] = sides
            self.rt.partition(list(sides[0]), list(sides[1]))
            return {"sides": [list(sides[0]), list(sides[1])]}
        if isinstance(a, Heal):
            self._heal_network()
            return {}
        if isinstance(a, Delay | Drop):
            return self._link_fault(i, a)
        if isinstance(a, ArmFailpoint):
            return self._arm(i, a, done)
        if isinstance(a, PauseProcess | ResumeProcess):
            return self._pause_fault(a, done)
        if isinstance(a, ClockSkew):
            node = self.node_ref(a.node)
            self.rt.set_clock_skew(node, a.seconds)
            done.skewed = node
            return {"node": node, "seconds": a.seconds}
        raise UnsupportedScenario(f"{fault.name} is not supported")  # check_supported

    def _arm(self, i: int, a: ArmFailpoint, done: _Done) -> dict[str, Any]:
        """Arm a failpoint. A target named by its registered name whose name is free (its
        process between a death and its restart's registration) is waited for, up to
        ARM_NAME_WAIT; the record says how long, or that it gave up. So is the restart of
        a process a crash failpoint just fired in (`avoid`): its name may still be the
        dying one's."""
        pid, node, _ = self.process(a.target)
        waited = 0.0
        if pid == self.avoid and a.target.name is not None:
            pid = None
        if pid is None and a.target.name is not None:
            while pid is None and waited < ARM_NAME_WAIT:
                self.rt.sleep(NAME_POLL)
                waited += NAME_POLL
                pid = self.rt.whereis(a.target.name)
                if pid == self.avoid:
                    pid = None
            if pid is None:
                return {"node": node, "point": a.point,
                        "missed": f"no process registered as {a.target.name!r} within "
                                  f"{ARM_NAME_WAIT:g} s"}
            node = pid.node
        if pid is None:
            return {"node": node, "point": a.point, "missed": "no such process"}
        self.rt.arm_failpoint(pid, a.point, a.action, count=a.count, seconds=a.seconds,
                              notify=self.notify, tag=fired_tag(i))
        done.failpoint = (pid, a.point)
        if a.action == "crash":
            self.armed.append((i, pid, a.point, node))
        detail: dict[str, Any] = {"node": node, "process": str(pid), "point": a.point,
                                  "then": a.action}
        if waited:
            detail["waited_for_name"] = round(waited, 3)
        return detail

    def _pause_fault(self, a: PauseProcess | ResumeProcess, done: _Done) -> dict[str, Any]:
        """Suspend a process (SIGSTOP), or resume the one a pause of the same target
        stopped (its role may have moved on since: a paused leader is soon a follower)."""
        if isinstance(a, ResumeProcess):
            pid = next((p for p, t in reversed(self.paused.items()) if t == a.target), None)
            if pid is None:
                pid = self.process(a.target)[0]
            if pid is None or pid not in self.paused:
                return {"missed": "no paused process of that target"}
            del self.paused[pid]
            self.rt.resume(pid)
            return {"node": pid.node, "process": str(pid)}
        pid, node, child = self.process(a.target)
        if pid is None:
            return {"node": node, "missed": "no such process"}
        self.rt.suspend(pid)
        self.paused[pid] = a.target
        done.paused = pid
        return {"node": node, "process": str(pid), "child": child}

    def _end_pause_and_skew(self, done: _Done) -> list[str]:
        undone = []
        if done.paused is not None and self.paused.pop(done.paused, None) is not None:
            self.rt.resume(done.paused)
            undone.append(f"resumed {done.paused}")
        if done.skewed is not None:
            self.rt.set_clock_skew(done.skewed, 0.0)
            undone.append(f"clock of {done.skewed} reset")
        return undone

    def _process_fault(self, a: KillProcess | RestartProcess, keep_down: bool,
                       done: _Done) -> dict[str, Any]:
        if a.target.role == SPARK_ROLE:  # a RayDP executor actor, not a process of ours
            from sediment.scenarios.branch_tier import kill_spark_executor

            return kill_spark_executor()
        held = self._held()
        pid, node, child = self.process(a.target)
        detail: dict[str, Any] = {"node": node, "process": str(pid), "child": child}
        if isinstance(a, RestartProcess):
            for n, ids in held:
                if n == node and child in ids:
                    self._restart_children(n, ids)
                    return {**detail, "restarted": ids}
        if pid is None:
            return {**detail, "missed": "no such process"}
        self.rt.kill(pid)
        if keep_down and isinstance(a, KillProcess) and child is not None:
            order = list(self._children(node))
            later = order[order.index(child):] if child in order else [child]
            sup = self._node_supervisor(node)
            if sup is not None:
                for c in reversed(later):
                    self.rt.call(sup, requests.TerminateChild(c), timeout=30)
                done.children_down.append((node, later))
                detail["down"] = later
        return detail

    def _held(self) -> list[tuple[str, list[str]]]:
        return [x for d in self.done.values() for x in d.children_down]

    def _restart_children(self, node: str, ids: list[str]) -> None:
        sup = self._node_supervisor(node)
        if sup is None:
            return
        for c in ids:
            self.rt.call(sup, requests.RestartChild(c), timeout=30)
        for d in self.done.values():
            d.children_down = [(n, x) for n, x in d.children_down if (n, x) != (node, ids)]

    def _stop_node(self, node: str) -> None:
        self.cluster.node(node).stop()

    def _restart_nodes(self, a: RestartNode) -> dict[str, Any]:
        down = [n for d in self.done.values() for n in d.nodes_down]
        if a.node is None:
            targets = down
        else:
            node = self.node_ref(a.node)
            if node not in down:
                self._stop_node(node)  # a running node: a clean stop and start
            targets = [node]
        for node in targets:
            self.cluster.node(node).restart()
        for d in self.done.values():
            d.nodes_down = [n for n in d.nodes_down if n not in targets]
        return {"nodes": targets}

    def _link_fault(self, i: int, a: Delay | Drop) -> dict[str, Any]:
        if a.between is not None:
            a_, b_ = (self.node_ref(x) for x in a.between)
            pairs = [(a_, b_), (b_, a_)]
        else:
            pairs = [(x, y) for x in self.nodes for y in self.nodes if x != y]
        delay = (a.min, a.max) if isinstance(a, Delay) else None
        drop = a.probability if isinstance(a, Drop) else 0.0
        self.links[i] = [(x, y, delay, drop) for x, y in pairs]
        self._apply_links()
        return {"links": [f"{x}->{y}" for x, y in pairs], "delay": delay, "drop": drop}

    def _heal_network(self) -> None:
        self.partitions.clear()
        self.links.clear()
        with self.rt.network_change():
            self.rt.heal()
            self.rt.clear_faults()

    def _apply_links(self) -> None:
        """The runtime keeps one fault per link: the latest fault on a link wins."""
        with self.rt.network_change():
            self.rt.clear_faults()
            for faults in self.links.values():
                for x, y, delay, drop in faults:
                    self.rt.set_faults(x, y, delay=delay, drop=drop)

    # -- ending --

    def undo(self, i: int, fault: Fault) -> dict[str, Any]:
        """End fault `i` (its `until`)."""
        done = self.done.pop(i, _Done())
        a = fault.action
        detail: dict[str, Any] = {}
        for node in done.nodes_down:
            self.cluster.node(node).restart()
            detail["restarted"] = [*detail.get("restarted", []), node]
        for node, ids in done.children_down:
            self._restart_children(node, ids)
            detail["restarted"] = [*detail.get("restarted", []), *ids]
        if isinstance(a, Partition) and i in self.partitions:
            del self.partitions[i]
            with self.rt.network_change():
                self.rt.heal()
                for side_a, side_b in self.partitions.values():  # the others stay
                    self.rt.partition(list(side_a), list(side_b))
            detail["healed"] = True
        if isinstance(a, Delay | Drop) and i in self.links:
            del self.links[i]
            self._apply_links()
            detail["cleared"] = True
        if done.failpoint is not None:
            pid, point = done.failpoint
            if self.rt.is_alive(pid):
                self.rt.release_failpoint(pid, point)
            detail["disarmed"] = point
        ended = self._end_pause_and_skew(done)
        if ended:
            detail["ended"] = ended
        return detail

    def unfired(self, fired: Mapping[str, object] | None = None) -> list[str]:
        """Armed crash failpoints that never fired: no hit under their tag in `fired`
        (what the `notify` process heard), or without it, whose process is still alive
        (call before heal_all, which restarts processes)."""
        out = []
        for i, pid, point, node in self.armed:
            if fired is not None and fired_tag(i) not in fired or (
                    fired is None and self.rt.is_alive(pid)):
                out.append(f"faults[{i}]: failpoint {point} on {node} never fired")
        return out

    def heal_all(self) -> list[str]:
        """Undo everything still in effect (the end of the run); what was undone."""
        undone = []
        self._heal_network()
        for i in sorted(self.done):
            done = self.done.pop(i)
            for node in done.nodes_down:
                self.cluster.node(node).restart()
                undone.append(f"restarted {node}")
            for node, ids in done.children_down:
                self._restart_children(node, ids)
                undone.append(f"restarted {', '.join(ids)} on {node}")
            if done.failpoint is not None and self.rt.is_alive(done.failpoint[0]):
                self.rt.release_failpoint(*done.failpoint)
                undone.append(f"disarmed {done.failpoint[1]}")
            undone += self._end_pause_and_skew(done)
        for pid in list(self.paused):  # paused without an `until`: resume_process never came
            del self.paused[pid]
            self.rt.resume(pid)
            undone.append(f"resumed {pid}")
        return undone


__all__ = ["CHILD_OF_ROLE", "Injector", "Step", "UnsupportedScenario", "check_supported",
           "plan"]
