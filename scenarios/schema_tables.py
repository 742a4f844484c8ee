"""The scenario file's `cluster.tables`: Ignite 3 style tables with a versioned catalog
and catalog compaction, run beside the KV (`scenarios/tables_tier.py`).

`tables: {}` (or any key below) starts a tables cluster of its own on `nodes` more
runtime nodes (`t1`, `t2`, ...): per node the metastore member, the partition members,
the table node and, beside the metastore leader, the compaction coordinator, the index
build driver and the rebalance driver (`sediment/wiring/tables.py`). It creates zone `Z`
(`partitions`, `replicas`) with table `T`, and runs `clients` tables clients that do
RW transactions, read-only reads and DDL (an added column: a new catalog version) at
`rate` operations a second each. `events` is the tier's own timeline: index builds,
rebalances, a dropped zone, a long transaction, and its faults (the metastore leader
killed, mid-compaction or not; a node killed; a node stopped for a while). Every run
with `cluster.tables` also runs the catalog history checks (docs/catalog.md section 6)
and `tables_tier` (the tier worked: compactions, commits, every event applied).

Validation is `schema_parse._Validator`'s primitives (`schema_blocks.Reader`); the hook
that reads the key is `schema_tables_parse.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from sediment.scenarios.schema_blocks import Path_, Reader

TABLES_CHECKS: tuple[str, ...] = ("catalog_compaction_safety", "catalog_atomic_visibility",
                                  "tables_tier")
TABLE_OPS: tuple[str, ...] = ("tx", "read", "ddl")
NODE_PICKS: tuple[str, ...] = ("leader", "any", "idle")  # idle: a node holding no partition
EVENT_ACTIONS: tuple[str, ...] = ("create_index", "alter_zone", "drop_zone",
                                  "long_transaction", "kill_leader", "kill_node",
                                  "stop_node")
MAX_EVENTS = 64


@dataclass(frozen=True)
class TablesMix:
    """Relative weights of the tables clients' operations."""

    tx: float = 60.0  # an RW transaction: 1-3 upserts, then commit (9 in 10) or rollback
    read: float = 30.0  # a read-only read of one row, now
    ddl: float = 10.0  # ALTER TABLE T ADD COLUMN: one more catalog version

    def weights(self) -> list[tuple[str, float]]:
        return [(f.name, float(getattr(self, f.name))) for f in fields(self)
                if getattr(self, f.name) > 0]


@dataclass(frozen=True)
class TablesEvent:
    """One step of the tier's timeline, at `at` seconds of traffic.

    - `create_index`: CREATE INDEX on T(v); `hold` s: the build held at BUILDING
      (the driver's `index_driver.before_available` failpoint), then released;
    - `alter_zone`: zone Z to `replicas`; `hold` s: the rebalance held before its
      stable record;
    - `drop_zone`: zone Y with table U created, a row written, both dropped;
    - `long_transaction`: an RW transaction that writes one row and stays open `hold` s;
    - `kill_leader`: the metastore leader's node killed (its supervisor restarts it);
      `mid_compaction`: first wait (at most `within` s) until a leader is about to
      apply a `CompactCatalog` and kill it there, committed and not applied on it;
    - `kill_node`: `node` (a name, leader, any, idle) killed, restarted by its
      supervisor;
    - `stop_node`: `node` stopped (missing from the topology) for `hold` s.
    """

    at: float
    action: str
    hold: float = 0.0
    replicas: int = 0
    node: str = "any"
    mid_compaction: bool = False
    within: float = 2.0


@dataclass(frozen=True)
class TablesSpec:
    nodes: int = 3
    partitions: int = 4
    replicas: int = 2
    clients: int = 2
    rate: float = 8.0  # ops/s per client
    keys: int = 16
    data_availability: float = 1.5  # seconds: the low watermark trails now by this
    lwm_interval: float = 0.3  # seconds between low-watermark updates
    # seconds a writer waits for a live holder's intent (node_state.DEFAULT_LOCK_WAIT;
    # 0: no-wait, it fails at once)
    lock_wait: float = 1.0
    mix: TablesMix = TablesMix()
    events: tuple[TablesEvent, ...] = ()

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(f"t{i}" for i in range(1, self.nodes + 1))


KNOWN = ("nodes", "partitions", "replicas", "clients", "rate", "keys", "data_availability",
         "lwm_interval", "lock_wait", "mix", "events")
_EVENT_KEYS: dict[str, tuple[str, ...]] = {
    "create_index": ("hold",), "alter_zone": ("replicas", "hold"), "drop_zone": (),
    "long_transaction": ("hold",), "kill_leader": ("mid_compaction", "within"),
    "kill_node": ("node",), "stop_node": ("node", "hold"),
}


def read_tables(r: Reader, v: object, path: Path_) -> TablesSpec:
    """`cluster.tables` (a mapping; `{}` or nothing: every default)."""
    m = {} if v is None else r.mapping(v, path, KNOWN)
    d = TablesSpec()

    def count(lo: int, hi: int) -> Callable[[object, Path_], int]:
        return lambda x, p: r.integer(x, p, lo, hi)

    def secs(lo: float, hi: float) -> Callable[[object, Path_], float]:
        return lambda x, p: r.number(x, p, lo, hi, open_lo=True)

    nodes = r.opt(m, "nodes", path, count(1, 7), d.nodes)
    replicas = r.opt(m, "replicas", path, count(1, 7), d.replicas)
    if replicas > nodes:
        r.fail((*path, "replicas"), f"must be at most nodes ({nodes}), got {replicas}")
    spec = TablesSpec(
        nodes=nodes,
        partitions=r.opt(m, "partitions", path, count(1, 64), d.partitions),
        replicas=replicas,
        clients=r.opt(m, "clients", path, count(1, 8), d.clients),
        rate=r.opt(m, "rate", path, secs(0.0, 1000.0), d.rate),
        keys=r.opt(m, "keys", path, count(1, 10_000), d.keys),
        data_availability=r.opt(m, "data_availability", path, secs(0.0, 600.0),
                                d.data_availability),
        lwm_interval=r.opt(m, "lwm_interval", path, secs(0.0, 60.0), d.lwm_interval),
        lock_wait=r.opt(m, "lock_wait", path, lambda x, p: r.number(x, p, 0.0, 60.0),
                        d.lock_wait),
        mix=r.opt(m, "mix", path, lambda x, p: _mix(r, x, p), d.mix),
    )
    if "events" in m:
        p = (*path, "events")
        items = r.items(m["events"], p, MAX_EVENTS)
        events = tuple(_event(r, x, (*p, i), spec) for i, x in enumerate(items))
        spec = TablesSpec(**{**{f.name: getattr(spec, f.name) for f in fields(spec)},
                             "events": events})
    return spec


def _event(r: Reader, v: object, path: Path_, spec: TablesSpec) -> TablesEvent:
    m = r.mapping(v, path, ("at", *EVENT_ACTIONS), required=("at",))
    at = r.number(m["at"], (*path, "at"), 0.0, r.duration)
    actions = [k for k in m if k in EVENT_ACTIONS]
    if len(actions) != 1:
        r.fail(path, f"needs exactly one action ({', '.join(EVENT_ACTIONS)}), got "
               f"{', '.join(actions) or 'none'}")
    action = actions[0]
    p = (*path, action)
    args = {} if m[action] is None else r.mapping(m[action], p, _EVENT_KEYS[action])
    hold = r.opt(args, "hold", p, lambda x, q: r.number(x, q, 0.0, r.duration), 0.0)
    if action in ("long_transaction", "stop_node") and "hold" not in args:
        r.fail((*p, "hold"), "is required")
    replicas = 0
    if action == "alter_zone":
        if "replicas" not in args:
            r.fail((*p, "replicas"), "is required")
        replicas = r.integer(args["replicas"], (*p, "replicas"), 1, spec.nodes)
    node = r.opt(args, "node", p, lambda x, q: r.choice(x, q, (*spec.node_names,
                                                               *NODE_PICKS)), "any")
    mid = r.opt(args, "mid_compaction", p, lambda x, q: _bool(r, x, q), False)
    within = r.opt(args, "within", p, lambda x, q: r.number(x, q, 0.0, r.duration,
                                                            open_lo=True), 2.0)
    return TablesEvent(at, action, hold, replicas, node, mid, within)


def _bool(r: Reader, v: object, path: Path_) -> bool:
    if not isinstance(v, bool):
        r.fail(path, "must be true or false")
    return v


def _mix(r: Reader, v: object, path: Path_) -> TablesMix:
    m = r.mapping(v, path, TABLE_OPS)
    weights = {k: r.number(m[k], (*path, k), 0.0, 1e6) for k in m}
    mix = TablesMix(**{k: weights.get(k, 0.0) for k in TABLE_OPS})
    if not mix.weights():
        r.fail(path, "at least one weight must be above 0")
    return mix


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x


def _event_dict(e: TablesEvent) -> dict[str, Any]:
    args: dict[str, Any] = {}
    if e.action in ("create_index", "alter_zone", "long_transaction", "stop_node") and (
            e.hold or e.action in ("long_transaction", "stop_node")):
        args["hold"] = _num(e.hold)
    if e.action == "alter_zone":
        args["replicas"] = e.replicas
    if e.action in ("kill_node", "stop_node"):
        args["node"] = e.node
    if e.action == "kill_leader":
        args.update(mid_compaction=e.mid_compaction, within=_num(e.within))
    return {"at": _num(e.at), e.action: args}


def tables_dict(t: TablesSpec) -> dict[str, Any]:
    """The plain form `read_tables` reads back to `t`."""
    return {"nodes": t.nodes, "partitions": t.partitions, "replicas": t.replicas,
            "clients": t.clients, "rate": _num(t.rate), "keys": t.keys,
            "data_availability": _num(t.data_availability),
            "lwm_interval": _num(t.lwm_interval),
            # only when set: a file without it reads and writes back as before
            **({} if t.lock_wait == TablesSpec.lock_wait else {"lock_wait": _num(t.lock_wait)}),
            "mix": {k: _num(getattr(t.mix, k)) for k in TABLE_OPS},
            "events": [_event_dict(e) for e in t.events]}


__all__ = ["EVENT_ACTIONS", "TABLES_CHECKS", "TABLE_OPS", "TablesEvent", "TablesMix",
           "TablesSpec", "read_tables", "tables_dict"]
