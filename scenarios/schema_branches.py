"""The scenario file's `cluster.branches`: lakeFS-style branches over the KV, as a
scenario runs them (`scenarios/branch_tier.py`).

`branches: {}` (or any key below) starts the branch tier's services beside the KV
leader (the delete sensor, the staging compactor, the garbage collector;
`actors/branches/shell/service.py`), creates one repository with `branches` branches,
and runs `clients` branch clients that stage puts and deletes, read (get, list pages,
diffs), commit, reset and ask the compactor for compactions, at `rate` operations a
second each. `sensors: 2` adds a second sensor and compactor pair on the first node,
fed the same deletes: two sensors trigger the same branch and their compactors race
for it. Every run with `cluster.branches` also runs the `branch_reads` check on the
branch history (the clients' events and the compactors').

The defaults are small, so that sensor triggers, compactions and commits that race
them happen within a few seconds. Validation is `schema_parse._Validator`'s, through
`schema_blocks.Reader`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from sediment.scenarios.schema_blocks import Path_, Reader

# names that need `cluster.branches.spark` (Ray only): a trigger and a fault role
SPARK_TRIGGER = "spark_merge_running"
SPARK_ROLE = "spark_executor"
SPARK_NAMES: tuple[str, ...] = (SPARK_TRIGGER, SPARK_ROLE)
BRANCH_TRIGGERS: tuple[str, ...] = ("compaction_started", SPARK_TRIGGER)
BRANCH_CHECK = "branch_reads"
BRANCH_OPS: tuple[str, ...] = ("put", "rm", "get", "ls", "diff", "commit", "reset", "compact")


@dataclass(frozen=True)
class BranchMix:
    """Relative weights of the branch clients' operations."""

    put: float = 30.0
    rm: float = 25.0
    get: float = 15.0
    ls: float = 8.0
    diff: float = 5.0
    commit: float = 8.0
    reset: float = 1.0
    compact: float = 8.0

    def weights(self) -> list[tuple[str, float]]:
        return [(f.name, float(getattr(self, f.name))) for f in fields(self)
                if getattr(self, f.name) > 0]


@dataclass(frozen=True)
class SparkSpec:
    """The compactors' merges on the cluster's Spark bridge (Ray only)."""

    threshold: int = 0  # base entries read from which a merge goes to Spark (0: every one)
    timeout: float = 20.0  # seconds a compactor waits for the bridge, then merges here


@dataclass(frozen=True)
class BranchesSpec:
    threshold: int = 6  # deletes on one staging token that trigger the sensor
    compaction_interval: float = 1.0  # a branch's claim: no unforced compaction within it
    poll_interval: float = 0.5  # the compactor's look at the sensor's queue
    sensors: int = 1  # 2: a second sensor and compactor pair, fed the same deletes
    clients: int = 2
    rate: float = 20.0  # ops/s per client
    paths: int = 12
    branches: int = 1  # main, b1, b2, ...
    mix: BranchMix = BranchMix()
    spark: SparkSpec | None = None  # merges on Spark (Ray only)


KNOWN = ("threshold", "compaction_interval", "poll_interval", "sensors", "clients", "rate",
         "paths", "branches", "mix", "spark")


def read_branches(r: Reader, v: object, path: Path_) -> BranchesSpec:
    """`cluster.branches` (a mapping; `{}` or nothing: every default)."""
    m = {} if v is None else r.mapping(v, path, KNOWN)
    d = BranchesSpec()

    def count(lo: int, hi: int) -> Callable[[object, Path_], int]:
        return lambda x, p: r.integer(x, p, lo, hi)

    def secs(lo: float, hi: float) -> Callable[[object, Path_], float]:
        return lambda x, p: r.number(x, p, lo, hi, open_lo=True)

    return BranchesSpec(
        threshold=r.opt(m, "threshold", path, count(1, 100_000), d.threshold),
        compaction_interval=r.opt(m, "compaction_interval", path, secs(0.0, 3600.0),
                                  d.compaction_interval),
        poll_interval=r.opt(m, "poll_interval", path, secs(0.0, 60.0), d.poll_interval),
        sensors=r.opt(m, "sensors", path, count(1, 2), d.sensors),
        clients=r.opt(m, "clients", path, count(1, 16), d.clients),
        rate=r.opt(m, "rate", path, secs(0.0, 10_000.0), d.rate),
        paths=r.opt(m, "paths", path, count(1, 10_000), d.paths),
        branches=r.opt(m, "branches", path, count(1, 8), d.branches),
        mix=r.opt(m, "mix", path, lambda x, p: _mix(r, x, p), d.mix),
        spark=r.opt(m, "spark", path, lambda x, p: _spark(r, x, p), d.spark),
    )


def _spark(r: Reader, v: object, path: Path_) -> SparkSpec:
    m = {} if v is None else r.mapping(v, path, ("threshold", "timeout"))
    d = SparkSpec()
    return SparkSpec(
        threshold=r.opt(m, "threshold", path, lambda x, p: r.integer(x, p, 0, 10**9),
                        d.threshold),
        timeout=r.opt(m, "timeout", path,
                      lambda x, p: r.number(x, p, 0.0, 3600.0, open_lo=True), d.timeout))


def _mix(r: Reader, v: object, path: Path_) -> BranchMix:
    m = r.mapping(v, path, BRANCH_OPS)
    weights = {k: r.number(m[k], (*path, k), 0.0, 1e6) for k in m}
    mix = BranchMix(**{k: weights.get(k, 0.0) for k in BRANCH_OPS})
    if not mix.weights():
        r.fail(path, "at least one weight must be above 0")
    return mix


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x


def branches_dict(b: BranchesSpec) -> dict[str, Any]:
    """The plain form `read_branches` reads back to `b`."""
    return {"threshold": b.threshold, "compaction_interval": _num(b.compaction_interval),
            "poll_interval": _num(b.poll_interval), "sensors": b.sensors,
            "clients": b.clients, "rate": _num(b.rate), "paths": b.paths,
            "branches": b.branches,
            "mix": {k: _num(getattr(b.mix, k)) for k in BRANCH_OPS},
            **({} if b.spark is None else {"spark": {"threshold": b.spark.threshold,
                                                     "timeout": _num(b.spark.timeout)}})}


__all__ = ["BRANCH_CHECK", "BRANCH_OPS", "BRANCH_TRIGGERS", "SPARK_NAMES", "SPARK_ROLE",
           "SPARK_TRIGGER", "BranchMix", "BranchesSpec", "SparkSpec", "branches_dict",
           "read_branches"]
