"""Reading a scenario file: YAML with the position of every value, then validation.

`schema.loads` and `schema.load_dict` come here. `_Doc` keeps the line and column of
every value and key, so each problem is a `ScenarioError` at its place in the file;
`_Validator` checks every field (unknown keys are errors, with a "did you mean") and
builds the frozen `schema.Scenario`. `cluster.blocks` is read by `schema_blocks.py`
through the validator's primitives. Pure: no clock, no cluster, no filesystem.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, TypeVar, cast

import yaml

from sediment.scenarios.schema import (
    ACTIONS,
    BACKENDS,
    CHECKS,
    CLIENT_KINDS,
    FAILPOINT_RE,
    FILTERS,
    MAX_COMPACTIONS,
    MAX_DURATION_S,
    MAX_FAULTS,
    MAX_NODES,
    MAX_SKEW_S,
    MAX_TEXT_BYTES,
    MAX_WATCHERS,
    MIX_OPS,
    NAME_RE,
    NODE_RE,
    NODE_ROLES,
    RANGED,
    ROLES,
    TIER_CHECKS,
    TIER_ROLES,
    TIER_TRIGGERS,
    TRIGGERS,
    WATCH_STARTS,
    ArmFailpoint,
    Backend,
    ClientKind,
    ClockSkew,
    Cluster,
    CompactAt,
    Compactions,
    CompactTarget,
    Delay,
    Drop,
    FailpointAction,
    Fault,
    FaultAction,
    Heal,
    KillNode,
    KillProcess,
    Mix,
    Partition,
    Path_,
    PauseProcess,
    ProcessTarget,
    RestartNode,
    RestartProcess,
    ResumeProcess,
    Role,
    Scenario,
    ScenarioError,
    Settings,
    Traffic,
    Trigger,
    WatcherSpec,
    WatchStart,
    When,
)
from sediment.scenarios.schema_blocks import LEADER_ONLY, read_blocks
from sediment.scenarios.schema_branches import BRANCH_TRIGGERS, read_branches


def parse_text(text: str, source: str) -> Scenario:
    """A scenario from YAML text (`schema.loads`)."""
    if len(text) > MAX_TEXT_BYTES:
        raise ScenarioError(source, "scenario", f"text larger than {MAX_TEXT_BYTES} bytes")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        what = f"{exc.context}, {exc.problem}" if exc.context else exc.problem
        raise ScenarioError(source, "scenario", f"invalid YAML: {what}", line, col) from None
    except yaml.YAMLError as exc:
        raise ScenarioError(source, "scenario", f"invalid YAML: {exc}") from None
    doc = _Doc(source)
    data = None if node is None else doc.convert(node, ())
    return _Validator(doc).scenario(data)


def parse_data(data: Mapping[str, Any], source: str) -> Scenario:
    """A scenario from plain data (`schema.load_dict`)."""
    return _Validator(_Doc(source)).scenario(data)


class _Doc:
    """Plain values from YAML nodes, with the position of every value and key."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.marks: dict[Path_, tuple[int, int]] = {}
        self.key_marks: dict[Path_, tuple[int, int]] = {}
        self._scalars = yaml.constructor.SafeConstructor()

    def convert(self, node: yaml.Node, path: Path_) -> Any:
        self.marks[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for knode, vnode in node.value:
                key = self._scalars.construct_object(knode) if isinstance(
                    knode, yaml.ScalarNode) else None
                at = (knode.start_mark.line + 1, knode.start_mark.column + 1)
                if not isinstance(key, str):
                    self.key_marks[(*path, "?")] = at
                    self.fail((*path, "?"), "keys must be strings", key=True)
                if key in out:
                    self.key_marks[(*path, key)] = at
                    self.fail((*path, key), "duplicate key", key=True)
                self.key_marks[(*path, key)] = at
                out[key] = self.convert(vnode, (*path, key))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.convert(v, (*path, i)) for i, v in enumerate(node.value)]
        return self._scalars.construct_object(node)

    def fail(self, path: Path_, message: str, *, key: bool = False) -> NoReturn:
        mark = (self.key_marks.get(path) if key else None) or self.marks.get(path)
        if mark is None:  # a missing field: point at its parent
            parent = path
            while parent and parent not in self.marks:
                parent = parent[:-1]
            mark = self.marks.get(parent)
        line, col = mark if mark else (None, None)
        raise ScenarioError(self.source, show_path(path), message, line, col)


def show_path(path: Path_) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "scenario"


def _got(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, str):
        return repr(v if len(v) <= 40 else v[:37] + "...")
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, int | float):
        return repr(v)
    return f"a {type(v).__name__}"


def did_you_mean(v: object, choices: Sequence[str]) -> str:
    """" (did you mean 'x'?)" for a string close to one of `choices`, else ""."""
    if not isinstance(v, str):
        return ""
    close = difflib.get_close_matches(v, choices, n=1, cutoff=0.6)
    if not close:  # a case slip ("Leader") is close at any length
        close = [c for c in choices if c.lower() == v.lower()][:1]
    return f" (did you mean {close[0]!r}?)" if close else ""


T = TypeVar("T")


class _Validator:
    def __init__(self, doc: _Doc) -> None:
        self.doc = doc
        self.nodes: tuple[str, ...] = ()
        self.duration = MAX_DURATION_S
        self.blocks = False  # the scenario starts a block tier: its roles, triggers, checks
        self.branches = False  # the scenario runs the branch tier: its triggers

    # -- primitives --

    def fail(self, path: Path_, message: str, *, key: bool = False) -> NoReturn:
        self.doc.fail(path, message, key=key)

    def mapping(
        self, v: object, path: Path_, known: Sequence[str], required: Sequence[str] = ()
    ) -> dict[str, Any]:
        if not isinstance(v, dict):
            self.fail(path, f"must be a mapping, got {_got(v)}")
        for k in v:
            if not isinstance(k, str):
                self.fail(path, f"keys must be strings, got {_got(k)}")
            if k not in known:
                self.fail((*path, k), f"unknown key{did_you_mean(k, known)}; known: "
                          f"{', '.join(known)}", key=True)
        for k in required:
            if k not in v:
                self.fail((*path, k), "is required")
        return cast(dict[str, Any], v)

    def integer(self, v: object, path: Path_, lo: int, hi: int) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            self.fail(path, f"must be an integer in [{lo}, {hi}], got {_got(v)}")
        return v

    def number(
        self, v: object, path: Path_, lo: float, hi: float, *, open_lo: bool = False
    ) -> float:
        ok = (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
              and (v > lo if open_lo else v >= lo) and v <= hi)
        if not ok:
            low = f"> {lo:g}" if open_lo else f">= {lo:g}"
            self.fail(path, f"must be a number {low} and <= {hi:g}, got {_got(v)}")
        return float(cast(float, v))

    def boolean(self, v: object, path: Path_) -> bool:
        if not isinstance(v, bool):
            self.fail(path, f"must be true or false, got {_got(v)}")
        return v

    def string(self, v: object, path: Path_, pattern: re.Pattern[str] | None = None,
               what: str = "a string") -> str:
        if not isinstance(v, str) or (pattern is not None and not pattern.fullmatch(v)):
            self.fail(path, f"must be {what}, got {_got(v)}")
        return v

    def choice(self, v: object, path: Path_, choices: Sequence[str]) -> str:
        if not isinstance(v, str) or v not in choices:
            self.fail(path, f"must be one of {', '.join(choices)}, got {_got(v)}"
                      f"{did_you_mean(v, choices)}")
        return v

    def items(self, v: object, path: Path_, most: int, *, empty: bool = True) -> list[Any]:
        if not isinstance(v, list):
            self.fail(path, f"must be a list, got {_got(v)}")
        if not empty and not v:
            self.fail(path, "must not be empty")
        if len(v) > most:
            self.fail(path, f"at most {most} items, got {len(v)}")
        return v

    def distinct(self, values: list[T], path: Path_) -> tuple[T, ...]:
        for i, x in enumerate(values):
            if x in values[:i]:
                self.fail((*path, i), f"{_got(x)} is listed twice")
        return tuple(values)

    def opt(self, m: Mapping[str, Any], key: str, path: Path_,
            read: Callable[[object, Path_], T], default: T) -> T:
        return read(m[key], (*path, key)) if key in m else default

    def time(self, v: object, path: Path_) -> float:
        return self.number(v, path, 0.0, self.duration)

    # -- the scenario --

    def scenario(self, data: object) -> Scenario:
        top = ("name", "description", "seed", "duration", "backends", "cluster", "traffic",
               "faults", "checks")
        m = self.mapping(data, (), top, required=("name", "duration"))
        name = self.string(m["name"], ("name",), NAME_RE,
                           "a name of lower-case letters, digits, '_', '.', '-' (<= 64)")
        self.duration = self.number(m["duration"], ("duration",), 0.0, MAX_DURATION_S,
                                    open_lo=True)
        description = self.opt(m, "description", (), self.string, "")
        seed = self.opt(m, "seed", (), lambda v, p: self.integer(v, p, 0, 2**63 - 1), 0)
        backends = self.opt(m, "backends", (), self.backends, BACKENDS)
        cluster = self.opt(m, "cluster", (), self.cluster, Cluster())
        self.nodes = cluster.nodes
        self.blocks = cluster.blocks is not None
        self.branches = cluster.branches is not None
        traffic = self.opt(m, "traffic", (), self.traffic, Traffic())
        if traffic.client == "grpc" and "sim" in backends:
            self.fail(("traffic", "client"), "client: grpc needs the ray backend (the "
                      "simulator has no sockets for the gRPC API): add backends: [ray]")
        if self.blocks and traffic.compactions is not None:
            self.fail(("traffic", "compactions"), "client Compacts go straight to raft and "
                      "bypass the block tier's flush hold; with cluster.blocks the cluster's "
                      "coordinator compacts (settings.compaction_interval)")
        no_faults: tuple[Fault, ...] = ()
        faults = self.opt(m, "faults", (), self.faults, no_faults)
        checks = self.opt(m, "checks", (), self.checks, self._all_checks())
        return Scenario(name, self.duration, description, seed, backends, cluster, traffic,
                        faults, checks)

    def backends(self, v: object, path: Path_) -> tuple[Backend, ...]:
        items = self.items(v, path, len(BACKENDS), empty=False)
        names = [cast(Backend, self.choice(x, (*path, i), BACKENDS)) for i, x in enumerate(items)]
        return self.distinct(names, path)

    def needs_tier(self, v: object, path: Path_, tier: Sequence[str]) -> None:
        """A name of the block tier (a role, trigger, check) in a scenario without one."""
        if not self.blocks and isinstance(v, str) and v in tier:
            self.fail(path, f"{v!r} belongs to the block tier: it needs cluster.blocks")

    def needs_branches(self, v: object, path: Path_) -> None:
        """A trigger of the branch tier in a scenario without it."""
        if not self.branches and isinstance(v, str) and v in BRANCH_TRIGGERS:
            self.fail(path, f"{v!r} belongs to the branch tier: it needs cluster.branches")

    def _all_checks(self) -> tuple[str, ...]:
        """The checks a scenario may name (and runs by default): the tier's too with one."""
        return (*CHECKS, *TIER_CHECKS) if self.blocks else CHECKS

    def checks(self, v: object, path: Path_) -> tuple[str, ...]:
        known = self._all_checks()
        items = self.items(v, path, len(known), empty=False)
        for i, x in enumerate(items):
            self.needs_tier(x, (*path, i), TIER_CHECKS)
        return self.distinct([self.choice(x, (*path, i), known) for i, x in enumerate(items)],
                             path)

    # -- cluster --

    def cluster(self, v: object, path: Path_) -> Cluster:
        m = self.mapping(v, path, ("nodes", "settings", "blocks", "branches"))
        nodes = self.opt(m, "nodes", path, self.node_list, Cluster().nodes)
        settings = self.opt(m, "settings", path, self.settings, Settings())
        blocks = read_blocks(self, m["blocks"], (*path, "blocks")) if "blocks" in m else None
        branches = (read_branches(self, m["branches"], (*path, "branches"))
                    if "branches" in m else None)
        return Cluster(nodes, settings, blocks, branches)

    def node_list(self, v: object, path: Path_) -> tuple[str, ...]:
        if isinstance(v, int) and not isinstance(v, bool):
            n = self.integer(v, path, 1, MAX_NODES)
            return tuple(f"n{i}" for i in range(1, n + 1))
        if not isinstance(v, list):
            self.fail(path, f"must be a node count (1..{MAX_NODES}) or a list of names, "
                      f"got {_got(v)}")
        items = self.items(v, path, MAX_NODES, empty=False)
        names = []
        for i, x in enumerate(items):
            name = self.string(x, (*path, i), NODE_RE, "a node name (a-z, 0-9, '_', '-')")
            if name in (*NODE_ROLES, "any"):
                self.fail((*path, i), f"{name!r} is reserved for picking a node by role")
            names.append(name)
        return self.distinct(names, path)

    def settings(self, v: object, path: Path_) -> Settings:
        readers: dict[str, Callable[[object, Path_], Any]] = {
            "compaction_interval": lambda x, p: self.number(x, p, 0.0, MAX_DURATION_S,
                                                            open_lo=True),
            "watcher_max_pending": lambda x, p: self.integer(x, p, 1, 1_000_000),
            "election_timeout": self.election_timeout,
            "heartbeat_interval": lambda x, p: self.number(x, p, 0.0, 60.0, open_lo=True),
            "snapshot_every": lambda x, p: self.integer(x, p, 1, 10_000_000),
            "max_retained": lambda x, p: self.integer(x, p, 0, 10_000_000),
            "segment_max_entries": lambda x, p: self.integer(x, p, 1, 10_000_000),
            "wal_max_size": lambda x, p: self.integer(x, p, 4096, 1 << 40),
            "num_minors": lambda x, p: self.integer(x, p, 1, 1000),
        }
        m = self.mapping(v, path, tuple(readers))
        s = Settings(**{k: readers[k](x, (*path, k)) for k, x in m.items()})
        if (s.heartbeat_interval is not None and s.election_timeout is not None
                and s.heartbeat_interval >= s.election_timeout[0]):
            self.fail((*path, "heartbeat_interval"),
                      "must be below the election timeout's lower bound")
        return s

    def election_timeout(self, v: object, path: Path_) -> tuple[float, float]:
        items = self.items(v, path, 2)
        if len(items) != 2:
            self.fail(path, f"must be [lo, hi] in seconds, got {_got(v)}")
        lo = self.number(items[0], (*path, 0), 0.0, 60.0, open_lo=True)
        hi = self.number(items[1], (*path, 1), 0.0, 60.0, open_lo=True)
        if not lo < hi:
            self.fail(path, f"lo must be below hi, got [{lo:g}, {hi:g}]")
        return (lo, hi)

    # -- traffic --

    def traffic(self, v: object, path: Path_) -> Traffic:
        known = ("clients", "rate", "keys", "mix", "value_size", "watchers", "compactions",
                 "client")
        m = self.mapping(v, path, known)
        d = Traffic()
        return Traffic(
            clients=self.opt(m, "clients", path, lambda x, p: self.integer(x, p, 1, 256),
                             d.clients),
            rate=self.opt(m, "rate", path,
                          lambda x, p: self.number(x, p, 0.0, 100_000.0, open_lo=True), None),
            keys=self.opt(m, "keys", path, lambda x, p: self.integer(x, p, 1, 100_000), d.keys),
            mix=self.opt(m, "mix", path, self.mix, d.mix),
            value_size=self.opt(m, "value_size", path,
                                lambda x, p: self.integer(x, p, 1, 1 << 20), d.value_size),
            watchers=self.opt(m, "watchers", path, self.watchers, ()),
            compactions=self.opt(m, "compactions", path, self.compactions, None),
            client=self.opt(m, "client", path, self.client_kind, d.client),
        )

    def client_kind(self, v: object, path: Path_) -> ClientKind:
        return cast(ClientKind, self.choice(v, path, CLIENT_KINDS))

    def mix(self, v: object, path: Path_) -> Mix:
        m = self.mapping(v, path, MIX_OPS)
        weights = {k: self.number(x, (*path, k), 0.0, 1e6) for k, x in m.items()}
        if not any(weights.values()):
            self.fail(path, "at least one weight must be above 0")
        return Mix(**{k: weights.get(k, 0.0) for k in MIX_OPS})

    def watchers(self, v: object, path: Path_) -> tuple[WatcherSpec, ...]:
        items = self.items(v, path, MAX_WATCHERS)
        return tuple(self.watcher(x, (*path, i)) for i, x in enumerate(items))

    def watcher(self, v: object, path: Path_) -> WatcherSpec:
        known = ("count", "start", "open_at", "slow", "pause_at", "resume_at", "prev_kv",
                 "filters")
        m = self.mapping(v, path, known)
        open_at = self.opt(m, "open_at", path, self.time, 0.0)
        pause = self.opt(m, "pause_at", path, self.time, None)
        resume = self.opt(m, "resume_at", path, self.time, None)
        if resume is not None and (pause is None or resume <= pause):
            self.fail((*path, "resume_at"), "needs pause_at and must be after it")
        if pause is not None and pause < open_at:
            self.fail((*path, "pause_at"), f"must not be before open_at ({open_at:g})")
        no_filters: tuple[str, ...] = ()
        filters = self.opt(m, "filters", path, lambda x, p: self.distinct(
            [self.choice(f, (*p, i), FILTERS) for i, f in enumerate(self.items(x, p, 2))], p),
            no_filters)
        return WatcherSpec(
            count=self.opt(m, "count", path, lambda x, p: self.integer(x, p, 1, 64), 1),
            start=self.opt(m, "start", path, self.watch_start, "now"),
            open_at=open_at,
            slow=self.opt(m, "slow", path, lambda x, p: self.number(x, p, 0.0, 60.0), None),
            pause_at=pause,
            resume_at=resume,
            prev_kv=self.opt(m, "prev_kv", path, self.boolean, False),
            filters=filters,
        )

    def watch_start(self, v: object, path: Path_) -> WatchStart:
        if v == "0":
            return 0
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return v
        if isinstance(v, str) and v in WATCH_STARTS:
            return cast(WatchStart, v)
        self.fail(path, f"must be a revision >= 0 or one of {', '.join(WATCH_STARTS)}, "
                  f"got {_got(v)}")

    def compactions(self, v: object, path: Path_) -> Compactions:
        if isinstance(v, list):
            items = self.items(v, path, MAX_COMPACTIONS, empty=False)
            return Compactions(at=tuple(self.compact_at(x, (*path, i))
                                        for i, x in enumerate(items)))
        m = self.mapping(v, path, ("every", "ahead"), required=("every",))
        return Compactions(
            every=self.number(m["every"], (*path, "every"), 0.01, self.duration),
            ahead=self.opt(m, "ahead", path, lambda x, p: self.integer(x, p, 0, 1000), 5),
        )

    def compact_at(self, v: object, path: Path_) -> CompactAt:
        m = self.mapping(v, path, ("at", "revision"), required=("at",))
        at = self.time(m["at"], (*path, "at"))
        rev: CompactTarget = "random"
        if "revision" in m:
            x = m["revision"]
            if isinstance(x, int) and not isinstance(x, bool) and x >= 1:
                rev = x
            elif x in ("head", "random"):
                rev = cast(CompactTarget, x)
            else:
                self.fail((*path, "revision"),
                          f"must be a revision >= 1, head or random, got {_got(x)}")
        return CompactAt(at, rev)

    # -- faults --

    def faults(self, v: object, path: Path_) -> tuple[Fault, ...]:
        items = self.items(v, path, MAX_FAULTS)
        return tuple(self.fault(x, (*path, i)) for i, x in enumerate(items))

    def fault(self, v: object, path: Path_) -> Fault:
        # `when` is checked apart so that a typo's "known:" list names the actions
        when_raw = v.get("when") if isinstance(v, dict) else None
        rest = {k: x for k, x in v.items() if k != "when"} if isinstance(v, dict) else v
        m = self.mapping(rest, path, ("at", "until", *ACTIONS), required=("at",))
        at = self.time(m["at"], (*path, "at"))
        actions = [k for k in m if k in ACTIONS]
        if len(actions) != 1:
            what = "none" if not actions else ", ".join(actions)
            self.fail(path, f"needs exactly one action ({', '.join(ACTIONS)}), got {what}")
        name = actions[0]
        action = self.action(name, m[name], (*path, name))
        until = None
        if "until" in m:
            if name not in RANGED:
                self.fail((*path, "until"), f"{name} cannot have until; only "
                          f"{', '.join(sorted(RANGED))}")
            until = self.time(m["until"], (*path, "until"))
            if until <= at:
                self.fail((*path, "until"), f"must be after at ({at:g}), got {until:g}")
        when = None if when_raw is None else self.when(when_raw, (*path, "when"), at, until)
        if (until is not None and isinstance(action, KillProcess)
                and action.target.role == "compaction_worker"):
            self.fail((*path, "until"), "a compaction_worker is one of its pool's workers, "
                      "restarted at once; kill the blocks_node or the node to keep it down")
        return Fault(at, action, until, when)

    def when(self, v: object, path: Path_, at: float, until: float | None) -> When:
        """`when: notice` or `when: {trigger: notice, within: 2}`."""
        known: tuple[str, ...] = (*TRIGGERS, *TIER_TRIGGERS) if self.blocks else TRIGGERS
        if self.branches:
            known = (*known, *BRANCH_TRIGGERS)
        if isinstance(v, str):
            self.needs_tier(v, path, TIER_TRIGGERS)
            self.needs_branches(v, path)
            return When(cast(Trigger, self.choice(v, path, known)))
        m = self.mapping(v, path, ("trigger", "within"), required=("trigger",))
        self.needs_tier(m["trigger"], (*path, "trigger"), TIER_TRIGGERS)
        self.needs_branches(m["trigger"], (*path, "trigger"))
        trigger = cast(Trigger, self.choice(m["trigger"], (*path, "trigger"), known))
        within = self.opt(m, "within", path,
                          lambda x, p: self.number(x, p, 0.0, MAX_DURATION_S, open_lo=True), None)
        if within is not None:
            end = until if until is not None else self.duration
            if at + within > end:
                what = "until" if until is not None else "duration"
                self.fail((*path, "within"), f"the window must end by {what} ({end:g}), "
                          f"got at + within = {at + within:g}")
        return When(trigger, within)

    def action(self, name: str, v: object, path: Path_) -> FaultAction:
        args: dict[str, Any] = {} if v is None else self.mapping(v, path, _ARGS[name])
        if name in ("kill_process", "restart_process", "pause_process", "resume_process"):
            make: dict[str, Callable[[ProcessTarget], FaultAction]] = {
                "kill_process": KillProcess, "restart_process": RestartProcess,
                "pause_process": PauseProcess, "resume_process": ResumeProcess}
            return make[name](self.target(args, path))
        if name == "kill_node":
            self.mapping(args, path, _ARGS[name], required=("node",))
            return KillNode(self.node_ref(args["node"], (*path, "node"), NODE_ROLES))
        if name == "restart_node":
            return RestartNode(self.opt(args, "node", path,
                                        lambda x, p: self.node_ref(x, p, ()), None))
        if name == "partition":
            return self.partition(args, path)
        if name == "heal":
            return Heal()
        if name in ("delay", "drop"):
            return self.link_fault(name, args, path)
        if name == "clock_skew":
            self.mapping(args, path, _ARGS[name], required=("node", "seconds"))
            return ClockSkew(
                self.node_ref(args["node"], (*path, "node"), NODE_ROLES),
                self.number(args["seconds"], (*path, "seconds"), -MAX_SKEW_S, MAX_SKEW_S),
            )
        return self.failpoint(args, path)

    def node_ref(self, v: object, path: Path_, roles: Sequence[str]) -> str:
        allowed = (*self.nodes, *roles)
        if not isinstance(v, str) or v not in allowed:
            self.fail(path, f"must be one of {', '.join(allowed)}, got {_got(v)}"
                      f"{did_you_mean(v, allowed)}")
        return v

    def target(self, args: Mapping[str, Any], path: Path_) -> ProcessTarget:
        if ("role" in args) == ("name" in args):
            self.fail(path, "needs exactly one of role, name")
        roles: tuple[str, ...] = (*ROLES, *TIER_ROLES) if self.blocks else ROLES
        if "role" in args:
            self.needs_tier(args["role"], (*path, "role"), TIER_ROLES)
        role = self.opt(args, "role", path, lambda x, p: cast(Role, self.choice(x, p, roles)),
                        None)
        name = self.opt(args, "name", path, lambda x, p: self.string(
            x, p, re.compile(r"\S{1,128}"), "a process name"), None)
        node = self.opt(args, "node", path, lambda x, p: self.node_ref(x, p, ()), None)
        if role == "leader" and node is not None:
            self.fail((*path, "node"), "the leader's node is not chosen; drop node")
        if role in LEADER_ONLY and node is not None:
            self.fail((*path, "node"), f"a {role} runs on one node only, found when the "
                      "fault fires; drop node")
        return ProcessTarget(role, name, node)

    def partition(self, args: Mapping[str, Any], path: Path_) -> Partition:
        if ("sides" in args) == ("isolate" in args):
            self.fail(path, "needs exactly one of sides, isolate")
        if "isolate" in args:
            return Partition(isolate=self.node_ref(args["isolate"], (*path, "isolate"),
                                                   ("leader",)))
        p = (*path, "sides")
        items = self.items(args["sides"], p, 2)
        if len(items) != 2:
            self.fail(p, "must be two lists of nodes")
        sides = []
        for i, side in enumerate(items):
            names = [self.node_ref(x, (*p, i, j), ())
                     for j, x in enumerate(self.items(side, (*p, i), MAX_NODES, empty=False))]
            sides.append(self.distinct(names, (*p, i)))
        both = set(sides[0]) & set(sides[1])
        if both:
            self.fail(p, f"a node cannot be on both sides: {', '.join(sorted(both))}")
        return Partition(sides=(sides[0], sides[1]))

    def link_fault(self, name: str, args: Mapping[str, Any], path: Path_) -> Delay | Drop:
        between = None
        if "between" in args:
            p = (*path, "between")
            items = self.items(args["between"], p, 2)
            if len(items) != 2:
                self.fail(p, "must be two nodes")
            a, b = (self.node_ref(x, (*p, i), ()) for i, x in enumerate(items))
            if a == b:
                self.fail(p, "must be two different nodes")
            between = (a, b)
        prob = self.opt(args, "probability", path,
                        lambda x, p: self.number(x, p, 0.0, 1.0, open_lo=True), 1.0)
        if name == "drop":
            return Drop(between, prob)
        self.mapping(args, path, _ARGS[name], required=("min", "max"))
        lo = self.number(args["min"], (*path, "min"), 0.0, 60.0)
        hi = self.number(args["max"], (*path, "max"), 0.0, 60.0)
        if hi < lo:
            self.fail((*path, "max"), f"must be >= min ({lo:g}), got {hi:g}")
        return Delay(between, lo, hi, prob)

    def failpoint(self, args: Mapping[str, Any], path: Path_) -> ArmFailpoint:
        self.mapping(args, path, _ARGS["failpoint"], required=("point",))
        target = self.target({k: v for k, v in args.items() if k in ("role", "name", "node")},
                             path)
        point = self.string(args["point"], (*path, "point"), FAILPOINT_RE,
                            "a failpoint name like wal.before_fsync")
        action = cast(FailpointAction, self.opt(
            args, "action", path, lambda x, p: self.choice(x, p, ("crash", "pause", "raise")),
            "crash"))
        count: int | None = 1
        if "count" in args:
            x = args["count"]
            if x == "always":
                count = None
            elif isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= 1_000_000:
                count = x
            else:
                self.fail((*path, "count"), f"must be an integer >= 1 or always, got {_got(x)}")
        seconds = self.opt(args, "seconds", path, lambda x, p: self.number(x, p, 0.0, 3600.0),
                           None)
        if seconds is not None and action != "pause":
            self.fail((*path, "seconds"), "only a pause failpoint has seconds")
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


__all__ = ["did_you_mean", "parse_data", "parse_text", "show_path"]
