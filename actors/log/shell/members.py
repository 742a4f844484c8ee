"""Changing a running raft group's members from the driver: the steps of a rebalance.

Moving a replica from node `old` to node `new` is four raft configuration changes with
a process start before and a stop after (etcd's learner workflow; Ignite's rebalance):

1. `start_member(new)`: the log processes of a member on `new`, from nothing. It knows
   only the bootstrap configuration, where it is no voter, so it waits for a leader;
2. `add_learner new`: the leader replicates to it (a snapshot install if it compacted);
3. once the leader reports it caught up, `promote new`;
4. `remove old` (the leader itself possibly: it steps down once the removal commits);
5. `stop_member(old)` once the removal committed.

`change` proposes one step at whichever member leads (found by name, following leader
hints), waits out the refusals that pass on their own (a change still pending, a new
leader that has not committed yet, a learner still catching up) and treats a change
that already holds as done (a retry after a lost reply). Every wait is bounded.

Not yet: a member on a node that already runs log processes of other groups (its
segment writer's group list is fixed when it starts), and leadership transfer before a
leader removes itself (the group waits one election timeout instead).
"""

from __future__ import annotations

from typing import Any

from sediment.actors.log.shell.cluster import member_children, node_supervisor
from sediment.actors.log.shell.group_spec import GroupSpec
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Change, Done, NotLeader, Refused
from sediment.runtime.common_calls import Status
from sediment.runtime.errors import BadArgument, CallError
from sediment.supervision import requests

WAIT_OUT = ("change_pending", "leader_not_ready", "not_caught_up")
POLL = 0.05  # seconds between polls of the group


class ChangeRefused(BadArgument):
    """The group refused a configuration change that will not pass by waiting."""

    def __init__(self, op: str, node: str, reason: str) -> None:
        super().__init__(f"{op} {node}: refused ({reason})")
        self.op, self.node, self.reason = op, node, reason


class MemberPlacementError(BadArgument):
    """The node cannot host this member (see the module notes)."""


def start_member(rt: Any, top: Any, spec: GroupSpec, node: str) -> None:
    """Start the log processes of a member of `spec`'s group on `node` under the log
    cluster's top supervisor (`start_log_cluster`'s pid)."""
    which = rt.call(top, requests.WhichChildren(), timeout=30)
    if any(cid == f"node:{node}" for cid, _, _ in which):
        raise MemberPlacementError(f"{node} already runs log processes; a new member needs "
                                   "a node of its own for now")
    reply = rt.call(top, requests.StartChild(node_supervisor(node, member_children(
        node, [spec]))), timeout=60)
    if not isinstance(reply, requests.ChildStarted):
        raise MemberPlacementError(f"could not start a member on {node}: {reply}")


def stop_member(rt: Any, top: Any, spec: GroupSpec, node: str) -> None:
    """Stop `node`'s member once its removal committed: its node supervisor and all
    under it (the member is the node's only raft server, as `start_member` placed it)."""
    sup = requests.child_pid(rt.call(top, requests.WhichChildren(), timeout=30),
                             f"node:{node}")
    if sup is not None:
        servers = [cid for cid, _, _ in rt.call(sup, requests.WhichChildren(), timeout=30)
                   if isinstance(cid, str) and cid.startswith("raft:")]
        if servers != [f"raft:{spec.group}"]:
            raise MemberPlacementError(f"{node} runs other raft servers too: {servers}")
    for request in (requests.TerminateChild(f"node:{node}"),
                    requests.DeleteChild(f"node:{node}")):
        rt.call(top, request, timeout=60)


def leader_view(rt: Any, spec: GroupSpec, nodes: tuple[str, ...]) -> dict[str, Any] | None:
    """The status of the member of `nodes` that leads now (None: none answers as leader)."""
    for node in nodes:
        try:
            view = rt.call(raft_name(spec.group, node), Status(), timeout=5)
        except CallError:
            continue
        if view.get("role") == "leader":
            return dict(view)
    return None


def _holds(view: dict[str, Any] | None, op: str, node: str) -> bool:
    """Whether the leader's configuration already has the change's outcome."""
    if view is None:
        return False
    voters, learners = tuple(view["voters"]), tuple(view["learners"])
    if op == "add_learner":
        return node in learners or node in voters
    if op == "promote":
        return node in voters
    return op == "remove" and node not in voters and node not in learners


def change(rt: Any, spec: GroupSpec, op: str, node: str, nodes: tuple[str, ...],
           timeout: float = 60.0) -> int | None:
    """Propose `op` of `node` through the leader among `nodes`; the committed index (None:
    it held already). Raises ChangeRefused, or TimeoutError after `timeout` seconds."""
    waited, hint, hops = 0.0, None, 0
    while waited <= timeout:
        targets = [hint] if hint else list(nodes)
        hint = None
        reply: Any = None  # no member answered
        for target in targets:
            try:
                reply = rt.call(raft_name(spec.group, target), Change(op, node), timeout=10)
            except CallError:
                continue
            if not isinstance(reply, NotLeader):
                break
            hint = reply.hint if reply.hint in nodes else None
        if isinstance(reply, Done):
            return int(reply.index)
        if isinstance(reply, Refused) and reply.reason not in WAIT_OUT:
            if _holds(leader_view(rt, spec, nodes), op, node):
                return None
            raise ChangeRefused(op, node, reply.reason)
        hops = hops + 1 if hint is not None else 0
        if hint is None or hops > 3:  # follow a fresh hint at once, a stale one slowly
            rt.sleep(POLL)
            waited += POLL
    raise TimeoutError(f"{op} {node} in {spec.group}: no leader took it in {timeout} s")


def wait_caught_up(rt: Any, spec: GroupSpec, node: str, nodes: tuple[str, ...],
                   timeout: float = 60.0) -> None:
    """Until the leader reports learner `node` caught up (a bounded wait)."""
    waited = 0.0
    while waited <= timeout:
        view = leader_view(rt, spec, nodes)
        if view is not None and node in view.get("caught_up", ()):
            return
        rt.sleep(POLL)
        waited += POLL
    raise TimeoutError(f"learner {node} of {spec.group} did not catch up in {timeout} s")


def replace_member(rt: Any, top: Any, spec: GroupSpec, old: str, new: str,
                   members: tuple[str, ...], timeout: float = 60.0) -> tuple[str, ...]:
    """Move the group's replica from `old` to `new` (the steps above); `members`: the
    voters now. Returns the voters after."""
    if old not in members or new in members:
        raise BadArgument(f"cannot move {old} -> {new} in {members}")
    everyone = (*members, new)
    start_member(rt, top, spec, new)
    change(rt, spec, "add_learner", new, everyone, timeout)
    wait_caught_up(rt, spec, new, everyone, timeout)
    change(rt, spec, "promote", new, everyone, timeout)
    after = tuple(p for p in everyone if p != old)
    change(rt, spec, "remove", old, everyone, timeout)
    stop_member(rt, top, spec, old)
    return after


__all__ = [
    "ChangeRefused",
    "MemberPlacementError",
    "change",
    "leader_view",
    "replace_member",
    "start_member",
    "stop_member",
    "wait_caught_up",
]
