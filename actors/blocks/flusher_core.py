"""The level-0 flusher as a pure step core: committed KV history out into level-0 blocks.

`step(state, event) -> (state, effects)`; no clock, no I/O. One flusher runs per KV
cluster, beside the KV leader. Its cursor ("every committed revision at or below R is in
the index") lives only in the metastore and moves in the same raft command as the
blocks that justify it (`AddBlocks(blocks, through=R)`), so a flusher that restarts, or
one on a new leader, resumes exactly where the last committed flush left off.

The cycle, one operation at a time:
1. sync: read the cursor and the per-shard watermarks through the metastore's log
   (ReadCursor -> CursorRead); pending rows are dropped, reading restarts above it.
2. read: committed rows above `read_through`, whole revisions, a bounded batch
   (ReadHistory -> HistoryRead). A row of a shard already flushed past it (a flush that
   committed after the cursor was read: the watermark says so) is skipped, so nothing
   is flushed twice. Rows wait per shard (`meta.shard_for_key`).
3. flush, when a shard's rows are due (`meta.FlushPolicy`: rows, bytes, age since they
   were read), or every shard when the pending rows reach `max_pending_rows`: WriteBlocks
   (one level-0 block per due shard) -> BlocksWritten -> ProposeFlush -> FlushDone. The
   proposed cursor is just below the oldest row still pending in another shard (or
   `read_through` when none is), so it never claims a row no block holds.
   With nothing pending and `read_through` above the cursor (rows all skipped), the
   flush proposes only the cursor.
A refused or unanswered proposal may still commit later, so after it the core backs off
and syncs again: the watermarks then tell which rows made it. A failed read or write
changed nothing durable: it is retried after the backoff without a sync.

Every effect carries the sync `epoch`; outcomes of an older epoch (a leadership change,
a resync) are ignored. The shell feeds `Tick(now)` every tick interval; after each
outcome the core goes on by itself: it reads on while the KV has rows it has not read
(between flushes too), and waits for the next tick once it has read everything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, assert_never

from sediment.actors.blocks.meta import BlockMeta, FlushPolicy, flush_due, shard_for_key

Row = tuple[int, bytes, bytes | None]  # (revision, key, value; None: a delete)
Phase = Literal["stopped", "syncing", "idle", "reading", "writing", "proposing", "backoff"]
Failure = Literal["cursor", "read", "write", "flush"]
ROW_OVERHEAD = 17  # bytes a row costs beside its key and value (revision, flags)
MAX_SHARDS = 1024  # one flush writes at most one block per shard (MetastoreConfig's bound)


@dataclass(frozen=True, slots=True)
class FlushConfig:
    """`read_batch`: rows per history read; `max_pending_rows`: rows held before every
    shard is flushed regardless of the policy; `retry_interval`: seconds of backoff.
    Without an age threshold a quiet shard's few rows wait until it fills (or the bound
    is reached), and hold the cursor, and so the KV's compaction, below them."""

    shards: int
    policy: FlushPolicy = field(default_factory=FlushPolicy)
    read_batch: int = 1000
    max_pending_rows: int = 20_000
    retry_interval: float = 1.0

    def __post_init__(self) -> None:
        counts = (self.shards, self.read_batch, self.max_pending_rows)
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in counts):
            raise ValueError(f"shards, read_batch and max_pending_rows must be positive: {self}")
        if self.shards > MAX_SHARDS:
            raise ValueError(f"at most {MAX_SHARDS} shards, got {self.shards}")
        if not isinstance(self.policy, FlushPolicy):
            raise ValueError(f"policy must be a FlushPolicy, got {self.policy!r}")
        if not self.retry_interval > 0:
            raise ValueError(f"retry_interval must be positive: {self}")


@dataclass(frozen=True, slots=True)
class ShardRows:
    """A shard's rows waiting for a flush, in revision order; `oldest_at`: when the first
    of them was read (the age threshold's start)."""

    rows: tuple[Row, ...]
    size_bytes: int
    oldest_at: float


@dataclass(frozen=True, slots=True)
class Flush:
    """The flush in progress: the shards whose rows it writes, the cursor it proposes."""

    shards: tuple[int, ...]
    through: int


@dataclass(frozen=True, slots=True)
class FlusherState:
    config: FlushConfig
    phase: Phase = "stopped"
    term: int = 0
    epoch: int = 0
    cursor: int = 0  # the committed flushed-through revision, as last known
    flushed: Mapping[int, int] = field(default_factory=dict)  # shard -> its watermark
    read_through: int = 0  # every row at or below it is flushed or pending
    pending: Mapping[int, ShardRows] = field(default_factory=dict)
    inflight: Flush | None = None
    retry_at: float = 0.0
    resync: bool = True  # what the backoff ends in: a sync, or going on where it was
    behind: bool = False  # the last read left rows unread: read on after a flush

    def pending_rows(self) -> int:
        return sum(len(p.rows) for p in self.pending.values())


def initial(config: FlushConfig) -> FlusherState:
    return FlusherState(config)


# ---- events ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Start:
    """The KV member beside this flusher leads in `term`."""

    now: float
    term: int


@dataclass(frozen=True, slots=True)
class Stop:
    now: float


@dataclass(frozen=True, slots=True)
class Tick:
    now: float


@dataclass(frozen=True, slots=True)
class CursorRead:
    epoch: int
    through: int
    flushed: tuple[tuple[int, int], ...]
    now: float


@dataclass(frozen=True, slots=True)
class HistoryRead:
    """Rows with lo <= revision <= through, by (revision, key); `more`: rows above
    `through` may exist already."""

    epoch: int
    rows: tuple[Row, ...]
    through: int
    more: bool
    now: float


@dataclass(frozen=True, slots=True)
class BlocksWritten:
    epoch: int
    blocks: tuple[BlockMeta, ...]
    now: float


@dataclass(frozen=True, slots=True)
class FlushDone:
    """The AddBlocks committed; `through`: the metastore's cursor after it."""

    epoch: int
    through: int
    now: float


@dataclass(frozen=True, slots=True)
class Failed:
    epoch: int
    what: Failure
    reason: str
    now: float


Event = Start | Stop | Tick | CursorRead | HistoryRead | BlocksWritten | FlushDone | Failed

# ---- effects ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadCursor:
    """Propose ReadFlushCursor to the metastore; CursorRead or Failed("cursor")."""

    epoch: int


@dataclass(frozen=True, slots=True)
class ReadHistory:
    """Query the local KV machine `HistoryRows(lo, max_rows)`; HistoryRead or
    Failed("read")."""

    epoch: int
    lo: int
    max_rows: int


@dataclass(frozen=True, slots=True)
class WriteBlocks:
    """Write one level-0 block per (shard, rows); BlocksWritten (in this order) or
    Failed("write")."""

    epoch: int
    batches: tuple[tuple[int, tuple[Row, ...]], ...]
    created_at: float


@dataclass(frozen=True, slots=True)
class ProposeFlush:
    """Propose AddBlocks(blocks, through); FlushDone or Failed("flush") (refused, or no
    answer: it may still commit)."""

    epoch: int
    blocks: tuple[BlockMeta, ...]
    through: int


@dataclass(frozen=True, slots=True)
class Flushed:
    """For logs and metrics: a flush committed."""

    blocks: int
    rows: int
    through: int


@dataclass(frozen=True, slots=True)
class Problem:
    """For logs: an operation failed and is retried after the backoff."""

    what: Failure
    reason: str


Effect = ReadCursor | ReadHistory | WriteBlocks | ProposeFlush | Flushed | Problem
Step = tuple[FlusherState, tuple[Effect, ...]]

# ---- step ------------------------------------------------------------------------------


def step(state: FlusherState, event: Event) -> Step:
    match event:
        case Start():
            return _on_start(state, event)
        case Stop():
            return replace(state, phase="stopped", epoch=state.epoch + 1, pending={},
                           inflight=None), ()
        case Tick():
            return _on_tick(state, event.now)
        case CursorRead():
            return _on_cursor(state, event)
        case HistoryRead():
            return _on_history(state, event)
        case BlocksWritten():
            return _on_written(state, event)
        case FlushDone():
            return _on_done(state, event)
        case Failed():
            return _on_failed(state, event)
        case _:
            assert_never(event)


def _on_start(state: FlusherState, ev: Start) -> Step:
    if ev.term < state.term or (ev.term == state.term and state.phase != "stopped"):
        return state, ()
    return _sync(replace(state, term=ev.term))


def _sync(state: FlusherState) -> Step:
    """Forget everything not durable and read the cursor again."""
    epoch = state.epoch + 1
    state = replace(state, phase="syncing", epoch=epoch, pending={}, inflight=None)
    return state, (ReadCursor(epoch),)


def _on_tick(state: FlusherState, now: float) -> Step:
    if state.phase == "backoff" and now >= state.retry_at:
        if state.resync:
            return _sync(state)
        return _next(replace(state, phase="idle"), now, may_read=True)
    if state.phase == "idle":
        return _next(state, now, may_read=True)
    return state, ()


def _current(state: FlusherState, epoch: int, phase: Phase) -> bool:
    return epoch == state.epoch and state.phase == phase


def _on_cursor(state: FlusherState, ev: CursorRead) -> Step:
    if not _current(state, ev.epoch, "syncing"):
        return state, ()
    cursor = max(state.cursor, ev.through)
    state = replace(state, phase="idle", cursor=cursor, flushed=dict(ev.flushed),
                    read_through=cursor, pending={})
    return _next(state, ev.now, may_read=True)


def _on_history(state: FlusherState, ev: HistoryRead) -> Step:
    if not _current(state, ev.epoch, "reading"):
        return state, ()
    shards = state.config.shards
    added: dict[int, list[Row]] = {}
    for row in ev.rows:
        revision, key, _ = row
        shard = shard_for_key(key, shards)
        if revision > state.read_through and revision > state.flushed.get(shard, 0):
            added.setdefault(shard, []).append(row)
    pending = dict(state.pending)
    for shard, rows in added.items():
        size = sum(len(k) + len(v or b"") + ROW_OVERHEAD for _, k, v in rows)
        old = pending.get(shard)
        pending[shard] = (ShardRows(tuple(rows), size, ev.now) if old is None else
                          ShardRows(old.rows + tuple(rows), old.size_bytes + size, old.oldest_at))
    state = replace(state, phase="idle", pending=pending, behind=ev.more,
                    read_through=max(state.read_through, ev.through))
    return _next(state, ev.now, may_read=ev.more)


def _next(state: FlusherState, now: float, may_read: bool) -> Step:
    """From idle: flush what is due, else move the cursor alone, else read more."""
    flush = _due(state, now)
    if flush is not None:
        batches = tuple((s, state.pending[s].rows) for s in flush.shards)
        return (replace(state, phase="writing", inflight=flush),
                (WriteBlocks(state.epoch, batches, now),))
    if not state.pending and state.read_through > state.cursor:
        flush = Flush((), state.read_through)
        return (replace(state, phase="proposing", inflight=flush),
                (ProposeFlush(state.epoch, (), flush.through),))
    room = state.config.max_pending_rows - state.pending_rows()
    if may_read and room > 0:
        size = min(state.config.read_batch, room)
        return (replace(state, phase="reading"),
                (ReadHistory(state.epoch, state.read_through + 1, size),))
    return state, ()


def _due(state: FlusherState, now: float) -> Flush | None:
    """The shards to flush now and the cursor that flush may claim, or None."""
    config = state.config
    if state.pending_rows() >= config.max_pending_rows:
        due = sorted(state.pending)
    else:
        due = sorted(s for s, p in state.pending.items()
                     if flush_due(config.policy, len(p.rows), p.size_bytes, p.oldest_at, now))
    if not due:
        return None
    waiting = [p.rows[0][0] for s, p in state.pending.items() if s not in due]
    through = min(waiting) - 1 if waiting else state.read_through
    return Flush(tuple(due), through)


def _on_written(state: FlusherState, ev: BlocksWritten) -> Step:
    flush = state.inflight
    if not _current(state, ev.epoch, "writing") or flush is None:
        return state, ()
    state = replace(state, phase="proposing")
    return state, (ProposeFlush(state.epoch, ev.blocks, flush.through),)


def _on_done(state: FlusherState, ev: FlushDone) -> Step:
    flush = state.inflight
    if not _current(state, ev.epoch, "proposing") or flush is None:
        return state, ()
    if ev.through != max(state.cursor, flush.through):
        # another flusher moved the cursor too (a former leader's late flush): the
        # rows held here may be in blocks already, so read again from what is durable
        return _sync(state)
    flushed = dict(state.flushed)
    pending = dict(state.pending)
    rows = 0
    for shard in flush.shards:
        done = pending.pop(shard)
        rows += len(done.rows)
        flushed[shard] = max(flushed.get(shard, 0), done.rows[-1][0])
    state = replace(state, phase="idle", cursor=ev.through, flushed=flushed,
                    pending=pending, inflight=None)
    state, more = _next(state, ev.now, may_read=state.behind)
    return state, (Flushed(len(flush.shards), rows, ev.through), *more)


def _on_failed(state: FlusherState, ev: Failed) -> Step:
    expected: dict[Failure, Phase] = {"cursor": "syncing", "read": "reading",
                                      "write": "writing", "flush": "proposing"}
    if not _current(state, ev.epoch, expected[ev.what]):
        return state, ()
    state = replace(state, phase="backoff", inflight=None,
                    retry_at=ev.now + state.config.retry_interval,
                    resync=ev.what in ("cursor", "flush"))
    return state, (Problem(ev.what, ev.reason),)


__all__ = [
    "BlocksWritten",
    "CursorRead",
    "Effect",
    "Event",
    "Failed",
    "Failure",
    "Flush",
    "FlushConfig",
    "FlushDone",
    "Flushed",
    "FlusherState",
    "HistoryRead",
    "Phase",
    "Problem",
    "ProposeFlush",
    "ReadCursor",
    "ReadHistory",
    "Row",
    "ShardRows",
    "Start",
    "Step",
    "Stop",
    "Tick",
    "WriteBlocks",
    "initial",
    "step",
]
