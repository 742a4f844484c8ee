"""Ray's side of `sediment.metrics`: the reporter thread, and reading the cluster back.

Reporting. In a process connected to Ray, a daemon thread hands what changed in the
registry to `ray.util.metrics` every REPORT_EVERY seconds: a counter's increments, a
gauge's latest value, a histogram's new observations. Ray's Histogram takes one
observation per call, so a histogram is exported as three Counters instead, in
Prometheus' own histogram layout: `<name>_bucket` (cumulative, tag `le`), `<name>_sum`
and `<name>_count`; one report costs a few calls per series, however many observations
it carries. Ray's metrics agent on each node serves them to Prometheus with Ray's
`ray_` prefix (and `_total` after counters).

Reading back (`sediment status` on Ray): `scrape()` reads every node's metrics agent
(`ray.nodes()`: NodeManagerAddress:MetricsExportPort) and `parse()` folds the Prometheus
text into `metrics.snapshot()`'s shape: Ray's own tags dropped, counters summed and
gauges maxed over the worker processes that reported them.
"""

from __future__ import annotations

import math
import re
import threading
import time
import urllib.request
from collections.abc import Iterable
from typing import Any

from sediment import log, metrics
from sediment.metrics import Definition, TagPairs

REPORT_EVERY = 1.0  # seconds between two reports to Ray
SCRAPE_TIMEOUT = 2.0  # seconds per metrics agent

_logger = log.get_logger("sediment.metrics")
_thread: threading.Thread | None = None
_start_lock = threading.Lock()
_ray_metrics: dict[str, Any] = {}
_paused = False  # tests that drive report_once themselves hold the thread off


def maybe_start() -> bool:
    """Start the reporter thread if this process is connected to Ray; True if it runs."""
    global _thread
    if not metrics._in_ray():
        return False
    with _start_lock:
        if _thread is None:
            _thread = threading.Thread(target=_loop, name="sediment-metrics", daemon=True)
            _thread.start()
    return True


def _loop() -> None:
    while True:
        time.sleep(REPORT_EVERY)
        if _paused:
            continue
        try:
            report_once()
        except Exception as exc:  # noqa: BLE001 - metrics never take a process down
            _logger.warning("reporting metrics to Ray failed", error=repr(exc)[:200])


def report_once() -> int:
    """Hand what changed to Ray (nothing while Ray is down: it waits in the registry).
    Returns the number of Ray metric calls made."""
    if not metrics._in_ray():
        return 0
    calls = 0
    for pending in metrics.take_pending():
        d = pending.definition
        if d.kind == "counter":
            counter = _ray_metric(d.name, "counter", d)
            for key, delta in pending.values.items():
                counter.inc(delta, tags=_tags(d, key))
                calls += 1
        elif d.kind == "gauge":
            gauge = _ray_metric(d.name, "gauge", d)
            for key, latest in pending.values.items():
                gauge.set(latest, tags=_tags(d, key))
                calls += 1
        else:
            calls += _report_histogram(pending)
    return calls


def _report_histogram(pending: metrics.Pending) -> int:
    d = pending.definition
    bucket = _ray_metric(d.name + "_bucket", "counter", d, extra=("le",))
    total = _ray_metric(d.name + "_sum", "counter", d)
    count = _ray_metric(d.name + "_count", "counter", d)
    calls = 0
    for key, counts in pending.counts.items():
        tags = _tags(d, key)
        running = 0
        for bound, n in zip((*d.bounds, math.inf), counts, strict=True):
            running += n
            if running:
                bucket.inc(running, tags={**tags, "le": _le(bound)})
                calls += 1
        if running:
            count.inc(running, tags=tags)
            calls += 1
        observed = pending.sums.get(key, 0.0)
        if observed > 0:
            total.inc(observed, tags=tags)
            calls += 1
    return calls


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(bound)


def _tags(d: Definition, key: tuple[object, ...]) -> dict[str, str]:
    return dict(zip(d.tag_keys, map(str, key), strict=True))


def _ray_metric(name: str, kind: str, d: Definition, extra: tuple[str, ...] = ()) -> Any:
    metric = _ray_metrics.get(name)
    if metric is None:
        from ray.util import metrics as ray_metrics

        keys = (*d.tag_keys, *extra)
        metric = (ray_metrics.Counter(name, d.description, keys) if kind == "counter"
                  else ray_metrics.Gauge(name, d.description, keys))
        _ray_metrics[name] = metric
    return metric


# --- reading the cluster's metrics back -------------------------------------------------


def agent_addresses() -> list[str]:
    """host:port of every live node's Ray metrics agent (needs ray.init first)."""
    import ray

    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return [f"{n['NodeManagerAddress']}:{n['MetricsExportPort']}" for n in nodes
            if n.get("alive") and n.get("MetricsExportPort")]


def scrape(addresses: Iterable[str],
           definitions: list[Definition] | None = None) -> dict[str, dict[TagPairs, float]]:
    """What the agents at `addresses` serve of sediment's metrics (unreachable agents are
    skipped), in `metrics.snapshot()`'s shape."""
    texts = []
    for address in addresses:
        try:
            with urllib.request.urlopen(f"http://{address}/metrics",  # noqa: S310 - http only
                                        timeout=SCRAPE_TIMEOUT) as response:
                texts.append(response.read().decode("utf-8", "replace"))
        except OSError as exc:
            _logger.debug("metrics agent unreachable", address=address, error=str(exc))
    return parse("\n".join(texts), definitions)


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text: str, definitions: list[Definition] | None = None
          ) -> dict[str, dict[TagPairs, float]]:
    """Prometheus text -> {metric: {tag pairs: value}} for the defined sediment metrics.
    Counters (also a histogram's `_count` and `_sum`) add up across the processes that
    report them; gauges take the largest value."""
    wanted = _exported_names(definitions if definitions is not None
                             else metrics.definitions())
    out: dict[str, dict[TagPairs, float]] = {}
    seen_total: set[str] = set()
    rows: list[tuple[str, str, TagPairs, float, bool]] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, labels, raw = match.groups()
        found = wanted.get(name)
        if found is None:
            continue
        target, d, is_total = found
        try:
            number = float(raw)
        except ValueError:
            continue
        tags = dict(_LABEL.findall(labels or ""))
        pairs = tuple(sorted((k, tags[k]) for k in d.tag_keys if k in tags))
        rows.append((target, d.kind, pairs, number, is_total))
        if is_total:
            seen_total.add(target)
    for target, kind, pairs, number, is_total in rows:
        if target in seen_total and not is_total:
            continue  # Ray exports a counter twice (`_total` and a gauge): one is enough
        series = out.setdefault(target, {})
        if kind == "gauge":
            series[pairs] = max(series.get(pairs, -math.inf), number)
        else:
            series[pairs] = series.get(pairs, 0.0) + number
    return out


def _exported_names(definitions: list[Definition]
                    ) -> dict[str, tuple[str, Definition, bool]]:
    """Exported name -> (snapshot name, definition, is a `_total`)."""
    names: dict[str, tuple[str, Definition, bool]] = {}
    for d in definitions:
        if d.kind == "histogram":
            as_counters = [(d.name + "_sum", d.name + "_sum"),
                           (d.name + "_count", d.name + "_count")]
        else:
            as_counters = [(d.name, d.name)]
        for exported, target in as_counters:
            for prefix in ("ray_", ""):
                if d.kind == "gauge":
                    names[prefix + exported] = (target, d, False)
                else:
                    names[prefix + exported + "_total"] = (target, d, True)
                    names[prefix + exported] = (target, d, False)
    return names


__all__ = ["REPORT_EVERY", "agent_addresses", "maybe_start", "parse", "report_once", "scrape"]
