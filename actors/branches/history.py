"""What the branch tier records for the history checker
(`scenarios/checkers/branch_reads.py`): plain data, no behaviour.

Every event carries the KV revision it took effect at (a write's or update's txn
revision, a read's snapshot revision), so the checker can order them exactly; it
relies on revisions only being ordered and equal where the KV says so.

- `Updated`: a branch SetIf that won (kind, the branch before and after, the mod
  revision it compared, the revision it wrote at); `Lost`: one that lost its race.
- `Staged`: an acknowledged write (a tombstone too), with the token it landed in.
- `Uncertain`: a write whose outcome is unknown (the KV call timed out).
- `GotEntry`, `ListedPage`, `DiffedPage`: reads of a branch at a snapshot revision,
  with what they returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from sediment.actors.branches.branch import Branch
from sediment.actors.branches.diff import Diff
from sediment.actors.branches.entry import Entry


@dataclass(frozen=True, slots=True)
class Updated:
    repo: str
    branch: str
    kind: str  # create, seal, commit, reset, compaction_start, compaction_finish
    before: Branch | None
    after: Branch
    base_revision: int  # the mod revision compared (0: created)
    revision: int


@dataclass(frozen=True, slots=True)
class Lost:
    repo: str
    branch: str
    kind: str
    base_revision: int


@dataclass(frozen=True, slots=True)
class Staged:
    repo: str
    branch: str
    path: str
    entry: Entry | None
    token: str
    revision: int


@dataclass(frozen=True, slots=True)
class Uncertain:
    repo: str
    branch: str
    path: str
    entry: Entry | None


@dataclass(frozen=True, slots=True)
class GotEntry:
    repo: str
    branch: str
    path: str
    revision: int
    entry: Entry | None


@dataclass(frozen=True, slots=True)
class ListedPage:
    repo: str
    branch: str
    prefix: str
    after: str
    amount: int
    revision: int
    entries: tuple[tuple[str, Entry], ...]
    has_more: bool


@dataclass(frozen=True, slots=True)
class DiffedPage:
    repo: str
    branch: str
    prefix: str
    after: str
    amount: int
    revision: int
    diffs: tuple[Diff, ...]
    has_more: bool


Event = Updated | Lost | Staged | Uncertain | GotEntry | ListedPage | DiffedPage


class Recorder(Protocol):
    def record(self, event: Event) -> None: ...


@dataclass
class History:
    """A `Recorder` that keeps every event in order."""

    events: list[Event] = field(default_factory=list)

    def record(self, event: Event) -> None:
        self.events.append(event)


class NoRecorder:
    def record(self, event: Event) -> None:
        pass


__all__ = ["DiffedPage", "Event", "GotEntry", "History", "ListedPage", "Lost", "NoRecorder",
           "Recorder", "Staged", "Uncertain", "Updated"]
