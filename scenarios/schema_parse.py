"""Reading a scenario file: YAML with the position of every value, then validation.

`schema.loads` and `schema.load_dict` come here. `schema_yaml.Doc` keeps the line and
column of every value and key, so each problem is a `ScenarioError` at its place in the
file; `_Validator` checks every field (unknown keys are errors, with a "did you mean") and
builds the frozen `schema.Scenario`. This module reads the scenario's top level, its
cluster and its traffic; `schema_faults.py` its faults, `schema_blocks.py` and
`schema_branches.py` its tiers, all through `schema_values.ValueReader`'s checks. Pure:
no clock, no cluster, no filesystem.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from sediment.scenarios.schema import (
    BACKENDS,
    CHECKS,
    CLIENT_KINDS,
    FILTERS,
    MAX_COMPACTIONS,
    MAX_DURATION_S,
    MAX_NODES,
    MAX_WATCHERS,
    MIX_OPS,
    NAME_RE,
    NODE_RE,
    NODE_ROLES,
    TIER_CHECKS,
    WATCH_STARTS,
    Backend,
    ClientKind,
    Cluster,
    CompactAt,
    Compactions,
    CompactTarget,
    Fault,
    Mix,
    Path_,
    Scenario,
    Settings,
    Traffic,
    WatcherSpec,
    WatchStart,
)
from sediment.scenarios.schema_blocks import read_blocks
from sediment.scenarios.schema_branches import read_branches
from sediment.scenarios.schema_faults import read_faults
from sediment.scenarios.schema_values import ValueReader
from sediment.scenarios.schema_yaml import Doc, did_you_mean, got, read_yaml, show_path


def parse_text(text: str, source: str) -> Scenario:
    """A scenario from YAML text (`schema.loads`)."""
    doc, data = read_yaml(text, source)
    return _Validator(doc).scenario(data)


def parse_data(data: Mapping[str, Any], source: str) -> Scenario:
    """A scenario from plain data (`schema.load_dict`)."""
    return _Validator(Doc(source)).scenario(data)


class _Validator(ValueReader):
    """The scenario's top level, cluster and traffic, into a `Scenario`."""

    def scenario(self, data: object) -> Scenario:
        top = ("name", "description", "seed", "duration", "ray_duration", "backends", "cluster",
               "traffic", "faults", "checks")
        m = self.mapping(data, (), top, required=("name", "duration"))
        name = self.string(m["name"], ("name",), NAME_RE,
                           "a name of lower-case letters, digits, '_', '.', '-' (<= 64)")
        self.duration = self.number(m["duration"], ("duration",), 0.0, MAX_DURATION_S,
                                    open_lo=True)
        ray_duration = self.opt(m, "ray_duration", (), lambda v, p: self.number(
            v, p, self.duration, MAX_DURATION_S), None)
        description = self.opt(m, "description", (), self.string, "")
        seed = self.opt(m, "seed", (), lambda v, p: self.integer(v, p, 0, 2**63 - 1), 0)
        backends = self.opt(m, "backends", (), self.backends, BACKENDS)
        cluster = self.opt(m, "cluster", (), self.cluster, Cluster())
        self.nodes = cluster.nodes
        self.blocks = cluster.blocks is not None
        self.branches = cluster.branches is not None
        self.spark = cluster.branches is not None and cluster.branches.spark is not None
        if self.spark and "sim" in backends:
            self.fail(("cluster", "branches", "spark"), "Spark runs on Ray only (RayDP; the "
                      "simulator has no Spark): add backends: [ray]")
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
        if ray_duration is not None and "ray" not in backends:
            self.fail(("ray_duration",), "a scenario that does not run on ray has no "
                      "ray_duration: remove it or add ray to backends")
        return Scenario(name, self.duration, description, seed, backends, cluster, traffic,
                        faults, checks, ray_duration)

    def backends(self, v: object, path: Path_) -> tuple[Backend, ...]:
        items = self.items(v, path, len(BACKENDS), empty=False)
        names = [cast(Backend, self.choice(x, (*path, i), BACKENDS)) for i, x in enumerate(items)]
        return self.distinct(names, path)

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
                      f"got {got(v)}")
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
            self.fail(path, f"must be [lo, hi] in seconds, got {got(v)}")
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
                  f"got {got(v)}")

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
                          f"must be a revision >= 1, head or random, got {got(x)}")
        return CompactAt(at, rev)

    def faults(self, v: object, path: Path_) -> tuple[Fault, ...]:
        return read_faults(self, v, path)


__all__ = ["did_you_mean", "parse_data", "parse_text", "show_path"]
