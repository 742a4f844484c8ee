"""`sediment branches ...` against a cluster `sediment start` keeps running: the commands
reach the KV over the cluster's etcd endpoints and report deletes to its delete sensor
(`actors/branches/shell/sensor_wire.py`), so the cluster's compactor compacts a branch
after enough deletes while every read stays the same. The report's wire format is
checked here without Ray; the end-to-end test runs `sediment start --backend ray
--detach` (on the session's Ray cluster), every command as a separate `sediment` process,
and `sediment stop`."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sediment import cli, detached
from sediment.actors.branches.sensor import CountDelete
from sediment.actors.branches.shell import sensor_wire as sw
from sediment.local_cluster import STATE_FILE

TOKEN = "0123456789abcdef0123456789abcdef"
THRESHOLD = 5
START_WAIT = 240.0  # seconds `sediment start` may take to come up on a loaded machine
COMPACTION_WAIT = 120.0  # bound on waiting for the sensor's compaction (not a timing claim)
METRICS_WAIT = 120.0  # bound on waiting for Prometheus to show it (not a timing claim)


# ---- the report's wire format (no Ray) -----------------------------------------------------


def test_a_report_round_trips_and_bad_ones_are_refused_whole() -> None:
    deletes = [CountDelete("demo", "dev", TOKEN, 0), CountDelete("demo", "main", TOKEN, 2)]
    assert sw.decode(sw.encode(deletes)) == deletes
    for body, message in [
        (b"\xff", "a report is JSON"),
        (b"[]", '"deletes"'),
        (b'{"deletes": [["demo", "dev", "' + TOKEN.encode() + b'"]]}', "[repo, branch"),
        (b'{"deletes": [["Bad Repo", "dev", "' + TOKEN.encode() + b'", 0]]}', "Bad Repo"),
        (b'{"deletes": [["demo", "dev", "nothex", 0]]}', "staging token"),
        (b'{"deletes": [["demo", "dev", "' + TOKEN.encode() + b'", -1]]}', "sealed"),
        (b'{"deletes": [["demo", "dev", "' + TOKEN.encode() + b'", true]]}', "sealed"),
        (json.dumps({"deletes": [["demo", "b", TOKEN, 0]] * (sw.MAX_DELETES + 1)}).encode(),
         "at most"),
    ]:
        with pytest.raises(sw.BadReport, match=message.replace("[", r"\[")):
            sw.decode(body)


def test_a_reporter_that_reaches_no_endpoint_says_so(tmp_path: Path) -> None:
    reporter = sw.DeleteReporter(["127.0.0.1:1"], timeout=5)
    assert reporter.flush() is None  # nothing to report
    reporter("demo", "dev", TOKEN, 0)
    why = reporter.flush()
    assert why is not None and "UNAVAILABLE" in why and reporter.pending


def test_a_held_data_dir_whose_cluster_does_not_answer_is_unavailable(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "held"
    d.mkdir()
    (d / STATE_FILE).write_text(json.dumps({
        "format": 1, "running": True, "pid": os.getpid(),
        "endpoints": {"n1": "http://127.0.0.1:1"}, "blocks": str(d / "blocks")}))
    code = cli.main(["--log-level", "warning", "branches", "--data-dir", str(d), "repo", "ls"])
    err = capsys.readouterr().err
    assert code == 3 and "the cluster:" in err
    assert not (d / "kv").exists() and not (d / "blocks").exists()  # nothing started here


# ---- against `sediment start` on Ray -------------------------------------------------------


def _env(ray_address: str | None = None) -> dict[str, str]:
    env = dict(os.environ, RAY_AUTH_MODE="disabled", PYTHONHASHSEED="0")
    env.pop("RAY_ADDRESS", None)
    if ray_address:
        env["RAY_ADDRESS"] = ray_address
    return env


STOP_WAIT = 60.0  # seconds a stopped `sediment start` may take to exit (it takes 1-4 s)


@pytest.fixture
def running(tmp_path: Path, ray_cluster: Any) -> Iterator[Path]:
    """A `sediment start --backend ray --detach` over a fresh data dir, on the session's
    Ray cluster (as in the suite's Ray pass, where a bare `ray.init()` finds it anyway):
    the command returns once the cluster is up, and `sediment stop` ends it after. One
    that does not exit within STOP_WAIT is killed, with its threads' stacks (SIGUSR1,
    which `sediment start` answers) in a warning."""
    d = tmp_path / "cluster"
    up = subprocess.run(
        [sys.executable, "-m", "sediment", "start", "--backend", "ray", "--data-dir", str(d),
         "--detach", "--etcd-port", "0", "--branch-delete-threshold", str(THRESHOLD),
         "--branch-compaction-interval", "1"],
        env=_env(ray_cluster.address), capture_output=True, text=True, timeout=START_WAIT)
    assert up.returncode == 0, f"sediment start --detach: {up.stdout}{up.stderr}"
    pid = int(json.loads((d / STATE_FILE).read_text())["pid"])
    stuck = None
    try:
        yield d
    finally:
        stop = subprocess.run(
            [sys.executable, "-m", "sediment", "stop", "--data-dir", str(d), "--wait",
             str(STOP_WAIT)], env=_env(), capture_output=True, text=True,
            timeout=STOP_WAIT + 60)
        if stop.returncode != 0 and detached.is_sediment(pid):
            os.kill(pid, signal.SIGUSR1)  # the stacks, into its output
            time.sleep(1)
            os.kill(pid, signal.SIGKILL)
            stuck = (d / detached.OUT_FILE).read_text()[-20_000:]
            _teardown_left_behind(d)
    if stuck is not None:  # seen once in a full CI Ray pass, never alone: the stacks
        # say where; a warning, not a failure, until it is understood (this test is
        # about the branch commands; the CLI's own tests stop `sediment start`)
        warnings.warn(f"sediment start did not exit {STOP_WAIT} s after SIGTERM:\n{stuck}",
                      stacklevel=1)


def _teardown_left_behind(d: Path) -> None:
    """A killed `sediment start` leaves its cluster's (detached) actors running: for the
    rest of a CI Ray pass they held ~10 GB and a share of the cores."""
    from sediment.runtime.ray.runtime import teardown_cluster

    with contextlib.suppress(OSError, ValueError, KeyError):
        teardown_cluster(json.loads((d / STATE_FILE).read_text())["ray_cluster"])


def _command(d: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "sediment", "--log-level", "warning", "branches",
            "--data-dir", str(d), *args]


def sed(d: Path, *args: str) -> tuple[int, str, str]:
    r = subprocess.run(_command(d, *args), env=_env(), capture_output=True, text=True,
                       timeout=120)
    return r.returncode, r.stdout, r.stderr


def sed_all(d: Path, *commands: tuple[str, ...]) -> list[tuple[int, str, str]]:
    """Several read-only commands, each a `sediment` process, run side by side."""
    procs = [subprocess.Popen(_command(d, *args), env=_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for args in commands]
    outs = [p.communicate(timeout=120) for p in procs]
    return [(p.returncode, o, e) for p, (o, e) in zip(procs, outs, strict=True)]


def ok(d: Path, *args: str) -> str:
    code, out, err = sed(d, *args)
    assert code == 0, f"sediment branches {' '.join(args)}: exit {code}: {err}"
    return out


def _ok(args: tuple[str, ...], result: tuple[int, str, str]) -> str:
    code, out, err = result
    assert code == 0, f"sediment branches {' '.join(args)}: exit {code}: {err}"
    return out


def reads(d: Path) -> tuple[object, ...]:
    """Everything a reader of branch dev sees: a listing in pages, gets, the diff (the
    commands side by side: each its own process, reading one state)."""
    pages, after = [], ""
    while True:  # pages one after the other: a page starts after the last one's end
        page = json.loads(ok(d, "ls", "demo", "dev", "--prefix", "a/", "--after", after,
                             "--amount", "4", "--json"))
        pages.append(page)
        if not page["has_more"]:
            break
        after = page["entries"][-1]["path"]
    commands = [("get", "demo", "dev", "a/10", "--json"), ("get", "demo", "dev", "a/00"),
                ("diff", "demo", "dev", "--json")]
    got, gone, diff = sed_all(d, *commands)
    return (pages, json.loads(_ok(commands[0], got)), gone[0],
            json.loads(_ok(commands[2], diff)))


def _metrics_when(d: Path, seen: Any) -> dict[str, Any]:
    """The cluster's metrics as its state file holds them, once `seen(metrics)` (bounded:
    Ray's agents export every few seconds, `sediment start` reads them every 5 s)."""
    deadline = time.monotonic() + METRICS_WAIT
    while True:
        metrics = json.loads((d / STATE_FILE).read_text()).get("metrics") or {}
        if seen(metrics):
            return dict(metrics)
        assert time.monotonic() < deadline, f"not in the cluster's metrics: {sorted(metrics)}"
        time.sleep(1)


@pytest.mark.ray
def test_the_commands_talk_to_a_running_cluster_whose_sensor_compacts(running: Path) -> None:
    d = running
    assert not (d / "branches.json").exists()
    first = json.loads(ok(d, "repo", "create", "demo", "--json"))["commit"]
    assert ok(d, "repo", "ls") == "demo\n"
    for i in range(12):
        ok(d, "put", "demo", "main", f"a/{i:02d}", "--address", f"s3://b/{i}", "--size",
           str(i), "--checksum", f"c{i}")
    head = ok(d, "commit", "demo", "main", "-m", "twelve", "--committer", "ada").strip()
    assert ok(d, "branch", "create", "demo", "dev", "--source", "main").strip() == head
    assert ok(d, "branch", "ls", "demo") == "dev\nmain\n"
    ok(d, "put", "demo", "dev", "b/new", "--address", "s3://b/new", "--size", "1")

    # deletes: one command for the sensor's threshold and more (its first delete on a
    # token only starts the count, as lakeFS's), reported to the cluster's sensor
    removed = [f"a/{i:02d}" for i in range(THRESHOLD + 2)]
    code, _, err = sed(d, "rm", "demo", "dev", *removed)
    assert code == 0 and "warning" not in err
    before = reads(d)
    assert [e["path"] for p in before[0] for e in p["entries"]] == [  # type: ignore[index]
        f"a/{i:02d}" for i in range(THRESHOLD + 2, 12)]
    assert before[2] == 1  # a/00 is gone: ObjectNotFound
    assert sorted((x["kind"], x["path"]) for x in before[3]["diffs"]) == sorted(  # type: ignore[index]
        [("removed", p) for p in removed] + [("added", "b/new")])

    # the cluster's sensor triggers its compactor: no `compact` command is run
    deadline = time.monotonic() + COMPACTION_WAIT
    while True:
        record = json.loads(ok(d, "branch", "show", "demo", "dev", "--json"))
        if record["compacted_metarange"] is not None:
            break
        assert time.monotonic() < deadline, f"no compaction after the deletes: {record}"
        time.sleep(0.2)  # a poll is a process: no need to wait long between two
    assert record["commit_id"] == head and record["compaction_start_time"] is not None
    assert abs(record["compaction_start_time"] - time.time()) < 3600  # the wall clock
    assert reads(d) == before  # the compaction changed no read

    # the branch metrics reach Prometheus: the sensor and the compactor report through
    # Ray's metrics API, `sediment start` reads the nodes' metrics agents into the state
    # file, and `sediment status` shows them
    metrics = _metrics_when(d, lambda m: any(
        x["tags"].get("outcome") == "done" and x["value"] >= 1
        for x in m.get("sediment_branch_compactions", [])) and any(
        x["tags"].get("fate") == "queued" and x["value"] >= 1
        for x in m.get("sediment_branch_sensor_triggers", [])))
    assert {x["tags"]["repo"] for x in metrics["sediment_branch_compactions"]} == {"demo"}
    status = subprocess.run([sys.executable, "-m", "sediment", "status", "--data-dir", str(d)],
                            env=_env(), capture_output=True, text=True, timeout=120)
    assert status.returncode == 0 and "branch_compactions" in status.stdout, status.stdout

    # a manual unforced compaction right after is throttled by the cluster's claim
    code, _, err = sed(d, "compact", "demo", "dev", "--no-force")
    assert code == 1 and ("CompactionThrottled" in err or "NothingToCompact" in err)

    done = ok(d, "commit", "demo", "dev", "-m", "trim").strip()
    assert reads(d)[:3] == before[:3]
    assert json.loads(ok(d, "diff", "demo", "dev", "--json"))["diffs"] == []
    log = [line.split("\t")[0] for line in ok(d, "log", "demo", "dev").splitlines()]
    assert log == [done, head, first]
    record = json.loads(ok(d, "branch", "show", "demo", "dev", "--json"))
    assert record["compacted_metarange"] is None and record["sealed_tokens"] == []
    ok(d, "branch", "delete", "demo", "dev")
    assert ok(d, "branch", "ls", "demo") == "main\n"
    assert not (d / "branches.json").exists()  # no cluster was started by a command
