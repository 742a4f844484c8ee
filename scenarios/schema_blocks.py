"""The scenario file's `cluster.blocks`: the KV cluster's block tier, as a scenario starts it.

A scenario that names `cluster.blocks` starts the KV with its block tier
(`actors/blocks/shell/tier.BlockTier`): the flusher beside the KV leader, the metastore
group, the compaction service and the worker pools. The defaults are not the tier's own
(Pyroscope's: 20 blocks / 36 s per level-0 job, 15 s leases) but small ones, so that
flushes, merges, lease expiries and block compactions all happen within the few seconds
a scenario runs. Only the in-process `pyarrow` executor runs in scenarios: a Spark
session takes longer to start than a scenario lasts.

Validation is `schema_values.ValueReader`'s (this module reads through the `Reader` protocol so
that it does not import the schema module that imports it), with the same file:line:col
errors. `blocks_dict` gives the plain form back for `Scenario.to_dict`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NoReturn, Protocol, TypeVar

Path_ = tuple[str | int, ...]
T = TypeVar("T")

TierRole = Literal[
    "flusher", "flush_node", "compaction_worker", "compaction_service", "metastore_leader",
    "metastore", "blocks_node",
]
TIER_ROLES: tuple[TierRole, ...] = (
    "flusher", "flush_node", "compaction_worker", "compaction_service", "metastore_leader",
    "metastore", "blocks_node",
)
# roles that exist on one node only, found when the fault fires: `node` is refused
LEADER_ONLY: tuple[str, ...] = ("flusher", "compaction_service", "metastore_leader")
TierTrigger = Literal["job_leased", "flush_behind"]
TIER_TRIGGERS: tuple[TierTrigger, ...] = ("job_leased", "flush_behind")
TIER_CHECKS: tuple[str, ...] = ("blocks_exactly_once", "history_reads")
EXECUTORS: tuple[str, ...] = ("pyarrow",)
MAX_SHARDS = 64
MAX_LEVELS = 4
MIN_LEASE_S = 1.0  # a worker steps every 0.5 s: a shorter lease expires between its ticks


@dataclass(frozen=True)
class FlushSpec:
    """`FlushPolicy`: a shard's pending rows become a level-0 block at `max_rows` rows,
    `max_bytes` bytes or `max_age` seconds (0 disables one; at least one is on)."""

    max_rows: int = 8
    max_bytes: int = 0
    max_age: float = 0.5


@dataclass(frozen=True)
class LevelSpec:
    """`LevelConfig`: `max_blocks` blocks of a level make a job; an incomplete group
    older than `max_age` seconds (0: never) is compacted anyway."""

    max_blocks: int
    max_age: float = 0.0


@dataclass(frozen=True)
class HistoryCompaction:
    """Every `every` seconds the runner moves the blocks' compaction revision up to the
    flush cursor minus `keep` (merges from then on drop history below it)."""

    every: float
    keep: int = 10


DEFAULT_LEVELS: tuple[LevelSpec, ...] = (LevelSpec(3, 1.0), LevelSpec(3, 2.0))


@dataclass(frozen=True)
class BlocksSpec:
    shards: int = 2
    flush: FlushSpec = FlushSpec()
    flush_tick: float = 0.2
    read_batch: int = 200
    levels: tuple[LevelSpec, ...] = DEFAULT_LEVELS
    cleanup_delay: float = 1.0
    cleanup_interval: float = 1.0
    lease_duration: float = 2.0
    max_failures: int = 3
    workers_per_node: int = 1
    capacity: int = 2
    poll_interval: float = 0.5
    executor: str = "pyarrow"
    history_compaction: HistoryCompaction | None = None


class Reader(Protocol):
    """The primitives of `schema_values.ValueReader` this module uses."""

    duration: float

    def fail(self, path: Path_, message: str, *, key: bool = False) -> NoReturn: ...

    def mapping(self, v: object, path: Path_, known: Sequence[str],
                required: Sequence[str] = ()) -> dict[str, Any]: ...

    def integer(self, v: object, path: Path_, lo: int, hi: int) -> int: ...

    def number(self, v: object, path: Path_, lo: float, hi: float, *,
               open_lo: bool = False) -> float: ...

    def choice(self, v: object, path: Path_, choices: Sequence[str]) -> str: ...

    def items(self, v: object, path: Path_, most: int, *, empty: bool = True) -> list[Any]: ...

    def opt(self, m: Mapping[str, Any], key: str, path: Path_,
            read: Callable[[object, Path_], T], default: T) -> T: ...


KNOWN = ("shards", "flush", "flush_tick", "read_batch", "levels", "cleanup_delay",
         "cleanup_interval", "lease_duration", "max_failures", "workers_per_node", "capacity",
         "poll_interval", "executor", "history_compaction")


def read_blocks(r: Reader, v: object, path: Path_) -> BlocksSpec:
    """`cluster.blocks` (a mapping; `{}` or nothing: every default)."""
    m = {} if v is None else r.mapping(v, path, KNOWN)
    d = BlocksSpec()

    def secs(lo: float, hi: float, open_lo: bool = True) -> Callable[[object, Path_], float]:
        return lambda x, p: r.number(x, p, lo, hi, open_lo=open_lo)

    def count(lo: int, hi: int) -> Callable[[object, Path_], int]:
        return lambda x, p: r.integer(x, p, lo, hi)

    spec = BlocksSpec(
        shards=r.opt(m, "shards", path, count(1, MAX_SHARDS), d.shards),
        flush=r.opt(m, "flush", path, lambda x, p: _flush(r, x, p), d.flush),
        flush_tick=r.opt(m, "flush_tick", path, secs(0.0, 60.0), d.flush_tick),
        read_batch=r.opt(m, "read_batch", path, count(1, 100_000), d.read_batch),
        levels=r.opt(m, "levels", path, lambda x, p: _levels(r, x, p), d.levels),
        cleanup_delay=r.opt(m, "cleanup_delay", path, secs(0.0, 3600.0, False),
                            d.cleanup_delay),
        cleanup_interval=r.opt(m, "cleanup_interval", path, secs(0.0, 3600.0),
                               d.cleanup_interval),
        lease_duration=r.opt(m, "lease_duration", path, secs(MIN_LEASE_S, 3600.0, False),
                             d.lease_duration),
        max_failures=r.opt(m, "max_failures", path, count(0, 100), d.max_failures),
        workers_per_node=r.opt(m, "workers_per_node", path, count(1, 8), d.workers_per_node),
        capacity=r.opt(m, "capacity", path, count(1, 16), d.capacity),
        poll_interval=r.opt(m, "poll_interval", path, secs(0.0, 60.0), d.poll_interval),
        executor=r.opt(m, "executor", path, lambda x, p: r.choice(x, p, EXECUTORS),
                       d.executor),
        history_compaction=r.opt(m, "history_compaction", path,
                                 lambda x, p: _history_compaction(r, x, p), None),
    )
    return spec


def _flush(r: Reader, v: object, path: Path_) -> FlushSpec:
    m = r.mapping(v, path, ("max_rows", "max_bytes", "max_age"))
    d = FlushSpec()
    spec = FlushSpec(
        max_rows=r.opt(m, "max_rows", path, lambda x, p: r.integer(x, p, 0, 1_000_000),
                       d.max_rows),
        max_bytes=r.opt(m, "max_bytes", path, lambda x, p: r.integer(x, p, 0, 1 << 30),
                        d.max_bytes),
        max_age=r.opt(m, "max_age", path, lambda x, p: r.number(x, p, 0.0, 3600.0),
                      d.max_age),
    )
    if not (spec.max_rows or spec.max_bytes or spec.max_age):
        r.fail(path, "at least one of max_rows, max_bytes, max_age must be above 0 (or rows "
               "would wait for a flush forever)")
    return spec


def _levels(r: Reader, v: object, path: Path_) -> tuple[LevelSpec, ...]:
    items = r.items(v, path, MAX_LEVELS, empty=False)
    out = []
    for i, x in enumerate(items):
        p = (*path, i)
        m = r.mapping(x, p, ("max_blocks", "max_age"), required=("max_blocks",))
        out.append(LevelSpec(
            max_blocks=r.integer(m["max_blocks"], (*p, "max_blocks"), 1, 1000),
            max_age=r.opt(m, "max_age", p, lambda y, q: r.number(y, q, 0.0, 3600.0), 0.0)))
    return tuple(out)


def _history_compaction(r: Reader, v: object, path: Path_) -> HistoryCompaction:
    m = r.mapping(v, path, ("every", "keep"), required=("every",))
    return HistoryCompaction(
        every=r.number(m["every"], (*path, "every"), 0.01, r.duration),
        keep=r.opt(m, "keep", path, lambda x, p: r.integer(x, p, 0, 1_000_000_000), 10))


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x


def blocks_dict(b: BlocksSpec) -> dict[str, Any]:
    """The plain form `read_blocks` reads back to `b`."""
    out: dict[str, Any] = {
        "shards": b.shards,
        "flush": {"max_rows": b.flush.max_rows, "max_bytes": b.flush.max_bytes,
                  "max_age": _num(b.flush.max_age)},
        "flush_tick": _num(b.flush_tick), "read_batch": b.read_batch,
        "levels": [{"max_blocks": lv.max_blocks, "max_age": _num(lv.max_age)}
                   for lv in b.levels],
        "cleanup_delay": _num(b.cleanup_delay), "cleanup_interval": _num(b.cleanup_interval),
        "lease_duration": _num(b.lease_duration), "max_failures": b.max_failures,
        "workers_per_node": b.workers_per_node, "capacity": b.capacity,
        "poll_interval": _num(b.poll_interval), "executor": b.executor,
    }
    if b.history_compaction is not None:
        out["history_compaction"] = {"every": _num(b.history_compaction.every),
                                     "keep": b.history_compaction.keep}
    return out


__all__ = [
    "DEFAULT_LEVELS", "LEADER_ONLY", "TIER_CHECKS", "TIER_ROLES", "TIER_TRIGGERS", "BlocksSpec",
    "FlushSpec", "HistoryCompaction", "LevelSpec", "Reader", "TierRole", "TierTrigger",
    "blocks_dict", "read_blocks",
]
