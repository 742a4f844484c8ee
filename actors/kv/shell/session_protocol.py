"""What a client says to a watcher session (`watcher.py`) and what it answers: one frozen
dataclass per message, so a caller matches on a type instead of re-parsing a tuple.
Three requests are the core's own events (`watch_protocol.py`), handed over as called.

Calls (`ctx.call(session, request)`):

- `wp.CreateWatch` -> `wp.Created`, `wp.Canceled` (its start is compacted),
  `wp.Rejected` (the core refused it) or `SessionError` (admission failed, or the
  request was not a CreateWatch).
- `wp.CancelWatch(watch_id)` -> `wp.Canceled`, or `Acked()` (no such watch).
- `wp.RequestProgress()` -> `Acked()`; the progress responses come through `Next`.
- `Next(max_wait)` -> `Responses(responses)`: every response queued so far (waiting up
  to `max_wait` for the first); pulling is the acknowledgement the core's flow control
  counts. `Closed(reason, responses)` once the session ended.
- `Positions()` -> `SessionPositions(committed, floor, positions)`: each watch's next
  needed revision, for checkers that compare the watches with committed compactions.
- `Close()` -> `Responses(responses)`: what was still queued. Sent as a message rather
  than called, `Close()` closes the session too (a client giving up on a session it
  cannot reach still frees it).
- Any other request (`Status()` too) -> `UnknownRequest` (`sediment.runtime.common_calls`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# -- calls ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Next:
    """Pull every queued response, waiting up to `max_wait` seconds for the first."""

    max_wait: float


@dataclass(frozen=True, slots=True)
class Positions:
    """Where each watch of the session is (for checkers)."""


@dataclass(frozen=True, slots=True)
class Close:
    """Close the session (a call or a plain message)."""


# -- replies ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Acked:
    """The request was taken; nothing else to say."""


@dataclass(frozen=True, slots=True)
class Responses:
    """The responses queued for the client (handing them over acknowledges them)."""

    responses: list[Any]


@dataclass(frozen=True, slots=True)
class Closed:
    """The session ended (`reason`: client, node_down, owner_down, or the core's why);
    `responses`: what was still queued."""

    reason: str
    responses: list[Any]


@dataclass(frozen=True, slots=True)
class SessionPositions:
    """The session's committed revision, its floor, and each watch's next revision."""

    committed: int
    floor: int
    positions: dict[int, int]


@dataclass(frozen=True, slots=True)
class SessionError:
    """The call failed: `error` says why (a node's error or a reason)."""

    error: Any


__all__ = ["Acked", "Close", "Closed", "Next", "Positions", "Responses", "SessionError",
           "SessionPositions"]
