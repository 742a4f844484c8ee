"""The branch tier from Python, in lakeFS's vocabulary.

```python
from sediment import Cluster
from sediment.actors.branches.api import Branches

with Cluster.start(nodes=3, backend="sim") as cluster:
    lake = Branches.connect(cluster, "/tmp/blocks")
    lake.repo_create("demo")                                 # branch "main"
    lake.put("demo", "main", "a/1.csv", address="s3://b/1", size=10, checksum="e1")
    lake.commit("demo", "main", "first")
    lake.branch_create("demo", "dev", "main")
    lake.rm("demo", "dev", "a/1.csv")
    lake.diff("demo", "dev")                                 # [Diff("a/1.csv", "removed", ...)]
    lake.compact("demo", "dev")                              # staging compaction, now
    lake.ls("demo", "dev", prefix="a/")                      # Page([], has_more=False)
    lake.log("demo", "main")
```

Every method checks its arguments first (InvalidName, InvalidPath, InvalidEntry,
InvalidInput: nothing read or written) and raises the tier's typed errors. A ref is a
branch name or a commit id. Deletes are reported to the delete sensor process
(`shell/sensor.py`) by a message that never blocks and is dropped when no sensor
runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sediment.actors.branches import commits, compactor, reads
from sediment.actors.branches import names as nm
from sediment.actors.branches import sensor as sn
from sediment.actors.branches.branch import Branch
from sediment.actors.branches.compactor import Compaction
from sediment.actors.branches.diff import Diff
from sediment.actors.branches.entry import Entry, make_entry
from sediment.actors.branches.errors import InvalidEntry
from sediment.actors.branches.history import NoRecorder, Recorder
from sediment.actors.branches.metarange import MetaRangeStore
from sediment.actors.branches.ports import ClientKv, KvPort, StoreKv, SyncEnv, run_sync
from sediment.actors.branches.records import Commit
from sediment.actors.branches.shell.names import SENSOR_NAME
from sediment.actors.branches.tier import LISTING_DEFAULT_AMOUNT, DeleteHook, Tier, TierConfig


@dataclass(frozen=True, slots=True)
class Page:
    entries: list[tuple[str, Entry]]
    has_more: bool

    @property
    def paths(self) -> list[str]:
        return [p for p, _ in self.entries]


@dataclass(frozen=True, slots=True)
class DiffPage:
    diffs: list[Diff]
    has_more: bool


class Branches:
    """Synchronous access to repositories, branches and commits."""

    def __init__(self, tier: Tier) -> None:
        self.tier = tier

    @classmethod
    def connect(cls, cluster: Any, root: str, config: TierConfig | None = None,
                sensor: str | None = SENSOR_NAME, recorder: Recorder | None = None,
                seed: int | None = None, store: MetaRangeStore | None = None,
                client: str = "driver") -> Branches:
        """Over a running KV cluster (`sediment/wiring/cluster.py`); `root` is the block store
        directory. Time is the cluster runtime's (virtual on sim). `sensor`: the
        registered name deletes are reported to (None: not reported). `seed` makes
        staging tokens reproducible (sim replays); seeded clients of one cluster need
        distinct `client` names (`ports.SyncEnv`)."""
        rt = cluster.rt
        hook: DeleteHook | None = None
        if sensor is not None:
            def hook(repo: str, branch: str, token: str, sealed: int) -> None:
                rt.send(sensor, sn.CountDelete(repo, branch, token, sealed))
        env = SyncEnv(clock=rt.now, sleeper=rt.sleep, seed=seed, client=client)
        return cls.over(ClientKv(cluster.client()), env, store or MetaRangeStore(root),
                        config, recorder, hook)

    @classmethod
    def over_store(cls, kv_store: Any, root: str, config: TierConfig | None = None,
                   recorder: Recorder | None = None, seed: int | None = 0,
                   clock: Any = None) -> Branches:
        """Over one KV `Store` without raft (fast tests), virtual time from `clock`
        (a zero-argument callable; default: a counter that only moves when slept)."""
        ticks = _Clock() if clock is None else clock
        env = SyncEnv(clock=ticks, sleeper=getattr(ticks, "advance", lambda s: None), seed=seed)
        return cls.over(StoreKv(kv_store), env, MetaRangeStore(root), config, recorder, None)

    @classmethod
    def over(cls, kv: KvPort, env: SyncEnv, store: MetaRangeStore,
             config: TierConfig | None = None, recorder: Recorder | None = None,
             on_delete: DeleteHook | None = None) -> Branches:
        return cls(Tier(kv, env, store, config or TierConfig(), recorder or NoRecorder(),
                        on_delete))

    # ---- repositories and branches -----------------------------------------------------

    def repo_create(self, repo: str, default_branch: str = "main") -> str:
        """Create a repository; its first commit's id."""
        return run_sync(commits.create_repo(self.tier, repo, default_branch))

    def repo_list(self) -> list[str]:
        return run_sync(self.tier.refs.list_repos())

    def branch_create(self, repo: str, name: str, source: str) -> str:
        """Create branch `name` at `source` (a branch's HEAD or a commit); its commit."""
        nm.check_repo(repo)
        return run_sync(commits.create_branch(self.tier, repo, name, source))

    def branch_list(self, repo: str) -> list[str]:
        nm.check_repo(repo)
        return [name for name, _ in run_sync(self.tier.refs.list_branches(repo))]

    def branch_delete(self, repo: str, name: str) -> None:
        nm.check_repo(repo)
        run_sync(commits.delete_branch(self.tier, repo, name))

    def branch(self, repo: str, name: str) -> Branch:
        """The branch record (commit, staging and sealed tokens, compaction state)."""
        nm.check_repo(repo)
        nm.check_branch(name)
        return run_sync(self.tier.refs.get_branch(repo, name)).branch

    # ---- objects ------------------------------------------------------------------------

    def put(self, repo: str, branch: str, path: str | bytes, entry: Entry | None = None, *,
            address: str | None = None, size: int | None = None, checksum: str = "",
            metadata: Mapping[str, str] | None = None) -> None:
        """Stage an entry at `path`: an `Entry`, or its fields."""
        nm.check_repo(repo)
        nm.check_branch(branch)
        p = nm.check_path(path)
        if entry is None:
            entry = make_entry(address, size, checksum, metadata)
        elif not isinstance(entry, Entry):
            raise InvalidEntry(f"entry must be an Entry, got {type(entry).__name__}")
        else:
            entry = make_entry(entry.address, entry.size, entry.checksum, dict(entry.metadata))
        run_sync(commits.stage(self.tier, repo, branch, p, entry))

    def rm(self, repo: str, branch: str, path: str | bytes) -> None:
        """Delete `path` on the branch (a staged tombstone; deleting a path that does not
        exist is not an error, as in S3)."""
        nm.check_repo(repo)
        nm.check_branch(branch)
        run_sync(commits.stage(self.tier, repo, branch, nm.check_path(path), None))

    def get(self, repo: str, ref: str, path: str | bytes, staged_only: bool = False) -> Entry:
        nm.check_repo(repo)
        nm.check_ref(ref)
        return run_sync(reads.get_entry(self.tier, repo, ref, nm.check_path(path), staged_only))

    def ls(self, repo: str, ref: str, prefix: str = "", after: str = "",
           amount: int = LISTING_DEFAULT_AMOUNT) -> Page:
        nm.check_repo(repo)
        nm.check_ref(ref)
        prefix, after, amount = reads.check_page(prefix, after, amount)
        entries, more = run_sync(reads.list_entries(self.tier, repo, ref, prefix, after, amount))
        return Page(entries, more)

    # ---- versions -----------------------------------------------------------------------

    def commit(self, repo: str, branch: str, message: str,
               metadata: Mapping[str, str] | None = None, committer: str = "",
               allow_empty: bool = False, source_metarange: str | None = None) -> str:
        nm.check_repo(repo)
        return run_sync(commits.commit(self.tier, repo, branch, message, metadata, committer,
                                       allow_empty, source_metarange))

    def diff(self, repo: str, branch: str, prefix: str = "", after: str = "",
             amount: int = LISTING_DEFAULT_AMOUNT) -> DiffPage:
        """The branch's uncommitted changes (lakeFS DiffUncommitted), a page."""
        nm.check_repo(repo)
        nm.check_branch(branch)
        prefix, after, amount = reads.check_page(prefix, after, amount)
        diffs, more = run_sync(reads.diff_uncommitted(self.tier, repo, branch, prefix, after,
                                                      amount))
        return DiffPage(diffs, more)

    def is_staging_empty(self, repo: str, branch: str) -> bool:
        nm.check_repo(repo)
        nm.check_branch(branch)
        return run_sync(reads.is_staging_empty(self.tier, repo, branch))

    def reset(self, repo: str, branch: str) -> None:
        nm.check_repo(repo)
        run_sync(commits.reset(self.tier, repo, branch))

    def log(self, repo: str, ref: str, amount: int = 100) -> list[tuple[str, Commit]]:
        nm.check_repo(repo)
        nm.check_ref(ref)
        return run_sync(reads.log(self.tier, repo, ref, amount))

    def compact(self, repo: str, branch: str, force: bool = True) -> Compaction:
        """Compact the branch's staging area now (`force` ignores CompactionStartTime;
        the sensor's compactions do not)."""
        return run_sync(compactor.compact(self.tier, repo, branch, force))


class _Clock:
    """Virtual time that moves only when something sleeps (or a test advances it)."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


__all__ = ["Branches", "DiffPage", "Page"]
