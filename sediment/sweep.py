"""`sediment run`: scenario files x seeds, one progress bar, reports and an index.

Before anything runs, every file is loaded and checked (every bad file is reported,
not only the first) and every run directory must be new. A sweep that will take long or
write much is announced with an estimate (seconds and bytes per run, measured on the
library: see ESTIMATE). Each run's logs go to `run.log` in its report directory (the
processes' lines only there; the console shows the driver's warnings and errors); the
console shows one bar across the sweep, a failing run's violations as it ends, then a
table (one row per run, or per scenario for a larger sweep) and where the reports are:
per run `result.json`, `history.json`, `timeline.html`, `run.log`; for the sweep
`summary.json` and `index.html`. Ctrl-C stops the sweep; the finished runs' reports,
summary and index stay.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sediment import log
from sediment.progress import SweepBar

EXIT_OK, EXIT_VIOLATION, EXIT_USAGE, EXIT_UNKNOWN, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
RUN_LOG = "run.log"
PER_RUN_ROWS = 30  # a larger sweep's table has one row per scenario


@dataclass(frozen=True)
class Cost:
    """What a run costs, by backend: seconds = base + per_second x the scenario's
    duration; bytes of reports and log. Measured on this project's 2-core machine: on
    sim the library's files take 1.1-3.2 s and write 0.2-1.3 MB each (the 200-seed
    sweep of its 19 files, 3,800 runs, took about 2 h and 2.4 GB); on Ray 21-47 s."""

    base: float
    per_second: float
    bytes: int


ESTIMATE = {"sim": Cost(0.3, 0.3, 700_000), "ray": Cost(15.0, 3.0, 600_000)}
LONG_SWEEP = 10 * 60.0  # seconds: warn above this
LARGE_SWEEP = 1_000_000_000  # bytes: warn above this


class UsageError(Exception):
    """Bad input to the command: each line of the message is one problem."""


def load_scenarios(paths: Sequence[str], duration: float | None = None) -> list[Any]:
    """Every scenario of the files and directories, in order; UsageError listing every
    bad file (and every path that holds none). `duration` replaces each file's, checked
    as if the file said it (faults and their windows must end by it)."""
    from sediment.scenarios import schema

    out: list[Any] = []
    problems: list[str] = []
    for p in paths:
        path = Path(p)
        try:
            if path.is_dir():
                found = schema.load_dir(path)
                if not found:
                    problems.append(f"{path}: no scenario files (*.yaml) in it")
                out += found
            else:
                out.append(schema.load(path))
        except schema.ScenarioErrors as errs:
            problems += [str(e) for e in errs.errors]
        except schema.ScenarioError as err:
            problems.append(str(err))
    if duration is not None and not problems:
        out = [_with_duration(s, duration, problems) for s in out]
    if problems:
        raise UsageError("\n".join(problems))
    return out


def _with_duration(s: Any, duration: float, problems: list[str]) -> Any:
    from sediment.scenarios import schema

    try:
        data = {**s.to_dict(), "duration": duration}
        data.pop("ray_duration", None)  # --duration is the run's length on every backend
        schema.load_dict(data, source=s.name)
    except schema.ScenarioError as err:
        problems.append(f"--duration {duration:g}: {err}")
    except schema.ScenarioErrors as errs:
        problems += [f"--duration {duration:g}: {e}" for e in errs.errors]
    return dataclasses.replace(s, duration=duration, ray_duration=None)


@dataclass(frozen=True)
class Plan:
    runs: tuple[tuple[Any, int], ...]  # (scenario, seed)
    skipped: tuple[str, ...]  # scenario names that do not run on the backend

    def estimate(self, backend: str) -> tuple[float, int]:
        """(seconds, bytes) the runs will take and write, roughly."""
        cost = ESTIMATE[backend]
        seconds = sum(cost.base + cost.per_second * s.on(backend).duration
                      for s, _ in self.runs)
        return seconds, cost.bytes * len(self.runs)


def plan(scenarios: Sequence[Any], backend: str, first_seed: int | None, seeds: int,
         out: Path) -> Plan:
    """The runs in order; UsageError for faults this runtime cannot inject and for run
    directories that already exist (a report is never overwritten)."""
    from sediment.scenarios import nemesis

    runs: list[tuple[Any, int]] = []
    skipped: list[str] = []
    problems: list[str] = []
    for s in scenarios:
        if backend not in s.backends:
            skipped.append(s.name)
            continue
        try:
            nemesis.check_supported(s)
        except nemesis.UnsupportedScenario as exc:
            problems.append(str(exc))
            continue
        first = s.seed if first_seed is None else first_seed
        for seed in range(first, first + seeds):
            if run_dir(out, s.name, seed).exists():
                problems.append(f"{run_dir(out, s.name, seed)} exists: choose another --out")
                break
            runs.append((s, seed))
    if problems:
        raise UsageError("\n".join(problems))
    return Plan(tuple(runs), tuple(skipped))


def run_dir(out: Path, name: str, seed: int) -> Path:
    return out / name / f"seed-{seed}"


def human_seconds(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def human_bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def warning_for(p: Plan, backend: str, out: Path) -> str | None:
    """The warning before a sweep that will take long or write much, or None."""
    seconds, size = p.estimate(backend)
    if seconds <= LONG_SWEEP and size <= LARGE_SWEEP:
        return None
    per_file: dict[str, int] = {}
    for s, _ in p.runs:
        per_file[s.name] = per_file.get(s.name, 0) + 1
    seeds = set(per_file.values())
    shape = _count(len(per_file), "file") + (
        f" x {_count(seeds.pop(), 'seed')}" if len(seeds) == 1 else "")
    return (f"sediment: warning: {len(p.runs):,} runs ({shape}) on {backend}: "
            f"about {human_seconds(seconds)} and {human_bytes(size)} of reports in {out} "
            "(estimated); Ctrl-C stops it and keeps the finished runs' reports")


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}" + ("" if n == 1 else "s")


def cmd_run(args: argparse.Namespace) -> int:
    from sediment.scenarios import report, runner, sweep_report

    out = Path(args.out or f"sediment-runs/{datetime.now(UTC):%Y%m%d-%H%M%S}")
    client = getattr(args, "client", None)
    if client == "grpc" and args.backend != "ray":
        print("sediment: --client grpc needs --backend ray (the simulator has no sockets "
              "for the gRPC API)", file=sys.stderr)
        return EXIT_USAGE
    try:
        scenarios = load_scenarios(args.paths, getattr(args, "duration", None))
        p = plan(scenarios, args.backend, args.seed, args.seeds, out)
    except UsageError as exc:
        for line in str(exc).splitlines():
            print(f"sediment: {line}", file=sys.stderr)
        return EXIT_USAGE
    for name in p.skipped:
        print(f"{name}: skipped (does not run on {args.backend})")
    if not p.runs:
        return EXIT_OK
    warning = warning_for(p, args.backend, out)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    show = not args.no_progress and sys.stderr.isatty()
    file_level = min(log.LEVELS["info"], log.LEVELS[log.current_settings()["level"]])
    summaries: list[report.RunSummary] = []
    code = EXIT_OK
    interrupted = False
    with SweepBar(len(p.runs), enabled=show) as bar, log.console_writer(bar.write_log_line):
        try:
            for s, seed in p.runs:
                d = run_dir(out, s.name, seed)
                with log.file_sink(d / RUN_LOG, file_level, capture_processes=True):
                    result = runner.run_scenario(s, args.backend, seed, d / "data",
                                                 progress=bar.run(f"{s.name} seed {seed}"),
                                                 **({"client": client} if client else {}))
                    files = report.write_run(result, d)
                summaries.append(report.summarize(result, str(d.relative_to(out))))
                bar.finished()
                code = _worse(code, result.verdict)
                if result.verdict != "pass":
                    bar.write(report.failure_text(result)
                              + f"\n  report: {files['timeline']} (logs {d / RUN_LOG})\n")
                    continue
                if args.each:
                    bar.write(f"{s.name} seed {seed}: PASS ({result.timings.get('wall', 0):.1f}"
                              f" s) {files['timeline']}")
                if not args.keep_data:
                    shutil.rmtree(d / "data", ignore_errors=True)
        except KeyboardInterrupt:
            interrupted = True
    if summaries:
        if args.each:
            print()
        print(report.summary_table(summaries) if len(summaries) <= PER_RUN_ROWS
              else sweep_report.sweep_table(summaries))
        report.write_summary(summaries, out)
        index = sweep_report.write_index(summaries, out, interrupted)
        print(f"\nreport: {index}")
    if interrupted:
        print(f"sediment: interrupted after {len(summaries)} of {len(p.runs)} runs",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    return code


def _worse(code: int, verdict: str) -> int:
    if verdict == "fail":
        return EXIT_VIOLATION
    if verdict == "unknown" and code == EXIT_OK:
        return EXIT_UNKNOWN
    return code


__all__ = ["ESTIMATE", "Plan", "UsageError", "cmd_run", "load_scenarios", "plan",
           "warning_for"]
