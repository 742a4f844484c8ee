"""The MVCC read errors the KV's hot store and the block tier's cold history both raise.

A read of history is refused the same way wherever the history lives: below the
compaction revision it is `ErrCompacted`, above the head `ErrFutureRev` (etcd's two
"mvcc:" errors). The block tier (`actors/blocks/merge.py`, its shell's reads) answers
for compacted history the KV hands it, so it raises the KV's own errors, and a caller
catching `KvError` catches them from either tier. They live here, below both packages,
so the block tier needs no import of the KV (`tests/test_wiring_layers.py`).

`KvError` keeps its name (`sediment.KvError`, every `except KvError`, the class names
that reach metrics labels and status text); `actors/kv/errors.py` re-exports all three.
The descriptions are etcd's, byte for byte; `actors/kv/rpctypes.py` takes these two
from here, so the wire table and the errors cannot drift apart.
"""

from __future__ import annotations

COMPACTED = "etcdserver: mvcc: required revision has been compacted"
FUTURE_REV = "etcdserver: mvcc: required revision is a future revision"


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
        super().__init__(COMPACTED)
        self.compact_revision = compact_revision


class ErrFutureRev(KvError):
    def __init__(self) -> None:
        super().__init__(FUTURE_REV)


__all__ = ["COMPACTED", "FUTURE_REV", "ErrCompacted", "ErrFutureRev", "KvError"]
