"""The KV's metrics: requests, revisions, watches and compaction cycles.

Recorded through `sediment.metrics` (Ray's metrics API on Ray, the in-memory snapshot on
the simulator), each from the one place that knows it, with one call per shell:

- requests: `counted(api, request)` around the Python client's calls (`cluster.py`),
  `request(...)` in the etcd API's unary handler (`actors/etcd/shell/services.py`);
- the node's revisions, floor and watches: `node_state(...)` after each message of the
  KV node process (`node.py`), recomputed only when its admission state changed;
- watch sessions and cancellations: the watcher process (`watcher.py`);
- compaction cycles: `cycle_ended(...)` on the coordinator's CycleEnded (`coordinator.py`).
  Rows compacted are counted by the raft member hosting the machine
  (`actors/log/shell/raft_metrics.py`, `sediment_compaction_rows`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sediment import metrics
from sediment.actors.kv import admission as adm
from sediment.actors.kv.coordinator_core import CycleEnded
from sediment.metrics import Counter, Gauge, Histogram

NODE = ("node",)
REQUESTS = Counter("kv_requests", "KV requests answered, by API (python, etcd), request type "
                   "and code (ok, or the error's class name)", ("api", "type", "code"))
REVISION = Gauge("kv_revision", "the head revision the node's KV process has seen applied",
                 NODE)
COMPACT_REVISION = Gauge("kv_compact_revision", "the node's applied compaction revision", NODE)
FLOOR = Gauge("kv_floor", "the node's admission floor: no watch may start at or below it "
              "(a confirmed compaction notice raises it before the compaction commits)", NODE)
MIN_REVISION = Gauge("kv_min_revision", "what the node reports to the compaction "
                     "coordinator: the lowest revision its watches still need", NODE)
WATCHES = Gauge("watches", "watches admitted on the node", NODE)
WATCH_SESSIONS = Gauge("watch_sessions", "watcher sessions (client streams) on the node", NODE)
WATCH_LAG = Gauge("watch_lag_revisions", "revisions between the node's head and the "
                  "position its slowest watch last reported (0: every watch is synced)", NODE)
WATCH_SESSION_CLOSES = Counter("watch_session_closes", "watcher sessions ended, by reason: "
                               "slow (a client that did not keep up), client, node_down, "
                               "owner_down", (*NODE, "reason"))
WATCH_CANCELS = Counter("watch_cancels", "watches ended by a Canceled answer, by reason: "
                        "canceled (asked), compacted, error", (*NODE, "reason"))
COMPACTION_CYCLES = Counter("compaction_cycles", "compaction cycles ended on the leader's "
                            "coordinator, by outcome", (*NODE, "outcome"))
COMPACTION_ABORTS = Counter("compaction_aborts", "compaction cycles that failed, by reason "
                            "(the outcome: min_failed, refused, notice_timeout, "
                            "propose_failed, propose_timeout, leadership_lost)",
                            (*NODE, "reason"))
COMPACTION_CYCLE_SECONDS = Histogram("compaction_cycle_seconds",
                                     "how long a compaction cycle ran, start to end", NODE)

NOT_ABORTS = frozenset({"compacted", "nothing_to_compact"})
_ETCD_NAMES = {"Compaction": "Compact"}  # etcd's request names -> the KV's command names


def request(api: str, kind: str, code: str) -> None:
    REQUESTS.inc(1, {"api": api, "type": kind, "code": code})


def type_name(request_object: object) -> str:
    """The request's type: the KV command's class name, an etcd request's without its
    `Request` suffix (CompactionRequest is Compact)."""
    name = type(request_object).__name__.removesuffix("Request")
    return _ETCD_NAMES.get(name, name)


@contextmanager
def counted(api: str, command: object) -> Iterator[None]:
    """Count one request by how it ends: ok, or the class name of what it raised."""
    try:
        yield
    except Exception as exc:
        request(api, type_name(command), type(exc).__name__)
        raise
    request(api, type_name(command), "ok")


class _NodeGauges:
    """One node's gauges (bound once), the values they hold, and the state they came from."""

    __slots__ = ("gauges", "values", "seen")

    def __init__(self, node: str) -> None:
        tags = {"node": node}
        self.gauges = tuple(g.bind(tags) for g in (REVISION, COMPACT_REVISION, FLOOR,
                                                   MIN_REVISION, WATCHES, WATCH_SESSIONS,
                                                   WATCH_LAG))
        self.values: list[float | None] = [None] * len(self.gauges)
        self.seen: tuple[adm.AdmissionState, int, int] | None = None


_nodes: dict[str, _NodeGauges] = {}


def node_state(node: str, state: adm.AdmissionState, compact_revision: int,
               sessions: int) -> None:
    """The KV node's gauges; a message that changed nothing costs one comparison, and
    only the values that moved are recorded."""
    gauges = _nodes.get(node)
    if gauges is None:
        gauges = _nodes[node] = _NodeGauges(node)
    seen = gauges.seen
    if (seen is not None and seen[0] is state and seen[1] == compact_revision
            and seen[2] == sessions):
        return
    gauges.seen = (state, compact_revision, sessions)
    slowest = min(state.watches.values(), default=state.committed + 1)
    values = (state.committed, compact_revision, adm.floor(state), adm.min_revision(state),
              len(state.watches), sessions, max(0, state.committed + 1 - slowest))
    for i, v in enumerate(values):
        if gauges.values[i] != v:
            gauges.values[i] = v
            gauges.gauges[i].set(v)


def _forget_nodes() -> None:
    """After metrics.reset(): set every gauge again at the next message."""
    for gauges in _nodes.values():
        gauges.seen = None
        gauges.values = [None] * len(gauges.gauges)


def cycle_ended(node: str, ended: CycleEnded) -> None:
    tags = {"node": node}
    COMPACTION_CYCLES.inc(1, {**tags, "outcome": ended.outcome})
    if ended.outcome not in NOT_ABORTS:
        COMPACTION_ABORTS.inc(1, {**tags, "reason": ended.outcome})
    COMPACTION_CYCLE_SECONDS.observe(max(0.0, ended.duration), tags)


def watch_session_closed(node: str, reason: str) -> None:
    WATCH_SESSION_CLOSES.inc(1, {"node": node, "reason": reason})


def watch_canceled(node: str, reason: str) -> None:
    WATCH_CANCELS.inc(1, {"node": node, "reason": reason})


metrics.on_reset(_forget_nodes)

__all__ = ["counted", "cycle_ended", "node_state", "request", "type_name",
           "watch_canceled", "watch_session_closed"]
