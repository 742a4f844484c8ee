"""The scenario file's `faults`: what the nemesis does, when, and to which node or process.

Each fault has a time (`at`, and `until` for the ranged ones), exactly one action
(kill, restart, pause or resume a process; kill or restart a node; partition, heal,
delay, drop; skew a clock; arm a failpoint) and optionally a trigger (`when`) that
delays it to a moment of the run. Read through `schema_values.ValueReader`, whose
knowledge of the nodes and tiers declared so far every reference is checked against.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final, cast

from sediment.scenarios.schema import (
    ACTIONS,
    FAILPOINT_RE,
    MAX_DURATION_S,
    MAX_FAULTS,
    MAX_NODES,
    MAX_SKEW_S,
    NODE_ROLES,
    RANGED,
    ROLES,
    TIER_ROLES,
    TIER_TRIGGERS,
    TRIGGERS,
    ArmFailpoint,
    ClockSkew,
    Delay,
    Drop,
    FailpointAction,
    Fault,
    FaultAction,
    Heal,
    KillNode,
    KillProcess,
    Partition,
    Path_,
    PauseProcess,
    ProcessTarget,
    RestartNode,
    RestartProcess,
    ResumeProcess,
    Role,
    Trigger,
    When,
)
from sediment.scenarios.schema_blocks import LEADER_ONLY
from sediment.scenarios.schema_branches import BRANCH_TRIGGERS, SPARK_ROLE
from sediment.scenarios.schema_values import ValueReader
from sediment.scenarios.schema_yaml import got


def read_faults(r: ValueReader, v: object, path: Path_) -> tuple[Fault, ...]:
    """The scenario's `faults`: when each fires, what it does, and to what."""
    items = r.items(v, path, MAX_FAULTS)
    faults = tuple(_fault(r, x, (*path, i)) for i, x in enumerate(items))
    for i, f in enumerate(faults):
        if f.when is None or f.when.fired is None:
            continue
        j = f.when.fired
        if j >= i or not isinstance(faults[j].action, ArmFailpoint):
            r.fail((*path, i, "when", FIRED), f"must name an earlier fault that arms a "
                   f"failpoint, got {j}")
    return faults


def _fault(r: ValueReader, v: object, path: Path_) -> Fault:
    # `when` is checked apart so that a typo's "known:" list names the actions
    when_raw = v.get("when") if isinstance(v, dict) else None
    rest = {k: x for k, x in v.items() if k != "when"} if isinstance(v, dict) else v
    m = r.mapping(rest, path, ("at", "until", *ACTIONS), required=("at",))
    at = r.time(m["at"], (*path, "at"))
    actions = [k for k in m if k in ACTIONS]
    if len(actions) != 1:
        what = "none" if not actions else ", ".join(actions)
        r.fail(path, f"needs exactly one action ({', '.join(ACTIONS)}), got {what}")
    name = actions[0]
    action = _action(r, name, m[name], (*path, name))
    until = None
    if "until" in m:
        if name not in RANGED:
            r.fail((*path, "until"), f"{name} cannot have until; only "
                   f"{', '.join(sorted(RANGED))}")
        until = r.time(m["until"], (*path, "until"))
        if until <= at:
            r.fail((*path, "until"), f"must be after at ({at:g}), got {until:g}")
    when = None if when_raw is None else _when(r, when_raw, (*path, "when"), at, until)
    if (until is not None and isinstance(action, KillProcess)
            and action.target.role == SPARK_ROLE):
        r.fail((*path, "until"), f"a {SPARK_ROLE} is not restarted; drop until")
    if (until is not None and isinstance(action, KillProcess)
            and action.target.role == "compaction_worker"):
        r.fail((*path, "until"), "a compaction_worker is one of its pool's workers, "
               "restarted at once; kill the blocks_node or the node to keep it down")
    return Fault(at, action, until, when)


FIRED: Final = "failpoint_fired"


def _when(r: ValueReader, v: object, path: Path_, at: float, until: float | None) -> When:
    """`when: notice`, `when: {trigger: notice, within: 2}` or `when: {failpoint_fired:
    1, within: 2}` (after faults[1]'s failpoint fired)."""
    if isinstance(v, dict) and FIRED in v:
        m = r.mapping(v, path, (FIRED, "within"), required=(FIRED,))
        fired = r.integer(m[FIRED], (*path, FIRED), 0, MAX_FAULTS - 1)
        return When(FIRED, _within(r, m, path, at, until), fired)
    known: tuple[str, ...] = (*TRIGGERS, *TIER_TRIGGERS) if r.blocks else TRIGGERS
    if r.branches:
        known = (*known, *BRANCH_TRIGGERS)
    if isinstance(v, str):
        r.needs_tier(v, path, TIER_TRIGGERS)
        r.needs_branches(v, path)
        return When(cast(Trigger, r.choice(v, path, known)))
    m = r.mapping(v, path, ("trigger", "within"), required=("trigger",))
    r.needs_tier(m["trigger"], (*path, "trigger"), TIER_TRIGGERS)
    r.needs_branches(m["trigger"], (*path, "trigger"))
    trigger = cast(Trigger, r.choice(m["trigger"], (*path, "trigger"), known))
    return When(trigger, _within(r, m, path, at, until))


def _within(r: ValueReader, m: dict[str, Any], path: Path_, at: float,
            until: float | None) -> float | None:
    within = r.opt(m, "within", path,
                   lambda x, p: r.number(x, p, 0.0, MAX_DURATION_S, open_lo=True), None)
    if within is not None:
        end = until if until is not None else r.duration
        if at + within > end:
            what = "until" if until is not None else "duration"
            r.fail((*path, "within"), f"the window must end by {what} ({end:g}), "
                   f"got at + within = {at + within:g}")
    return within


def _action(r: ValueReader, name: str, v: object, path: Path_) -> FaultAction:
    args: dict[str, Any] = {} if v is None else r.mapping(v, path, _ARGS[name])
    if name in ("kill_process", "restart_process", "pause_process", "resume_process"):
        make: dict[str, Callable[[ProcessTarget], FaultAction]] = {
            "kill_process": KillProcess, "restart_process": RestartProcess,
            "pause_process": PauseProcess, "resume_process": ResumeProcess}
        target = _target(r, args, path)
        if target.role == SPARK_ROLE and name != "kill_process":
            r.fail((*path, "role"), f"a {SPARK_ROLE} can only be killed (RayDP does not "
                   "restart it, and the bridge replaces its session)")
        return make[name](target)
    if name == "kill_node":
        r.mapping(args, path, _ARGS[name], required=("node",))
        return KillNode(r.node_ref(args["node"], (*path, "node"), NODE_ROLES))
    if name == "restart_node":
        return RestartNode(r.opt(args, "node", path,
                                 lambda x, p: r.node_ref(x, p, ()), None))
    if name == "partition":
        return _partition(r, args, path)
    if name == "heal":
        return Heal()
    if name in ("delay", "drop"):
        return _link_fault(r, name, args, path)
    if name == "clock_skew":
        r.mapping(args, path, _ARGS[name], required=("node", "seconds"))
        return ClockSkew(
            r.node_ref(args["node"], (*path, "node"), NODE_ROLES),
            r.number(args["seconds"], (*path, "seconds"), -MAX_SKEW_S, MAX_SKEW_S),
        )
    return _failpoint(r, args, path)


def _target(r: ValueReader, args: Mapping[str, Any], path: Path_) -> ProcessTarget:
    if ("role" in args) == ("name" in args):
        r.fail(path, "needs exactly one of role, name")
    roles: tuple[str, ...] = (*ROLES, *TIER_ROLES) if r.blocks else ROLES
    if r.spark:
        roles = (*roles, SPARK_ROLE)
    if "role" in args:
        r.needs_tier(args["role"], (*path, "role"), TIER_ROLES)
        r.needs_branches(args["role"], (*path, "role"))
    role = r.opt(args, "role", path, lambda x, p: cast(Role, r.choice(x, p, roles)),
                 None)
    name = r.opt(args, "name", path, lambda x, p: r.string(
        x, p, re.compile(r"\S{1,128}"), "a process name"), None)
    node = r.opt(args, "node", path, lambda x, p: r.node_ref(x, p, ()), None)
    if role == "leader" and node is not None:
        r.fail((*path, "node"), "the leader's node is not chosen; drop node")
    if role in (*LEADER_ONLY, SPARK_ROLE) and node is not None:
        r.fail((*path, "node"), f"a {role} runs on one node only, found when the "
               "fault fires; drop node")
    return ProcessTarget(role, name, node)


def _partition(r: ValueReader, args: Mapping[str, Any], path: Path_) -> Partition:
    if ("sides" in args) == ("isolate" in args):
        r.fail(path, "needs exactly one of sides, isolate")
    if "isolate" in args:
        return Partition(isolate=r.node_ref(args["isolate"], (*path, "isolate"),
                                            ("leader",)))
    p = (*path, "sides")
    items = r.items(args["sides"], p, 2)
    if len(items) != 2:
        r.fail(p, "must be two lists of nodes")
    sides = []
    for i, side in enumerate(items):
        names = [r.node_ref(x, (*p, i, j), ())
                 for j, x in enumerate(r.items(side, (*p, i), MAX_NODES, empty=False))]
        sides.append(r.distinct(names, (*p, i)))
    both = set(sides[0]) & set(sides[1])
    if both:
        r.fail(p, f"a node cannot be on both sides: {', '.join(sorted(both))}")
    return Partition(sides=(sides[0], sides[1]))


def _link_fault(r: ValueReader, name: str, args: Mapping[str, Any], path: Path_) -> Delay | Drop:
    between = None
    if "between" in args:
        p = (*path, "between")
        items = r.items(args["between"], p, 2)
        if len(items) != 2:
            r.fail(p, "must be two nodes")
        a, b = (r.node_ref(x, (*p, i), ()) for i, x in enumerate(items))
        if a == b:
            r.fail(p, "must be two different nodes")
        between = (a, b)
    prob = r.opt(args, "probability", path,
                 lambda x, p: r.number(x, p, 0.0, 1.0, open_lo=True), 1.0)
    if name == "drop":
        return Drop(between, prob)
    r.mapping(args, path, _ARGS[name], required=("min", "max"))
    lo = r.number(args["min"], (*path, "min"), 0.0, 60.0)
    hi = r.number(args["max"], (*path, "max"), 0.0, 60.0)
    if hi < lo:
        r.fail((*path, "max"), f"must be >= min ({lo:g}), got {hi:g}")
    return Delay(between, lo, hi, prob)


def _failpoint(r: ValueReader, args: Mapping[str, Any], path: Path_) -> ArmFailpoint:
    r.mapping(args, path, _ARGS["failpoint"], required=("point",))
    target = _target(r, {k: v for k, v in args.items() if k in ("role", "name", "node")}, path)
    point = r.string(args["point"], (*path, "point"), FAILPOINT_RE,
                     "a failpoint name like wal.before_fsync")
    action = cast(FailpointAction, r.opt(
        args, "action", path, lambda x, p: r.choice(x, p, ("crash", "pause", "raise")),
        "crash"))
    count: int | None = 1
    if "count" in args:
        x = args["count"]
        if x == "always":
            count = None
        elif isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= 1_000_000:
            count = x
        else:
            r.fail((*path, "count"), f"must be an integer >= 1 or always, got {got(x)}")
    seconds = r.opt(args, "seconds", path, lambda x, p: r.number(x, p, 0.0, 3600.0),
                    None)
    if seconds is not None and action != "pause":
        r.fail((*path, "seconds"), "only a pause failpoint has seconds")
    return ArmFailpoint(target, point, action, count, seconds)


_TARGET = ("role", "name", "node")
_ARGS: dict[str, tuple[str, ...]] = {
    "kill_process": _TARGET, "restart_process": _TARGET, "pause_process": _TARGET,
    "resume_process": _TARGET, "kill_node": ("node",), "restart_node": ("node",),
    "partition": ("sides", "isolate"), "heal": (), "delay": ("between", "min", "max",
                                                              "probability"),
    "drop": ("between", "probability"), "clock_skew": ("node", "seconds"),
    "failpoint": (*_TARGET, "point", "action", "count", "seconds"),
}


__all__ = ["read_faults"]
