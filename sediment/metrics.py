"""Metrics: Ray's metrics API inside a Ray cluster, an in-process registry elsewhere.

Processes record the same metrics on both backends. On Ray they are exported through
`ray.util.metrics` (Prometheus, the dashboard); on the simulator and in plain tests they
land in a local registry that `snapshot()` reads. Names are prefixed `sediment_`.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

_lock = threading.Lock()
_local: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(dict)
_ray_metrics: dict[str, Any] = {}
HISTOGRAM_BOUNDS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0]


def _in_ray() -> bool:
    try:
        import ray
    except ImportError:  # pragma: no cover - ray is a dependency
        return False
    return bool(ray.is_initialized())


class _Metric:
    kind = "counter"

    def __init__(self, name: str, description: str, tag_keys: tuple[str, ...]) -> None:
        self.name = f"sediment_{name}"
        self.description = description
        self.tag_keys = tag_keys

    def _ray(self) -> Any | None:
        if not _in_ray():
            return None
        metric = _ray_metrics.get(self.name)
        if metric is None:
            from ray.util import metrics as ray_metrics

            if self.kind == "counter":
                metric = ray_metrics.Counter(self.name, self.description, self.tag_keys)
            elif self.kind == "gauge":
                metric = ray_metrics.Gauge(self.name, self.description, self.tag_keys)
            else:
                metric = ray_metrics.Histogram(self.name, self.description, HISTOGRAM_BOUNDS,
                                               self.tag_keys)
            _ray_metrics[self.name] = metric
        return metric

    def _record(self, value: float, tags: dict[str, str] | None, op: str) -> None:
        tags = {k: str(v) for k, v in (tags or {}).items()}
        metric = self._ray()
        if metric is not None:
            getattr(metric, op)(value, tags=tags)
            return
        key = tuple(sorted(tags.items()))
        with _lock:
            series = _local[self.name]
            if op == "set":
                series[key] = value
            else:
                series[key] = series.get(key, 0.0) + value


class Counter(_Metric):
    def inc(self, value: float = 1.0, tags: dict[str, str] | None = None) -> None:
        self._record(value, tags, "inc")


class Gauge(_Metric):
    kind = "gauge"

    def set(self, value: float, tags: dict[str, str] | None = None) -> None:
        self._record(value, tags, "set")


class Histogram(_Metric):
    """Locally only the sum of observations is kept (with a `_count` series)."""

    kind = "histogram"

    def observe(self, value: float, tags: dict[str, str] | None = None) -> None:
        metric = self._ray()
        if metric is not None:
            metric.observe(value, tags={k: str(v) for k, v in (tags or {}).items()})
            return
        self._record(value, tags, "inc")
        Counter(self.name.removeprefix("sediment_") + "_count", "", self.tag_keys).inc(1, tags)


def snapshot() -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """The local registry's values (what was recorded outside Ray)."""
    with _lock:
        return {name: dict(series) for name, series in _local.items()}


def reset() -> None:
    with _lock:
        _local.clear()


# --- the runtime's metrics --------------------------------------------------------------

MESSAGES_SENT = Counter("messages_sent", "messages sent between processes", ("node",))
RAY_CALLS = Counter("ray_calls", "Ray actor calls made to carry messages", ("node",))
CHANNEL_BATCHES = Counter("channel_batches", "batches of messages sent over direct host "
                          "channels instead of Ray calls", ("node",))
PROCESS_EXITS = Counter("process_exits", "processes ended, by kind of reason", ("node", "kind"))
CALL_SECONDS = Histogram("call_seconds", "round trip of ctx.call", ("node",))
SUPERVISOR_EVENTS = Counter("supervisor_events", "supervisor reports by kind", ("kind",))
