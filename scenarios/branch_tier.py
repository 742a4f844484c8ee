"""The branch tier in a scenario run (`cluster.branches`, `schema_branches.py`): its
services, its repository, its clients and what the `branch_reads` check judges.

- `services`: before the cluster starts, a history collector on the runner's node and
  the services' configuration, which `Cluster.start(..., branches=...)` runs beside
  the KV leader (a follower under every KV node's supervisor runs the sensor, the
  compactor and the garbage collector while its member leads);
- `start`: once the cluster runs, with `sensors: 2` a second sensor and compactor
  pair under its own supervisor on the first KV node, whose compactor takes the
  second sensor's triggers; the repository and its branches, created through the KV's
  log with their events recorded.
- `branch_client`: one client process (after the runner's Go, until the run's end):
  puts and deletes staged on a branch (deletes reported to every sensor, as a writer
  does, fire and forget), gets, list pages and diffs, commits, resets, and calls to a
  compactor for a compaction (forced or not). Every flow records its events to the
  collector; errors the tier answers (conflicts, a KV that did not answer in time, a
  compactor that is down) are counted, not fatal.
- `collect`: after recovery, the collected events, checked by
  `checkers/branch_reads.py`, and notes: compactions by outcome, sensor counts,
  client outcomes (and with `spark`, the bridge's counts; the bridge is stopped).

With `spark` (Ray only) `start` spawns the cluster's Spark bridge on the runner's node
and warms its session with one merge (20-40 s, before the run's clock starts), and the
compactors send their merges to it (`shell/merging.py`). The fault role
`spark_executor` is a RayDP executor actor (`kill_spark_executor`, from the driver), the
trigger `spark_merge_running` the bridge running a merge (`wait_for_spark_merge`,
polled by the run's trigger waiter).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sediment.actors.branches import commits, reads
from sediment.actors.branches import sensor as sn
from sediment.actors.branches.apply import SplitRule
from sediment.actors.branches.entry import Entry
from sediment.actors.branches.errors import BranchesError
from sediment.actors.branches.history import Event
from sediment.actors.branches.metarange import MetaRangeStore
from sediment.actors.branches.sensor import SensorConfig
from sediment.actors.branches.shell.compactor import CompactorConfig, compactor_process
from sediment.actors.branches.shell.kv_process import ProcessKv
from sediment.actors.branches.shell.merging import BridgeMerger, SparkPolicy
from sediment.actors.branches.shell.names import COMPACTOR_NAME, SENSOR_NAME
from sediment.actors.branches.shell.process_env import ProcessEnv
from sediment.actors.branches.shell.protocol import Compact, CompactFailed
from sediment.actors.branches.shell.recorder import (
    CollectedEvents,
    ProcessRecorder,
    TakeEvents,
    collector,
)
from sediment.actors.branches.shell.sensor import SensorProcessConfig, sensor_process
from sediment.actors.branches.shell.service import FLAGS, ServicesConfig
from sediment.actors.branches.tier import Tier, TierConfig
from sediment.actors.kv.errors import KvError
from sediment.actors.kv.types import Event as KvEvent
from sediment.runtime.common_calls import Status
from sediment.runtime.errors import CallError
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process
from sediment.scenarios import recorder_protocol as rp
from sediment.scenarios.checkers.branch_reads import check_branch_reads
from sediment.scenarios.checkers.result import CheckResult
from sediment.scenarios.processes import wait_for_go
from sediment.scenarios.schema_branches import BranchesSpec
from sediment.supervision import ChildSpec, Spawn, start_top

REPO = "scenario"
RULE = SplitRule(min_entries=2, max_entries=16, raggedness=4)  # small ranges: many files
SECOND_SENSOR, SECOND_COMPACTOR, SECOND_TOP = ("branches-sensor-2", "branches-compactor-2",
                                               "branches-2")
SETUP_TIMEOUT = 120.0


@dataclass(frozen=True)
class ClientOutcomes:
    """A branches client's counts of outcomes ("put:ok", "commit:Conflict", ...), sent
    to the history collector when the client ends."""

    client: int
    outcomes: dict[str, int]


@dataclass(frozen=True)
class Started:
    collector: Pid
    root: str
    branches: tuple[str, ...]
    sensors: tuple[str, ...]
    compactors: tuple[str, ...]
    spark: bool = False  # the Spark bridge runs (`start_spark`)


def branch_names(spec: BranchesSpec) -> tuple[str, ...]:
    return ("main", *(f"b{i}" for i in range(1, spec.branches)))


def services(rt: Any, spec: BranchesSpec, nodes: tuple[str, ...], root: str, seed: int,
             client_node: str) -> tuple[Pid, ServicesConfig]:
    """The history collector, and the services for `Cluster.start(..., branches=)`."""
    coll = rt.spawn(collector, node=client_node, label="branch-history")
    config = TierConfig(compaction_interval=spec.compaction_interval)
    compactor = CompactorConfig(nodes, root, config, RULE, poll_interval=spec.poll_interval,
                                recorder=coll, seed=seed, spark=spark_policy(spec))
    return coll, ServicesConfig(SensorConfig(threshold=spec.threshold), compactor)


def start(rt: Any, spec: BranchesSpec, nodes: tuple[str, ...], root: str, seed: int,
          client_node: str, coll: Pid) -> Started:
    """The second pair if asked, the repository and its branches (the services run
    with the cluster, `services`)."""
    config = TierConfig(compaction_interval=spec.compaction_interval)
    sensors, compactors = [SENSOR_NAME], [COMPACTOR_NAME]
    if spec.sensors == 2:
        second = CompactorConfig(nodes, root, config, RULE, poll_interval=spec.poll_interval,
                                 sensor=SECOND_SENSOR, recorder=coll, seed=seed + 1,
                                 spark=spark_policy(spec))
        children = [
            ChildSpec("sensor", (Spawn(sensor_process, node=nodes[0], name=SECOND_SENSOR,
                                       label=SECOND_SENSOR),
                                 (SensorProcessConfig(SensorConfig(threshold=spec.threshold),
                                                      SECOND_COMPACTOR),))),
            ChildSpec("compactor", (Spawn(compactor_process, node=nodes[0],
                                          name=SECOND_COMPACTOR, label=SECOND_COMPACTOR),
                                    (second,)), shutdown=30.0),
        ]
        start_top(rt, FLAGS, children, name=SECOND_TOP, node=client_node)
        sensors.append(SECOND_SENSOR)
        compactors.append(SECOND_COMPACTOR)
    names = branch_names(spec)
    if spec.spark is not None:
        start_spark(rt, root, client_node)
    rt.run(_setup, _Setup(nodes, root, names, coll, seed), node=client_node,
           timeout=SETUP_TIMEOUT)
    return Started(coll, root, names, tuple(sensors), tuple(compactors), spec.spark is not None)


def spark_policy(spec: BranchesSpec) -> SparkPolicy:
    """The compactors' merger policy: the file's `spark`, else the tier's default (which
    finds no bridge in a scenario and merges here)."""
    if spec.spark is None:
        return SparkPolicy()
    return SparkPolicy(threshold=spec.spark.threshold, timeout=spec.spark.timeout)


SPARK_WARMUP_REPO = "spark-warmup"
SPARK_START_TIMEOUT = 900.0  # bound on starting the session (20-40 s alone; not a claim)
SPARK_HEALTH_INTERVAL = 1.0  # the bridge looks for live executors this often mid-merge


def start_spark(rt: Any, root: str, node: str) -> None:
    """The cluster's Spark bridge, its session started by one merge through it (the
    compactor's merger, every merge to Spark); a bridge that did not run it on Spark
    fails the run's start."""
    from sediment.actors.spark.session import SparkSettings
    from sediment.actors.spark.shell.bridge import spark_bridge

    rt.spawn(spark_bridge, SparkSettings(executor_memory="1g"), None, None, 8, None, 900.0,
             SPARK_HEALTH_INTERVAL, node=node)
    status = rt.run(_warm_spark, root, node=node, timeout=SPARK_START_TIMEOUT + 60)
    if getattr(status, "completed", 0) != 1:
        raise RuntimeError(f"the Spark bridge did not merge on Spark: {status!r:.300}")


async def _warm_spark(ctx: Process, root: str) -> Any:
    from sediment.actors.spark.shell.bridge import BRIDGE_NAME

    deadline = ctx.now() + SETUP_TIMEOUT
    while await ctx.whereis(BRIDGE_NAME) is None:  # spawned, maybe not registered yet
        if ctx.now() > deadline:
            raise RuntimeError("the Spark bridge did not register")
        await ctx.sleep(0.1)
    store = MetaRangeStore(root, RULE)
    base = store.apply(SPARK_WARMUP_REPO, store.empty(SPARK_WARMUP_REPO),
                       [(f"w/{i:04d}", Entry(f"s3://warm/{i}", i, f"w{i}")) for i in range(64)])
    merger = BridgeMerger(ctx, ProcessEnv(ctx), SparkPolicy(threshold=0,
                                                            timeout=SPARK_START_TIMEOUT))
    await merger.merge(store, SPARK_WARMUP_REPO, base[0],
                       [(f"w/{i:04d}", None) for i in range(0, 64, 4)])
    return await ctx.call(BRIDGE_NAME, Status(), timeout=30)


SPARK_ACTOR = "Executor"  # RayDP's executor actors' class names hold it


def spark_executors() -> list[dict[str, Any]]:
    """RayDP's live Spark executor actors, by name, from the GCS's actor table (Ray's
    state API needs the dashboard, which `sediment run` does not start)."""
    import ray

    table = ray._private.state.actors()  # noqa: SLF001 - the one dashboard-free listing
    alive = [a for a in table.values() if a.get("State") == "ALIVE"
             and SPARK_ACTOR in str(a.get("ActorClassName") or "")]
    return sorted(alive, key=lambda a: str(a.get("Name")))


def kill_spark_executor() -> dict[str, Any]:
    """The fault `kill_process: {role: spark_executor}`: one live RayDP executor
    killed (its worker process SIGKILLed: this machine's; RayDP does not restart it, the
    bridge then finds none, cancels its job and replaces the session before the next).
    Driver side, Ray only."""
    import os
    import signal

    found = spark_executors()
    if not found:
        return {"node": "spark", "process": None, "missed": "no live Spark executor"}
    victim = found[0]
    what = f"{victim.get('ActorClassName')} {victim.get('Name')} pid {victim.get('Pid')}"
    try:
        os.kill(int(victim["Pid"]), signal.SIGKILL)
    except (KeyError, ValueError, OSError) as err:
        return {"node": "spark", "process": what, "missed": f"kill failed: {err}"}
    return {"node": "spark", "process": what, "executors": len(found)}


async def wait_for_spark_merge(ctx: Process, deadline: float,
                               interval: float) -> tuple[bool, float, str]:
    """The trigger `spark_merge_running`: (hit, when, what was seen) once the bridge
    runs a merge, polled every `interval` s until `deadline` (the runtime's clock)."""
    from sediment.actors.spark.shell.bridge import BRIDGE_NAME

    while True:
        try:
            status = await ctx.call(BRIDGE_NAME, Status(), timeout=5.0)
        except CallError:
            status = None
        running = getattr(status, "running", None)
        if running is not None:
            return True, ctx.now(), (f"the Spark bridge runs {running} (completed "
                                     f"{status.completed}, failed {status.failed})")
        if ctx.now() + interval > deadline:
            return False, ctx.now(), "the Spark bridge ran no merge"
        await ctx.sleep(interval)


@dataclass(frozen=True)
class _Setup:
    nodes: tuple[str, ...]
    root: str
    branches: tuple[str, ...]
    collector: Pid
    seed: int


def _tier(ctx: Process, nodes: tuple[str, ...], root: str, interval: float, coll: Pid,
          seed: int, timeout: float = 10.0, on_delete: Any = None) -> Tier:
    return Tier(ProcessKv(ctx, nodes, timeout=timeout), ProcessEnv(ctx, seed),
                MetaRangeStore(root, RULE), TierConfig(compaction_interval=interval),
                ProcessRecorder(ctx, coll), on_delete)


async def _setup(ctx: Process, cfg: _Setup) -> None:
    tier = _tier(ctx, cfg.nodes, cfg.root, 1.0, cfg.collector, cfg.seed)
    await commits.create_repo(tier, REPO, cfg.branches[0])
    for name in cfg.branches[1:]:
        await commits.create_branch(tier, REPO, name, cfg.branches[0])


@dataclass(frozen=True)
class ClientConfig:
    client: int
    seed: int
    spec: BranchesSpec
    nodes: tuple[str, ...]
    started: Started
    recorder: Pid  # the scenario's recorder: told when this client is done
    op_timeout: float


def client_name(client: int) -> str:
    return f"branch-client-{client}"


async def branch_client(ctx: Process, cfg: ClientConfig) -> None:
    """Process entry: branch operations after Go until the run's end, at the rate."""
    end_t = (await wait_for_go(ctx)).end_t
    spec, st = cfg.spec, cfg.started
    rng = random.Random(f"sediment-branches-{cfg.seed}-{cfg.client}")
    sensor_pids: list[Pid] = []

    def on_delete(repo: str, branch: str, token: str, sealed: int) -> None:
        for pid in sensor_pids:
            ctx.send(pid, sn.CountDelete(repo, branch, token, sealed))

    tier = _tier(ctx, cfg.nodes, st.root, spec.compaction_interval, st.collector,
                 cfg.seed * 1000 + cfg.client, cfg.op_timeout, on_delete)
    ops, weights = zip(*spec.mix.weights(), strict=True)
    outcomes: dict[str, int] = {}
    period = 1.0 / spec.rate
    next_at = ctx.now() + period * rng.random()
    n = 0
    while ctx.now() < end_t:
        wait = next_at - ctx.now()
        if wait > 0:
            await ctx.sleep(wait)
        next_at = max(next_at + period, ctx.now())
        if ctx.now() >= end_t:
            break
        op = rng.choices(ops, weights)[0]
        n += 1
        if op == "rm":
            sensor_pids[:] = [p for p in [await ctx.whereis(s) for s in st.sensors]
                              if p is not None]
        try:
            await _one(ctx, tier, cfg, rng, op, n)
            outcome = f"{op}:ok"
        except (BranchesError, KvError, CallError) as err:
            outcome = f"{op}:{type(err).__name__}"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    ctx.send(cfg.recorder, rp.Finished(client_name(cfg.client)))
    ctx.send(st.collector, ClientOutcomes(cfg.client, outcomes))


async def _one(ctx: Process, tier: Tier, cfg: ClientConfig, rng: random.Random, op: str,
               n: int) -> None:
    st, spec = cfg.started, cfg.spec
    branch = rng.choice(st.branches)
    path = f"p/{rng.randrange(spec.paths):04d}"
    tag = f"c{cfg.client}-{n}"
    if op == "put":
        await commits.stage(tier, REPO, branch, path, Entry(f"s3://bucket/{tag}", n, tag))
    elif op == "rm":
        await commits.stage(tier, REPO, branch, path, None)
    elif op == "get":
        await reads.get_entry(tier, REPO, branch, path)
    elif op == "ls":
        prefix = rng.choice(("", "p/", "p/000"))
        await reads.list_entries(tier, REPO, branch, prefix, rng.choice(("", path)),
                                 rng.randint(1, 6))
    elif op == "diff":
        await reads.diff_uncommitted(tier, REPO, branch, "", rng.choice(("", path)),
                                     rng.randint(1, 6))
    elif op == "commit":
        await commits.commit(tier, REPO, branch, tag)
    elif op == "reset":
        await commits.reset(tier, REPO, branch)
    else:
        compactor = await ctx.whereis(rng.choice(st.compactors))
        if compactor is None:
            raise _Down("no compactor registered")
        answer = await ctx.call(compactor, Compact(REPO, branch, rng.random() < 0.5),
                                timeout=cfg.op_timeout * 4)
        if isinstance(answer, CompactFailed) and isinstance(answer.error, BaseException):
            raise answer.error


class _Down(BranchesError):
    """The compactor a client asked was not running (moving with the KV leader)."""


def collect(rt: Any, started: Started, log: Sequence[KvEvent] | None = None,
            log_complete: bool = False) -> tuple[CheckResult, list[str]]:
    """The `branch_reads` check of the collected history (completed from the committed
    log's events, `log`, when given), and notes for the report."""
    answer = rt.call(started.collector, TakeEvents(), timeout=120)
    if not isinstance(answer, CollectedEvents):
        raise RuntimeError(f"the branch history collector answered {answer!r:.200}")
    events: list[Event] = []
    outcomes: dict[str, int] = {}
    for ev in answer.events:
        if isinstance(ev, ClientOutcomes):
            for k, v in ev.outcomes.items():
                outcomes[k] = outcomes.get(k, 0) + v
        else:
            events.append(ev)
    notes = [f"branch clients: {_counts(outcomes)}"]
    if answer.dropped:
        notes.append(f"branch history: {answer.dropped} events dropped (collector full)")
    for name in started.compactors:
        notes.append(f"{name}: {_status(rt, name, 'counts')}")
    for name in started.sensors:
        status = _status(rt, name, None)
        notes.append(f"{name}: {status}")
    kinds: dict[str, int] = {}
    for ev in events:
        kind = getattr(ev, "kind", None) if type(ev).__name__ in ("Updated", "Lost") else None
        if kind is not None:
            key = f"{type(ev).__name__.lower()}:{kind}"
            kinds[key] = kinds.get(key, 0) + 1
    notes.append(f"branch updates: {_counts(kinds)}")
    if started.spark:
        notes.append(f"spark bridge: {_stop_spark(rt)}")
    return check_branch_reads(events, log, log_complete), notes


def _stop_spark(rt: Any) -> str:
    """The bridge's counts (the warm-up merge is one completed), then stopped with its
    session."""
    from sediment.actors.spark.shell.bridge import BRIDGE_NAME
    from sediment.actors.spark.shell.bridge_protocol import Stop

    try:
        status = rt.call(BRIDGE_NAME, Status(), timeout=30)
        rt.call(BRIDGE_NAME, Stop(), timeout=120)
    except CallError as err:
        return f"no status ({type(err).__name__})"
    return (f"completed {status.completed}, failed {status.failed}, refused "
            f"{status.refused}, session {status.session}")


def _status(rt: Any, name: str, field: str | None) -> str:
    try:
        answer = rt.call(name, Status(), timeout=10)
    except CallError as err:
        return f"no status ({type(err).__name__})"
    if field is not None and isinstance(answer, dict):
        answer = answer.get(field, answer)
    return repr(answer)[:300]


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"


def client_names(spec: BranchesSpec) -> Sequence[str]:
    return [client_name(c) for c in range(spec.clients)]


__all__ = ["REPO", "ClientConfig", "Started", "branch_client", "branch_names",
           "client_name", "client_names", "collect", "kill_spark_executor", "services",
           "spark_executors", "spark_policy", "start", "start_spark",
           "wait_for_spark_merge"]
