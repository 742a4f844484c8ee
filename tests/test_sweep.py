"""`sediment run` over many runs: the estimate and its warning, one bar across the sweep
that log lines never break, the index page, the per-scenario table, Ctrl-C.

The runner is replaced by a fake that returns a verdict per seed, so these tests run no
cluster (`tests/test_cli.py` runs a real sim run end to end)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from sediment import cli, log, progress, sweep
from sediment.scenarios import report, runner, schema, sweep_report
from sediment.scenarios.checkers.result import passed, unknown, violated
from sediment.scenarios.history import History

SCENARIO = "name: {name}\nduration: {duration}\n"


@pytest.fixture
def fake_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """run_scenario returns at once: seed 13 fails, seed 17 is undecided, the others
    pass; seed 99 is Ctrl-C. Every run logs one line from a process and one from the
    driver."""
    seen: list[tuple[str, int]] = []

    def fake(s: Any, backend: str, seed: int, data_dir: Any, progress: Any = None) -> Any:
        if seed == 99:
            raise KeyboardInterrupt
        seen.append((s.name, seed))
        with log.bound_process("n1", "kv-node"):
            log.get_logger("t").error("process crashed", traceback="Traceback: planted")
        log.get_logger("t").info("fault", seed=seed)
        Path(data_dir).mkdir(parents=True)
        checks = ([violated("linearizable", "planted")] if seed == 13 else
                  [unknown("linearizable", "budget")] if seed == 17 else
                  [passed("linearizable")])
        return runner.RunResult(s, backend, seed, checks, History(), timings={"wall": 0.5})

    monkeypatch.setattr(runner, "run_scenario", fake)
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    monkeypatch.delenv(log.LEVEL_ENV, raising=False)
    return seen


def write(tmp_path: Path, name: str, duration: float = 5.0) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(SCENARIO.format(name=name, duration=duration))
    return path


def test_a_failing_run_is_told_with_its_report_and_log(
    fake_runs: list[tuple[str, int]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, "one")
    out = tmp_path / "out"
    assert cli.main(["run", str(tmp_path), "--seed", "12", "--seeds", "3", "--out",
                     str(out)]) == 1
    captured = capsys.readouterr()
    assert captured.err == ""  # the processes' error went to the run's log only
    assert "one seed 13 on sim: fail" in captured.out
    assert "linearizable: violation: planted" in captured.out
    assert f"report: {out}/one/seed-13/timeline.html (logs {out}/one/seed-13/run.log)" \
        in captured.out
    assert "one seed 12" not in captured.out  # a passing run is only in the table
    run_log = (out / "one" / "seed-13" / "run.log").read_text()
    assert "process crashed" in run_log and "Traceback: planted" in run_log
    assert (out / "one" / "seed-13" / "data").exists()  # kept: the run failed
    assert not (out / "one" / "seed-12" / "data").exists()


def test_each_prints_every_run(fake_runs: list[tuple[str, int]], tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "one")
    assert cli.main(["run", str(tmp_path), "--seed", "1", "--seeds", "2", "--each", "--out",
                     str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "one seed 1: PASS (0.5 s)" in out and "one seed 2: PASS (0.5 s)" in out


def test_the_index_links_every_run_and_lists_the_bad_ones_first(
    fake_runs: list[tuple[str, int]], tmp_path: Path
) -> None:
    write(tmp_path, "one")
    write(tmp_path, "two")
    out = tmp_path / "out"
    assert cli.main(["run", str(tmp_path), "--seed", "12", "--seeds", "6", "--out",
                     str(out)]) == 1
    page = (out / "index.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    assert "12 runs: 8 passed, 2 failed, 2 undecided" in page
    for name in ("one", "two"):
        for seed in range(12, 18):
            assert f'href="{name}/seed-{seed}/timeline.html"' in page
    bad = page.split("<h2>Every run</h2>")[0]
    assert 'href="one/seed-13/run.log"' in bad and 'href="two/seed-17/result.json"' in bad
    assert "seed-12" not in bad
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["passed"], summary["failed"], summary["unknown"]) == (8, 2, 2)


def test_a_large_sweep_gets_one_row_per_scenario(
    fake_runs: list[tuple[str, int]], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sweep, "PER_RUN_ROWS", 4)
    write(tmp_path, "one")
    write(tmp_path, "two")
    assert cli.main(["run", str(tmp_path), "--seed", "13", "--seeds", "5", "--out",
                     str(tmp_path / "out")]) == 1
    table = capsys.readouterr().out.split("\n\n")[-2]  # the table, before the report line
    rows = [line.split() for line in table.splitlines()[2:]]
    assert rows == [["one", "sim", "5", "3", "1", "1", "-", "0.5", "13,", "17"],
                    ["two", "sim", "5", "3", "1", "1", "-", "0.5", "13,", "17"]]


def test_ctrl_c_keeps_the_finished_runs(fake_runs: list[tuple[str, int]], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "one")
    out = tmp_path / "out"
    assert cli.main(["run", str(tmp_path), "--seed", "97", "--seeds", "3", "--out",
                     str(out)]) == 130
    assert fake_runs == [("one", 97), ("one", 98)]
    assert "interrupted after 2 of 3 runs" in capsys.readouterr().err
    assert "(interrupted: only the finished runs)" in (out / "index.html").read_text()
    assert json.loads((out / "summary.json").read_text())["passed"] == 2


def test_a_run_directory_is_never_overwritten(fake_runs: list[tuple[str, int]],
                                              tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "one")
    out = tmp_path / "out"
    assert cli.main(["run", str(tmp_path), "--seed", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    assert cli.main(["run", str(tmp_path), "--seed", "1", "--out", str(out)]) == 2
    assert f"{out}/one/seed-1 exists: choose another --out" in capsys.readouterr().err
    assert fake_runs == [("one", 1)]


# ---- the estimate ----------------------------------------------------------------------


def library_plan(seeds: int, backend: str = "sim") -> sweep.Plan:
    library = Path(schema.__file__).parent / "library"
    return sweep.plan(schema.load_dir(library), backend, 0, seeds, Path("/nonexistent"))


def test_the_readmes_200_seed_sweep_is_estimated_near_what_it_took() -> None:
    """3,800 runs of the library took about 2 h of two parallel workers (so about 4 h
    of one) and wrote about 2.4 GB; one worker, as `sediment run` is, should be
    estimated within a factor of two of that."""
    seconds, size = library_plan(200).estimate("sim")
    assert 2 * 3600 <= seconds <= 8 * 3600
    assert 1.2e9 <= size <= 4.8e9
    warning = sweep.warning_for(library_plan(200), "sim", Path("reports"))
    assert warning is not None
    assert warning.startswith("sediment: warning: 3,800 runs (19 files x 200 seeds) on sim")
    assert re.search(r"about \d\.\d h and \d\.\d GB of reports in reports", warning)


def test_duration_overrides_the_ray_duration_too(tmp_path: Path) -> None:
    path = tmp_path / "long.yaml"
    path.write_text("name: long\nduration: 5\nray_duration: 30\n")
    (s,) = sweep.load_scenarios([str(path)], duration=8)
    assert (s.duration, s.ray_duration, s.on("ray").duration) == (8, None, 8)
    (kept,) = sweep.load_scenarios([str(path)])
    assert kept.on("ray").duration == 30
    def seconds(scenario: Any) -> float:
        return sweep.plan([scenario], "ray", 0, 1, tmp_path / "o").estimate("ray")[0]

    assert seconds(kept) > seconds(s)  # a Ray sweep is estimated at the Ray length


def test_a_short_sweep_has_no_warning() -> None:
    assert sweep.warning_for(library_plan(1), "sim", Path("reports")) is None
    assert sweep.warning_for(library_plan(1), "ray", Path("reports")) is not None  # ~15 min


def test_the_warning_comes_before_the_first_run(
    fake_runs: list[tuple[str, int]], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sweep, "LONG_SWEEP", 1.0)
    write(tmp_path, "one")
    assert cli.main(["run", str(tmp_path), "--seed", "1", "--seeds", "2", "--out",
                     str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert err.startswith("sediment: warning: 2 runs (1 file x 2 seeds) on sim: about 4 s "
                          "and 1.4 MB of reports in")


# ---- the bar --------------------------------------------------------------------------


def test_one_bar_counts_runs_and_fractions_of_the_current_one() -> None:
    stream = io.StringIO()
    with progress.SweepBar(4, enabled=True, stream=stream) as bar:
        update = bar.run("one seed 1")
        update(runner.Progress("traffic", 2.5, 5.0, ops=10))
        assert bar._bar.n == pytest.approx(0.45)
        bar.finished()
        bar.run("one seed 2")(runner.Progress("check", 5.0, 5.0))
        assert bar._bar.n == pytest.approx(1.95)
        assert "one seed 2: check" in stream.getvalue()
    assert progress.run_fraction(runner.Progress("done", 5.0, 5.0)) == 1.0
    assert progress.run_fraction(runner.Progress("start", 0.0, 0.0)) == 0.0


def test_log_lines_go_through_the_bar_whole() -> None:
    """A line printed while the bar is drawn starts on a cleared line and ends with a
    newline: the bar is redrawn below it, never cut into it."""
    stream = io.StringIO()
    log.configure("console", "warning", stream=io.StringIO())
    try:
        with progress.SweepBar(2, enabled=True, stream=stream) as bar, \
                log.console_writer(bar.write_log_line):
            bar.run("one seed 1")(runner.Progress("traffic", 1.0, 5.0))
            log.get_logger("t").warning("disk slow")
            bar.run("one seed 1")(runner.Progress("traffic", 2.0, 5.0))
    finally:
        log.configure("console", "info")
    text = stream.getvalue()
    (line,) = [part for part in re.split(r"[\r\n]", text) if "disk slow" in part]
    assert line.lstrip().split()[1:3] == ["[warning", "]"]
    assert "runs" not in line  # no bar in the log line
    after = text.split("disk slow", 1)[1]
    assert "\n" in after and "runs" in after.split("\n", 1)[1]  # the bar, redrawn below


def test_a_disabled_bar_prints_plainly(capsys: pytest.CaptureFixture[str]) -> None:
    with progress.SweepBar(2, enabled=False) as bar:
        bar.run("x")(runner.Progress("traffic", 1.0, 5.0))
        bar.write("to stdout")
        bar.write_log_line("to stderr")
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("to stdout\n", "to stderr\n")


def test_sweep_table_and_index_from_summaries_only() -> None:
    runs = [report.RunSummary("s", seed, "sim", "pass" if seed else "fail",
                              {"triggered": 1, "hit": 1 if seed else 0}, (("x", "ok"),),
                              1.0 + seed, f"s/seed-{seed}")
            for seed in range(3)]
    rows = sweep_report.sweep_table(runs).splitlines()
    assert rows[2].split() == ["s", "sim", "3", "2", "1", "0", "2/3", "2.0", "0"]
    page = sweep_report.index_html(runs, "t<1>")
    assert "<title>t&lt;1&gt;</title>" in page and 'href="s/seed-0/run.log"' in page


def test_an_unwritable_report_directory_is_one_line(fake_runs: list[tuple[str, int]],
                                                    tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "one")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    assert cli.main(["run", str(tmp_path / "one.yaml"), "--out", str(blocker / "out")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"sediment: {blocker}") and line.endswith("Not a directory")
    assert fake_runs == []
