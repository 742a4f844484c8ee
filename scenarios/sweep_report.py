"""What a sweep (many runs: files x seeds) reports beside each run's own files: a table
with one row per scenario, and `index.html` linking every run's timeline, result and log.

The index is one self-contained page (no script, nothing fetched): the totals, the runs
that did not pass first (each with its links), then a grid per scenario with one cell
per seed, colored by verdict, each a link to that run's timeline. Built from
`report.RunSummary` records only, so a sweep of thousands of runs keeps no histories in
memory.
"""

from __future__ import annotations

import html
import statistics
from collections.abc import Sequence
from pathlib import Path

from sediment.scenarios.report import RunSummary, text_table

INDEX = "index.html"
VERDICT_COLORS = {"pass": "#3a9a5b", "fail": "#d03030", "unknown": "#e0a020"}
MOST_SEEDS_LISTED = 8  # seeds named per row of the console table


def _groups(runs: Sequence[RunSummary]) -> dict[tuple[str, str], list[RunSummary]]:
    out: dict[tuple[str, str], list[RunSummary]] = {}
    for r in runs:
        out.setdefault((r.scenario, r.backend), []).append(r)
    return out


def sweep_table(runs: Sequence[RunSummary]) -> str:
    """One row per scenario and backend: runs, verdicts, triggered faults that hit,
    the median seconds of a run, and the seeds that did not pass."""
    rows = [["scenario", "backend", "runs", "pass", "fail", "unknown", "hit", "median secs",
             "not passing (seeds)"]]
    for (name, backend), group in _groups(runs).items():
        verdicts = [r.verdict for r in group]
        triggered = sum(r.counts.get("triggered", 0) for r in group)
        hit = sum(r.counts.get("hit", 0) for r in group)
        bad = [str(r.seed) for r in group if r.verdict != "pass"]
        listed = ", ".join(bad[:MOST_SEEDS_LISTED]) + (
            f" (+{len(bad) - MOST_SEEDS_LISTED} more)" if len(bad) > MOST_SEEDS_LISTED else "")
        rows.append([name, backend, str(len(group)), str(verdicts.count("pass")),
                     str(verdicts.count("fail")), str(verdicts.count("unknown")),
                     f"{hit}/{triggered}" if triggered else "-",
                     f"{statistics.median(r.wall for r in group):.1f}", listed or "-"])
    return text_table(rows)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _links(r: RunSummary) -> str:
    d = _e(r.dir)
    return (f'<a href="{d}/timeline.html">timeline</a> · <a href="{d}/result.json">result</a>'
            f' · <a href="{d}/run.log">log</a>')


def index_html(runs: Sequence[RunSummary], title: str = "Sediment sweep",
               interrupted: bool = False) -> str:
    """The sweep's index page."""
    total = len(runs)
    count = {v: sum(r.verdict == v for r in runs) for v in VERDICT_COLORS}
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title>",
        "<style>body{font:14px system-ui,sans-serif;margin:24px}"
        "table{border-collapse:collapse}td,th{padding:2px 8px;text-align:left}"
        ".grid a{display:inline-block;width:14px;height:14px;margin:1px;border-radius:2px}"
        ".bad td{border-bottom:1px solid #ddd}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p>{total} runs: {count['pass']} passed, {count['fail']} failed, "
        f"{count['unknown']} undecided"
        + (" (interrupted: only the finished runs)" if interrupted else "") + ". "
        '<a href="summary.json">summary.json</a></p>',
    ]
    bad = [r for r in runs if r.verdict != "pass"]
    if bad:
        parts.append("<h2>Runs that did not pass</h2><table class=\"bad\">"
                     "<tr><th>scenario</th><th>seed</th><th>backend</th><th>verdict</th>"
                     "<th>checks</th><th></th></tr>")
        for r in bad:
            failing = ", ".join(f"{n}: {s}" for n, s in r.checks if s != "ok")
            if r.error:
                failing = f"run error: {r.error}"
            parts.append(f"<tr><td>{_e(r.scenario)}</td><td>{r.seed}</td><td>{_e(r.backend)}"
                         f"</td><td style=\"color:{VERDICT_COLORS[r.verdict]}\">"
                         f"{_e(r.verdict.upper())}</td><td>{_e(failing)}</td>"
                         f"<td>{_links(r)}</td></tr>")
        parts.append("</table>")
    parts.append("<h2>Every run</h2><table>")
    for (name, backend), group in _groups(runs).items():
        cells = "".join(
            f'<a href="{_e(r.dir)}/timeline.html" title="seed {r.seed}: {_e(r.verdict)} '
            f'({r.wall:.1f} s)" style="background:{VERDICT_COLORS[r.verdict]}"></a>'
            for r in group)
        passed = sum(r.verdict == "pass" for r in group)
        parts.append(f"<tr><td>{_e(name)}</td><td>{_e(backend)}</td>"
                     f"<td>{passed}/{len(group)}</td><td class=\"grid\">{cells}</td></tr>")
    parts += ["</table>", "</body></html>"]
    return "\n".join(parts) + "\n"


def write_index(runs: Sequence[RunSummary], out_dir: str | Path,
                interrupted: bool = False) -> Path:
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / INDEX
    path.write_text(index_html(runs, f"Sediment sweep {d.name}", interrupted))
    return path


__all__ = ["INDEX", "index_html", "sweep_table", "write_index"]
