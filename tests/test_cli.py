"""The `sediment` command: help, version, demo dispatch; run, start and status."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest

import sediment
from sediment import cli, detached

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, exe: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    command = (exe or [sys.executable, "-m", "sediment"]) + list(args)
    return subprocess.run(
        command, capture_output=True, text=True, timeout=60, cwd=ROOT, env=dict(os.environ)
    )


def test_version_via_python_m() -> None:
    result = run("version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"sediment {sediment.__version__}"


def test_version_matches_package_metadata() -> None:
    from importlib.metadata import version

    assert sediment.__version__ == version("sediment") != "0.0.0"


def test_help_lists_commands() -> None:
    result = run("--help")
    assert result.returncode == 0, result.stderr
    for word in ("demo", "version", "--log-format"):
        assert word in result.stdout


def test_console_script() -> None:
    script = Path(sys.executable).parent / "sediment"
    if not script.exists():
        pytest.skip("the sediment console script is not installed next to this python")
    result = run("version", exe=[str(script)])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("sediment ")


def test_version_all_lists_the_stack(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["version", "--all"]) == 0
    out = capsys.readouterr().out
    for dist in ("python", "ray", "raydp", "pyspark", "pandas"):
        assert f"\n{dist} " in out


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "usage: sediment" in capsys.readouterr().err


def test_unknown_argument_is_an_error() -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["version", "--bogus"])
    assert exc.value.code == 2


def test_bad_log_format_is_an_error() -> None:
    with pytest.raises(SystemExit):
        cli.main(["--log-format", "xml", "version"])


def test_demo_gets_every_argument_after_the_word_demo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[list[str]] = []
    fake = types.ModuleType("sediment.demo")
    fake.main = lambda argv: seen.append(argv) or 7  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sediment.demo", fake)
    monkeypatch.delenv("SEDIMENT_LOG_FORMAT", raising=False)
    assert cli.main(["demo", "--seed", "3", "--help"]) == 7
    assert seen == [["--seed", "3", "--help"]]


def test_missing_demo_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "sediment.demo", None)  # import now fails
    assert cli.main(["demo"]) == 2
    assert "sediment/demo.py" in capsys.readouterr().err


# ---- run / start / status -------------------------------------------------------------

SMALL_SCENARIO = """\
# A short run for the CLI tests.
name: cli-small
duration: 1.5
cluster:
  nodes: 3
  settings: {compaction_interval: 0.3, election_timeout: [0.3, 0.6], heartbeat_interval: 0.05}
traffic:
  clients: 2
  rate: 15
  keys: 3
  watchers:
    - {count: 1, prev_kv: true}
faults:
  - {at: 0.5, kill_node: {node: leader}}
"""


def sim_env() -> dict[str, str]:
    """The environment of a CLI child: a fixed hash seed (so `run` needs no re-exec)."""
    return {**os.environ, "PYTHONHASHSEED": "0", "SEDIMENT_LOG_LEVEL": "error"}


def run_cli(*args: str, timeout: float = 120,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sediment", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=env or sim_env())


@pytest.mark.slow
def test_run_writes_the_report_and_exits_0(tmp_path: Path) -> None:
    """A default sim run at the default console level: its table and the report path,
    nothing else, on stdout; nothing on stderr; the run's logs in its run.log."""
    scenario = tmp_path / "small.yaml"
    scenario.write_text(SMALL_SCENARIO)
    out = tmp_path / "out"
    env = {k: v for k, v in sim_env().items() if k != "SEDIMENT_LOG_LEVEL"}
    result = run_cli("run", str(scenario), "--out", str(out), "--seed", "3", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""
    header, rule, row, blank, where = result.stdout.splitlines()
    assert header.split()[:4] == ["scenario", "seed", "backend", "verdict"]
    assert set(rule) <= {"-", " "}
    assert row.split()[:4] == ["cli-small", "3", "sim", "PASS"]
    assert (blank, where) == ("", f"report: {out / 'index.html'}")
    run_dir = out / "cli-small" / "seed-3"
    verdict = json.loads((run_dir / "result.json").read_text())
    assert verdict["verdict"] == "pass" and verdict["seed"] == 3
    assert verdict["python_hash_seed"] == "0"
    assert "<svg" in (run_dir / "timeline.html").read_text()
    assert json.loads((out / "summary.json").read_text())["passed"] == 1
    assert 'href="cli-small/seed-3/timeline.html"' in (out / "index.html").read_text()
    logs = (run_dir / "run.log").read_text()
    assert "raft server up" in logs and "kv node up" in logs  # the processes' info lines
    assert "fault" in logs and "kill_node" in logs  # the driver's
    assert not (run_dir / "data").exists()  # a passing run's cluster files are removed


def test_run_a_broken_scenario_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nduration: 5\ntraffic:\n  clinets: 3\n")
    # without a hash seed: `run` re-executes itself with one first (a sim seed then
    # replays exactly across invocations), and still reports the file
    env = {k: v for k, v in sim_env().items() if k != "PYTHONHASHSEED"}
    result = run_cli("run", str(bad), "--out", str(tmp_path / "out"), env=env)
    assert result.returncode == 2
    assert ("bad.yaml:4:3: traffic.clinets: unknown key (did you mean 'clients'?)"
            in result.stderr)
    assert not (tmp_path / "out").exists()


def test_run_a_directory_without_scenarios_is_an_error(tmp_path: Path) -> None:
    assert cli.main(["run", str(tmp_path)]) == 2


def test_run_exit_codes_follow_the_verdicts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from sediment.scenarios import runner
    from sediment.scenarios.checkers.result import passed, unknown, violated
    from sediment.scenarios.history import History

    scenario = tmp_path / "small.yaml"
    scenario.write_text(SMALL_SCENARIO)
    monkeypatch.setenv("PYTHONHASHSEED", "0")  # no re-exec of the test process
    checks = {1: [passed("linearizable")], 2: [violated("linearizable", "planted")],
              3: [unknown("linearizable", "budget")]}

    def fake(s: Any, backend: str, seed: int, data_dir: Any, progress: Any = None) -> Any:
        return runner.RunResult(s, backend, seed, checks[seed], History())

    monkeypatch.setattr(runner, "run_scenario", fake)
    for seed, code in ((1, 0), (2, 1), (3, 3)):
        assert cli.main(["run", str(scenario), "--seed", str(seed), "--out",
                         str(tmp_path / f"o{seed}")]) == code
    out = capsys.readouterr().out
    assert "linearizable: violation: planted" in out and "UNKNOWN" in out


def test_seeds_run_from_the_first_seed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from sediment.scenarios import runner
    from sediment.scenarios.history import History

    scenario = tmp_path / "small.yaml"
    scenario.write_text(SMALL_SCENARIO)
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    seen: list[tuple[str, int]] = []

    def fake(s: Any, backend: str, seed: int, data_dir: Any, progress: Any = None) -> Any:
        seen.append((backend, seed))
        return runner.RunResult(s, backend, seed, [], History())

    monkeypatch.setattr(runner, "run_scenario", fake)
    assert cli.main(["run", str(scenario), "--seed", "7", "--seeds", "3",
                     "--out", str(tmp_path / "o")]) == 0
    assert seen == [("sim", 7), ("sim", 8), ("sim", 9)]


def test_duration_replaces_each_files_and_must_fit_its_faults(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from sediment.scenarios import runner
    from sediment.scenarios.history import History

    monkeypatch.setenv("PYTHONHASHSEED", "0")
    seen: list[float] = []

    def fake(s: Any, backend: str, seed: int, data_dir: Any, progress: Any = None) -> Any:
        seen.append(s.duration)
        return runner.RunResult(s, backend, seed, [], History())

    monkeypatch.setattr(runner, "run_scenario", fake)
    lcf = ROOT / "scenarios" / "library" / "log-compaction-failpoints.yaml"
    assert cli.main(["run", str(lcf), "--duration", "20", "--out", str(tmp_path / "o")]) == 0
    assert seen == [20.0]
    assert cli.main(["run", str(lcf), "--duration", "0.35", "--out",
                     str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "--duration 0.35" in err and "faults" in err, err
    assert seen == [20.0] and not (tmp_path / "p").exists()


def test_status_without_a_cluster_is_a_clear_error(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["status", "--data-dir", str(tmp_path)]) == 2
    assert "sediment start --data-dir" in capsys.readouterr().err


@pytest.mark.slow
def test_start_keeps_a_cluster_up_and_status_shows_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    start = subprocess.Popen(
        [sys.executable, "-m", "sediment", "start", "--backend", "sim", "--data-dir",
         str(data), "--for", "6", "--compaction-interval", "0.5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=sim_env())
    try:
        status = None
        for _ in range(120):
            time.sleep(0.25)
            if (data / cli.STATE_FILE).exists():
                status = run_cli("status", "--data-dir", str(data))
                break
        assert status is not None and status.returncode == 0, status
        assert "running" in status.stdout and "leader: n" in status.stdout
        for word in ("node", "role", "head", "compact", "floor", "segments", "n3"):
            assert word in status.stdout
        assert "metrics (docs/metrics.md):" in status.stdout
        assert re.search(r"raft_term\{group=kv\}\s+[1-9]\s+[1-9]\s+[1-9]\n",
                         status.stdout), status.stdout
        state = json.loads(run_cli("status", "--data-dir", str(data), "--json").stdout)
        assert state["running"] and len(state["members"]) == 3
        terms = state["metrics"]["sediment_raft_term"]
        assert {t["tags"]["node"] for t in terms if t["tags"]["group"] == "kv"} == {
            "n1", "n2", "n3"}
        out, _ = start.communicate(timeout=60)
        assert start.returncode == 0 and "sediment status --data-dir" in out
    finally:
        if start.poll() is None:
            start.kill()
    after = run_cli("status", "--data-dir", str(data))
    assert after.returncode == 1 and "not running" in after.stdout


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_start_stops_on_ctrl_c_and_sigterm_even_started_with_sigint_ignored(
        tmp_path: Path, signum: int) -> None:
    """A non-interactive shell starts `cmd &` with SIGINT ignored, and Python then raises
    no KeyboardInterrupt: such a `start` went on through every Ctrl-C (and, killed, left
    its detached Ray cluster running)."""
    data = tmp_path / "data"
    start = subprocess.Popen(
        [sys.executable, "-m", "sediment", "start", "--backend", "sim", "--data-dir",
         str(data), "--for", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=sim_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        for _ in range(240):
            time.sleep(0.25)
            if (data / cli.STATE_FILE).exists():
                break
        start.send_signal(signum)
        out, _ = start.communicate(timeout=60)
        assert start.returncode == 0 and "stopping ..." in out and "stopped" in out
    finally:
        if start.poll() is None:
            start.kill()
    assert not json.loads((data / cli.STATE_FILE).read_text())["running"]


@pytest.mark.slow
def test_a_detached_start_returns_once_up_and_stop_ends_it(tmp_path: Path) -> None:
    """`start --detach` leaves the cluster running in a process of its own and returns;
    a second start on the same data dir is refused; `stop` ends it and is idempotent."""
    data = tmp_path / "data"
    up = run_cli("start", "--backend", "sim", "--data-dir", str(data), "--detach",
                 "--compaction-interval", "0.5", timeout=300)
    pid = 0
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "cluster up: leader n" in up.stdout
        assert f"stop:    sediment stop --data-dir {data}" in up.stdout
        state = json.loads((data / cli.STATE_FILE).read_text())
        pid = state["pid"]
        assert state["running"] and detached.is_sediment(pid)
        status = run_cli("status", "--data-dir", str(data))
        assert status.returncode == 0 and "running" in status.stdout, status.stdout
        for extra in (["--detach"], []):  # two clusters on one data dir's files: refused
            again = run_cli("start", "--backend", "sim", "--data-dir", str(data), *extra)
            assert again.returncode == 2 and f"already runs in {data}" in again.stderr
        stop = run_cli("stop", "--data-dir", str(data))
        assert stop.returncode == 0 and stop.stdout.endswith("stopped\n"), stop.stdout
        assert not detached.is_sediment(pid)
    finally:
        if pid and detached.is_sediment(pid):
            os.kill(pid, signal.SIGKILL)
    assert not json.loads((data / cli.STATE_FILE).read_text())["running"]
    assert run_cli("status", "--data-dir", str(data)).returncode == 1
    again = run_cli("stop", "--data-dir", str(data))
    assert again.returncode == 0 and "no cluster running" in again.stdout


def test_a_detached_start_that_fails_says_why_and_stop_needs_a_cluster(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    bad = run_cli("start", "--data-dir", str(data), "--detach", "--tls-cert", "x.pem")
    assert bad.returncode == 1
    assert "exited (2) before its cluster was up" in bad.stderr
    assert "--tls-cert and --tls-key go together" in bad.stderr
    nothing = run_cli("stop", "--data-dir", str(tmp_path / "none"))
    assert nothing.returncode == 2 and "no cluster state in" in nothing.stderr


# ---- help, version, errors for people --------------------------------------------------


def _subparsers(parser: Any) -> dict[str, Any]:
    import argparse

    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _option_helps(parser: Any) -> dict[str, str]:
    """Each option's help as printed (defaults expanded), by its first flag."""
    formatter = parser._get_formatter()
    return {a.option_strings[0]: formatter._expand_help(a) for a in parser._actions
            if a.option_strings and a.option_strings[0] not in ("-h", "--version")}


def test_every_option_of_every_command_has_help_with_its_default() -> None:
    import argparse

    parser = cli.build_parser()
    parsers = {"sediment": parser}
    for name, sub in _subparsers(parser).items():
        if name != "demo":  # demo parses its own options (next test)
            parsers[f"sediment {name}"] = sub
    from sediment import demo

    parsers["sediment demo"] = demo.build_parser()
    for prog, p in parsers.items():
        for flag, text in _option_helps(p).items():
            assert "default" in text, f"{prog} {flag}: {text!r}"
    for name, sub in _subparsers(parser).items():  # branches, catalog, tables
        if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
            for leaf, p in _subparsers(sub).items():
                for flag, text in _option_helps(p).items():
                    assert "default" in text or "(required)" in text, (
                        f"sediment {name} {leaf} {flag}: {text!r}")
    sub_helps = {a.dest: a.help for a in _subparsers(parser)["run"]._actions}
    assert sub_helps["paths"]
    for action in next(a for a in parser._actions if a.dest == "command")._choices_actions:
        assert action.help, action.dest


@pytest.mark.parametrize("command", ["", "run", "start", "stop", "status", "version",
                                     "demo", "inspect", "branches", "catalog", "tables"])
def test_help_shows_the_defaults(command: str) -> None:
    result = run(*([command] if command else []), "--help")
    assert result.returncode == 0, result.stderr
    assert "(default:" in result.stdout and "usage: sediment" in result.stdout


def test_version_flag() -> None:
    result = run("--version")
    assert (result.returncode, result.stdout.strip()) == (0, f"sediment {sediment.__version__}")


def test_a_bad_log_level_in_the_environment_is_one_line() -> None:
    env = dict(os.environ, SEDIMENT_LOG_LEVEL="loud")
    result = subprocess.run([sys.executable, "-m", "sediment", "version"], capture_output=True,
                            text=True, timeout=60, cwd=ROOT, env=env)
    assert result.returncode == 2
    assert result.stderr == ("sediment: SEDIMENT_LOG_LEVEL must be one of debug, info, "
                             "warning, error, critical, got 'loud'\n")


@pytest.mark.parametrize(("args", "message"), [
    (["run", "x.yaml", "--seed", "x"], "argument --seed: must be an integer >= 0, got 'x'"),
    (["run", "x.yaml", "--seeds", "0"], "argument --seeds: must be an integer >= 1, got 0"),
    (["start", "--for", "soon"], "argument --for: must be a number of seconds, got 'soon'"),
    (["start", "--compaction-interval", "-1"], "must be a number of seconds > 0, got '-1'"),
])
def test_bad_option_values_read_well(args: list[str], message: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "_non_negative" not in err and "invalid" not in err


def test_an_unexpected_error_is_one_line_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sediment import sweep

    def broken(args: Any) -> int:
        raise RuntimeError("the disk is on fire")

    monkeypatch.setattr(sweep, "cmd_run", broken)
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    monkeypatch.delenv("SEDIMENT_LOG_LEVEL", raising=False)
    assert cli.main(["run", "x.yaml"]) == 4
    err = capsys.readouterr().err
    assert err == ("sediment: unexpected error: RuntimeError: the disk is on fire "
                   "(`sediment --log-level debug ...` shows where)\n")
    with pytest.raises(RuntimeError):  # at debug level the traceback shows
        cli.main(["--log-level", "debug", "run", "x.yaml"])


def test_every_bad_file_of_a_directory_is_reported(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.yaml").write_text("name: a\nduration: 5\ntraffic: {clinets: 3}\n")
    (tmp_path / "b.yaml").write_text("name: b\nduration: 5\n")
    (tmp_path / "c.yaml").write_text("name: c\nduration: 5\nbackends: [sin]\n")
    (tmp_path / "d.yaml").write_text("name: b\nduration: 5\n")
    out = tmp_path / "out"
    assert cli.main(["run", str(tmp_path), "--out", str(out)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "sediment: a.yaml:3:11: traffic.clinets: unknown key (did you mean 'clients'?); "
        "known: clients, rate, keys, mix, value_size, watchers, compactions, client",
        "sediment: c.yaml:3:12: backends[0]: must be one of sim, ray, got 'sin' "
        "(did you mean 'sim'?)",
        "sediment: d.yaml: name: 'b' is also the name in b.yaml",
    ]
    assert not out.exists()


# ---- the demos on the simulator ----------------------------------------------------------


@pytest.mark.slow
def test_the_headline_demo_on_sim_prints_its_story_table_and_report(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    env = {k: v for k, v in sim_env().items() if k != "SEDIMENT_LOG_LEVEL"}
    result = run_cli("demo", "--backend", "sim", "--out", str(out), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""
    assert result.stdout.startswith("primary-killed-in-notice on sim, seed 0:\n  Proves:")
    assert "primary-killed-in-notice seed 0: PASS" in result.stdout
    assert result.stdout.endswith(f"report: {out / 'index.html'}\n")
    assert (out / "primary-killed-in-notice" / "seed-0" / "run.log").exists()


@pytest.mark.slow
@pytest.mark.parametrize("which", ["--kv", "--supervision"])
def test_the_other_demos_on_sim_keep_their_logs_in_a_file(which: str) -> None:
    env = {k: v for k, v in sim_env().items() if k != "SEDIMENT_LOG_LEVEL"}
    result = run_cli("demo", "--backend", "sim", which, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""  # the kills' crash reports went to the file
    last = result.stdout.splitlines()[-1]
    assert last.startswith("logs: ")
    logs = Path(last.removeprefix("logs: "))
    try:
        assert "supervisor report" in logs.read_text()
    finally:
        import shutil

        shutil.rmtree(logs.parent, ignore_errors=True)
