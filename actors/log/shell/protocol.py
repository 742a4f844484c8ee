"""What other processes say to a raft server, what it answers, and what it tells its
subscribers: one frozen dataclass per message, so a caller matches on a type instead of
re-parsing a tuple (`actors/log/raft/protocol.py` is the core's side of the server).

Calls (`ctx.call(raft_name(group, node), request)`):

- `Propose(command)` -> `Done(index, result)` once the entry is applied on this member
  (the leader), `NotLeader(hint)`, or `Failed(reason, index)` (`"Dropped"`: a new
  leader overwrote it; `"Unknown"`: the outcome is lost; `"bad_proposal"`).
- `ReadIndex(query)` -> `Done(applied, answer)`: a linearizable read of the machine at
  an applied index at or above the leader's commit index, without a log entry;
  `NotLeader(hint)` or `Failed` as for a proposal.
- `Change(op, node)` (`add_learner`, `promote`, `remove`) -> `Done(index, None)` once
  committed, `Refused(reason)`, `NotLeader(hint)`.
- `Query(request)` -> the machine's own answer, read locally (no linearizability).
- `Subscribe(pid)` -> the `LeaderChanged` of now; later ones are sent to `pid`.
- `WatchApplied(pid, eager)` -> `AppliedIndex(index)`; `AppliedNews` are sent to `pid`
  after every applied batch (eager) or at most every `LAZY_NOTICE`; `AppliedMode(pid,
  eager)` (a message, not a call) switches between the two.
- `GetKey(key)` -> `Found(value)` (None: no such key) or `Failed("not_found")`: the
  key-value test machine's value, read from wherever the log keeps its entry.
- `ReadEntry(index)` -> `Found(command)` or `Failed("not_in_memory")`.
- `CompactLog()` -> `LogCompacted(kind, linked)` once a major compaction ran.
- `Status()` -> a dict (the common status call every process answers).

Any other request is answered `UnknownRequest` (`sediment.runtime.common_calls`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sediment.runtime.pid import Pid

# -- calls ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Propose:
    """Append `command` to the log (None is reserved for the leader's no-op)."""

    command: Any


@dataclass(frozen=True, slots=True)
class ReadIndex:
    """Answer `query` from the machine once it applied the leader's commit index."""

    query: Any


@dataclass(frozen=True, slots=True)
class Change:
    """A membership change: `op` is add_learner, promote or remove of `node`."""

    op: str
    node: str


@dataclass(frozen=True, slots=True)
class Query:
    """A local read of the machine (`machine.query(request)`)."""

    request: Any


@dataclass(frozen=True, slots=True)
class Subscribe:
    """Tell `pid` of every leadership change (until it ends)."""

    pid: Pid


@dataclass(frozen=True, slots=True)
class WatchApplied:
    """Tell `pid` what the machine applied (until it ends); `eager`: after every batch."""

    pid: Pid
    eager: bool = True


@dataclass(frozen=True, slots=True)
class AppliedMode:
    """Switch an applied-index subscriber between eager and lazy notices (a message)."""

    pid: Pid
    eager: bool


@dataclass(frozen=True, slots=True)
class GetKey:
    """The value of `key` in the key-value test machine."""

    key: str


@dataclass(frozen=True, slots=True)
class ReadEntry:
    """The command at log `index`, if this member still holds it in memory."""

    index: int


@dataclass(frozen=True, slots=True)
class CompactLog:
    """Run a major compaction of the group's segments now."""


# -- replies ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Done:
    """A proposal applied at `index` with the machine's `result`; a read served at
    applied index `index`; a membership change committed at `index`."""

    index: int
    result: Any


@dataclass(frozen=True, slots=True)
class NotLeader:
    """This member does not lead; `hint`: the node it believes does (None: unknown)."""

    hint: str | None


@dataclass(frozen=True, slots=True)
class Refused:
    """A membership change the leader refused (`reason`, e.g. one already pending)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Failed:
    """The request failed: `reason` names why (`"Dropped"`, `"Unknown"`, `"bad_proposal"`,
    ...); `index`: the log index concerned, when there is one."""

    reason: str
    index: int | None = None


@dataclass(frozen=True, slots=True)
class AppliedIndex:
    """The index the machine has applied."""

    index: int


@dataclass(frozen=True, slots=True)
class Found:
    """A value read from the log (None: the key has none)."""

    value: Any


@dataclass(frozen=True, slots=True)
class LogCompacted:
    """A major compaction ended: its `kind` and how many segments it linked."""

    kind: Any
    linked: int


Reply = Done | NotLeader | Refused | Failed

# -- news to subscribers ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaderChanged:
    """Group `group`'s leader is now `leader` (None: unknown) in `term`."""

    group: str
    leader: str | None
    term: int


@dataclass(frozen=True, slots=True)
class AppliedNews:
    """Group `group`'s machine applied up to `index`; `changes`: what it applied since the
    last notice, read once for every subscriber (None: the machine offers no notice)."""

    group: str
    index: int
    changes: Any


__all__ = ["AppliedIndex", "AppliedMode", "AppliedNews", "Change", "CompactLog", "Done",
           "Failed", "Found", "GetKey", "LeaderChanged", "LogCompacted", "NotLeader",
           "Propose", "Query", "ReadEntry", "ReadIndex", "Refused", "Reply", "Subscribe",
           "WatchApplied"]
