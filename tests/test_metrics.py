"""Metrics: the registry (`sediment/metrics.py`), the Ray reporter's encoding and the
Prometheus reader (`sediment/metrics_ray.py`), the docs list, and a simulated KV cluster
whose raft, KV, watch and compaction metrics must all be recorded."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import eventually

from sediment import metrics, metrics_ray
from sediment.actors.kv import metrics as kv_metrics
from sediment.actors.kv.errors import ErrEmptyKey
from sediment.actors.log.shell import raft_metrics
from sediment.runtime import api
from sediment.wiring.cluster import Cluster

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def local_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The in-memory registry only, also when an earlier test left the session's Ray up."""
    monkeypatch.setattr(metrics, "_in_ray", lambda: False)
    metrics.reset()
    yield
    metrics.reset()


# ---- the registry ----------------------------------------------------------------------


def test_counters_gauges_and_histograms_keep_their_series_by_tags() -> None:
    c = metrics.Counter("test_things", "things", ("kind",))
    g = metrics.Gauge("test_level", "a level", ("node",))
    h = metrics.Histogram("test_seconds", "durations", ("node",), bounds=(0.1, 1.0))
    c.inc(tags={"kind": "a"})
    c.inc(2, {"kind": "a"})
    c.inc(1, {"kind": "b"})
    c.inc(0, {"kind": "c"})  # nothing happened: no series
    g.set(5, {"node": "n1"})
    g.set(3, {"node": "n1"})
    for seconds in (0.05, 0.5, 0.7, 3.0):
        h.observe(seconds, {"node": "n1"})
    snap = metrics.snapshot()
    assert snap["sediment_test_things"] == {(("kind", "a"),): 3.0, (("kind", "b"),): 1.0}
    assert snap["sediment_test_level"] == {(("node", "n1"),): 3.0}
    assert snap["sediment_test_seconds_sum"] == {(("node", "n1"),): pytest.approx(4.25)}
    assert snap["sediment_test_seconds_count"] == {(("node", "n1"),): 4.0}
    assert metrics.buckets("test_seconds") == {(("node", "n1"),): (1, 2, 1)}
    assert metrics.value("test_things") == 4.0
    assert metrics.value("sediment_test_things", kind="b") == 1.0
    assert metrics.value("test_things", kind="zzz") == 0.0
    metrics.reset()
    assert "sediment_test_things" not in metrics.snapshot()


def test_bad_updates_and_definitions_are_refused_and_change_nothing() -> None:
    c = metrics.Counter("test_refused", "refusals", ("node",))
    with pytest.raises(ValueError, match="needs tags"):
        c.inc(1, {"other": "x"})
    with pytest.raises(ValueError, match="needs tags"):
        c.inc(1)
    with pytest.raises(ValueError, match="takes tags"):
        c.inc(1, {"node": "n1", "extra": "x"})
    with pytest.raises(ValueError, match="only goes up"):
        c.inc(-1, {"node": "n1"})
    with pytest.raises(ValueError, match=">= 0"):
        metrics.Histogram("test_refused_seconds", "d").observe(-0.5)
    with pytest.raises(ValueError, match="already defined"):
        metrics.Gauge("test_refused", "the same name as another kind", ("node",))
    with pytest.raises(ValueError, match="bad metric name"):
        metrics.Counter("sediment_twice", "prefixed")
    with pytest.raises(ValueError, match="bad metric name"):
        metrics.Counter("has space", "spaces")
    with pytest.raises(ValueError, match="bad metric name"):
        metrics.Counter("caf\u00e9", "not Prometheus' alphabet")
    with pytest.raises(ValueError, match="bounds"):
        metrics.Histogram("test_bad_bounds", "d", bounds=(1.0, 0.5))
    assert "sediment_test_refused" not in metrics.snapshot()
    # the same definition twice (a module imported twice) shares the series
    again = metrics.Counter("test_refused", "refusals", ("node",))
    again.inc(1, {"node": "n1"})
    assert metrics.value("test_refused") == 1.0


def test_a_bound_series_records_like_the_metric_with_its_tags() -> None:
    c = metrics.Counter("test_bound", "b", ("node",))
    g = metrics.Gauge("test_bound_level", "b", ("node",))
    h = metrics.Histogram("test_bound_seconds", "b", ("node",), bounds=(1.0,))
    c.bind({"node": "n1"}).inc(2)
    c.inc(1, {"node": "n1"})
    g.bind({"node": "n2"}).set(9)
    h.bind({"node": "n3"}).observe(0.5)
    assert metrics.value("test_bound", node="n1") == 3.0
    assert metrics.value("test_bound_level", node="n2") == 9.0
    assert metrics.value("test_bound_seconds_count", node="n3") == 1.0
    with pytest.raises(ValueError, match="needs tags"):
        c.bind({"other": "x"})
    with pytest.raises(ValueError, match="takes tags"):
        g.bind({"node": "n1", "extra": "x"})


def test_a_metric_keeps_at_most_max_series_and_counts_what_it_dropped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "MAX_SERIES", 3)
    c = metrics.Counter("test_many", "many series", ("key",))
    for i in range(5):
        c.inc(1, {"key": i})
    c.inc(1, {"key": 0})  # an existing series still counts
    snap = metrics.snapshot()
    assert snap["sediment_test_many"] == {(("key", "0"),): 2.0, (("key", "1"),): 1.0,
                                          (("key", "2"),): 1.0}
    assert metrics.value("metrics_dropped_updates", metric="sediment_test_many") == 2.0


def test_updates_outside_ray_never_start_a_reporter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "_reporting", False)
    monkeypatch.setattr(metrics, "_next_check", 0.0)
    monkeypatch.setattr(metrics_ray, "_thread", None)
    metrics.Counter("test_quiet", "q").inc()
    assert metrics._reporting is False and metrics_ray._thread is None


# ---- Ray: the reporter's encoding and the Prometheus reader ----------------------------


class _Recorder:
    """Stands in for one ray.util.metrics object: what the reporter hands it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float, dict[str, str]]] = []

    def inc(self, value: float, tags: dict[str, str]) -> None:
        self.calls.append(("inc", value, tags))

    def set(self, value: float, tags: dict[str, str]) -> None:
        self.calls.append(("set", value, tags))


def test_a_report_carries_totals_latest_gauges_and_cumulative_buckets_in_few_calls(
        monkeypatch: pytest.MonkeyPatch) -> None:
    c = metrics.Counter("test_rep_count", "c", ("node",))
    g = metrics.Gauge("test_rep_gauge", "g", ("node",))
    h = metrics.Histogram("test_rep_seconds", "h", ("node",), bounds=(0.1, 1.0))
    for _ in range(500):
        c.inc(1, {"node": "n1"})
        h.observe(0.05, {"node": "n1"})
    h.observe(2.0, {"node": "n1"})
    g.set(1, {"node": "n1"})
    g.set(7, {"node": "n1"})
    recorders: dict[str, _Recorder] = {}
    for name in ("test_rep_count", "test_rep_gauge", "test_rep_seconds_bucket",
                 "test_rep_seconds_sum", "test_rep_seconds_count"):
        recorders["sediment_" + name] = _Recorder()
    monkeypatch.setattr(metrics_ray, "_ray_metrics", recorders)
    monkeypatch.setattr(metrics_ray, "_paused", True)  # a reporter thread of this session
    monkeypatch.setattr(metrics, "_in_ray", lambda: True)
    calls = metrics_ray.report_once()
    n1 = {"node": "n1"}
    assert recorders["sediment_test_rep_count"].calls == [("inc", 500.0, n1)]
    assert recorders["sediment_test_rep_gauge"].calls == [("set", 7, n1)]
    assert recorders["sediment_test_rep_seconds_bucket"].calls == [
        ("inc", 500, {**n1, "le": "0.1"}), ("inc", 500, {**n1, "le": "1.0"}),
        ("inc", 501, {**n1, "le": "+Inf"})]
    assert recorders["sediment_test_rep_seconds_count"].calls == [("inc", 501, n1)]
    assert recorders["sediment_test_rep_seconds_sum"].calls[0][1] == pytest.approx(27.0)
    assert calls == 7  # 1001 updates, 7 Ray calls
    assert metrics_ray.report_once() == 0  # nothing new
    assert metrics.value("test_rep_count") == 500.0  # the local view keeps its totals


PROMETHEUS_TEXT = """\
# HELP ray_sediment_raft_term the member's current term
# TYPE ray_sediment_raft_term gauge
ray_sediment_raft_term{Component="core_worker",WorkerId="a",group="kv",node="n1"} 3.0
ray_sediment_raft_term{Component="core_worker",WorkerId="b",group="kv",node="n1"} 2.0
ray_sediment_kv_requests_total{WorkerId="a",api="etcd",code="ok",type="Put"} 4.0
ray_sediment_kv_requests{WorkerId="a",api="etcd",code="ok",type="Put"} 4.0
ray_sediment_kv_requests_total{WorkerId="b",api="etcd",code="ok",type="Put"} 6.0
ray_sediment_compaction_cycle_seconds_count_total{node="n2"} 2.0
ray_sediment_compaction_cycle_seconds_sum_total{node="n2"} 0.25
ray_sediment_compaction_cycle_seconds_bucket_total{le="0.1",node="n2"} 1.0
ray_other_metric{node="n1"} 9.0
"""


def test_prometheus_text_folds_into_the_snapshot_shape() -> None:
    got = metrics_ray.parse(PROMETHEUS_TEXT)
    assert got["sediment_raft_term"] == {(("group", "kv"), ("node", "n1")): 3.0}  # max
    assert got["sediment_kv_requests"] == {  # summed, the gauge copy of a counter ignored
        (("api", "etcd"), ("code", "ok"), ("type", "Put")): 10.0}
    assert got["sediment_compaction_cycle_seconds_count"] == {(("node", "n2"),): 2.0}
    assert got["sediment_compaction_cycle_seconds_sum"] == {(("node", "n2"),): 0.25}
    assert not any("other" in name for name in got)


# ---- every metric is documented --------------------------------------------------------


def test_every_metric_is_listed_in_the_docs_with_its_tags() -> None:
    import sediment.actors.branches.metrics  # noqa: F401 - defines the branch metrics
    import sediment.actors.spark.shell.bridge  # noqa: F401 - defines spark_merges

    doc = (ROOT / "docs" / "metrics.md").read_text()
    rows = {m.group(1): m.group(2) for m in
            re.finditer(r"^\| `(sediment_[a-z_]+)` \| [a-z]+ \| ([^|]*) \|", doc, re.M)}
    for d in metrics.definitions():
        if d.name.startswith("sediment_test_"):
            continue
        assert d.name in rows, f"{d.name} is not in docs/metrics.md"
        documented = set(re.findall(r"`([a-z_]+)`", rows[d.name]))
        assert documented == set(d.tag_keys), (d.name, documented, d.tag_keys)
    assert "docs/metrics.md" in (ROOT / "README.md").read_text()


# ---- a simulated cluster records them all ----------------------------------------------


def _series(name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return metrics.snapshot().get("sediment_" + name, {})


def _per_node(name: str) -> dict[str, float]:
    return {dict(pairs)["node"]: v for pairs, v in _series(name).items()}


CLIENT = "client"  # the test's node: the cluster's nodes can die under it


def test_a_sim_cluster_records_raft_kv_watch_and_compaction_metrics(tmp_path: Path) -> None:
    rt = api.start("sim", seed=3, nodes=(CLIENT, "n1", "n2", "n3"), trace=False)
    try:
        _run_cluster(rt, tmp_path)
    finally:
        rt.shutdown()


def _run_cluster(rt: Any, tmp_path: Path) -> None:
    cluster = Cluster.start(("n1", "n2", "n3"), runtime=rt, data_dir=str(tmp_path / "kv"),
                            top_node=CLIENT, compaction_interval=1.0, watcher_max_pending=4)
    first_leader = cluster.wait_ready()
    kv = cluster.client()
    watch = kv.watch(b"k", node="n2")
    revisions = []
    for i in range(8):  # the client reads as it goes: at most 4 events wait for it
        revisions.append(kv.put(b"k", str(i).encode()).revision)
        watch.poll(0)
    with pytest.raises(ErrEmptyKey):
        kv.put(b"", b"v")
    assert kv.get(b"k") is not None
    assert eventually(rt, lambda: watch.poll(0.2) is not None and any(
        getattr(r, "events", None) and r.events[-1].kv.mod_revision == revisions[-1]
        for r in watch.responses), timeout=30)
    # a session whose client never reads is closed as slow
    slow = kv.session("n3")
    slow.watch(b"s")
    for i in range(12):
        kv.put(b"s", str(i).encode())
    assert eventually(rt, lambda: metrics.value("watch_session_closes", reason="slow") == 1,
                      timeout=30)
    watch.cancel()
    # compaction: cycles run every second and compact up to the head
    head = kv.put(b"k", b"last").revision
    assert eventually(rt, lambda: set(_per_node("kv_compact_revision").values()) == {head - 1}
                      and len(_per_node("kv_compact_revision")) == 3, timeout=60)
    assert eventually(rt, lambda: len(_per_node("compaction_rows")) == 3, timeout=60)
    # a stopped follower answers no cycle: the cycles abort
    follower = next(n for n in cluster.nodes if n != first_leader)
    cluster.node(follower).stop()
    kv.put(b"k", b"after")
    assert eventually(rt, lambda: metrics.value("compaction_aborts", reason="min_failed") >= 1,
                      timeout=60)
    cluster.node(follower).restart()
    # the leader dies: a new election
    cluster.node(first_leader).kill()
    ok = eventually(rt, lambda: metrics.value("raft_elections_won", group="kv") >= 2
                    and cluster.leader() is not None, timeout=60)
    assert ok, (cluster.leader(), {k: v for k, v in metrics.snapshot().items() if "raft" in k})
    final = kv.put(b"k", b"new leader").revision
    cluster.wait_ready()
    assert eventually(rt, lambda: set(_per_node("kv_revision").values()) == {final}
                      and len(_per_node("kv_revision")) == 3, timeout=60)
    assert eventually(rt, lambda: set(_per_node("raft_apply_lag").values()) == {0}, timeout=60)

    # raft
    kv_members = {dict(p)["node"]: v for p, v in _series("raft_term").items()
                  if dict(p)["group"] == "kv"}
    assert set(kv_members) == {"n1", "n2", "n3"} and max(kv_members.values()) >= 2
    assert metrics.value("raft_elections_won", group="kv") >= 2
    assert metrics.value("raft_campaigns", group="kv", kind="vote") >= 2
    assert metrics.value("raft_campaigns", group="kv", kind="pre_vote") >= 2
    assert metrics.value("raft_leader_changes", group="kv") >= 4
    assert metrics.value("raft_is_leader", group="kv") == 1
    commits = {dict(p)["node"]: v for p, v in _series("raft_commit_index").items()
               if dict(p)["group"] == "kv"}
    applied = {dict(p)["node"]: v for p, v in _series("raft_applied_index").items()
               if dict(p)["group"] == "kv"}
    assert commits == applied and min(commits.values()) > 0
    # KV requests, revisions, floor
    puts = metrics.value("kv_requests", api="python", type="Put", code="ok")
    assert puts == len(revisions) + 12 + 3
    assert metrics.value("kv_requests", api="python", type="Put", code="ErrEmptyKey") == 1
    assert metrics.value("kv_requests", api="python", type="Range", code="ok") >= 1
    assert all(v >= head - 1 for v in _per_node("kv_compact_revision").values())
    assert all(v >= head - 1 for v in _per_node("kv_floor").values())
    assert set(_per_node("kv_min_revision")) == {"n1", "n2", "n3"}
    # watches
    assert metrics.value("watch_cancels", reason="canceled") == 1
    assert set(_per_node("watches").values()) == {0}
    assert set(_per_node("watch_lag_revisions").values()) == {0}
    assert set(_per_node("watch_sessions")) == {"n1", "n2", "n3"}
    # compaction
    assert metrics.value("compaction_cycles", outcome="compacted") >= 1
    assert metrics.value("compaction_cycle_seconds_count") == metrics.value("compaction_cycles")
    assert metrics.value("compaction_rows", group="kv") > 0
    assert metrics.value("compaction_aborts") == sum(
        v for p, v in _series("compaction_cycles").items()
        if dict(p)["outcome"] not in kv_metrics.NOT_ABORTS)


def test_status_prints_the_metrics_the_state_file_holds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sediment import cli, local_cluster

    raft_metrics.TERM.set(4, {"group": "kv", "node": "n1"})
    kv_metrics.request("etcd", "Put", "ok")
    state = {"format": 1, "backend": "sim", "nodes": ["n1"], "pid": 0, "running": False,
             "members": [], "metrics": local_cluster._as_json(metrics.snapshot())}
    (tmp_path / local_cluster.STATE_FILE).write_text(json.dumps(state))
    assert cli.main(["status", "--data-dir", str(tmp_path)]) == 1  # not running
    out = capsys.readouterr().out
    assert "metrics (docs/metrics.md):" in out
    assert re.search(r"metric\s+n1\s+-\n", out)  # a column per node, one for the rest
    assert re.search(r"raft_term\{group=kv\}\s+4\n", out)
    assert re.search(r"kv_requests\{api=etcd,code=ok,type=Put\}\s+1\n", out)


def test_the_etcd_api_counts_each_answer_by_request_type_and_code() -> None:
    import asyncio

    from sediment.actors.etcd.pb import rpc_pb2
    from sediment.actors.etcd.shell import services
    from sediment.actors.kv.errors import ErrCompacted

    class Context:  # grpc.aio's abort raises, so does this one
        async def abort(self, code: Any, message: str) -> None:
            raise RuntimeError(code)

    async def served(request: Any, context: Any) -> str:
        return "answered"

    async def refused(request: Any, context: Any) -> str:
        raise ErrCompacted(3)

    pb: Any = rpc_pb2
    assert asyncio.run(services.answer(Context(), served, pb.PutRequest())) == "answered"
    with pytest.raises(RuntimeError, match="OUT_OF_RANGE"):
        asyncio.run(services.answer(Context(), refused, (None, pb.CompactionRequest())))
    assert metrics.value("kv_requests", api="etcd", type="Put", code="ok") == 1
    assert metrics.value("kv_requests", api="etcd", type="Compact", code="ErrCompacted") == 1


def test_the_node_gauges_follow_its_admission_state() -> None:
    from sediment.actors.kv import admission as adm

    state = adm.AdmissionState(committed=10, persisted=4,
                               watches={("s", 1): 7, ("s", 2): 11})
    kv_metrics.node_state("nx", state, 4, 1)
    got = {name: metrics.value(name, node="nx") for name in (
        "kv_revision", "kv_compact_revision", "kv_floor", "kv_min_revision", "watches",
        "watch_sessions", "watch_lag_revisions")}
    # the slowest watch still needs 7: revisions 7..10 are behind it
    assert got == {"kv_revision": 10, "kv_compact_revision": 4, "kv_floor": 4,
                   "kv_min_revision": 7, "watches": 2, "watch_sessions": 1,
                   "watch_lag_revisions": 4}
    caught_up = adm.progress_watch(state, ("s", 1), 11)
    kv_metrics.node_state("nx", caught_up, 4, 1)
    assert metrics.value("watch_lag_revisions", node="nx") == 0
    assert metrics.value("kv_min_revision", node="nx") == 10  # capped at the head


def test_the_raft_observer_counts_transitions_once_and_sets_gauges_again_after_a_reset(
        ) -> None:
    from dataclasses import replace

    from sediment.actors.log.raft.state import RaftConfig, RaftState

    class Machine:
        applied = 0
        rows_compacted = 0

    machine = Machine()
    state = RaftState(RaftConfig(peers=("a", "b", "c"), group="obs"), "a", ("b", "c"), 1)
    raft_metrics.stepped(state, machine)
    raft_metrics.stepped(replace(state, role="pre_candidate"), machine)
    raft_metrics.stepped(replace(state, role="candidate", term=1), machine)
    leading = replace(state, role="leader", term=1, leader="a", commit=5)
    machine.applied, machine.rows_compacted = 3, 7
    raft_metrics.stepped(leading, machine)
    raft_metrics.stepped(leading, machine)  # nothing moved: nothing recorded
    tags = {"group": "obs", "node": "a"}
    assert metrics.value("raft_campaigns", **tags, kind="pre_vote") == 1
    assert metrics.value("raft_campaigns", **tags, kind="vote") == 1
    assert metrics.value("raft_elections_won", **tags) == 1
    assert metrics.value("raft_leader_changes", **tags) == 1
    assert metrics.value("raft_apply_lag", **tags) == 2
    assert metrics.value("compaction_rows", **tags) == 7
    metrics.reset()
    raft_metrics.stepped(leading, machine)
    assert metrics.value("raft_term", **tags) == 1 and metrics.value("raft_is_leader", **tags) == 1
    assert metrics.value("raft_elections_won", **tags) == 0  # not counted again
    machine.rows_compacted = 2  # a reopened machine counts from 0
    raft_metrics.stepped(leading, machine)
    assert metrics.value("compaction_rows", **tags) == 2
