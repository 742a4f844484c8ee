"""Typed errors of the block tier.

Two families: `BlockError` for a block file that cannot be used (missing, corrupt, or in
conflict with another block), raised by the I/O helpers and by a worker's merge; and
`MetastoreError` for a command or query the metastore machine refuses. A machine
returns its errors instead of raising them, so every replica answers a bad command the
same way and none of them crashes on it. Errors travel between processes (a machine's
result, a worker's report): pickling rebuilds them without calling the subclasses' own
constructors, as `actors/kv/errors.py` does.
"""

from __future__ import annotations


def _rebuild(cls: type[Exception], args: tuple[object, ...], state: dict[str, object]) -> Exception:
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


class _Picklable(Exception):
    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))

    def __eq__(self, other: object) -> bool:
        """Same type and message: results of replicas compare equal."""
        return type(self) is type(other) and self.args == getattr(other, "args", None)

    def __hash__(self) -> int:
        return hash((type(self), self.args))


# ---- block files -------------------------------------------------------------


class BlockError(_Picklable):
    """A block cannot be read or written as asked; nothing under the final name changed."""


class MissingBlock(BlockError):
    """The block's file does not exist in the block store."""

    def __init__(self, block_id: str, path: str) -> None:
        super().__init__(f"block {block_id} is missing: {path}")
        self.block_id = block_id
        self.path = path


class CorruptBlock(BlockError):
    """The block's file exists but is not the block its metadata describes."""

    def __init__(self, block_id: str, path: str, reason: str) -> None:
        super().__init__(f"block {block_id} is corrupt ({reason}): {path}")
        self.block_id = block_id
        self.path = path
        self.reason = reason


class BlockConflict(BlockError):
    """Two source blocks hold different rows for the same (key, revision): history can
    only be written once, so one of them is wrong and the merge refuses both."""


class InvalidRows(BlockError):
    """Rows handed to a block writer break the block format (bad revision, unsorted,
    duplicate (key, revision), a tombstone with a value)."""


# ---- the metastore machine ---------------------------------------------------


class MetastoreError(_Picklable):
    """A command or query the metastore refuses; its state did not change."""


class ErrUnknownCommand(MetastoreError):
    """A command or query of a type the machine does not know."""


class ErrMalformedCommand(MetastoreError):
    """A command of a known type whose fields are not what the machine expects."""


class ErrEntryNotAfterApplied(MetastoreError):
    """An entry at or below the machine's applied index."""


class ErrInvalidBlock(MetastoreError):
    """Block metadata that breaks the index rules (bad field, wrong level, id in use)."""


class ErrUnknownBlock(MetastoreError):
    """A block id the index does not hold."""


class ErrTermMismatch(MetastoreError):
    """A compaction plan prepared in one term reached the log in another: the leader
    changed in between (Pyroscope's ABA check), so the plan is dropped."""

    def __init__(self, plan_term: int, entry_term: int) -> None:
        super().__init__(f"plan prepared in term {plan_term} applied in term {entry_term}")
        self.plan_term = plan_term
        self.entry_term = entry_term


class ErrStalePlan(MetastoreError):
    """A plan prepared before the last applied plan: it was computed from a state that
    plan has since changed, so applying it could assign or complete a job twice."""


class ErrInvalidPlan(MetastoreError):
    """A plan that does not fit the state it is applied to (unknown job, source block not
    queued, output block id in use, ...): a bug in the proposer, refused as a whole."""


class ErrCompactionRevision(MetastoreError):
    """A history compaction revision that is not above the current one (forward only)."""


__all__ = [
    "BlockConflict",
    "BlockError",
    "CorruptBlock",
    "ErrCompactionRevision",
    "ErrEntryNotAfterApplied",
    "ErrInvalidBlock",
    "ErrInvalidPlan",
    "ErrMalformedCommand",
    "ErrStalePlan",
    "ErrTermMismatch",
    "ErrUnknownBlock",
    "ErrUnknownCommand",
    "InvalidRows",
    "MetastoreError",
    "MissingBlock",
]
