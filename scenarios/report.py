"""What a person sees of scenario runs: a summary table, `result.json` (+
`history.json`), and a timeline page (the progress bar is `sediment/progress.py`, a
sweep's index page `sweep_report.py`).

The timeline is one self-contained HTML file (inline SVG and CSS, no script, nothing
fetched): a lane per client with each operation as a bar from invoke to completion,
colored by outcome (indeterminate ones fade out to the end of the run); a lane per
watch with its responses as ticks; the fault spans as shaded bands; the leader over
time; the compact revision, the highest admission floor and the head over time. The
operations and watches a violation names are outlined in red and listed on top; every
mark has a tooltip with the operation as the checkers describe it.
"""

from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sediment.scenarios.checkers.result import CheckResult, describe
from sediment.scenarios.history import (
    CLUSTER_CLIENT,
    TIER_CLIENT,
    FaultEvent,
    History,
    Op,
    WatchLog,
)
from sediment.scenarios.observe import ClusterView, leaders
from sediment.scenarios.runner import RunResult

OUTCOME_COLORS = {"ok": "#3a9a5b", "fail": "#e08a1e", "info": "#8a8f98"}
WATCH_END_COLORS = {None: "#4a78c2", "compacted": "#9b59b6", "slow": "#c0392b",
                    "lost": "#7f8c8d", "canceled": "#4a78c2", "error": "#c0392b"}
NODE_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948",
               "#e15759", "#9c755f", "#bab0ac")
FAULT_COLORS = {"kill_node": "#e15759", "kill_process": "#f28e2b", "partition": "#b07aa1",
                "delay": "#edc948", "drop": "#edc948", "failpoint": "#9c755f"}
STATUS_MARK = {"ok": "ok", "violation": "VIOLATION", "unknown": "unknown"}


# ---- console ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSummary:
    """What the console and a sweep's index keep of a finished run (its history and
    samples are in its files): enough for the tables, summary.json and index.html."""

    scenario: str
    seed: int
    backend: str
    verdict: str
    counts: dict[str, int]
    checks: tuple[tuple[str, str], ...]  # (name, status)
    wall: float
    dir: str  # the run's report directory, relative to the sweep's
    error: str | None = None


def summarize(r: RunResult | RunSummary, run_dir: str = "") -> RunSummary:
    if isinstance(r, RunSummary):
        return r
    return RunSummary(r.scenario.name, r.seed, r.backend, r.verdict, counts(r.history),
                      tuple((c.name, c.status) for c in r.checks),
                      r.timings.get("wall", 0.0), run_dir or f"{r.scenario.name}/seed-{r.seed}",
                      r.error)


def counts(history: History) -> dict[str, int]:
    ops = [op for op in history.ops if op.client not in (CLUSTER_CLIENT, TIER_CLIENT)]
    return {"ok": sum(op.outcome == "ok" for op in ops),
            "fail": sum(op.outcome == "fail" for op in ops),
            "info": sum(op.outcome == "info" for op in ops),
            "watches": len(history.watches),
            "events": sum(len(r.events) for w in history.watches for r in w.responses),
            "faults": sum(1 for f in history.faults if f.detail.get("phase") == "start"),
            "triggered": sum(1 for f in history.faults if "trigger" in f.detail),
            "hit": sum(1 for f in history.faults if f.detail.get("hit")),
            "fired": sum(1 for f in history.faults if "fired_at" in f.detail)}


def summary_table(results: Sequence[RunResult | RunSummary]) -> str:
    """One row per run: verdict, operation outcomes, watches, faults, the triggered
    faults that landed inside their moment (`hit`), each check."""
    runs = [summarize(r) for r in results]
    names: list[str] = []
    for r in runs:
        for name, _ in r.checks:
            if name not in names:
                names.append(name)
    head = ["scenario", "seed", "backend", "verdict", "ok/fail/info", "watches", "faults",
            "hit", "secs", *names]
    rows = [head]
    for r in runs:
        n = r.counts
        by_name = {name: STATUS_MARK[status] for name, status in r.checks}
        rows.append([r.scenario, str(r.seed), r.backend, r.verdict.upper(),
                     f"{n['ok']}/{n['fail']}/{n['info']}", str(n["watches"]),
                     str(n["faults"]), f"{n['hit']}/{n['triggered']}" if n["triggered"] else "-",
                     f"{r.wall:.1f}", *(by_name.get(x, "-") for x in names)])
    return text_table(rows)


def text_table(rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns, a rule under the first row."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def failure_text(r: RunResult) -> str:
    """The violations (and a failed run's error) of one run, for the console."""
    out = [f"{r.scenario.name} seed {r.seed} on {r.backend}: {r.verdict}"]
    if r.error:
        out.append(f"  run error: {r.error}")
    for c in r.checks:
        if c.status != "ok":
            out += ["  " + line for line in c.report().splitlines()]
    out += [f"  note: {n}" for n in r.notes]
    return "\n".join(out)


# ---- files ------------------------------------------------------------------------------


def result_dict(r: RunResult) -> dict[str, Any]:
    return {
        "scenario": r.scenario.name, "description": r.scenario.description,
        "backend": r.backend, "seed": r.seed, "verdict": r.verdict, "error": r.error,
        "duration": r.scenario.duration, "counts": counts(r.history),
        "checks": [_check_dict(c) for c in r.checks],
        "faults": [{"t": round(f.t, 6), "action": f.action, "detail": _plain(f.detail)}
                   for f in r.history.faults],
        "notes": list(r.notes), "timings": {k: round(v, 3) for k, v in r.timings.items()},
        "placement": dict(r.placement),
        "data_dir": r.data_dir, "python_hash_seed": os.environ.get("PYTHONHASHSEED"),
        "scenario_file": r.scenario.to_dict(),
    }


def _check_dict(c: CheckResult) -> dict[str, Any]:
    return {"name": c.name, "status": c.status, "explanation": c.explanation,
            "evidence": [describe(e) for e in c.evidence], "details": list(c.details)}


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    if x is None or isinstance(x, bool | int | str):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else str(x)
    return str(x)


def write_run(r: RunResult, out_dir: str | Path) -> dict[str, Path]:
    """result.json, history.json and timeline.html of one run into `out_dir`."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    paths = {"result": d / "result.json", "history": d / "history.json",
             "timeline": d / "timeline.html"}
    paths["result"].write_text(json.dumps(result_dict(r), indent=2) + "\n")
    paths["history"].write_text(r.history.to_json())
    paths["timeline"].write_text(timeline_html(r))
    return paths


def write_summary(results: Sequence[RunResult | RunSummary], out_dir: str | Path) -> Path:
    runs = [summarize(r) for r in results]
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / "summary.json"
    path.write_text(json.dumps({
        "runs": [{"scenario": r.scenario, "seed": r.seed, "backend": r.backend,
                  "verdict": r.verdict, "dir": r.dir} for r in runs],
        "passed": sum(r.verdict == "pass" for r in runs),
        "failed": sum(r.verdict == "fail" for r in runs),
        "unknown": sum(r.verdict == "unknown" for r in runs),
    }, indent=2) + "\n")
    return path


# ---- the timeline -----------------------------------------------------------------------

LEFT, RIGHT, LANE, GAP = 150, 30, 16, 6
CHART = 120


@dataclass
class _Svg:
    width: int
    x_end: float
    parts: list[str]
    y: int = 40

    def x(self, t: float) -> float:
        t = min(max(t, 0.0), self.x_end)
        return LEFT + (self.width - LEFT - RIGHT) * t / self.x_end

    def add(self, s: str) -> None:
        self.parts.append(s)

    def label(self, text: str, y: float, cls: str = "lane") -> None:
        self.add(f'<text class="{cls}" x="{LEFT - 8}" y="{y + LANE - 4:.1f}" '
                 f'text-anchor="end">{_e(text)}</text>')


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _op_title(op: Op) -> str:
    return op.describe() + (f" @log {op.index}" if op.index is not None else "")


def timeline_html(r: RunResult, width: int = 1400) -> str:
    h = r.history
    end_times = [op.complete_t for op in h.ops if op.complete_t is not None]
    end_times += [f.t for f in h.faults] + [r.scenario.duration]
    x_end = max(end_times) * 1.02 if end_times else 1.0
    svg = _Svg(width, x_end, [])
    flagged_ops, flagged_watches = _flagged(r.checks)
    _axis(svg)
    top = svg.y
    _leader_lane(svg, r.samples, r.scenario.cluster.nodes)
    _op_lanes(svg, h, flagged_ops)
    _watch_lanes(svg, h.watches, flagged_watches)
    _chart(svg, r.samples, h)
    _fault_bands(svg, h.faults, top)
    body = "\n".join(svg.parts)
    checks = "".join(
        f'<li class="{c.status}"><b>{_e(c.name)}</b>: {_e(c.status)}'
        + (f" &mdash; {_e(c.explanation)}" if c.explanation else "")
        + ("<ul>" + "".join(f"<li><code>{_e(describe(e))}</code></li>" for e in c.evidence)
           + "".join(f"<li>{_e(d)}</li>" for d in c.details[:10]) + "</ul>"
           if c.status != "ok" else "") + "</li>"
        for c in r.checks)
    notes = "".join(f"<li>{_e(n)}</li>" for n in r.notes)
    n = counts(h)
    title = f"{r.scenario.name} seed {r.seed} on {r.backend}: {r.verdict.upper()}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>
<style>
body {{ font: 13px system-ui, sans-serif; margin: 16px; color: #222; }}
h1 {{ font-size: 18px; }} .pass {{ color: #2e7d32; }} .fail {{ color: #c62828; }}
li.violation {{ color: #c62828; }} li.unknown {{ color: #b26a00; }} li.ok {{ color: #2e7d32; }}
li.violation li, li.unknown li {{ color: #222; }}
svg text.lane {{ font-size: 11px; fill: #444; }} svg text.axis {{ font-size: 10px; fill: #666; }}
svg text.band {{ font-size: 10px; fill: #333; }}
.legend span {{ display: inline-block; margin-right: 14px; }}
.sw {{ display: inline-block; width: 12px; height: 10px; margin-right: 4px; }}
</style></head><body>
<h1 class="{'pass' if r.verdict == 'pass' else 'fail'}">{_e(title)}</h1>
<p>{_e(r.scenario.description)}</p>
<p>{n['ok']} ok, {n['fail']} failed, {n['info']} indeterminate operations; {n['watches']}
watches ({n['events']} events); {n['faults']} faults.
{_e(f"Run error: {r.error}") if r.error else ""}</p>
<ul>{checks}</ul>{f"<p>Notes:</p><ul>{notes}</ul>" if notes else ""}
<p class="legend">{_legend()}</p>
<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{svg.y + 30}"
 viewBox="0 0 {width} {svg.y + 30}">
{body}
</svg></body></html>
"""


def _legend() -> str:
    items = [(OUTCOME_COLORS["ok"], "ok"), (OUTCOME_COLORS["fail"], "failed (definite)"),
             (OUTCOME_COLORS["info"], "indeterminate"), ("#4a78c2", "watch"),
             ("#9b59b6", "watch canceled: compacted"), ("#c0392b", "watch closed: slow"),
             ("#fde0e0", "fault"), ("#ffffff; outline: 2px solid #d00", "in a violation")]
    return "".join(f'<span><i class="sw" style="background:{c}"></i>{_e(t)}</span>'
                   for c, t in items)


def _flagged(checks: Iterable[CheckResult]) -> tuple[set[int], set[int]]:
    ops: set[int] = set()
    watches: set[int] = set()
    for c in checks:
        if c.status == "ok":
            continue
        for e in c.evidence:
            if isinstance(e, Op):
                ops.add(id(e))
            elif isinstance(e, WatchLog):
                watches.add(e.handle)
    return ops, watches


def _axis(svg: _Svg) -> None:
    step = _nice_step(svg.x_end)
    t = 0.0
    while t <= svg.x_end:
        x = svg.x(t)
        svg.add(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="30" y2="100%" stroke="#eee"/>'
                f'<text class="axis" x="{x:.1f}" y="24" text-anchor="middle">{t:g}s</text>')
        t = round(t + step, 9)


def _nice_step(span: float) -> float:
    raw = span / 12
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    return next((m * mag for m in (1, 2, 5, 10) if m * mag >= raw), 10 * mag)


def _leader_lane(svg: _Svg, samples: Sequence[ClusterView], nodes: Sequence[str]) -> None:
    y = svg.y
    svg.label("leader", y)
    changes = leaders(samples)
    for i, (t, node) in enumerate(changes):
        t_end = changes[i + 1][0] if i + 1 < len(changes) else (samples[-1].t if samples else t)
        color = (NODE_COLORS[list(nodes).index(node) % len(NODE_COLORS)]
                 if node is not None and node in nodes else "#ddd")
        x0, x1 = svg.x(t), svg.x(t_end)
        tip = f"{t:.3f}s: leader {node or 'none'}"
        svg.add(f'<rect x="{x0:.1f}" y="{y}" width="{max(x1 - x0, 1):.1f}" height="{LANE}" '
                f'fill="{color}"><title>{_e(tip)}</title></rect>')
        if x1 - x0 > 24:
            svg.add(f'<text class="lane" x="{x0 + 3:.1f}" y="{y + LANE - 4}" '
                    f'fill="#fff">{_e(node or "-")}</text>')
    svg.y += LANE + GAP * 2


def _op_lanes(svg: _Svg, h: History, flagged: set[int]) -> None:
    by_client: dict[int, list[Op]] = {}
    for op in h.ops:
        by_client.setdefault(op.client, []).append(op)
    for client in sorted(by_client, key=lambda c: (c < 0, c)):
        y = svg.y
        svg.label({CLUSTER_CLIENT: "cluster", TIER_CLIENT: "tier"}.get(client,
                                                                   f"client {client}"), y)
        for op in by_client[client]:
            x0 = svg.x(op.invoke_t)
            info = op.outcome == "info"
            x1 = svg.x(svg.x_end if info or op.complete_t is None else op.complete_t)
            color = OUTCOME_COLORS[op.outcome]
            style = ' fill-opacity="0.35"' if info else ""
            outline = ' stroke="#d00" stroke-width="2"' if id(op) in flagged else ""
            svg.add(f'<rect x="{x0:.1f}" y="{y + 1}" width="{max(x1 - x0, 1.5):.1f}" '
                    f'height="{LANE - 2}" fill="{color}"{style}{outline}>'
                    f'<title>{_e(_op_title(op))}</title></rect>')
        svg.y += LANE + GAP


def _watch_lanes(svg: _Svg, watches: Sequence[WatchLog], flagged: set[int]) -> None:
    for w in watches:
        y = svg.y
        svg.label(f"watch {w.handle} from {w.start or 'now'}", y)
        x0 = svg.x(w.open_t)
        x1 = svg.x(w.end_t if w.end_t is not None else svg.x_end)
        color = WATCH_END_COLORS.get(w.end_reason, "#4a78c2")
        outline = ' stroke="#d00" stroke-width="2"' if w.handle in flagged else ""
        title = (f"watch {w.handle} from {w.start} opened {w.open_t:.3f}s, "
                 f"{len(w.responses)} responses, "
                 + (f"ended {w.end_reason}" + (f" at {w.compact_revision}"
                                               if w.compact_revision else "")
                    if w.end_reason else "open at the end"))
        svg.add(f'<rect x="{x0:.1f}" y="{y + 3}" width="{max(x1 - x0, 1.5):.1f}" '
                f'height="{LANE - 6}" fill="{color}" fill-opacity="0.25"{outline}>'
                f'<title>{_e(title)}</title></rect>')
        if w.end_t is not None:  # how it ended, even when it ended at once
            svg.add(f'<rect x="{x1 - 3:.1f}" y="{y + 2}" width="6" height="{LANE - 4}" '
                    f'fill="{color}"><title>{_e(title)}</title></rect>')
        for r in w.responses:
            x = svg.x(r.t)
            tip = (f"{r.t:.3f}s header {r.revision}: " + (
                ", ".join(f"{e.kind} {e.kv.key.decode('latin-1')}@{e.kv.mod_revision}"
                          for e in r.events[:6]) if r.events else "progress"))
            svg.add(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y + 2}" y2="{y + LANE - 2}" '
                    f'stroke="{color if r.events else "#222"}" stroke-width="1.2">'
                    f'<title>{_e(tip)}</title></line>')
        svg.y += LANE + GAP


def _chart(svg: _Svg, samples: Sequence[ClusterView], h: History) -> None:
    """Compact revision, highest admission floor and head over time."""
    if not samples:
        return
    y0 = svg.y + 10
    series = {
        "head": [(s.t, max((m.head for m in s.members if m.up), default=0)) for s in samples],
        "admission floor": [(s.t, max((m.floor for m in s.members if m.kv_up), default=0))
                            for s in samples],
        "compact revision": [(s.t, s.compact_revision()) for s in samples],
    }
    top = max((v for pts in series.values() for _, v in pts), default=1) or 1
    colors = {"head": "#999", "admission floor": "#e08a1e", "compact revision": "#9b59b6"}
    svg.label("revisions", y0 + CHART / 2 - LANE)
    svg.add(f'<rect x="{LEFT}" y="{y0}" width="{svg.width - LEFT - RIGHT}" height="{CHART}" '
            f'fill="none" stroke="#ccc"/>'
            f'<text class="axis" x="{LEFT + 4}" y="{y0 + 10}">{top}</text>')
    for name, pts in series.items():
        path = []  # a step line: each value holds until the next sample
        for i, (t, v) in enumerate(pts):
            x, y = svg.x(t), y0 + CHART - CHART * v / top
            path.append(f"M{x:.1f},{y:.1f}" if i == 0 else f"H{x:.1f}V{y:.1f}")
        svg.add(f'<path d="{" ".join(path)}" fill="none" stroke="{colors[name]}" '
                f'stroke-width="1.5"><title>{_e(name)}</title></path>')
    for c in h.compaction_events():
        x = svg.x(c.t_end)
        svg.add(f'<circle cx="{x:.1f}" cy="{y0 + CHART - CHART * c.revision / top:.1f}" r="3" '
                f'fill="#9b59b6"><title>{_e(describe(c))}</title></circle>')
    legend_y = y0 + CHART + 14
    x = LEFT
    for name, color in colors.items():
        svg.add(f'<rect x="{x}" y="{legend_y - 8}" width="12" height="3" fill="{color}"/>'
                f'<text class="axis" x="{x + 16}" y="{legend_y - 4}">{_e(name)}</text>')
        x += 130
    svg.y = legend_y + GAP


def _fault_bands(svg: _Svg, faults: Sequence[FaultEvent], top: int) -> None:
    started: dict[Any, FaultEvent] = {}
    spans: list[tuple[FaultEvent, float]] = []
    for f in faults:
        key = f.detail.get("fault")
        phase = f.detail.get("phase")
        if phase == "start" and not f.detail.get("ranged", True):
            spans.append((f, f.t))  # a fault of one moment (a kill the supervisor undoes)
        elif phase == "start":
            started[key] = f
        elif phase == "end" and key in started:
            spans.append((started.pop(key), f.t))
        elif phase == "final":
            spans += [(s, f.t) for s in started.values()]
            started.clear()
    spans += [(s, svg.x_end) for s in started.values()]
    for row, (f, t_end) in enumerate(sorted(spans, key=lambda s: s[0].t)):
        x0, x1 = svg.x(f.t), svg.x(t_end)
        color = FAULT_COLORS.get(f.action, "#e15759")
        where = f.detail.get("node") or f.detail.get("sides") or f.detail.get("point") or ""
        tip = f"{f.t:.3f}-{t_end:.3f}s {f.action} {where}"
        if "trigger" in f.detail:
            tip += f" (when {f.detail['trigger']}: {'hit' if f.detail.get('hit') else 'missed'})"
            if "held_at" in f.detail:
                tip += f", {f.detail.get('seen', '')} from {f.detail['held_at']:.3f}s"
        svg.parts.insert(0, f'<rect x="{x0:.1f}" y="{top - 4}" width="{max(x1 - x0, 2):.1f}" '
                         f'height="{svg.y - top}" fill="{color}" fill-opacity="0.12">'
                         f'<title>{_e(tip)}</title></rect>')
        svg.add(f'<text class="band" x="{x0 + 2:.1f}" y="{34 + 10 * (row % 3)}">'
                f'{_e(f"{f.action} {where}"[:30])}</text>')


__all__ = ["RunSummary", "counts", "failure_text", "result_dict", "summarize", "summary_table",
           "text_table", "timeline_html", "write_run", "write_summary"]
