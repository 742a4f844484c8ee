"""Run one scenario on a backend: start the cluster, drive traffic, inject the faults on
their timeline, recover, and check what happened.

`run_scenario(scenario, backend, seed, data_dir, progress=callback) -> RunResult`
(`run_types.py`: the result, the progress reports, the time bounds per backend).

The runtime gets one node more than the cluster, `client`: the recorder, the clients,
the watchers, the log tail and the monitor run there (processes.py, watch_client.py,
observers.py), and so do the cluster's top supervisor and every driver call, so no
fault on a KV node touches them.
On `sim` the whole run is a function of the seed: the same seed replays the same
history (process code iterates insertion-ordered collections, never sets, so Python's
string hashing does not matter). On `ray` the same code runs with real processes and
real time.

The run, each phase bounded:
1. start the cluster (the scenario's settings), the recorder, monitor and log tail;
2. traffic: clients, the compactor and watchers run until `duration`, while the driver
   sleeps until each fault's time and applies it (`fault_driver.py`; a fault with
   `when` first waits for its protocol moment, at most its window);
3. recovery: the clients stop, every fault is undone (heal, restart, disarm), and the
   cluster must settle (one leader, every member up and applied to the same index);
4. a final linearizable read of every key, the watchers' final bookmarks, the log tail
   catches up with the final commit index;
5. the checks the scenario names, plus `recovered` (the cluster settled) and
   `committed_log` (every committed write was sent by a client).

With `cluster.blocks` the KV starts with its block tier (`tier.py`): a tier monitor takes
hold samples from the start, a history compactor moves the blocks' compaction revision
during the traffic (if the scenario asks), tier roles are fault targets and tier moments
triggers, and after step 4 the runner reads the tier (`tier_collect.py`) for the tier's
checks.

With `cluster.branches` the branch tier's services run beside the KV leader, branch
clients run with the KV traffic (`branch_tier.py`), and after recovery the branch
history they and the compactors recorded goes through the `branch_reads` check.
"""

from __future__ import annotations

import random
import shutil
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

from sediment import log
from sediment.runtime import api
from sediment.runtime.common_calls import Status
from sediment.runtime.errors import RuntimeErrorBase
from sediment.runtime.pid import Pid
from sediment.scenarios import (
    branch_tier,
    checkers,
    nemesis,
    observe,
    observers,
    processes,
    tables_tier,
    tier,
    tier_collect,
    trigger_waiter,
    watch_client,
)
from sediment.scenarios import recorder_protocol as rp
from sediment.scenarios.assemble import Assembled, assemble
from sediment.scenarios.checkers.result import CheckResult, passed, violated
from sediment.scenarios.checkers.tier_state import TierState
from sediment.scenarios.fault_driver import FaultDriver
from sediment.scenarios.history import FaultEvent, History
from sediment.scenarios.run_types import Progress, ProgressFn, RunResult, Timing
from sediment.scenarios.schema import CLIENT_KINDS, Scenario

_logger = log.get_logger("sediment.scenarios.runner")

CLIENT_NODE = "client"
# The run's own processes (clients, watch clients, the recorder, the observers) share one
# host on CLIENT_NODE: on Ray each host is an actor whose start costs about a second of
# CPU, which a run paid a dozen times while it measured the cluster.
HARNESS_HOST = "harness"
RECOVERED = "recovered"
COMMITTED_LOG = "committed_log"
def run_scenario(scenario: Scenario, backend: str = "sim", seed: int | None = None,
                 data_dir: str | Path | None = None, progress: ProgressFn | None = None,
                 timing: Timing | None = None, cluster_options: dict[str, Any] | None = None,
                 client: str | None = None) -> RunResult:
    """Run `scenario` once (seed: the scenario's own unless given). `data_dir` must be
    empty or missing; the cluster keeps its files there. `cluster_options` are extra
    keyword arguments for Cluster.start (tests use them to plant faults). `client`
    ("native" or "grpc") overrides the scenario's `traffic.client`."""
    if backend not in api.BACKENDS:
        raise ValueError(f"backend must be one of {api.BACKENDS}, got {backend!r}")
    if client is not None:
        if client not in CLIENT_KINDS:
            raise ValueError(f"client must be one of {CLIENT_KINDS}, got {client!r}")
        scenario = replace(scenario, traffic=replace(scenario.traffic, client=client))
    if scenario.traffic.client == "grpc" and backend != "ray":
        raise nemesis.UnsupportedScenario(
            f"{scenario.name}: client grpc needs the ray backend (the simulator has no "
            "sockets for the gRPC API)")
    if backend not in scenario.backends:
        raise nemesis.UnsupportedScenario(
            f"{scenario.name} runs on {', '.join(scenario.backends)} only, not {backend}")
    nemesis.check_supported(scenario)
    scenario = scenario.on(backend)
    seed = scenario.seed if seed is None else seed
    path = Path(data_dir) if data_dir is not None else Path(
        f"/tmp/sediment-scenarios/{scenario.name}-{backend}-{seed}")
    if path.exists() and any(path.iterdir()):
        raise ValueError(f"data_dir {path} is not empty")
    path.mkdir(parents=True, exist_ok=True)
    run = _Run(scenario, backend, seed, path, progress or (lambda p: None),
               timing or Timing.for_backend(backend), cluster_options or {})
    return run.execute()


class _Run:
    def __init__(self, scenario: Scenario, backend: str, seed: int, path: Path,
                 progress: ProgressFn, timing: Timing, options: dict[str, Any]) -> None:
        self.s, self.backend, self.seed, self.path = scenario, backend, seed, path
        self.progress, self.timing, self.options = progress, timing, options
        self.nodes = scenario.cluster.nodes
        self.rng = random.Random(f"sediment-nemesis-{seed}")
        self.faults: list[FaultEvent] = []
        self.notes: list[str] = []
        self.timings: dict[str, float] = {}
        self.placement: dict[str, str] = {}
        self.rt: Any = None
        self.cluster: Any = None
        self.t0 = 0.0
        self.recorder: Pid | None = None
        self.watchers: list[Pid] = []
        self.tail: Pid | None = None
        self.monitor: Pid | None = None
        self.tier_monitor: Pid | None = None
        self.waiter: Pid | None = None
        self.tier: TierState | None = None
        self.branches: branch_tier.Started | None = None
        self.tables: tables_tier.TablesTier | None = None
        self.settled = False
        self.settle_view = ""
        self.injector: nemesis.Injector | None = None
        self.fault_driver: FaultDriver | None = None

    # -- the phases --

    def execute(self) -> RunResult:
        wall = time.monotonic()
        try:
            self._start()
            self._traffic()
            final = self._recover()
            self.tier = self._collect_tier(final)
            assembled = self._collect(final)
            checks = self._check(assembled)
            history, samples = assembled.history, assembled.samples
            notes = [*self.notes, *assembled.notes]
            error = None
        except Exception as exc:  # noqa: BLE001 - a failed run is a result, with its cause
            _logger.error("scenario run failed", scenario=self.s.name, error=repr(exc),
                          traceback=traceback.format_exc())
            checks, history, samples, notes = [], History(faults=tuple(self.faults)), (), \
                self.notes
            error = f"{type(exc).__name__}: {exc}"
        finally:
            if self.rt is not None:
                self.rt.shutdown()
        self.timings["wall"] = time.monotonic() - wall
        result = RunResult(self.s, self.backend, self.seed, checks, history, samples, notes,
                           self.timings, str(self.path), error, self.placement, self.tier)
        self._report("done", self.s.duration, f"verdict {result.verdict}")
        return result

    def _report(self, phase: str, t: float, message: str = "", ops: int = 0) -> None:
        self.progress(Progress(phase, min(t, self.s.duration), self.s.duration, ops, message))

    def _start(self) -> None:
        from sediment.wiring.cluster import Cluster

        began = time.monotonic()
        self._report("start", 0.0, f"starting {len(self.nodes)} nodes on {self.backend}")
        nodes = (CLIENT_NODE, *self.nodes, *tables_tier.extra_nodes(self.s.cluster.tables))
        if self.backend == "sim":
            self.rt = api.start("sim", seed=self.seed, nodes=nodes, trace=False)
        else:
            from sediment.runtime.ray.runtime import RayRuntime

            ray_rt = api.start("ray", nodes=nodes)
            assert isinstance(ray_rt, RayRuntime)
            self.placement = dict(ray_rt.config.node_map)  # which raylet runs each node
            self.rt = ray_rt
        settings = self.s.cluster.settings.to_kwargs()
        blocks = self.s.cluster.blocks
        if blocks is not None:
            settings["blocks"] = tier.block_tier(blocks, self.s.cluster.settings)
        if self.s.traffic.client == "grpc":  # every node serves etcd's API
            from sediment.actors.etcd.shell.server import EtcdWire

            settings["etcd"] = EtcdWire()
        bspec = self.s.cluster.branches
        if bspec is not None:
            history, settings["branches"] = branch_tier.services(
                self.rt, bspec, self.nodes, str(self.path / "blocks"), self.seed, CLIENT_NODE)
        self.cluster = Cluster.start(self.nodes, data_dir=str(self.path / "kv"),
                                     runtime=self.rt, top_node=CLIENT_NODE,
                                     **{**settings, **self.options})
        self.recorder = self.rt.spawn(processes.recorder, node=CLIENT_NODE, host=HARNESS_HOST,
                                      label="scenario-recorder")
        t = self.timing
        self.monitor = self.rt.spawn(
            observers.monitor, observers.MonitorConfig(self.nodes, self.recorder,
                                                       t.sample_interval),
            node=CLIENT_NODE, host=HARNESS_HOST, label="scenario-monitor")
        self.tail = self.rt.spawn(
            observers.log_tail, observers.TailConfig(self.nodes, self.recorder,
                                                     t.tail_interval),
            node=CLIENT_NODE, host=HARNESS_HOST, label="scenario-log-tail")
        if self.s.faults:  # it also finds the leader a fault's target means
            self.waiter = self.rt.spawn(trigger_waiter.trigger_waiter, node=CLIENT_NODE,
                                        host=HARNESS_HOST, label="scenario-trigger-waiter")
        if bspec is not None:
            self.branches = branch_tier.start(self.rt, bspec, self.nodes,
                                              str(self.path / "blocks"), self.seed,
                                              CLIENT_NODE, history)
        if self.s.cluster.tables is not None:  # its own nodes, its top on CLIENT_NODE
            self.tables = tables_tier.TablesTier(
                self.rt, self.s.cluster.tables, self.path / "tables", self.seed, CLIENT_NODE,
                HARNESS_HOST, t.op_timeout, self.s.duration)
            self.tables.start()
        if blocks is not None:
            self.tier_monitor = self.rt.spawn(
                tier.tier_monitor, tier.MonitorConfig(self.nodes, t.sample_interval * 5),
                node=CLIENT_NODE, host=HARNESS_HOST, label="scenario-tier-monitor")
        self.timings["start"] = time.monotonic() - began

    def _traffic(self) -> None:
        began = time.monotonic()
        s, t = self.s, self.timing
        assert self.recorder is not None
        n = s.traffic.clients
        traffic = [
            self.rt.spawn(processes.traffic_client,
                          processes.ClientConfig(c, self.seed, s.traffic, self.nodes,
                                                 self.recorder, t.op_timeout,
                                                 s.traffic.client),
                          node=CLIENT_NODE, host=HARNESS_HOST, label=f"client-{c}")
            for c in range(n)]
        if s.traffic.compactions is not None:
            cfg2 = processes.CompactorConfig(n, self.seed, s.traffic.compactions, self.nodes,
                                             self.recorder, t.op_timeout, s.traffic.client)
            traffic.append(self.rt.spawn(processes.compactor, cfg2, node=CLIENT_NODE,
                                         host=HARNESS_HOST, label="compactor"))
        client = n + 2  # n: the compactor, n + 1: the final read
        for spec in s.traffic.watchers:
            for _ in range(spec.count):
                node = self.nodes[len(self.watchers) % len(self.nodes)]
                wcfg = watch_client.WatcherConfig(client, spec, node, self.recorder,
                                                  s.traffic.client)
                self.watchers.append(self.rt.spawn(
                    watch_client.watcher_client, wcfg, node=CLIENT_NODE, host=HARNESS_HOST,
                    label=f"watcher-{client}"))
                client += 1
        bspec = s.cluster.branches
        if bspec is not None and self.branches is not None:
            traffic += [self.rt.spawn(
                branch_tier.branch_client,
                branch_tier.ClientConfig(c, self.seed, bspec, self.nodes, self.branches,
                                         self.recorder, t.op_timeout),
                node=CLIENT_NODE, host=HARNESS_HOST, label=branch_tier.client_name(c))
                for c in range(bspec.clients)]
        blocks = s.cluster.blocks
        if blocks is not None and blocks.history_compaction is not None:
            traffic.append(self.rt.spawn(
                tier.history_compactor, tier.CompactorConfig(self.nodes,
                                                             blocks.history_compaction),
                node=CLIENT_NODE, host=HARNESS_HOST, label="scenario-history-compactor"))
        if not self.rt.wait_warm(t.start_timeout / 4):
            self.notes.append("the runtime was still starting spare processes when the "
                              "run's clock started")
        self.timings["spawn"] = time.monotonic() - began
        self.t0 = self.rt.now()  # the run's clock starts once every process runs and the
        # runtime's spare processes have booted (on Ray their start is seconds of CPU)
        go = processes.Go(self.t0, self.t0 + s.duration)
        for pid in [*traffic, *self.watchers]:
            self.rt.send(pid, go)
        assert self.recorder is not None
        driver = FaultDriver(self.rt, self.nodes, s.duration, t.trigger_interval, self.waiter,
                             self.recorder, self.t0, self._report, self.faults, self.notes)
        self.fault_driver = driver
        injector = nemesis.Injector(self.cluster, self.rng, self._sessions, driver.leader_now,
                                    notify=self.recorder)
        self.injector = injector
        steps = nemesis.plan(s)
        for step in steps:
            self._sleep_until(step.t)
            fault = s.faults[step.fault]
            driver.apply(injector, step, fault)
        self._sleep_until(s.duration)
        self.timings["traffic"] = time.monotonic() - began

    def _now(self) -> float:
        return float(self.rt.now()) - self.t0

    def _sleep_until(self, t: float) -> None:
        """Let the run go on until `t` seconds of traffic, reporting progress."""
        target = self.t0 + t
        while True:
            left = target - float(self.rt.now())
            if left <= 1e-9:  # below the clock's resolution at this magnitude: arrived
                return
            self.rt.sleep(min(left, self.timing.tick))
            if self.tables is not None:  # the tables tier's timeline and recorder
                self.tables.tick(self._now())
            self._report("traffic", self._now(), ops=self._ops())

    def _ops(self) -> int:
        try:
            status = self.rt.call(self.recorder, Status(), timeout=30)
        except RuntimeErrorBase:
            return 0
        return int(status.get("ops", 0))

    def _sessions(self) -> dict[int, tuple[Pid, str]]:
        answer = self.rt.call(self.recorder, rp.Sessions(), timeout=30)
        return answer if isinstance(answer, dict) else {}

    def _recover(self) -> processes.OpRecord | None:
        began = time.monotonic()
        s, t = self.s, self.timing
        self._report("recover", s.duration, "stopping clients, healing")
        names = [f"client-{c}" for c in range(s.traffic.clients)]
        if s.traffic.compactions is not None:
            names.append("compactor")
        if s.cluster.branches is not None:
            names += branch_tier.client_names(s.cluster.branches)
        self._wait_done(names, t.op_timeout * 8 + 10)
        if self.injector is not None and self.fault_driver is not None:
            self.fault_driver.record_fired(self.injector)
        undone = self.injector.heal_all() if self.injector is not None else []
        self.faults.append(FaultEvent(self._now(), "heal", {"phase": "final",
                                                            "undone": undone}))
        self._settle()
        final: processes.OpRecord | None = self.rt.run(
            processes.final_read, s.traffic.clients + 1, self.nodes, self.recorder,
            t.op_timeout, 20, s.traffic.client, node=CLIENT_NODE,
            timeout=t.settle_timeout + 60)
        head = 0
        if final is not None:
            head = final.result.revision
        else:
            self.notes.append("the final read never succeeded")
        for pid in self.watchers:
            self.rt.send(pid, watch_client.FinishWatch(head))
        self._wait_done([f"watcher-{i}" for i in self._watcher_ids()], t.drain_timeout)
        last = self._fresh_view()
        commit = max((m.commit for m in last.members if m.up), default=0) if last else 0
        assert self.tail is not None and self.monitor is not None
        self.rt.send(self.tail, observers.StopTail(commit))
        if self.waiter is not None:
            self.rt.send(self.waiter, trigger_waiter.Stop())
        self.rt.send(self.monitor, observers.Stop())
        self._wait_done(["tail", "monitor"], t.drain_timeout)
        self.timings["recover"] = time.monotonic() - began
        return final

    def _fresh_view(self) -> observe.ClusterView | None:
        """A sample the monitor takes from now on (a few intervals at most)."""
        now = float(self.rt.now())
        for _ in range(20):
            self.rt.sleep(self.timing.sample_interval)
            view = self._view(now)
            if view is not None:
                return view
        return self._view(0.0)

    def _watcher_ids(self) -> list[int]:
        first = self.s.traffic.clients + 2
        return list(range(first, first + len(self.watchers)))

    def _view(self, after: float) -> observe.ClusterView | None:
        """The monitor's latest sample, if it was taken after `after` (runtime clock)."""
        sample = self.rt.call(self.recorder, rp.LastSample(), timeout=30)
        if isinstance(sample, observe.ClusterView) and sample.t > after:
            return sample
        return None

    def _wait_done(self, names: list[str], timeout: float) -> None:
        deadline = float(self.rt.now()) + timeout
        while True:
            status = self.rt.call(self.recorder, Status(), timeout=30)
            missing = [n for n in names if n not in status["done"]]
            if not missing:
                return
            if float(self.rt.now()) > deadline:
                self.notes.append(f"still running after {timeout:g} s: {', '.join(missing)}")
                return
            self.rt.sleep(0.1)

    def _settle(self) -> None:
        """Until every member is up, one leader leads them all and all applied the same
        index; bounded by the settle timeout."""
        healed = float(self.rt.now())
        deadline = healed + self.timing.settle_timeout
        last = None
        while float(self.rt.now()) < deadline:
            self.rt.sleep(self.timing.sample_interval)
            last = self._view(healed) or last
            if last is None:
                continue
            leader = last.leader()
            members = last.members
            if (leader is not None and all(m.up and m.kv_up for m in members)
                    and all(m.leader == leader.node for m in members)
                    and len({(m.commit, m.applied) for m in members}) == 1
                    and all(m.commit == m.last_index for m in members)):
                self.settled = True
                return
        self.settle_view = (f"{observe.describe(last)} (sampled {last.t - healed:.0f} s "
                            f"after healing)" if last is not None else "no sample after healing")

    def _collect_tier(self, final: processes.OpRecord | None) -> TierState | None:
        """The block tier after recovery (`tier_collect.py`), or None without one."""
        if self.s.cluster.blocks is None or self.tier_monitor is None:
            return None
        began = time.monotonic()
        t = self.timing
        samples = tier.stop_monitor(self.rt, self.tier_monitor, self.t0, t.drain_timeout)
        head = final.result.revision if final is not None else max(
            (int((self.cluster.node(n).raft_status() or {}).get("head", 0)) for n in self.nodes),
            default=0)  # no final read: the members' own head
        budget = tier_collect.Budget(settle=t.settle_timeout / 2, timeout=t.op_timeout * 4)
        state = tier_collect.collect(self.cluster, self.seed, self.s.traffic.keys, head,
                                     samples, budget)
        self.timings["tier"] = time.monotonic() - began
        return state

    def _collect(self, final: processes.OpRecord | None) -> Assembled:
        dump = self.rt.call(self.recorder, rp.TakeDump(), timeout=120)
        return assemble(dump, self.t0, self.faults, final)

    def _check(self, a: Assembled) -> list[CheckResult]:
        began = time.monotonic()
        self._report("check", self.s.duration, "checking")
        out = [self._recovered()]
        out.append(violated(COMMITTED_LOG, a.strays[0], details=a.strays[1:])
                   if a.strays else passed(COMMITTED_LOG))
        results = checkers.run(a.history, self.s.checks, final=a.final, truth=a.truth,
                               head=a.head, local_watches=True, tier=self.tier)
        if a.unknown_entries:
            results = [_doubt(r, a.unknown_entries) for r in results]
        out += results
        if self.branches is not None:
            branch_check, notes = branch_tier.collect(
                self.rt, self.branches, a.truth, log_complete=not a.unknown_entries)
            out.append(branch_check)
            self.notes += notes
        if self.tables is not None:
            table_checks, notes = self.tables.collect(self._now())
            out += table_checks
            self.notes += notes
        self.timings["check"] = time.monotonic() - began
        return out

    def _recovered(self) -> CheckResult:
        if self.settled:
            return passed(RECOVERED)
        return violated(RECOVERED, f"the cluster did not settle within "
                        f"{self.timing.settle_timeout:g} s after healing: {self.settle_view}")


TRUTH_CHECKS = ("watch_guarantees", "compaction_safe", "linearizable", *checkers.TIER_NAMES)


def _doubt(r: CheckResult, unknown_entries: tuple[int, ...]) -> CheckResult:
    """A violation of a check that leans on the committed log (the watch truth, the
    coordinator's Compacts) is only "unknown" when some committed entries could not be
    read: the missing entry may be what explains it."""
    if r.name not in TRUTH_CHECKS or r.status != "violation":
        return r
    return replace(r, status="unknown", explanation=(
        f"{r.explanation} (but {len(unknown_entries)} committed entries could not be read, "
        f"first {unknown_entries[0]}: the truth may be incomplete)"))


def cleanup(result: RunResult) -> None:
    """Remove a run's data directory (callers keep it for failing runs)."""
    if result.data_dir:
        shutil.rmtree(result.data_dir, ignore_errors=True)


__all__ = ["CLIENT_NODE", "Progress", "ProgressFn", "RunResult", "Timing", "cleanup",
           "run_scenario"]
