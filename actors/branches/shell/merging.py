"""The compactor process's merger: small merges here, large ones on the cluster's Spark
session through the Spark bridge process (`actors/spark/shell/bridge.py`, "merge_ranges").

A merge goes to Spark when `span_merge.spark_pays` says so (it reads at least
`threshold` base entries, measured on this machine as where Spark starts to win, and
has at most half as many changes: docs/branches.md) and a bridge is registered. The
changes go to the bridge as a scratch file, removed after the call.

Spark is an accelerator, not a dependency: when the bridge is missing, refuses (busy,
stopping), times out or Spark fails the job (a lost executor, a cancelled job), the
same merge runs here and gives the same metarange (`spans.py`: both write exactly
`apply_changes`'s files). The tier's own typed errors (a missing or corrupt range)
are raised as they are: they would fail here too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sediment import log
from sediment.actors.branches import span_merge as sm
from sediment.actors.branches.apply import ApplyStats
from sediment.actors.branches.entry import Record
from sediment.actors.branches.errors import MergeFailed
from sediment.actors.branches.metarange import MetaRangeStore
from sediment.actors.branches.metrics import MERGES
from sediment.actors.branches.ports import Env
from sediment.runtime.errors import CallError
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.branches.merging")


@dataclass(frozen=True)
class SparkPolicy:
    """When a compaction's merge goes to the Spark bridge: reading `threshold` base
    entries or more (`span_merge.spark_pays`; None: never; 0: every merge, whatever its
    shape, as tests and the Spark scenario want), each call bounded by
    `timeout` seconds."""

    threshold: int | None = sm.SPARK_THRESHOLD
    timeout: float = 600.0

    def __post_init__(self) -> None:
        t = self.threshold
        if t is not None and (isinstance(t, bool) or not isinstance(t, int) or t < 0):
            raise ValueError(f"threshold must be None or a non-negative int: {t!r}")
        if not isinstance(self.timeout, int | float) or not math.isfinite(self.timeout) \
                or self.timeout <= 0:
            raise ValueError(f"timeout must be positive seconds: {self.timeout!r}")


class BridgeMerger:
    """A `tier.Merger` for a process: `policy` decides, the bridge runs large merges."""

    def __init__(self, ctx: Process, env: Env, policy: SparkPolicy) -> None:
        self.ctx = ctx
        self.env = env
        self.policy = policy

    async def merge(self, store: MetaRangeStore, repo: str, base_id: str,
                    changes: Sequence[Record]) -> tuple[str, ApplyStats]:
        threshold = self.policy.threshold
        if threshold is not None:
            base = await self.env.blocking(store.ranges, repo, base_id)
            paths = [p for p, _ in changes]
            work = sm.merge_size(base, paths)
            if threshold == 0 or sm.spark_pays(base, paths, threshold):
                done = await self._on_spark(store, repo, base_id, changes, work)
                if done is not None:
                    return done
        MERGES.inc(1, {"backend": "in_process", "outcome": "done"})
        return await self.env.blocking(store.apply, repo, base_id, changes)

    async def _on_spark(self, store: MetaRangeStore, repo: str, base_id: str,
                        changes: Sequence[Record], work: int) -> tuple[str, ApplyStats] | None:
        """The bridge's result, or None when Spark could not do it (logged, counted)."""
        from sediment.actors.spark.merge_job import SparkMergeFailed
        from sediment.actors.spark.session import SparkUnavailable
        from sediment.actors.spark.shell.bridge import (
            BRIDGE_NAME,
            BridgeError,
            merge_ranges_via_bridge,
        )

        if await self.ctx.whereis(BRIDGE_NAME) is None:
            MERGES.inc(1, {"backend": "spark", "outcome": "no_bridge"})
            return None
        path = await self.env.blocking(sm.write_changes, store.root, repo, list(changes))
        request = sm.RangeMergeRequest(store.root, repo, base_id, path, store.rule)
        try:
            result = await merge_ranges_via_bridge(self.ctx, request, self.policy.timeout)
        except (CallError, BridgeError, SparkUnavailable, SparkMergeFailed,
                MergeFailed) as err:
            MERGES.inc(1, {"backend": "spark", "outcome": type(err).__name__})
            _logger.warning("the Spark merge failed; merging here", repo=repo, work=work,
                            error=f"{type(err).__name__}: {err}"[:300])
            return None
        finally:
            sm.remove_changes(path)
        MERGES.inc(1, {"backend": "spark", "outcome": "done"})
        _logger.info("metarange merged on Spark", repo=repo, work=work, spans=result.spans)
        return result.metarange_id, result.stats


__all__ = ["BridgeMerger", "SparkPolicy"]
