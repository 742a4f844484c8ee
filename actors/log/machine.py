"""The contract between a raft group and its replicated state machine (Ra's ra_machine).

A machine is pure: the raft server's shell feeds it committed entries in index order and
stores its snapshots. Ra's live-index extension is what makes log compaction safe for
machines whose snapshot does not hold everything: `live_indexes` names the log entries
the snapshot still needs, so storage keeps those (and only those) below the snapshot
index; an empty list gives standard Raft truncation.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from sediment.actors.log.raft.types import Entry

S = TypeVar("S")


class StateMachine(Protocol[S]):
    """Every method is a pure function of its arguments."""

    def initial(self) -> S:
        """The state before any entry (index 0)."""
        ...

    def apply(self, state: S, entry: Entry) -> tuple[S, Any]:
        """Apply one committed entry; `entry.command` None is the leader's no-op. The
        result goes back to the proposer; it must depend only on (state, entry)."""
        ...

    def snapshot(self, state: S) -> bytes:
        """The state as bytes; it may leave out whatever the live entries hold."""
        ...

    def live_indexes(self, state: S) -> list[int]:
        """Sorted indexes of the entries at or below the snapshot the state still needs."""
        ...

    def restore(self, data: bytes) -> S:
        """Inverse of `snapshot`; the live entries stay readable from the log."""
        ...


__all__ = ["StateMachine"]
