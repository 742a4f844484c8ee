"""Typed errors of the KV store; messages follow etcd's where etcd has one."""

from __future__ import annotations


def _rebuild(cls: type[KvError], args: tuple[object, ...], state: dict[str, object]) -> KvError:
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


class KvError(Exception):
    """Base class of every error the store raises. Nothing is written when one is raised.

    Errors travel between processes (a machine's result, a query's answer): pickling
    rebuilds them without calling the subclasses' own constructors."""

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


class ErrCompacted(KvError):
    def __init__(self, compact_revision: int = 0) -> None:
        super().__init__("mvcc: required revision has been compacted")
        self.compact_revision = compact_revision


class ErrFutureRev(KvError):
    def __init__(self) -> None:
        super().__init__("mvcc: required revision is a future revision")


class InvalidRequest(KvError):
    """Rejected at the boundary (etcd's InvalidArgument family)."""


class ErrEmptyKey(InvalidRequest):
    def __init__(self) -> None:
        super().__init__("etcdserver: key is not provided")


class ErrKeyTooLarge(InvalidRequest):
    pass


class ErrValueTooLarge(InvalidRequest):
    pass


class ErrRequestTooLarge(InvalidRequest):
    pass


class ErrInvalidRangeEnd(InvalidRequest):
    pass


class ErrNegativeRevision(InvalidRequest):
    pass


class ErrTooManyOps(InvalidRequest):
    def __init__(self, n: int, limit: int) -> None:
        super().__init__(f"etcdserver: too many operations in txn request ({n} > {limit})")


class ErrDuplicateKey(InvalidRequest):
    def __init__(self) -> None:
        super().__init__("etcdserver: duplicate key given in txn request")


class ErrRevisionNotAfterHead(InvalidRequest):
    """A write was given an explicit revision that is not above the head revision."""


__all__ = [
    "ErrCompacted",
    "ErrDuplicateKey",
    "ErrEmptyKey",
    "ErrFutureRev",
    "ErrInvalidRangeEnd",
    "ErrKeyTooLarge",
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
