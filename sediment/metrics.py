"""Metrics: counters, gauges and histograms with tags, the same on both backends.

Every process keeps its metrics in an in-memory registry: an update is a dict update
under a lock (no Ray call, no I/O), so shells may record on their hot paths. Inside a
Ray cluster a daemon thread of the process (`metrics_ray.py`) reports what changed to
`ray.util.metrics` at most once a second (Prometheus through Ray's metrics agents, the
dashboard); on the simulator and in plain tests `snapshot()` and `value()` read the
registry, which holds the whole simulated cluster. Names are prefixed `sediment_`;
every metric is listed in docs/metrics.md.

Tag values are given as a mapping with exactly the metric's tag keys (checked when a
series is first seen) and reported as `str(value)`. A metric keeps at most MAX_SERIES
series; updates of further ones are dropped and counted in
`sediment_metrics_dropped_updates`.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

Kind = Literal["counter", "gauge", "histogram"]
SeriesKey = tuple[object, ...]  # tag values in tag_keys order
TagPairs = tuple[tuple[str, str], ...]  # sorted (key, str(value)) pairs: a snapshot's key
Tags = Mapping[str, object] | None

HISTOGRAM_BOUNDS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)
MAX_SERIES = 1000  # series per metric: tags must stay low-cardinality
PREFIX = "sediment_"

_lock = threading.Lock()
_registry: dict[str, _Storage] = {}
_reporting = False  # this process reports to Ray (a reporter thread runs)
_next_check = 0.0  # monotonic time of the next look for a Ray cluster
_starter: Callable[[], bool] | None = None  # tests may replace metrics_ray.maybe_start


@dataclass(frozen=True)
class Definition:
    """What a metric is: for docs, `sediment status` and the Ray reporter."""

    name: str
    kind: Kind
    description: str
    tag_keys: tuple[str, ...]
    bounds: tuple[float, ...] = ()


class _Storage:
    """One metric's series: totals (what snapshot reads) and what Ray has not seen yet.
    Guarded by the module lock."""

    def __init__(self, definition: Definition) -> None:
        self.definition = definition
        self.values: dict[SeriesKey, float] = {}  # counter total / gauge value / hist sum
        self.counts: dict[SeriesKey, list[int]] = {}  # histogram: per bucket, +Inf last
        self.unreported: dict[SeriesKey, float] = {}  # counter delta / gauge: latest value
        self.unreported_counts: dict[SeriesKey, list[int]] = {}
        self.unreported_sums: dict[SeriesKey, float] = {}


def _storage_for(definition: Definition) -> _Storage:
    """The registry entry of `definition`; a second definition of a name must match."""
    with _lock:
        found = _registry.get(definition.name)
        if found is None:
            found = _registry[definition.name] = _Storage(definition)
        elif found.definition != definition:
            raise ValueError(f"metric {definition.name} is already defined as "
                             f"{found.definition}")
        return found


DROPPED_NAME = PREFIX + "metrics_dropped_updates"
_NAME = re.compile(r"[a-z][a-z0-9_]*")  # Prometheus' names, lowercase


class _Metric:
    kind: Kind = "counter"

    def __init__(self, name: str, description: str, tag_keys: tuple[str, ...] = (),
                 bounds: tuple[float, ...] = ()) -> None:
        if not _NAME.fullmatch(name) or name.startswith(PREFIX):
            raise ValueError(f"bad metric name {name!r}: lowercase words joined by _, "
                             f"without the {PREFIX} prefix")
        if not isinstance(tag_keys, tuple) or not all(isinstance(k, str) for k in tag_keys):
            raise TypeError(f"tag_keys of {name} must be a tuple of str")
        self.name = PREFIX + name
        self.description = description
        self.tag_keys = tag_keys
        self._storage = _storage_for(Definition(self.name, self.kind, description, tag_keys,
                                                bounds))

    def _key(self, tags: Tags) -> SeriesKey:
        if not self.tag_keys:
            return ()
        if tags is None:
            raise ValueError(f"{self.name} needs tags {self.tag_keys}")
        try:
            return tuple([tags[k] for k in self.tag_keys])
        except KeyError as exc:
            raise ValueError(f"{self.name} needs tags {self.tag_keys}, got {sorted(tags)}"
                             ) from exc

    def _bound_key(self, tags: Tags) -> tuple[SeriesKey, dict[str, object]]:
        key = self._key(tags)
        given = dict(tags or {})
        if len(given) != len(self.tag_keys):
            raise ValueError(f"{self.name} takes tags {self.tag_keys}, got {sorted(given)}")
        return key, given

    def _admit(self, key: SeriesKey, tags: Tags, series: Mapping[SeriesKey, object]) -> bool:
        """A new series: its tags are exactly the tag keys, and there is room for it.
        Called under the lock."""
        if tags is not None and len(tags) != len(self.tag_keys):
            raise ValueError(f"{self.name} takes tags {self.tag_keys}, got {sorted(tags)}")
        if len(series) < MAX_SERIES:
            return True
        dropped = _registry[DROPPED_NAME]
        dkey = (self.name,)
        dropped.values[dkey] = dropped.values.get(dkey, 0.0) + 1
        dropped.unreported[dkey] = dropped.unreported.get(dkey, 0.0) + 1
        return False


def _in_ray() -> bool:
    """Whether this process is connected to a Ray cluster (tests patch it to False)."""
    try:
        import ray
    except ImportError:  # pragma: no cover - ray is a dependency
        return False
    return bool(ray.is_initialized())


def _maybe_start_reporting() -> None:
    """Look for a Ray cluster at most once a second until one is found (cheap: the
    update path calls this only while not reporting)."""
    global _next_check, _reporting
    now = time.monotonic()
    if now < _next_check:
        return
    _next_check = now + 1.0
    starter = _starter
    if starter is None:
        from sediment import metrics_ray

        starter = metrics_ray.maybe_start
    _reporting = starter()


class Counter(_Metric):
    """A running total; Ray gets the increments."""

    kind: Kind = "counter"

    def inc(self, value: float = 1.0, tags: Tags = None) -> None:
        self._inc(self._key(tags), tags, value)

    def bind(self, tags: Tags = None) -> BoundCounter:
        """This counter's series for `tags`, checked once: for a hot path."""
        return BoundCounter(self, *self._bound_key(tags))

    def _inc(self, key: SeriesKey, tags: Tags, value: float) -> None:
        if value <= 0:
            if value == 0:
                return
            raise ValueError(f"{self.name}: a counter only goes up (got {value})")
        s = self._storage
        with _lock:
            old = s.values.get(key)
            if old is None and not self._admit(key, tags, s.values):
                return
            s.values[key] = (old or 0.0) + value
            s.unreported[key] = s.unreported.get(key, 0.0) + value
        if not _reporting:
            _maybe_start_reporting()


class Gauge(_Metric):
    """A value that goes up and down; Ray gets the latest one."""

    kind: Kind = "gauge"

    def set(self, value: float, tags: Tags = None) -> None:
        self._set(self._key(tags), tags, value)

    def bind(self, tags: Tags = None) -> BoundGauge:
        """This gauge's series for `tags`, checked once: for a hot path."""
        return BoundGauge(self, *self._bound_key(tags))

    def _set(self, key: SeriesKey, tags: Tags, value: float) -> None:
        s = self._storage
        with _lock:
            if key not in s.values and not self._admit(key, tags, s.values):
                return
            s.values[key] = value
            s.unreported[key] = value
        if not _reporting:
            _maybe_start_reporting()


class Histogram(_Metric):
    """Observations counted in buckets (`bounds`, upper bounds, plus +Inf) with their sum.

    `snapshot()` shows `<name>_sum` and `<name>_count`; `buckets()` the per-bucket counts."""

    kind: Kind = "histogram"

    def __init__(self, name: str, description: str, tag_keys: tuple[str, ...] = (),
                 bounds: tuple[float, ...] = HISTOGRAM_BOUNDS) -> None:
        if not bounds or list(bounds) != sorted(set(bounds)) or bounds[0] <= 0:
            raise ValueError(f"histogram {name}: bounds must be positive and increasing")
        super().__init__(name, description, tag_keys, tuple(bounds))
        self.bounds = tuple(bounds)

    def observe(self, value: float, tags: Tags = None) -> None:
        self._observe(self._key(tags), tags, value)

    def bind(self, tags: Tags = None) -> BoundHistogram:
        """This histogram's series for `tags`, checked once: for a hot path."""
        return BoundHistogram(self, *self._bound_key(tags))

    def _observe(self, key: SeriesKey, tags: Tags, value: float) -> None:
        if value < 0:
            raise ValueError(f"{self.name}: observations are >= 0 (got {value})")
        bucket = _bucket(self.bounds, value)
        s = self._storage
        with _lock:
            counts = s.counts.get(key)
            if counts is None:
                if not self._admit(key, tags, s.counts):
                    return
                counts = s.counts[key] = [0] * (len(self.bounds) + 1)
            counts[bucket] += 1
            s.values[key] = s.values.get(key, 0.0) + value
            pending = s.unreported_counts.get(key)
            if pending is None:
                pending = s.unreported_counts[key] = [0] * (len(self.bounds) + 1)
            pending[bucket] += 1
            s.unreported_sums[key] = s.unreported_sums.get(key, 0.0) + value
        if not _reporting:
            _maybe_start_reporting()


class BoundCounter:
    """One series of a counter (`Counter.bind`): no tag handling per update."""

    __slots__ = ("_metric", "_key", "_tags")

    def __init__(self, metric: Counter, key: SeriesKey, tags: dict[str, object]) -> None:
        self._metric, self._key, self._tags = metric, key, tags

    def inc(self, value: float = 1.0) -> None:
        self._metric._inc(self._key, self._tags, value)


class BoundGauge:
    """One series of a gauge (`Gauge.bind`)."""

    __slots__ = ("_metric", "_key", "_tags")

    def __init__(self, metric: Gauge, key: SeriesKey, tags: dict[str, object]) -> None:
        self._metric, self._key, self._tags = metric, key, tags

    def set(self, value: float) -> None:
        self._metric._set(self._key, self._tags, value)


class BoundHistogram:
    """One series of a histogram (`Histogram.bind`)."""

    __slots__ = ("_metric", "_key", "_tags")

    def __init__(self, metric: Histogram, key: SeriesKey, tags: dict[str, object]) -> None:
        self._metric, self._key, self._tags = metric, key, tags

    def observe(self, value: float) -> None:
        self._metric._observe(self._key, self._tags, value)


def _bucket(bounds: tuple[float, ...], value: float) -> int:
    for i, bound in enumerate(bounds):
        if value <= bound:
            return i
    return len(bounds)


# --- reading the registry ---------------------------------------------------------------


def _pairs(definition: Definition, key: SeriesKey) -> TagPairs:
    return tuple(sorted(zip(definition.tag_keys, map(str, key), strict=True)))


def snapshot() -> dict[str, dict[TagPairs, float]]:
    """Every series recorded in this process: name -> {sorted (tag, value) pairs: value}.
    A histogram appears as its sum (`<name>_sum`) and its count (`<name>_count`)."""
    out: dict[str, dict[TagPairs, float]] = {}
    with _lock:
        for name, s in _registry.items():
            if not s.values:
                continue
            d = s.definition
            values = {_pairs(d, k): v for k, v in s.values.items()}
            if d.kind != "histogram":
                out[name] = values
                continue
            out[name + "_sum"] = values
            out[name + "_count"] = {_pairs(d, k): float(sum(c)) for k, c in s.counts.items()}
    return out


def value(name: str, **tags: object) -> float:
    """The sum of `name`'s series whose tags include `tags` (0.0 if none): for tests and
    status lines. `name` may omit the `sediment_` prefix."""
    full = name if name.startswith(PREFIX) else PREFIX + name
    series = snapshot().get(full, {})
    want = {k: str(v) for k, v in tags.items()}
    return sum(v for pairs, v in series.items()
               if all(dict(pairs).get(k) == w for k, w in want.items()))


def buckets(name: str) -> dict[TagPairs, tuple[int, ...]]:
    """A histogram's per-bucket counts by series (the last bucket is +Inf)."""
    full = name if name.startswith(PREFIX) else PREFIX + name
    with _lock:
        s = _registry.get(full)
        if s is None:
            return {}
        return {_pairs(s.definition, k): tuple(c) for k, c in s.counts.items()}


def definitions() -> list[Definition]:
    """Every metric defined in this process (imported modules define theirs)."""
    with _lock:
        return sorted((s.definition for s in _registry.values()), key=lambda d: d.name)


_on_reset: list[Callable[[], None]] = []


def on_reset(callback: Callable[[], None]) -> None:
    """Call `callback` after each reset (observers that record only changes re-record)."""
    _on_reset.append(callback)


def reset() -> None:
    """Forget every recorded value (the definitions stay)."""
    for callback in _on_reset:
        callback()
    with _lock:
        for s in _registry.values():
            s.values.clear()
            s.counts.clear()
            s.unreported.clear()
            s.unreported_counts.clear()
            s.unreported_sums.clear()


@dataclass(frozen=True)
class Pending:
    """What changed since the last report of one metric (taken by the Ray reporter)."""

    definition: Definition
    values: dict[SeriesKey, float]  # counter increments / latest gauge values
    counts: dict[SeriesKey, list[int]]  # histogram observations per bucket
    sums: dict[SeriesKey, float]  # histogram sums of those observations


def take_pending() -> Iterator[Pending]:
    """Hand over (and clear) everything not reported yet, one metric at a time."""
    taken: list[Pending] = []
    with _lock:
        for s in _registry.values():
            if s.unreported or s.unreported_counts:
                taken.append(Pending(s.definition, s.unreported, s.unreported_counts,
                                     s.unreported_sums))
                s.unreported, s.unreported_counts, s.unreported_sums = {}, {}, {}
    return iter(taken)


DROPPED = Counter("metrics_dropped_updates",
                  "updates dropped because the metric had MAX_SERIES series already",
                  ("metric",))

# --- the runtime's metrics --------------------------------------------------------------

MESSAGES_SENT = Counter("messages_sent", "messages sent between processes", ("node",))
RAY_CALLS = Counter("ray_calls", "Ray actor calls made to carry messages", ("node",))
CHANNEL_BATCHES = Counter("channel_batches", "batches of messages sent over direct host "
                          "channels instead of Ray calls", ("node",))
PROCESS_EXITS = Counter("process_exits", "processes ended, by kind of reason", ("node", "kind"))
CALL_SECONDS = Histogram("call_seconds", "round trip of ctx.call", ("node",))
SUPERVISOR_EVENTS = Counter("supervisor_events", "supervisor reports by kind", ("kind",))

__all__ = ["CALL_SECONDS", "HISTOGRAM_BOUNDS", "MAX_SERIES", "MESSAGES_SENT", "PROCESS_EXITS",
           "RAY_CALLS", "SUPERVISOR_EVENTS", "BoundCounter", "BoundGauge", "BoundHistogram",
           "Counter", "Definition", "Gauge", "Histogram", "Pending", "buckets", "definitions",
           "on_reset", "reset", "snapshot", "take_pending", "value"]
