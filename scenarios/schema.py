"""The scenario file: which cluster to start, the traffic, a fault timeline, the checks.

`load(path)`, `loads(text)` and `load_dict(data)` validate a scenario and return a frozen
`Scenario`; `load_dir(path)` loads every *.yaml of a directory. Every problem is a
`ScenarioError` naming the file, the line and column when the scenario came from YAML, and
the field path: `slow.yaml:14:9: faults[2].at: must be a number >= 0, got 'soon'`.
Unknown keys are errors (with a "did you mean" when one is close): a typo must never
silently fall back to a default. `Scenario.to_dict()` gives the plain form back, and
`load_dict(s.to_dict()) == s`. The format is documented in `scenarios/library/README.md`.
`cluster.blocks` (the KV's block tier) is read by `schema_blocks.py`; its roles, triggers
and checks are accepted only in a scenario that starts the tier.

Validation is pure: no clock, no cluster, no filesystem beyond reading the file.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, NoReturn, TypeAlias, TypeVar, cast

import yaml

from sediment.scenarios.schema_blocks import (
    LEADER_ONLY,
    TIER_CHECKS,
    TIER_ROLES,
    TIER_TRIGGERS,
    BlocksSpec,
    TierRole,
    TierTrigger,
    blocks_dict,
    read_blocks,
)

Backend = Literal["sim", "ray"]
Role = Literal[
    "leader", "follower", "coordinator", "kv_node", "watcher", "wal", "segment_writer",
    "log_worker",
]
FailpointAction = Literal["crash", "pause", "raise"]
WatchStart: TypeAlias = int | Literal["now", "compact", "below_compact", "above_compact"]
CompactTarget: TypeAlias = int | Literal["head", "random"]

BACKENDS: tuple[Backend, ...] = ("sim", "ray")
ROLES: tuple[Role, ...] = (
    "leader", "follower", "coordinator", "kv_node", "watcher", "wal", "segment_writer",
    "log_worker",
)
CHECKS: tuple[str, ...] = (
    "linearizable", "watch_guarantees", "no_lost_writes", "compaction_safe",
    "revisions_monotonic",
)
MIX_OPS: tuple[str, ...] = ("put", "delete", "txn", "range", "get")
FILTERS: tuple[str, ...] = ("no_put", "no_delete")
WATCH_STARTS: tuple[str, ...] = ("now", "compact", "below_compact", "above_compact")
Trigger = Literal["notice", "compact_entry", "physical_compaction", "snapshot_install"]
TRIGGERS: tuple[Trigger, ...] = (
    "notice", "compact_entry", "physical_compaction", "snapshot_install",
)
NODE_ROLES: tuple[str, ...] = ("leader", "follower")  # a node picked by its raft role

MAX_TEXT_BYTES = 1 << 20
MAX_DURATION_S = 3600.0
MAX_NODES = 9
MAX_FAULTS = 1000
MAX_WATCHERS = 64
MAX_COMPACTIONS = 10_000
MAX_SKEW_S = 3600.0
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
NODE_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
FAILPOINT_RE = re.compile(r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)+")

Path_: TypeAlias = tuple[str | int, ...]


class ScenarioError(ValueError):
    """A scenario is invalid. `line`/`column` are 1-based (None without a YAML source)."""

    def __init__(
        self, source: str, path: str, message: str, line: int | None = None,
        column: int | None = None,
    ) -> None:
        where = source if line is None else f"{source}:{line}:{column}"
        super().__init__(f"{where}: {path}: {message}")
        self.source, self.path, self.message = source, path, message
        self.line, self.column = line, column


# ---- the scenario ----------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """Cluster options; None keeps the cluster's default. The names are the keyword
    arguments of `actors/kv/cluster.Cluster.start` (and its raft GroupSpec)."""

    compaction_interval: float | None = None  # seconds between coordinator cycles
    watcher_max_pending: int | None = None  # events queued for a slow watcher
    election_timeout: tuple[float, float] | None = None  # seconds, [lo, hi)
    heartbeat_interval: float | None = None
    snapshot_every: int | None = None  # raft entries between snapshots
    max_retained: int | None = None  # entries kept past a snapshot for slow followers
    segment_max_entries: int | None = None
    wal_max_size: int | None = None  # bytes
    num_minors: int | None = None  # a major compaction every N minor ones

    def to_kwargs(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}


@dataclass(frozen=True)
class Cluster:
    """`blocks`: start the KV with its block tier (`schema_blocks.py`), or None."""

    nodes: tuple[str, ...] = ("n1", "n2", "n3")
    settings: Settings = Settings()
    blocks: BlocksSpec | None = None


@dataclass(frozen=True)
class Mix:
    """Relative weights of the request kinds (etcd robustness traffic style)."""

    put: float = 40.0
    delete: float = 10.0
    txn: float = 15.0
    range: float = 10.0
    get: float = 25.0


@dataclass(frozen=True)
class WatcherSpec:
    """`count` watchers over the traffic keyspace. start: "now" (0), a revision, or
    relative to the compact revision at opening time ("compact": at it,
    "below_compact": one below — canceled as compacted, "above_compact": one above)."""

    count: int = 1
    start: WatchStart = "now"
    slow: float | None = None  # seconds the client sleeps per event
    pause_at: float | None = None  # stop reading (falls behind) ...
    resume_at: float | None = None  # ... and resume
    prev_kv: bool = False
    filters: tuple[str, ...] = ()
    open_at: float = 0.0  # when the watch is opened (its start is resolved then)


@dataclass(frozen=True)
class CompactAt:
    at: float
    revision: CompactTarget = "random"


@dataclass(frozen=True)
class Compactions:
    """Client Compacts: every `every` seconds at a random revision in
    [last, head + ahead] (etcd's robustness traffic), or at the listed times."""

    every: float | None = None
    ahead: int = 5
    at: tuple[CompactAt, ...] = ()


@dataclass(frozen=True)
class Traffic:
    clients: int = 4
    rate: float | None = None  # ops/s per client; None: as fast as they complete
    keys: int = 10
    mix: Mix = Mix()
    value_size: int = 16
    watchers: tuple[WatcherSpec, ...] = ()
    compactions: Compactions | None = None


@dataclass(frozen=True)
class ProcessTarget:
    """A process by its role (optionally on one node) or by its registered name."""

    role: Role | TierRole | None = None
    name: str | None = None
    node: str | None = None


@dataclass(frozen=True)
class KillProcess:
    target: ProcessTarget


@dataclass(frozen=True)
class RestartProcess:
    target: ProcessTarget


@dataclass(frozen=True)
class PauseProcess:
    target: ProcessTarget


@dataclass(frozen=True)
class ResumeProcess:
    target: ProcessTarget


@dataclass(frozen=True)
class KillNode:
    node: str  # a node name, "leader" or "follower"


@dataclass(frozen=True)
class RestartNode:
    node: str | None = None  # None: every stopped node


@dataclass(frozen=True)
class Partition:
    """Two sides that cannot talk, or one node (`isolate`) cut from all the others."""

    sides: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    isolate: str | None = None


@dataclass(frozen=True)
class Heal:
    """Remove every partition, delay and drop."""


@dataclass(frozen=True)
class Delay:
    between: tuple[str, str] | None  # None: every link
    min: float
    max: float
    probability: float = 1.0


@dataclass(frozen=True)
class Drop:
    between: tuple[str, str] | None
    probability: float = 1.0


@dataclass(frozen=True)
class ClockSkew:
    node: str
    seconds: float


@dataclass(frozen=True)
class ArmFailpoint:
    target: ProcessTarget
    point: str
    action: FailpointAction = "crash"
    count: int | None = 1  # None: every time
    seconds: float | None = None  # pause only; None: until released


FaultAction: TypeAlias = (
    KillProcess | RestartProcess | PauseProcess | ResumeProcess | KillNode | RestartNode
    | Partition | Heal | Delay | Drop | ClockSkew | ArmFailpoint
)

ACTION_NAMES: dict[type, str] = {
    KillProcess: "kill_process", RestartProcess: "restart_process",
    PauseProcess: "pause_process", ResumeProcess: "resume_process", KillNode: "kill_node",
    RestartNode: "restart_node", Partition: "partition", Heal: "heal", Delay: "delay",
    Drop: "drop", ClockSkew: "clock_skew", ArmFailpoint: "failpoint",
}
ACTIONS: tuple[str, ...] = tuple(ACTION_NAMES.values())
RANGED: frozenset[str] = frozenset({
    "kill_process", "pause_process", "kill_node", "partition", "delay", "drop", "clock_skew",
    "failpoint",
})  # `until` undoes them: restart, resume, heal, reset, disarm


@dataclass(frozen=True)
class When:
    """A fault that waits, from its `at`, for a moment of the compaction protocols (etcd's
    failpoint triggers): the action is applied as soon as `trigger` holds, or at the end
    of the `within` window if it never does (the run reports that as a missed trigger)."""

    trigger: Trigger | TierTrigger
    within: float | None = None  # seconds after `at`; None: until `until` or the end


@dataclass(frozen=True)
class Fault:
    at: float
    action: FaultAction
    until: float | None = None
    when: When | None = None

    @property
    def name(self) -> str:
        return ACTION_NAMES[type(self.action)]


@dataclass(frozen=True)
class Scenario:
    name: str
    duration: float
    description: str = ""
    seed: int = 0
    backends: tuple[Backend, ...] = BACKENDS
    cluster: Cluster = Cluster()
    traffic: Traffic = Traffic()
    faults: tuple[Fault, ...] = ()
    checks: tuple[str, ...] = CHECKS

    def to_dict(self) -> dict[str, Any]:
        return _scenario_dict(self)

    def to_yaml(self) -> str:
        return str(yaml.safe_dump(self.to_dict(), sort_keys=False))


# ---- loading ---------------------------------------------------------------------------


def load(path: str | Path) -> Scenario:
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ScenarioError(p.name, "scenario", f"cannot read {p}: {exc.strerror}") from None
    if len(data) > MAX_TEXT_BYTES:
        raise ScenarioError(p.name, "scenario", f"file larger than {MAX_TEXT_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScenarioError(p.name, "scenario", "not UTF-8 text") from None
    return loads(text, source=p.name)


def loads(text: str, source: str = "<string>") -> Scenario:
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


def load_dict(data: Mapping[str, Any], source: str = "<dict>") -> Scenario:
    return _Validator(_Doc(source)).scenario(data)


def load_dir(path: str | Path) -> list[Scenario]:
    """Every *.yaml (and *.yml) file of a directory, by file name; names must differ."""
    d = Path(path)
    if not d.is_dir():
        raise ScenarioError(str(d), "scenario", "not a directory")
    out: list[Scenario] = []
    seen: dict[str, str] = {}
    for f in sorted([*d.glob("*.yaml"), *d.glob("*.yml")]):
        s = load(f)
        if s.name in seen:
            raise ScenarioError(f.name, "name", f"{s.name!r} is also the name in {seen[s.name]}")
        seen[s.name] = f.name
        out.append(s)
    return out


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


T = TypeVar("T")


class _Validator:
    def __init__(self, doc: _Doc) -> None:
        self.doc = doc
        self.nodes: tuple[str, ...] = ()
        self.duration = MAX_DURATION_S
        self.blocks = False  # the scenario starts a block tier: its roles, triggers, checks

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
                close = difflib.get_close_matches(k, known, n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                self.fail((*path, k), f"unknown key{hint}; known: {', '.join(known)}",
                          key=True)
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
            self.fail(path, f"must be one of {', '.join(choices)}, got {_got(v)}")
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
        traffic = self.opt(m, "traffic", (), self.traffic, Traffic())
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
        m = self.mapping(v, path, ("nodes", "settings", "blocks"))
        nodes = self.opt(m, "nodes", path, self.node_list, Cluster().nodes)
        settings = self.opt(m, "settings", path, self.settings, Settings())
        blocks = read_blocks(self, m["blocks"], (*path, "blocks")) if "blocks" in m else None
        return Cluster(nodes, settings, blocks)

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
        known = ("clients", "rate", "keys", "mix", "value_size", "watchers", "compactions")
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
        )

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
        known = (*TRIGGERS, *TIER_TRIGGERS) if self.blocks else TRIGGERS
        if isinstance(v, str):
            self.needs_tier(v, path, TIER_TRIGGERS)
            return When(cast(Trigger, self.choice(v, path, known)))
        m = self.mapping(v, path, ("trigger", "within"), required=("trigger",))
        self.needs_tier(m["trigger"], (*path, "trigger"), TIER_TRIGGERS)
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
            self.fail(path, f"must be one of {', '.join(allowed)}, got {_got(v)}")
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


# ---- back to plain data ----------------------------------------------------------------


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x


def _target_dict(t: ProcessTarget) -> dict[str, Any]:
    return {k: v for k, v in (("role", t.role), ("name", t.name), ("node", t.node))
            if v is not None}


def _action_dict(a: FaultAction) -> dict[str, Any]:
    match a:
        case KillProcess(target=t) | RestartProcess(target=t) | PauseProcess(target=t) | \
                ResumeProcess(target=t):
            return _target_dict(t)
        case KillNode(node=n):
            return {"node": n}
        case RestartNode(node=n):
            return {} if n is None else {"node": n}
        case Partition(sides=sides, isolate=iso):
            return {"isolate": iso} if iso is not None else {
                "sides": [list(s) for s in sides or ()]}
        case Heal():
            return {}
        case Delay(between=b, min=lo, max=hi, probability=p):
            out: dict[str, Any] = {} if b is None else {"between": list(b)}
            return {**out, "min": _num(lo), "max": _num(hi), "probability": _num(p)}
        case Drop(between=b, probability=p):
            return {**({} if b is None else {"between": list(b)}), "probability": _num(p)}
        case ClockSkew(node=n, seconds=s):
            return {"node": n, "seconds": _num(s)}
        case ArmFailpoint(target=t, point=pt, action=act, count=c, seconds=s):
            d = {**_target_dict(t), "point": pt, "action": act,
                 "count": "always" if c is None else c}
            return d if s is None else {**d, "seconds": _num(s)}
    raise AssertionError(a)  # every action is matched above


def _scenario_dict(s: Scenario) -> dict[str, Any]:
    t = s.traffic
    traffic: dict[str, Any] = {
        "clients": t.clients, "keys": t.keys,
        "mix": {k: _num(getattr(t.mix, k)) for k in MIX_OPS}, "value_size": t.value_size,
    }
    if t.rate is not None:
        traffic["rate"] = _num(t.rate)
    if t.watchers:
        traffic["watchers"] = [_watcher_dict(w) for w in t.watchers]
    if t.compactions is not None:
        c = t.compactions
        traffic["compactions"] = (
            {"every": _num(c.every), "ahead": c.ahead} if c.every is not None
            else [{"at": _num(x.at), "revision": x.revision} for x in c.at])
    settings = {k: (list(v) if isinstance(v, tuple) else v)
                for k, v in s.cluster.settings.to_kwargs().items()}
    out: dict[str, Any] = {
        "name": s.name, "description": s.description, "seed": s.seed,
        "duration": _num(s.duration), "backends": list(s.backends),
        "cluster": {"nodes": list(s.cluster.nodes), "settings": settings,
                    **({} if s.cluster.blocks is None
                       else {"blocks": blocks_dict(s.cluster.blocks)})},
        "traffic": traffic,
        "faults": [_fault_dict(f) for f in s.faults],
        "checks": list(s.checks),
    }
    return out


def _watcher_dict(w: WatcherSpec) -> dict[str, Any]:
    d: dict[str, Any] = {"count": w.count, "start": w.start, "prev_kv": w.prev_kv}
    if w.open_at:
        d["open_at"] = _num(w.open_at)
    for k in ("slow", "pause_at", "resume_at"):
        if getattr(w, k) is not None:
            d[k] = _num(getattr(w, k))
    if w.filters:
        d["filters"] = list(w.filters)
    return d


def _fault_dict(f: Fault) -> dict[str, Any]:
    d: dict[str, Any] = {"at": _num(f.at), f.name: _action_dict(f.action)}
    if f.until is not None:
        d["until"] = _num(f.until)
    if f.when is not None:
        d["when"] = (f.when.trigger if f.when.within is None
                     else {"trigger": f.when.trigger, "within": _num(f.when.within)})
    return d


__all__ = [
    "ACTIONS", "BACKENDS", "CHECKS", "MIX_OPS", "RANGED", "ROLES", "TIER_CHECKS", "TIER_ROLES",
    "TIER_TRIGGERS", "ArmFailpoint", "BlocksSpec",
    "ClockSkew", "Cluster", "CompactAt", "Compactions", "Delay", "Drop", "Fault",
    "FaultAction", "Heal", "KillNode", "KillProcess", "Mix", "Partition", "PauseProcess",
    "ProcessTarget", "RestartNode", "RestartProcess", "ResumeProcess", "Scenario",
    "ScenarioError", "Settings", "TRIGGERS", "Traffic", "Trigger", "WatcherSpec", "When",
    "load", "load_dict", "load_dir",
    "loads", "show_path",
]
