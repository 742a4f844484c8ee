"""What the KV node process (`node.py`) exchanges with its compaction coordinator, its
watcher sessions and its callers: one frozen dataclass per message.

From the coordinator (`coordinator.py`) to every node, and back:

- `MinRequest(cycle, reply_to)` -> `MinAnswer(node, cycle, revision)`: the lowest
  revision a watch on that node still needs.
- `Notice(cycle, revision, attempt, reply_to)` -> `NoticeAnswer(node, cycle, revision,
  attempt, confirmed)`: a confirmed notice is a promise the node keeps on disk first.
- `Rollback(cycle, revision)`: the cycle failed; the node forgets its promise.

Between a node and its watcher sessions (`watcher.py`):

- node -> session: `NewRevisions(revision, events)` (events None: the session reads what
  it missed itself), `NewFloor(revision)`.
- session -> node: `WatchPositions(session, positions)` (each watch's next revision,
  only what changed), `WatchEnded(session, watch_id)`.

Calls to a node: `Admit(key, start)` -> an admission verdict (`admission.py`) or
`NodeError`; `OpenWatcher(owner, token)` -> the pid of a watcher session (see node.py:
with an owner the open is idempotent per token) or `NodeError`; `Status()` -> a dict; any
other request -> `UnknownRequest`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sediment.actors.kv.admission import CycleId
from sediment.actors.kv.types import Event
from sediment.runtime.pid import Pid

# -- the coordinator and the nodes ------------------------------------------------------


@dataclass(frozen=True)
class MinRequest:
    cycle: CycleId
    reply_to: Any


@dataclass(frozen=True)
class Notice:
    cycle: CycleId
    revision: int
    attempt: int
    reply_to: Any


@dataclass(frozen=True)
class Rollback:
    cycle: CycleId
    revision: int


@dataclass(frozen=True, slots=True)
class MinAnswer:
    """Node `node`'s lowest needed revision in `cycle`."""

    node: str
    cycle: CycleId
    revision: int


@dataclass(frozen=True, slots=True)
class NoticeAnswer:
    """Node `node` confirmed (or refused) compaction notice `attempt` at `revision`."""

    node: str
    cycle: CycleId
    revision: int
    attempt: int
    confirmed: bool


# -- a node and its watcher sessions ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewRevisions:
    """The node applied up to `revision`; `events`: the changes since what it last told
    (None: the session reads them itself)."""

    revision: int
    events: tuple[Event, ...] | None


@dataclass(frozen=True, slots=True)
class NewFloor:
    """An applied compaction raised the watch floor to `revision`."""

    revision: int


@dataclass(frozen=True, slots=True)
class WatchPositions:
    """The next revision of each of `session`'s watches whose position changed."""

    session: Pid
    positions: dict[int, int]


@dataclass(frozen=True, slots=True)
class WatchEnded:
    """`session`'s watch `watch_id` ended: it no longer holds compaction back."""

    session: Pid
    watch_id: int


# -- calls ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Admit:
    """Admit watch `key` (session, watch id) from revision `start` (0: from now)."""

    key: tuple[str, int]
    start: int


@dataclass(frozen=True, slots=True)
class OpenWatcher:
    """Open a watcher session on this node; with an `owner`, tied to it and idempotent
    per `token` (a retry after a lost reply gets the same session)."""

    owner: Pid | None = None
    token: Any = None


@dataclass(frozen=True, slots=True)
class NodeError:
    """A call the node could not serve, and why."""

    reason: str


__all__ = ["Admit", "NewFloor", "MinAnswer", "MinRequest", "NewRevisions", "NodeError",
           "Notice", "NoticeAnswer", "OpenWatcher", "Rollback", "WatchEnded",
           "WatchPositions"]
