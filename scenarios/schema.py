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

This module holds the scenario's types and the entry points; reading and validation are
in `schema_parse.py`, the way back to plain data in `schema_dump.py`. Validation is
pure: no clock, no cluster, no filesystem beyond reading the file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal, TypeAlias

import yaml

from sediment.scenarios.schema_blocks import (
    TIER_CHECKS,
    TIER_ROLES,
    TIER_TRIGGERS,
    BlocksSpec,
    TierRole,
    TierTrigger,
)
from sediment.scenarios.schema_branches import BranchesSpec
from sediment.scenarios.schema_tables import TablesSpec

Backend = Literal["sim", "ray"]
ClientKind = Literal["native", "grpc"]
Role = Literal[
    "leader", "follower", "coordinator", "kv_node", "watcher", "wal", "segment_writer",
    "log_worker",
]
FailpointAction = Literal["crash", "pause", "raise"]
WatchStart: TypeAlias = int | Literal["now", "compact", "below_compact", "above_compact"]
CompactTarget: TypeAlias = int | Literal["head", "random"]

BACKENDS: tuple[Backend, ...] = ("sim", "ray")
# how the traffic reaches the cluster: "native" calls the raft members as process
# messages; "grpc" sends the same requests through every node's etcd v3 gRPC API (Ray
# only: the simulator has no sockets)
CLIENT_KINDS: tuple[ClientKind, ...] = ("native", "grpc")
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


class ScenarioErrors(ScenarioError):
    """Several scenarios are invalid (a directory's files): `errors`, one per problem,
    in file order; the message lists them all, one per line."""

    def __init__(self, errors: Sequence[ScenarioError]) -> None:
        first = errors[0]
        super().__init__(first.source, first.path, first.message, first.line, first.column)
        self.errors = tuple(errors)
        self.args = ("\n".join(str(e) for e in self.errors),)

    def __str__(self) -> str:
        return str(self.args[0])


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
    branches: BranchesSpec | None = None  # lakeFS branches (`schema_branches.py`)
    tables: TablesSpec | None = None  # tables and their catalog (`schema_tables.py`)


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
    client: ClientKind = "native"


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
    of the `within` window if it never does (the run reports that as a missed trigger).
    `failpoint_fired` waits instead for the failpoint an earlier fault (`fired`, its
    index) armed to fire: a failpoint armed on a process that an earlier crash failpoint
    is about to take down would go down with it."""

    trigger: Trigger | TierTrigger | Literal["failpoint_fired"]
    within: float | None = None  # seconds after `at`; None: until `until` or the end
    fired: int | None = None  # failpoint_fired: the earlier fault whose failpoint fired


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
    # how long a Ray run lasts (None: `duration`): Ray commits less per second than the
    # simulator, so a file's moments (a major compaction, a restarted compactor's next
    # step) come later there; the faults' times stay within `duration`
    ray_duration: float | None = None

    def on(self, backend: str) -> Scenario:
        """The scenario as a run on `backend` takes it: on Ray with `ray_duration`."""
        if backend == "ray" and self.ray_duration is not None:
            return replace(self, duration=self.ray_duration, ray_duration=None)
        return self

    def to_dict(self) -> dict[str, Any]:
        from sediment.scenarios import schema_dump  # it reads this module's types
        from sediment.scenarios.schema_tables import tables_dict

        out = schema_dump.scenario_dict(self)
        if self.cluster.tables is not None:
            out["cluster"]["tables"] = tables_dict(self.cluster.tables)
        return out

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
    from sediment.scenarios import schema_tables_parse  # schema_parse's, with `tables`

    return schema_tables_parse.parse_text(text, source)


def load_dict(data: Mapping[str, Any], source: str = "<dict>") -> Scenario:
    from sediment.scenarios import schema_tables_parse

    return schema_tables_parse.parse_data(data, source)


def load_dir(path: str | Path) -> list[Scenario]:
    """Every *.yaml (and *.yml) file of a directory, by file name; names must differ.
    Every bad file is reported: one raises its ScenarioError, several ScenarioErrors."""
    d = Path(path)
    if not d.is_dir():
        raise ScenarioError(str(d), "scenario", "not a directory")
    out: list[Scenario] = []
    errors: list[ScenarioError] = []
    seen: dict[str, str] = {}
    for f in sorted([*d.glob("*.yaml"), *d.glob("*.yml")]):
        try:
            s = load(f)
        except ScenarioError as err:
            errors.append(err)
            continue
        if s.name in seen:
            errors.append(ScenarioError(f.name, "name",
                                        f"{s.name!r} is also the name in {seen[s.name]}"))
            continue
        seen[s.name] = f.name
        out.append(s)
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ScenarioErrors(errors)
    return out


__all__ = [
    "ACTIONS", "BACKENDS", "CHECKS", "MIX_OPS", "RANGED", "ROLES", "TIER_CHECKS", "TIER_ROLES",
    "TIER_TRIGGERS", "ArmFailpoint", "BlocksSpec",
    "ClockSkew", "Cluster", "CompactAt", "Compactions", "Delay", "Drop", "Fault",
    "FaultAction", "Heal", "KillNode", "KillProcess", "Mix", "Partition", "PauseProcess",
    "ProcessTarget", "RestartNode", "RestartProcess", "ResumeProcess", "Scenario",
    "ScenarioError", "ScenarioErrors", "Settings", "TRIGGERS", "Traffic", "Trigger",
    "WatcherSpec", "When", "load", "load_dict", "load_dir", "loads",
]
