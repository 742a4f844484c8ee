"""What a compaction worker asks the compaction service (`compaction_service.py`) and
what it answers: one frozen dataclass per message, so a caller matches on a type
instead of re-parsing a tuple.

- `Poll(request)` -> `Polled(response)`: the worker's `PollResponse` (new assignments,
  lease renewals, due tombstones); `PollNotLeader(hint)`: the service's raft member
  no longer leads (`hint`: the node it believes does); `PollRefused(reason)`: a
  refused plan, a malformed request or an unreachable member; `Busy()`: too many
  polls wait already (`max_pending_polls`).
- `Status()` -> a dict (the common status call every process answers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sediment.actors.blocks.jobs import PollResponse


@dataclass(frozen=True, slots=True)
class Poll:
    """A worker's `PollRequest` (its finished jobs, its lease renewals, its capacity)."""

    request: Any


@dataclass(frozen=True, slots=True)
class Polled:
    """The service's answer to a poll."""

    response: PollResponse


@dataclass(frozen=True, slots=True)
class PollNotLeader:
    """The service's raft member does not lead; `hint`: the node it believes does."""

    hint: str | None


@dataclass(frozen=True, slots=True)
class PollRefused:
    """The poll was not served: `reason` (a `MetastoreError`, an `ErrMalformedCommand`,
    or the raft server's `Failed`)."""

    reason: Any


@dataclass(frozen=True, slots=True)
class Busy:
    """Too many polls are waiting; try again later."""


PollReply = Polled | PollNotLeader | PollRefused | Busy

__all__ = ["Busy", "Poll", "PollNotLeader", "PollRefused", "PollReply", "Polled"]
