"""What a run collected of the KV's block tier, for the tier's checks (pure values).

The runner gathers it after recovery (`scenarios/tier_collect.py`): the live block
index and every row of its blocks, the flush cursor, the blocks' and the KV's
compaction revisions, the rows the hot store still holds above its compaction, the
history reads it made through the KV client, and the hold samples taken while the run
went on. The checks compare it with the committed raft log (`truth`: every event the
log's writes made, as the other checkers use it), turned into rows here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from sediment.actors.kv.types import Event, KeyValue

Row = tuple[int, bytes, bytes | None]  # (revision, key, value; None: a delete)


@dataclass(frozen=True)
class BlockRow:
    """One row of a live block: `block` is the block's id."""

    revision: int
    key: bytes
    value: bytes | None
    block: str


@dataclass(frozen=True)
class HistoryRead:
    """A read at an old revision through the KV client, and what it answered.

    kind "range": `Client.range(key, range_end, revision=revision)`; kind "history":
    `Client.history(key, range_end, start_revision=revision, end_revision=end)`. `kvs` /
    `events`: the answer; `error`: the error's type name (the read answered nothing),
    `compact_revision`: an ErrCompacted's; `answered` False: the error was not the KV's
    (a timeout, no leader): the read proves nothing."""

    kind: Literal["range", "history"]
    revision: int
    key: bytes
    range_end: bytes | None = None
    end: int | None = None
    kvs: tuple[KeyValue, ...] = ()
    events: tuple[Event, ...] = ()
    error: str | None = None
    message: str = ""
    compact_revision: int = 0
    answered: bool = True

    def what(self) -> str:
        """The read, without its answer."""
        if self.kind == "range":
            return f"range [{self.key!r}, {self.range_end!r}) at revision {self.revision}"
        return f"history of [{self.key!r}, {self.range_end!r}) from revision {self.revision} " \
               f"to {self.end}"

    def describe(self) -> str:
        what = self.what()
        if self.error is not None:
            return f"{what}: {self.error}({self.compact_revision or self.message})"
        n = len(self.kvs) if self.kind == "range" else len(self.events)
        return f"{what}: {n} {'kvs' if self.kind == 'range' else 'events'}"


@dataclass(frozen=True)
class HoldSample:
    """At `t` (seconds of the run), the highest compact revision a KV member had applied,
    then (read after it, through the metastore's log) the committed flush cursor."""

    t: float
    kv_compact: int
    cursor: int


@dataclass(frozen=True)
class TierState:
    """The tier after recovery. `complete`: the live index was read (else the check
    cannot decide); `unreadable`: live blocks whose file could not be read, again and
    again (their rows are missing from `rows`); `hot_from`: the compact
    revision of the member whose rows above it are `hot`; `floor`: the oldest revision the
    blocks answer for (their compaction revision, or the highest one a block applied)."""

    rows: tuple[BlockRow, ...] = ()
    blocks: int = 0
    levels: Mapping[int, int] = field(default_factory=dict)  # level -> live blocks
    cursor: int = 0
    compaction_revision: int = 0
    floor: int = 0
    kv_compacts: Mapping[str, int] = field(default_factory=dict)  # member -> applied
    hot: tuple[Row, ...] = ()
    hot_from: int = 0
    head: int = 0
    reads: tuple[HistoryRead, ...] = ()
    samples: tuple[HoldSample, ...] = ()
    outcomes: Mapping[str, int] = field(default_factory=dict)  # worker outcome -> count
    unreadable: tuple[str, ...] = ()  # live blocks whose file is missing or corrupt
    notes: tuple[str, ...] = ()
    complete: bool = True


def truth_rows(truth: Sequence[Event]) -> dict[tuple[int, bytes], bytes | None]:
    """(revision, key) -> value (None: a delete) of every committed row."""
    return {(e.kv.mod_revision, e.kv.key): (e.kv.value if e.kind == "put" else None)
            for e in truth}


def show(key: bytes) -> str:
    return repr(key)[2:-1]


__all__ = ["BlockRow", "HistoryRead", "HoldSample", "Row", "TierState", "show", "truth_rows"]
