"""Typed errors of the KV store; etcd's descriptions (`rpctypes.py`) where etcd has the error.

`KvError`, `ErrCompacted` and `ErrFutureRev` are defined in `actors/mvcc_errors.py`
(the block tier raises them too) and re-exported here."""

from __future__ import annotations

from sediment.actors.kv.rpctypes import message
from sediment.actors.mvcc_errors import ErrCompacted, ErrFutureRev, KvError


class InvalidRequest(KvError):
    """Rejected at the boundary (etcd's InvalidArgument family)."""


class ErrEmptyKey(InvalidRequest):
    def __init__(self) -> None:
        super().__init__(message("ErrEmptyKey"))


class ErrRequestTooLarge(InvalidRequest):
    """etcd's "request is too large"; `detail` says what was too large (etcd says no
    more, so neither does the message)."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(message("ErrRequestTooLarge"))
        self.detail = detail


class ErrKeyTooLarge(ErrRequestTooLarge):
    """A key above `Limits.max_key_bytes` (etcd has no key limit of its own: with the
    default limits only a key too large for a request gets here)."""


class ErrValueTooLarge(ErrRequestTooLarge):
    """A value above `Limits.max_value_bytes` (see ErrKeyTooLarge)."""


class ErrInvalidRangeEnd(InvalidRequest):
    """A watch whose range is empty (etcd refuses it; a Range or a DeleteRange with
    range_end before key is an empty range instead, as in etcd)."""


class ErrNegativeRevision(InvalidRequest):
    """A negative revision where etcd has no meaning for one (a watch's start, a history
    read). etcd's Range reads a negative revision at head, and so does the store."""


class ErrTooManyOps(InvalidRequest):
    def __init__(self, n: int = 0, limit: int = 0) -> None:
        super().__init__(message("ErrTooManyOps"))
        self.ops, self.limit = n, limit


class ErrDuplicateKey(InvalidRequest):
    def __init__(self) -> None:
        super().__init__(message("ErrDuplicateKey"))


class ErrKeyNotFound(InvalidRequest):
    """etcd's "key not found": an empty txn op (the wire's RequestOp with nothing set),
    or ignore_value / ignore_lease on a key that does not exist."""

    def __init__(self) -> None:
        super().__init__(message("ErrKeyNotFound"))


class ErrLeaseNotFound(KvError):
    def __init__(self) -> None:
        super().__init__(message("ErrLeaseNotFound"))


class ErrLeaseExist(KvError):
    def __init__(self) -> None:
        super().__init__(message("ErrLeaseExist"))


class ErrLeaseTTLTooLarge(InvalidRequest):
    def __init__(self) -> None:
        super().__init__(message("ErrLeaseTTLTooLarge"))


class ErrValueProvided(InvalidRequest):
    """A Put with ignore_value that also gives a value."""

    def __init__(self) -> None:
        super().__init__(message("ErrValueProvided"))


class ErrLeaseProvided(InvalidRequest):
    """A Put with ignore_lease that also gives a lease."""

    def __init__(self) -> None:
        super().__init__(message("ErrLeaseProvided"))


class ErrRevisionNotAfterHead(InvalidRequest):
    """A write was given an explicit revision that is not above the head revision."""


__all__ = [
    "ErrCompacted",
    "ErrDuplicateKey",
    "ErrEmptyKey",
    "ErrFutureRev",
    "ErrInvalidRangeEnd",
    "ErrKeyNotFound",
    "ErrKeyTooLarge",
    "ErrLeaseExist",
    "ErrLeaseNotFound",
    "ErrLeaseProvided",
    "ErrLeaseTTLTooLarge",
    "ErrValueProvided",
    "ErrNegativeRevision",
    "ErrRequestTooLarge",
    "ErrRevisionNotAfterHead",
    "ErrTooManyOps",
    "ErrValueTooLarge",
    "InvalidRequest",
    "KvError",
]


# ---- watch errors (the Watcher process) ----------------------------------------------


class ErrWatcherDuplicateID(InvalidRequest):
    def __init__(self, watch_id: int) -> None:
        super().__init__("mvcc: duplicate watch ID provided on the WatchStream")
        self.watch_id = watch_id


class ErrWatcherNotExist(InvalidRequest):
    def __init__(self, watch_id: int) -> None:
        super().__init__("mvcc: watcher does not exist")
        self.watch_id = watch_id


class WatchProtocolError(KvError):
    """The watcher's shell broke the driving contract (e.g. a Committed revision went
    backwards or a fetch answer lies outside what was asked): a bug, never ignore."""


__all__ += ["ErrWatcherDuplicateID", "ErrWatcherNotExist", "WatchProtocolError"]


# ---- the block tier (committed history flushed out of the hot store) -------------------


class ErrNotFlushed(KvError):
    """A Compact above the block tier's flushed-through revision: the hot store would drop
    values no block holds yet. Nothing is proposed."""

    def __init__(self, revision: int, flushed_through: int) -> None:
        super().__init__(f"compaction at {revision} is above the flushed history "
                         f"({flushed_through}); retry when the flusher has caught up")
        self.revision = revision
        self.flushed_through = flushed_through


class ErrHistoryUnavailable(KvError):
    """A compacted value that the blocks should hold is not there (a block tier that lost
    history, or a flush cursor that ran ahead of its blocks): never answered partially."""


__all__ += ["ErrHistoryUnavailable", "ErrNotFlushed"]
