"""Checking a watcher's input: bad input gets a typed error and changes nothing.

`watch_core.step` runs `validate` before anything else: a create is checked as etcd
checks it (key, range, revision, id, in its order), a cancel must name a watch, an ack
must not run ahead of what was delivered. The request came off the wire, so the Python
types are checked too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sediment.actors.kv.errors import (
    ErrEmptyKey,
    ErrInvalidRangeEnd,
    ErrNegativeRevision,
    ErrWatcherDuplicateID,
    ErrWatcherNotExist,
    InvalidRequest,
    KvError,
)
from sediment.actors.kv.watch_protocol import ALL_KEYS, Ack, CancelWatch, CreateWatch, WatcherEvent

if TYPE_CHECKING:
    from sediment.actors.kv.watch_core import WatcherState


def is_int(value: object) -> bool:
    """An int that is not a bool (a bool is an int to Python, never to the wire)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_bytes(value: object) -> bool:
    """A runtime check the annotations cannot make: the request came off the wire."""
    return isinstance(value, bytes)


def asked_id(event: WatcherEvent) -> int | None:
    """The watch id a refused create or cancel named (None: any other event)."""
    return event.watch_id if isinstance(event, CreateWatch | CancelWatch) else None


def validate(s: WatcherState, event: WatcherEvent) -> KvError | None:
    """Why `event` is refused in state `s` (a typed error), or None."""
    if isinstance(event, CreateWatch):
        return _check_create(s, event)
    if isinstance(event, CancelWatch) and event.watch_id not in s.watches:
        return ErrWatcherNotExist(event.watch_id)
    if isinstance(event, Ack) and not (is_int(event.seq) and 0 <= event.seq <= s.seq):
        return InvalidRequest(f"ack of seq {event.seq!r}: only 0..{s.seq} were delivered")
    return None


def _check_create(s: WatcherState, ev: CreateWatch) -> KvError | None:
    """etcd's checks, in its order: key, range (key < end unless ALL_KEYS), revision, id."""
    if not _is_bytes(ev.key) or not (ev.range_end is None or _is_bytes(ev.range_end)):
        return InvalidRequest("key and range_end must be bytes")
    if not ev.key:
        return ErrEmptyKey()
    end = ev.range_end or None
    if end is not None and end != ALL_KEYS and end <= ev.key:
        return ErrInvalidRangeEnd("mvcc: watcher range is empty")
    if not is_int(ev.start_revision):
        return InvalidRequest("start_revision must be an int")
    if ev.start_revision < 0:
        return ErrNegativeRevision(f"start_revision {ev.start_revision} is negative")
    if ev.watch_id is None:
        return None
    if not is_int(ev.watch_id) or ev.watch_id < 0:
        return InvalidRequest(f"watch_id must be a non-negative int, got {ev.watch_id!r}")
    if ev.watch_id in s.watches:
        return ErrWatcherDuplicateID(ev.watch_id)
    return None


__all__ = ["asked_id", "is_int", "validate"]
