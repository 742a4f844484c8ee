"""Events into a watcher core and the effects out of it: the whole Watcher-shell contract.

A *watcher* is one client session (etcd's gRPC Watch stream, Netsy's Watcher) holding
many *watches*. `watch_core.step(state, event) -> (state, effects)` decides; the shell
reads the store, talks to the client and runs the effects of one step IN ORDER:

- `Created`, `Canceled`, `Rejected`, `Deliver`, `Progress` go to the client, in order
  (one ordered stream per watcher: a `Progress` after a `Deliver` must arrive after it).
- `FetchHistory` asks for replay: answer with `HistoryFetched` (the shell reads
  `Store.events(from_revision, key, range_end, end_revision=to_revision, prev_kv=...)`,
  may cut the answer at a revision boundary after `limit` events, and says up to which
  revision it is complete) or `FetchFailed` (e.g. `ErrCompacted`). At most one fetch is
  outstanding per watcher; an answer with a stale `fetch_id` is ignored, so the shell
  may answer late or after a cancel.
- `CloseWatcher` ends the stream (a slow client): the shell closes it and stops
  stepping; a closed core ignores every later event.

Events the shell must feed: `Committed` for every applied revision range, with every
change in it (or `Advanced` when the node jumped without the changes, e.g. a snapshot
install); `FloorRaised` when the node's watch-admission floor / compact revision rises;
`Ack` when the client has consumed deliveries (flow control); `Tick` at least at
`watch_core.wakeup_at(state)` for progress notifications.

Revisions: a watch is delivered only revisions <= the committed revision, each exactly
once, in order, with all of a revision's (filtered) events in one `Deliver`. A watch
must start ABOVE the floor (Netsy's admission rule, applied identically at creation and
on `FloorRaised`; the primary compacts at min_revision - 1, so a watch never blocks
compaction of what it has already seen).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sediment.actors.kv.errors import KvError
from sediment.actors.kv.types import ALL_KEYS, Event

BROADCAST_ID = -1  # etcd's InvalidWatchID: a progress response for every watch of the stream

# ---- events (shell -> core) ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateWatch:
    """etcd WatchCreateRequest. watch_id None: the core picks the lowest free id at or
    above its counter. start_revision 0: from now (committed + 1)."""

    key: bytes
    range_end: bytes | None = None
    start_revision: int = 0
    watch_id: int | None = None
    prev_kv: bool = False
    no_put: bool = False
    no_delete: bool = False
    progress_notify: bool = False


@dataclass(frozen=True, slots=True)
class CancelWatch:
    watch_id: int


@dataclass(frozen=True, slots=True)
class Committed:
    """The node applied every revision up to `revision`. `events` are ALL the changes in
    (previous committed, revision], ordered by revision (their kv.mod_revision)."""

    revision: int
    events: tuple[Event, ...] = ()


@dataclass(frozen=True, slots=True)
class Advanced:
    """The node's committed revision jumped to `revision` without the changes (snapshot
    install): watches below it catch up from history instead of live events."""

    revision: int


@dataclass(frozen=True, slots=True)
class HistoryFetched:
    """The answer to FetchHistory `fetch_id`: every change of the watch's range in
    [from_revision, to_revision], by revision. to_revision may be below the one asked
    (the answer was cut after whole revisions) but not below from_revision."""

    fetch_id: int
    to_revision: int
    events: tuple[Event, ...] = ()


@dataclass(frozen=True, slots=True)
class FetchFailed:
    """FetchHistory `fetch_id` could not be served: ErrCompacted cancels the watch with
    its compact revision, any other error cancels it with reason "error"."""

    fetch_id: int
    error: KvError


@dataclass(frozen=True, slots=True)
class FloorRaised:
    """The node's watch-admission floor (compact revision) is now at least `revision`:
    every watch that still needs history at or below it is canceled (compacted)."""

    revision: int


@dataclass(frozen=True, slots=True)
class Ack:
    """The client consumed every Deliver with seq <= `seq` (cumulative, idempotent)."""

    seq: int


@dataclass(frozen=True, slots=True)
class RequestProgress:
    """etcd WatchProgressRequest: one Progress(BROADCAST_ID) once every watch is synced."""


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passes (seconds, the shell's monotonic clock): interval progress notifies."""

    now: float


WatcherEvent = (
    CreateWatch
    | CancelWatch
    | Committed
    | Advanced
    | HistoryFetched
    | FetchFailed
    | FloorRaised
    | Ack
    | RequestProgress
    | Tick
)

# ---- effects (core -> shell) -----------------------------------------------------------

CancelReason = Literal["canceled", "compacted", "error"]
CloseReason = Literal["slow"]


@dataclass(frozen=True, slots=True)
class Created:
    """The watch exists. start_revision is its effective start (for a "from now" watch,
    committed + 1); revision is the header (the committed revision)."""

    watch_id: int
    start_revision: int
    revision: int


@dataclass(frozen=True, slots=True)
class Canceled:
    """The watch is gone. reason "compacted": it needed history at or below
    compact_revision (etcd: Canceled with CompactRevision; the client must not retry the
    same start revision). detail carries the error text for reason "error"."""

    watch_id: int
    reason: CancelReason
    compact_revision: int = 0
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Rejected:
    """A bad request; nothing changed. watch_id is the one asked for, if any."""

    error: KvError
    watch_id: int | None = None


@dataclass(frozen=True, slots=True)
class Deliver:
    """One watch response: whole revisions, ordered, never seen before by this watch.
    seq numbers every Deliver of the watcher (from 1) for Ack; revision is the header."""

    watch_id: int
    seq: int
    revision: int
    events: tuple[Event, ...]


@dataclass(frozen=True, slots=True)
class Progress:
    """A progress notification at `revision`: every event <= revision of the watch (of
    every watch for BROADCAST_ID) has been delivered before this response."""

    watch_id: int
    revision: int


@dataclass(frozen=True, slots=True)
class FetchHistory:
    """Read the changes of [key, range_end) in [from_revision, to_revision] (with prev_kv
    if asked) and answer HistoryFetched / FetchFailed with this fetch_id. `limit` is the
    flow-control budget: cut after the whole revision that reaches it (at least one)."""

    fetch_id: int
    watch_id: int
    key: bytes
    range_end: bytes | None
    from_revision: int
    to_revision: int
    prev_kv: bool
    limit: int


@dataclass(frozen=True, slots=True)
class CloseWatcher:
    """Close the whole stream: the client fell too far behind (never a gap instead)."""

    reason: CloseReason


Effect = Created | Canceled | Rejected | Deliver | Progress | FetchHistory | CloseWatcher

__all__ = [
    "ALL_KEYS",
    "BROADCAST_ID",
    "Ack",
    "Advanced",
    "CancelReason",
    "CancelWatch",
    "Canceled",
    "CloseReason",
    "CloseWatcher",
    "Committed",
    "CreateWatch",
    "Created",
    "Deliver",
    "Effect",
    "FetchFailed",
    "FetchHistory",
    "FloorRaised",
    "HistoryFetched",
    "Progress",
    "Rejected",
    "RequestProgress",
    "Tick",
    "WatcherEvent",
]
