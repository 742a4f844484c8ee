"""A bounded mailbox with Erlang's selective receive, and a per-sender reorder buffer.

Selective receive scans messages in arrival order and removes the first that matches.
A receive that found nothing remembers how far it scanned (the "save queue" cursor), so
a wake-up only looks at messages that arrived since. Both structures are pure: no
asyncio, no clock; the process shell owns waiting and timeouts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from typing import Any

from .errors import MailboxOverflow

Matcher = Callable[[Any], bool]


def compile_match(match: Any) -> Matcher | None:
    """None matches anything; a type or tuple of types matches by isinstance; else a predicate."""
    if match is None:
        return None
    if isinstance(match, type) or (
        isinstance(match, tuple) and all(isinstance(m, type) for m in match)
    ):
        kinds = match
        return lambda msg: isinstance(msg, kinds)
    if callable(match):
        return match  # type: ignore[no-any-return]
    raise TypeError(
        f"receive match must be None, a type, a tuple of types or a callable: {match!r}")


class Mailbox:
    """FIFO of messages, bounded; `take` removes the first message accepted by a matcher."""

    __slots__ = ("_items", "capacity", "_cursor")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"mailbox capacity must be >= 1, got {capacity}")
        self._items: deque[Any] = deque()
        self.capacity = capacity
        self._cursor = 0

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def take_first(self) -> Any:
        """Remove and return the oldest message (the mailbox must not be empty)."""
        self._cursor = 0
        return self._items.popleft()

    def put(self, msg: Any) -> None:
        """Append; a full mailbox is a failure of its owner, never a silent drop."""
        if len(self._items) >= self.capacity:
            raise MailboxOverflow(f"mailbox full ({self.capacity} messages)")
        self._items.append(msg)

    def take(self, matcher: Matcher | None, *, resume: bool = False) -> tuple[bool, Any]:
        """Return (True, msg) for the first match, else (False, None).

        With `resume`, scanning starts where the previous unsuccessful scan of the same
        receive stopped; otherwise from the oldest message.
        """
        items = self._items
        start = self._cursor if resume else 0
        if matcher is None:
            if start < len(items):
                self._cursor = 0
                return True, self._pop(start)
        else:
            for i in range(start, len(items)):
                if matcher(items[i]):
                    self._cursor = 0
                    return True, self._pop(i)
        self._cursor = len(items)
        return False, None

    def take_all(self, matcher: Matcher, limit: int) -> list[Any]:
        """Remove and return (oldest first) up to `limit` messages accepted by `matcher`,
        in one pass: a shell that batches what is waiting (raft proposals) pays for one
        scan, not one per message."""
        taken: list[Any] = []
        if limit <= 0 or not self._items:
            return taken
        kept: deque[Any] = deque()
        for msg in self._items:
            if len(taken) < limit and matcher(msg):
                taken.append(msg)
            else:
                kept.append(msg)
        if taken:
            self._items = kept
            self._cursor = 0
        return taken

    def _pop(self, i: int) -> Any:
        items = self._items
        if i == 0:
            return items.popleft()
        msg = items[i]
        del items[i]
        return msg

    def drain(self) -> list[Any]:
        items, self._items, self._cursor = list(self._items), deque(), 0
        return items


class ReorderBuffer:
    """Restores per-sender FIFO when the transport may reorder.

    Each envelope carries (sender, seq) with seq = 1, 2, ... per (sender, receiver) pair.
    `accept` returns the items that are now deliverable, in order. Held items count
    against `capacity`, like the mailbox.
    """

    __slots__ = ("_next", "_held", "_held_count", "_after", "capacity")

    def __init__(self, capacity: int) -> None:
        self._next: dict[Hashable, int] = {}
        self._held: dict[Hashable, dict[int, Any]] = {}
        self._held_count = 0
        self._after: dict[Hashable, list[tuple[int, Any]]] = {}
        self.capacity = capacity

    def after(self, sender: Hashable, last_seq: int, item: Any) -> list[Any]:
        """Release `item` once everything up to `last_seq` from `sender` was delivered.

        Used for a sender's exit notification: it must not overtake the messages the
        sender sent before it ended.
        """
        if self._next.get(sender, 1) > last_seq:
            return [item]
        self._after.setdefault(sender, []).append((last_seq, item))
        return []

    def accept(self, sender: Hashable, seq: int, item: Any) -> list[Any]:
        expected = self._next.get(sender, 1)
        if seq < expected:
            return []  # duplicate: already delivered
        if seq > expected:
            if self._held_count >= self.capacity:
                raise MailboxOverflow(f"reorder buffer full ({self.capacity} held)")
            self._held.setdefault(sender, {})[seq] = item
            self._held_count += 1
            return []
        out = [item]
        expected += 1
        held = self._held.get(sender)
        while held and expected in held:
            out.append(held.pop(expected))
            self._held_count -= 1
            expected += 1
        if held is not None and not held:
            del self._held[sender]
        self._next[sender] = expected
        waiting = self._after.get(sender)
        if waiting:
            ready = [it for seq_, it in waiting if seq_ < expected]
            if ready:
                out.extend(ready)
                rest = [(s, it) for s, it in waiting if s >= expected]
                if rest:
                    self._after[sender] = rest
                else:
                    del self._after[sender]
        return out

    def forget(self, sender: Hashable) -> None:
        """Drop a sender's state (it exited and will never send again)."""
        self._next.pop(sender, None)
        self._after.pop(sender, None)
        held = self._held.pop(sender, None)
        if held:
            self._held_count -= len(held)
