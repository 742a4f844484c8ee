"""The scenario file schema (scenarios/schema.py).

A full valid file loads into the expected frozen values; every bad file in the table is
rejected with the exact file:line:column, field path and message; a scenario survives
to_dict / to_yaml round trips; hypothesis builds random valid scenarios as plain dicts
and they all load (and round-trip).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sediment.scenarios import schema
from sediment.scenarios.schema import (
    ArmFailpoint,
    ClockSkew,
    CompactAt,
    Compactions,
    Delay,
    Drop,
    Fault,
    Heal,
    KillNode,
    KillProcess,
    Mix,
    Partition,
    PauseProcess,
    ProcessTarget,
    RestartNode,
    ScenarioError,
    Settings,
    WatcherSpec,
)

FULL = """\
name: slow-watcher-under-compaction
description: A slow watcher falls behind while the coordinator compacts.
seed: 7
duration: 30
backends: [sim]
cluster:
  nodes: [a1, a2, a3]
  settings:
    compaction_interval: 1.5
    watcher_max_pending: 64
    election_timeout: [0.5, 1]
    heartbeat_interval: 0.1
    snapshot_every: 128
    max_retained: 1000
    segment_max_entries: 256
    wal_max_size: 1048576
    num_minors: 4
traffic:
  clients: 4
  rate: 50
  keys: 10
  mix: {put: 20, delete: 5, txn: 10, range: 5, get: 15}
  value_size: 32
  watchers:
    - {count: 2, start: now, slow: 0.05, prev_kv: true}
    - {start: below_compact, pause_at: 5, resume_at: 12, filters: [no_delete]}
    - {start: "0"}
    - {start: 17}
  compactions: {every: 0.2, ahead: 3}
faults:
  - {at: 3, kill_process: {role: leader}, until: 5}
  - {at: 6, pause_process: {role: watcher, node: a2}, until: 7}
  - {at: 8, partition: {isolate: leader}, until: 12}
  - {at: 9, partition: {sides: [[a1], [a2, a3]]}}
  - {at: 10, heal: }
  - {at: 13, delay: {between: [a1, a2], min: 0.01, max: 0.05, probability: 0.5}, until: 20}
  - {at: 14, drop: {probability: 0.25}}
  - {at: 15, failpoint: {role: log_worker, node: a2, point: compaction.after_rename}}
  - {at: 16, failpoint: {name: wal@a1, point: wal.before_fsync, action: pause, count: always,
                         seconds: 2}}
  - {at: 21, kill_node: {node: follower}, until: 25}
  - {at: 26, restart_node: }
  - {at: 27, clock_skew: {node: a3, seconds: -0.5}}
checks: [linearizable, no_lost_writes]
"""


def test_a_full_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "full.yaml"
    path.write_text(FULL)
    s = schema.load(path)
    assert (s.name, s.seed, s.duration, s.backends) == (
        "slow-watcher-under-compaction", 7, 30.0, ("sim",))
    assert s.cluster.nodes == ("a1", "a2", "a3")
    assert s.cluster.settings == Settings(1.5, 64, (0.5, 1.0), 0.1, 128, 1000, 256, 1 << 20, 4)
    assert s.cluster.settings.to_kwargs()["election_timeout"] == (0.5, 1.0)
    t = s.traffic
    assert (t.clients, t.rate, t.keys, t.value_size) == (4, 50.0, 10, 32)
    assert t.mix == Mix(20, 5, 10, 5, 15)
    assert t.watchers == (
        WatcherSpec(2, "now", 0.05, None, None, True, ()),
        WatcherSpec(1, "below_compact", None, 5.0, 12.0, False, ("no_delete",)),
        WatcherSpec(start=0),
        WatcherSpec(start=17),
    )
    assert t.compactions == Compactions(every=0.2, ahead=3)
    assert s.faults == (
        Fault(3, KillProcess(ProcessTarget("leader")), 5),
        Fault(6, PauseProcess(ProcessTarget("watcher", node="a2")), 7),
        Fault(8, Partition(isolate="leader"), 12),
        Fault(9, Partition(sides=(("a1",), ("a2", "a3")))),
        Fault(10, Heal()),
        Fault(13, Delay(("a1", "a2"), 0.01, 0.05, 0.5), 20),
        Fault(14, Drop(None, 0.25)),
        Fault(15, ArmFailpoint(ProcessTarget("log_worker", node="a2"),
                               "compaction.after_rename")),
        Fault(16, ArmFailpoint(ProcessTarget(name="wal@a1"), "wal.before_fsync", "pause",
                               None, 2.0)),
        Fault(21, KillNode("follower"), 25),
        Fault(26, RestartNode()),
        Fault(27, ClockSkew("a3", -0.5)),
    )
    assert [f.name for f in s.faults][:3] == ["kill_process", "pause_process", "partition"]
    assert s.checks == ("linearizable", "no_lost_writes")


def test_defaults() -> None:
    s = schema.loads("name: tiny\nduration: 1\n")
    assert s.backends == ("sim", "ray")
    assert s.cluster.nodes == ("n1", "n2", "n3")
    assert s.cluster.settings.to_kwargs() == {}
    assert s.checks == schema.CHECKS
    assert s.faults == () and s.traffic.watchers == () and s.traffic.compactions is None
    assert schema.loads("name: x\nduration: 1\ncluster: {nodes: 5}\n").cluster.nodes == (
        "n1", "n2", "n3", "n4", "n5")


def test_an_explicit_compaction_list_and_a_partial_mix() -> None:
    s = schema.loads("name: x\nduration: 9\ntraffic:\n  mix: {put: 1}\n  compactions:\n"
                     "    - {at: 1, revision: 4}\n    - {at: 2, revision: head}\n"
                     "    - {at: 3}\n")
    assert s.traffic.mix == Mix(1, 0, 0, 0, 0)
    assert s.traffic.compactions == Compactions(
        at=(CompactAt(1, 4), CompactAt(2, "head"), CompactAt(3, "random")))


HEAD = "name: bad\nduration: 30\n"

# (yaml, "line:column: path: message") — the YAML starts with HEAD (two lines) unless
# the case replaces it (cases that start with "!" are used as they are, minus the "!")
BAD: list[tuple[str, str]] = [
    ("!", "scenario: must be a mapping, got null"),
    ("!- 1\n", "1:1: scenario: must be a mapping, got a list"),
    ("!name: bad\n", "1:1: duration: is required"),
    ("!duration: 3\n", "1:1: name: is required"),
    ("!name: Bad Name\nduration: 3\n", "1:7: name: must be a name of lower-case letters, "
     "digits, '_', '.', '-' (<= 64), got 'Bad Name'"),
    ("!name: x\nduration: 0\n", "2:11: duration: must be a number > 0 and <= 3600, got 0"),
    ("!name: x\nduration: 5000\n", "2:11: duration: must be a number > 0 and <= 3600, "
     "got 5000"),
    ("!name: x\nduration: [1\n", "3:1: scenario: invalid YAML: while parsing a flow "
     "sequence, expected ',' or ']', but got '<stream end>'"),
    ("!name: x\nname: y\nduration: 1\n", "2:1: name: duplicate key"),
    ("!name: x\nduration: 1\n---\nname: y\n", "3:1: scenario: invalid YAML: expected a "
     "single document in the stream, but found another document"),
    ("seeed: 3\n", "3:1: seeed: unknown key (did you mean 'seed'?); known: name, description, "
     "seed, duration, ray_duration, backends, cluster, traffic, faults, checks"),
    ("seed: -1\n", "3:7: seed: must be an integer in [0, 9223372036854775807], got -1"),
    ("seed: true\n", "3:7: seed: must be an integer in [0, 9223372036854775807], got true"),
    ("backends: [sim, ray, sim]\n", "3:11: backends: at most 2 items, got 3"),
    ("backends: [sim, sim]\n", "3:17: backends[1]: 'sim' is listed twice"),
    ("backends: [spark]\n", "3:12: backends[0]: must be one of sim, ray, got 'spark'"),
    ("backends: [Ray]\n", "3:12: backends[0]: must be one of sim, ray, got 'Ray' (did you "
     "mean 'ray'?)"),
    ("checks: [linearisable]\n", "3:10: checks[0]: must be one of linearizable, "
     "watch_guarantees, no_lost_writes, compaction_safe, revisions_monotonic, got "
     "'linearisable' (did you mean 'linearizable'?)"),
    ("backends: []\n", "3:11: backends: must not be empty"),
    ("cluster: {nodes: 10}\n", "3:18: cluster.nodes: must be an integer in [1, 9], got 10"),
    ("cluster: {nodes: [n1, N2]}\n", "3:23: cluster.nodes[1]: must be a node name (a-z, 0-9, "
     "'_', '-'), got 'N2'"),
    ("cluster: {nodes: [n1, leader]}\n", "3:23: cluster.nodes[1]: 'leader' is reserved for "
     "picking a node by role"),
    ("cluster: {nodes: three}\n", "3:18: cluster.nodes: must be a node count (1..9) or a list "
     "of names, got 'three'"),
    ("cluster:\n  settings:\n    compaction_intervl: 1\n", "5:5: cluster.settings."
     "compaction_intervl: unknown key (did you mean 'compaction_interval'?); known: "
     "compaction_interval, watcher_max_pending, election_timeout, heartbeat_interval, "
     "snapshot_every, max_retained, segment_max_entries, wal_max_size, num_minors"),
    ("cluster:\n  settings:\n    watcher_max_pending: 1.5\n", "5:26: cluster.settings."
     "watcher_max_pending: must be an integer in [1, 1000000], got 1.5"),
    ("cluster:\n  settings:\n    election_timeout: [1, 0.5]\n", "5:23: cluster.settings."
     "election_timeout: lo must be below hi, got [1, 0.5]"),
    ("cluster:\n  settings:\n    election_timeout: [1]\n", "5:23: cluster.settings."
     "election_timeout: must be [lo, hi] in seconds, got a list"),
    ("cluster:\n  settings:\n    election_timeout: [0.1, 0.2]\n    heartbeat_interval: 0.5\n",
     "6:25: cluster.settings.heartbeat_interval: must be below the election timeout's lower "
     "bound"),
    ("traffic: {clients: 0}\n", "3:20: traffic.clients: must be an integer in [1, 256], "
     "got 0"),
    ("traffic: {rate: 0}\n", "3:17: traffic.rate: must be a number > 0 and <= 100000, got 0"),
    ("traffic: {mix: {put: 0, get: 0}}\n", "3:16: traffic.mix: at least one weight must be "
     "above 0"),
    ("traffic: {mix: {put: -1}}\n", "3:22: traffic.mix.put: must be a number >= 0 and <= "
     "1e+06, got -1"),
    ("traffic: {mix: {puts: 1}}\n", "3:17: traffic.mix.puts: unknown key (did you mean "
     "'put'?); known: put, delete, txn, range, get"),
    ("traffic:\n  watchers:\n    - {start: later}\n", "5:15: traffic.watchers[0].start: must "
     "be a revision >= 0 or one of now, compact, below_compact, above_compact, got 'later'"),
    ("traffic:\n  watchers:\n    - {resume_at: 3}\n", "5:19: traffic.watchers[0].resume_at: "
     "needs pause_at and must be after it"),
    ("traffic:\n  watchers:\n    - {pause_at: 40}\n", "5:18: traffic.watchers[0].pause_at: "
     "must be a number >= 0 and <= 30, got 40"),
    ("traffic:\n  watchers:\n    - {filters: [no_put, no_get]}\n", "5:26: traffic.watchers[0]"
     ".filters[1]: must be one of no_put, no_delete, got 'no_get' (did you mean 'no_put'?)"),
    ("traffic:\n  compactions: {ahead: 3}\n", "4:16: traffic.compactions.every: is required"),
    ("traffic:\n  compactions: {every: 0}\n", "4:24: traffic.compactions.every: must be a "
     "number >= 0.01 and <= 30, got 0"),
    ("traffic:\n  compactions:\n    - {at: 1, revision: 0}\n", "5:25: traffic.compactions[0]."
     "revision: must be a revision >= 1, head or random, got 0"),
    ("faults:\n  - at: 1\n    heal:\n  - at: 2\n    heal:\n  - at: soon\n    heal:\n",
     "8:9: faults[2].at: must be a number >= 0 and <= 30, got 'soon'"),
    ("faults:\n  - at: 1\n", "4:5: faults[0]: needs exactly one action (kill_process, "
     "restart_process, pause_process, resume_process, kill_node, restart_node, partition, "
     "heal, delay, drop, clock_skew, failpoint), got none"),
    ("faults:\n  - {at: 1, heal: , kill_node: {node: n1}}\n", "4:5: faults[0]: needs exactly "
     "one action (kill_process, restart_process, pause_process, resume_process, kill_node, "
     "restart_node, partition, heal, delay, drop, clock_skew, failpoint), got heal, "
     "kill_node"),
    ("faults:\n  - {at: 1, kill_proces: {role: leader}}\n", "4:13: faults[0].kill_proces: "
     "unknown key (did you mean 'kill_process'?); known: at, until, kill_process, "
     "restart_process, pause_process, resume_process, kill_node, restart_node, partition, "
     "heal, delay, drop, clock_skew, failpoint"),
    ("faults:\n  - {at: 1, heal: , until: 3}\n", "4:28: faults[0].until: heal cannot have "
     "until; only clock_skew, delay, drop, failpoint, kill_node, kill_process, partition, "
     "pause_process"),
    ("faults:\n  - {at: 5, kill_node: {node: n1}, until: 5}\n", "4:43: faults[0].until: must "
     "be after at (5), got 5"),
    ("faults:\n  - {at: 1, kill_node: {node: n7}}\n", "4:31: faults[0].kill_node.node: must "
     "be one of n1, n2, n3, leader, follower, got 'n7'"),
    ("faults:\n  - {at: 1, kill_node: {node: N1}}\n", "4:31: faults[0].kill_node.node: must "
     "be one of n1, n2, n3, leader, follower, got 'N1' (did you mean 'n1'?)"),
    ("faults:\n  - {at: 1, kill_node: {node: leadr}}\n", "4:31: faults[0].kill_node.node: "
     "must be one of n1, n2, n3, leader, follower, got 'leadr' (did you mean 'leader'?)"),
    ("faults:\n  - {at: 1, kill_process: {role: log-worker}}\n", "4:34: faults[0]."
     "kill_process.role: must be one of leader, follower, coordinator, kv_node, watcher, wal, "
     "segment_writer, log_worker, got 'log-worker' (did you mean 'log_worker'?)"),
    ("faults:\n  - {at: 1, kill_node: }\n", "4:23: faults[0].kill_node.node: is required"),
    ("faults:\n  - {at: 1, kill_process: {role: boss}}\n", "4:34: faults[0].kill_process."
     "role: must be one of leader, follower, coordinator, kv_node, watcher, wal, "
     "segment_writer, log_worker, got 'boss'"),
    ("faults:\n  - {at: 1, kill_process: {role: wal, name: wal@n1}}\n", "4:27: faults[0]."
     "kill_process: needs exactly one of role, name"),
    ("faults:\n  - {at: 1, kill_process: {role: leader, node: n1}}\n", "4:48: faults[0]."
     "kill_process.node: the leader's node is not chosen; drop node"),
    ("faults:\n  - {at: 1, partition: {sides: [[n1, n2], [n2, n3]]}}\n", "4:32: faults[0]."
     "partition.sides: a node cannot be on both sides: n2"),
    ("faults:\n  - {at: 1, partition: {isolate: follower}}\n", "4:34: faults[0].partition."
     "isolate: must be one of n1, n2, n3, leader, got 'follower'"),
    ("faults:\n  - {at: 1, delay: {min: 0.2, max: 0.1}}\n", "4:36: faults[0].delay.max: "
     "must be >= min (0.2), got 0.1"),
    ("faults:\n  - {at: 1, drop: {between: [n1, n1]}}\n", "4:29: faults[0].drop.between: "
     "must be two different nodes"),
    ("faults:\n  - {at: 1, drop: {probability: 0}}\n", "4:33: faults[0].drop.probability: "
     "must be a number > 0 and <= 1, got 0"),
    ("faults:\n  - {at: 1, failpoint: {role: wal, point: fsync}}\n", "4:43: faults[0]."
     "failpoint.point: must be a failpoint name like wal.before_fsync, got 'fsync'"),
    ("faults:\n  - {at: 1, failpoint: {role: wal, point: a.b, count: 0}}\n", "4:55: faults[0]"
     ".failpoint.count: must be an integer >= 1 or always, got 0"),
    ("faults:\n  - {at: 1, failpoint: {role: wal, point: a.b, seconds: 1}}\n", "4:57: "
     "faults[0].failpoint.seconds: only a pause failpoint has seconds"),
    ("faults:\n  - {at: 1, clock_skew: {node: n1}}\n", "4:25: faults[0].clock_skew.seconds: "
     "is required"),
    ("checks: [linearizable, linearizable]\n", "3:24: checks[1]: 'linearizable' is listed "
     "twice"),
    ("checks: [serializable]\n", "3:10: checks[0]: must be one of linearizable, "
     "watch_guarantees, no_lost_writes, compaction_safe, revisions_monotonic, got "
     "'serializable'"),
    ("1: x\n", "3:1: ?: keys must be strings"),
]


@pytest.mark.parametrize("text, expected", BAD, ids=[e for _, e in BAD])
def test_bad_files_name_the_line_and_the_field(text: str, expected: str) -> None:
    body = text[1:] if text.startswith("!") else HEAD + text
    with pytest.raises(ScenarioError) as err:
        schema.loads(body, source="slow.yaml")
    sep = ":" if expected[0].isdigit() else ": "  # no position: the source, then the path
    assert str(err.value) == f"slow.yaml{sep}{expected}"
    assert isinstance(err.value, ValueError)


def test_a_ray_duration_lengthens_only_a_run_on_ray() -> None:
    s = schema.loads("name: x\nduration: 5\nray_duration: 30\n"
                     "faults:\n  - {at: 4, kill_process: {role: leader}}\n")
    assert s.duration == 5 and s.ray_duration == 30
    assert s.on("sim") is s
    on_ray = s.on("ray")
    assert (on_ray.duration, on_ray.ray_duration, on_ray.faults) == (30, None, s.faults)
    assert schema.load_dict(s.to_dict()) == s and schema.loads(s.to_yaml()) == s
    assert "ray_duration" not in schema.loads("name: x\nduration: 5\n").to_dict()
    for text, message in [
            ("ray_duration: 4\n", "ray_duration: must be a number >= 5"),
            ("ray_duration: 30\nbackends: [sim]\n", "does not run on ray has no ray_duration"),
            ("ray_duration: 30\nfaults:\n  - {at: 6, heal: }\n", "faults[0].at")]:
        with pytest.raises(ScenarioError, match=re.escape(message)):
            schema.loads("name: x\nduration: 5\n" + text)


def test_errors_carry_their_parts() -> None:
    with pytest.raises(ScenarioError) as err:
        schema.loads(HEAD + "faults:\n  - {at: x, heal: }\n", source="f.yaml")
    e = err.value
    assert (e.source, e.line, e.column, e.path) == ("f.yaml", 4, 10, "faults[0].at")


def test_a_dict_without_positions_still_names_the_field() -> None:
    with pytest.raises(ScenarioError, match=r"^<dict>: traffic.keys: must be an integer"):
        schema.load_dict({"name": "x", "duration": 1, "traffic": {"keys": 0}})


def test_a_missing_or_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="cannot read"):
        schema.load(tmp_path / "none.yaml")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe")
    with pytest.raises(ScenarioError, match="not UTF-8"):
        schema.load(tmp_path / "bin.yaml")


def test_round_trip() -> None:
    s = schema.loads(FULL)
    assert schema.load_dict(s.to_dict()) == s
    assert schema.loads(s.to_yaml()) == s
    again = schema.loads(schema.loads(s.to_yaml()).to_yaml())
    assert again.to_dict() == s.to_dict()


def test_load_dir(tmp_path: Path) -> None:
    (tmp_path / "b.yaml").write_text("name: second\nduration: 2\n")
    (tmp_path / "a.yml").write_text("name: first\nduration: 1\n")
    (tmp_path / "notes.txt").write_text("not a scenario")
    assert [s.name for s in schema.load_dir(tmp_path)] == ["first", "second"]
    (tmp_path / "c.yaml").write_text("name: first\nduration: 3\n")
    with pytest.raises(ScenarioError, match="c.yaml: name: 'first' is also the name in a.yml"):
        schema.load_dir(tmp_path)
    with pytest.raises(ScenarioError, match="not a directory"):
        schema.load_dir(tmp_path / "b.yaml")


def test_load_dir_reports_every_bad_file(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("name: a\nduration: -1\n")
    (tmp_path / "b.yaml").write_text("name: b\nduration: 2\n")
    (tmp_path / "c.yaml").write_text("name: c\nduraton: 2\n")
    with pytest.raises(schema.ScenarioErrors) as err:
        schema.load_dir(tmp_path)
    assert [(e.source, e.path) for e in err.value.errors] == [("a.yaml", "duration"),
                                                             ("c.yaml", "duraton")]
    assert str(err.value).splitlines() == [str(e) for e in err.value.errors]
    assert isinstance(err.value, ScenarioError)  # callers that catch one catch all


def test_the_library_readme_example_is_valid() -> None:
    readme = Path(schema.__file__).parent / "library" / "README.md"
    text = readme.read_text()
    example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    s = schema.loads(example, source="README.md")
    assert s.name == "slow-watcher-under-compaction" and len(s.faults) == 5


# ---- hypothesis: random valid scenarios --------------------------------------------------

DURATION = 60

times = st.floats(0, DURATION, allow_nan=False).map(lambda x: round(x, 3))
nodes3 = ["n1", "n2", "n3"]
targets = st.one_of(
    st.builds(lambda r: {"role": r}, st.sampled_from(schema.ROLES)),
    st.builds(lambda r, n: {"role": r, "node": n},
              st.sampled_from([r for r in schema.ROLES if r != "leader"]),
              st.sampled_from(nodes3)),
    st.builds(lambda n: {"name": n}, st.sampled_from(["kv-node@n1", "wal@n2"])),
)
actions = st.one_of(
    st.builds(lambda t: ("kill_process", t), targets),
    st.builds(lambda t: ("restart_process", t), targets),
    st.builds(lambda t: ("pause_process", t), targets),
    st.builds(lambda t: ("resume_process", t), targets),
    st.builds(lambda n: ("kill_node", {"node": n}), st.sampled_from([*nodes3, "leader"])),
    st.just(("restart_node", None)),
    st.just(("heal", {})),
    st.builds(lambda n: ("partition", {"isolate": n}), st.sampled_from([*nodes3, "leader"])),
    st.builds(lambda k: ("partition", {"sides": [nodes3[:k], nodes3[k:]]}), st.integers(1, 2)),
    st.builds(lambda lo, d, p: ("delay", {"min": lo, "max": lo + d, "probability": p}),
              st.sampled_from([0, 0.01]), st.sampled_from([0, 0.5]),
              st.sampled_from([0.1, 1])),
    st.builds(lambda p: ("drop", {"between": ["n1", "n3"], "probability": p}),
              st.sampled_from([0.5, 1])),
    st.builds(lambda n, s: ("clock_skew", {"node": n, "seconds": s}),
              st.sampled_from(nodes3), st.sampled_from([-2, 0.25])),
    st.builds(lambda t, a, c: ("failpoint", {**t, "point": "wal.before_fsync", "action": a,
                                             "count": c}),
              targets, st.sampled_from(["crash", "pause", "raise"]),
              st.sampled_from([1, 3, "always"])),
)


@st.composite
def faults(draw: st.DrawFn) -> dict[str, Any]:
    name, args = draw(actions)
    at = draw(times)
    out: dict[str, Any] = {"at": at, name: args}
    if name in schema.RANGED and at < DURATION and draw(st.booleans()):
        out["until"] = draw(st.floats(at, DURATION, exclude_min=True, allow_nan=False))
    return out


@st.composite
def watchers(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if draw(st.booleans()):
        out["count"] = draw(st.integers(1, 64))
    if draw(st.booleans()):
        out["start"] = draw(st.one_of(st.sampled_from(schema.WATCH_STARTS),
                                      st.integers(0, 10**6), st.just("0")))
    if draw(st.booleans()):
        out["pause_at"] = draw(st.floats(0, DURATION - 1, allow_nan=False))
        out["resume_at"] = out["pause_at"] + 1
    if draw(st.booleans()):
        out["filters"] = draw(st.lists(st.sampled_from(schema.FILTERS), unique=True))
    return out


scenarios = st.fixed_dictionaries(
    {"name": st.from_regex(schema.NAME_RE, fullmatch=True), "duration": st.just(DURATION)},
    optional={
        "description": st.text(max_size=20),
        "seed": st.integers(0, 2**63 - 1),
        "backends": st.lists(st.sampled_from(schema.BACKENDS), min_size=1, unique=True),
        "cluster": st.fixed_dictionaries({}, optional={
            "nodes": st.just(3),
            "settings": st.fixed_dictionaries({}, optional={
                "compaction_interval": st.floats(0.01, 100),
                "watcher_max_pending": st.integers(1, 10_000),
                "election_timeout": st.just([0.15, 0.3]),
                "snapshot_every": st.integers(1, 10_000),
                "wal_max_size": st.integers(4096, 1 << 30),
            }),
        }),
        "traffic": st.fixed_dictionaries({}, optional={
            "clients": st.integers(1, 256),
            "rate": st.floats(0.5, 1000),
            "keys": st.integers(1, 1000),
            "mix": st.fixed_dictionaries({"put": st.floats(0.1, 100)}, optional={
                k: st.floats(0, 100) for k in ("delete", "txn", "range", "get")}),
            "value_size": st.integers(1, 4096),
            "watchers": st.lists(watchers(), max_size=4),
            "compactions": st.one_of(
                st.fixed_dictionaries({"every": st.floats(0.01, DURATION)},
                                      optional={"ahead": st.integers(0, 1000)}),
                st.lists(st.fixed_dictionaries({"at": times}, optional={
                    "revision": st.one_of(st.integers(1, 10**6),
                                          st.sampled_from(["head", "random"]))}),
                    min_size=1, max_size=4)),
        }),
        "faults": st.lists(faults(), max_size=8),
        "checks": st.lists(st.sampled_from(schema.CHECKS), min_size=1, unique=True),
    },
)


@settings(max_examples=150, deadline=None)
@given(scenarios)
def test_random_valid_scenarios_load_and_round_trip(data: dict[str, Any]) -> None:
    s = schema.load_dict(data)
    assert s.name == data["name"]
    assert len(s.faults) == len(data.get("faults", []))
    assert schema.load_dict(s.to_dict()) == s
    assert schema.loads(s.to_yaml()) == s
