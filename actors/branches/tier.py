"""The parts one branch-tier client is made of, and its settings: the KV and
environment ports, the metarange store, refs, staging, the history recorder, the
delete hook that feeds the sensor, and the merger that writes metaranges. The flows
(`reads`, `commits`, `compactor`) take a `Tier`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sediment.actors.branches.apply import ApplyStats
from sediment.actors.branches.entry import Record
from sediment.actors.branches.history import NoRecorder, Recorder
from sediment.actors.branches.metarange import MetaRangeStore
from sediment.actors.branches.ports import Env, KvPort
from sediment.actors.branches.refs import Refs
from sediment.actors.branches.retry import BRANCH_UPDATE, SNAPSHOT_READ, STAGED_WRITE, RetryPolicy
from sediment.actors.branches.staging import SCAN_BATCH, Staging

DEFAULT_COMPACTION_INTERVAL = 300.0  # seconds; the seed leaves "x minutes" TBD
LISTING_DEFAULT_AMOUNT = 1000  # lakeFS ListingDefaultBatchSize
LISTING_MAX_AMOUNT = 100_000  # lakeFS ListingMaxBatchSize

DeleteHook = Callable[[str, str, str, int], None]
"""(repo, branch, staging token, sealed tokens): a delete was staged (the sensor)."""


class Merger(Protocol):
    async def merge(self, store: MetaRangeStore, repo: str, base_id: str,
                    changes: Sequence[Record]) -> tuple[str, ApplyStats]:
        """Write the metarange of `changes` (sorted) applied onto `base_id`: its id and
        the merge's stats. The default runs `store.apply` off the event loop; a process
        may send large merges to the cluster's Spark bridge (`shell/merging.py`)."""
        ...


@dataclass(frozen=True, slots=True)
class TierConfig:
    compaction_interval: float = DEFAULT_COMPACTION_INTERVAL
    scan_batch: int = SCAN_BATCH
    branch_update: RetryPolicy = BRANCH_UPDATE
    staged_write: RetryPolicy = STAGED_WRITE
    snapshot_read: RetryPolicy = SNAPSHOT_READ

    def __post_init__(self) -> None:
        if not isinstance(self.compaction_interval, int | float) or self.compaction_interval < 0:
            raise ValueError(f"compaction_interval must be >= 0 seconds: {self}")
        if isinstance(self.scan_batch, bool) or not isinstance(self.scan_batch, int) \
                or self.scan_batch < 1:
            raise ValueError(f"scan_batch must be a positive int: {self}")


@dataclass
class Tier:
    kv: KvPort
    env: Env
    store: MetaRangeStore
    config: TierConfig = field(default_factory=TierConfig)
    recorder: Recorder = field(default_factory=NoRecorder)
    on_delete: DeleteHook | None = None
    merger: Merger | None = None
    refs: Refs = field(init=False)
    staging: Staging = field(init=False)

    def __post_init__(self) -> None:
        self.refs = Refs(self.kv, self.env, self.recorder, self.config.branch_update)
        self.staging = Staging(self.kv, self.env, self.refs, self.recorder,
                               self.config.staged_write, self.config.scan_batch)

    async def merge(self, repo: str, base_id: str,
                    changes: Sequence[Record]) -> tuple[str, ApplyStats]:
        """A commit's or a compaction's merge, through the merger if one is set."""
        if self.merger is not None:
            return await self.merger.merge(self.store, repo, base_id, changes)
        return await self.env.blocking(self.store.apply, repo, base_id, changes)


__all__ = ["DEFAULT_COMPACTION_INTERVAL", "LISTING_DEFAULT_AMOUNT", "LISTING_MAX_AMOUNT",
           "DeleteHook", "Merger", "Tier", "TierConfig"]
