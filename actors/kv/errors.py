"""Typed errors of the KV store; messages follow etcd's where etcd has one."""

from __future__ import annotations


class KvError(Exception):
    """Base class of every error the store raises. Nothing is written when one is raised."""


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
