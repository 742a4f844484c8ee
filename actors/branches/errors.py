"""Typed errors of the branch tier (lakeFS's Graveler errors, by the same names).

Every error raised at the boundary leaves the repository as it was: a bad name or path
is refused before anything is read or written, a failed conditional update wrote
nothing. Errors pickle without calling the subclasses' own constructors (they travel
between processes), as `actors/kv/errors.py` does.
"""

from __future__ import annotations


def _rebuild(cls: type[Exception], args: tuple[object, ...], state: dict[str, object]) -> Exception:
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


class BranchesError(Exception):
    """Base of every error of the branch tier."""

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.args == getattr(other, "args", None)

    def __hash__(self) -> int:
        return hash((type(self), self.args))


# ---- bad input (nothing was read or written) ------------------------------------------


class InvalidInput(BranchesError, ValueError):
    """A request the tier refuses by its shape alone."""


class InvalidName(InvalidInput):
    """A repository, branch or ref name that does not follow the naming rules."""


class InvalidPath(InvalidInput):
    """An object path that is empty, too long or not UTF-8."""


class InvalidEntry(InvalidInput):
    """An object entry (address, size, checksum, metadata) out of its limits."""


# ---- missing and existing things --------------------------------------------------------


class NotFound(BranchesError):
    """Something asked for does not exist."""


class RepositoryNotFound(NotFound):
    pass


class BranchNotFound(NotFound):
    pass


class CommitNotFound(NotFound):
    pass


class ObjectNotFound(NotFound):
    """No entry at the path on that ref (a tombstone reads as missing)."""


class RepositoryExists(BranchesError):
    pass


class BranchExists(BranchesError):
    pass


# ---- refused operations -----------------------------------------------------------------


class NoChanges(BranchesError):
    """A commit with nothing to commit (lakeFS ErrNoChanges)."""


class CommitMetaRangeDirtyBranch(BranchesError):
    """A commit of a given metarange on a branch with uncommitted changes, a compacted
    metarange included (lakeFS ErrCommitMetaRangeDirtyBranch)."""


class TooManyTries(BranchesError):
    """A conditional update lost its race more times than the retry policy allows
    (lakeFS ErrTooManyTries); nothing was written by the attempt that gave up."""


class CompactionConflict(BranchesError):
    """Compaction step 3 found the branch's sealed tokens, commit or compacted
    metarange changed since step 1: the branch is left as it was."""


class CompactionThrottled(BranchesError):
    """The branch's CompactionStartTime is within the interval: another compaction
    started recently (the sensor's claim lost, or a manual one runs)."""


class NothingToCompact(BranchesError):
    """No sealed tokens and an empty staging token: compaction would change nothing."""


class CorruptRecord(BranchesError):
    """A KV record of the branch tier (repository, branch, commit, staged entry) that
    does not decode: written by something else, or damaged."""


class KvUnavailable(BranchesError):
    """No KV member took a request in time. If the request may have reached the log
    (`indeterminate`), it may still take effect: the caller must read to know."""

    def __init__(self, message: str, indeterminate: bool) -> None:
        super().__init__(message)
        self.indeterminate = indeterminate


# ---- the block store --------------------------------------------------------------------


class RangeError(BranchesError):
    """A range or metarange file that cannot be used."""

    def __init__(self, kind: str, range_id: str, path: str, reason: str) -> None:
        super().__init__(f"{kind} {range_id}: {reason} ({path})")
        self.kind = kind
        self.range_id = range_id
        self.path = path
        self.reason = reason


class MissingRange(RangeError):
    """The file is not in the block store (collected, or never written)."""


class CorruptRange(RangeError):
    """The file is there but is not the range its name promises (checksum, Parquet,
    schema, order)."""


class MergeFailed(BranchesError):
    """A merge backend failed for a reason of its own (Spark lost an executor, the job
    was cancelled, a change file went away): no metarange was published."""


__all__ = [
    "BranchExists",
    "BranchNotFound",
    "BranchesError",
    "CommitMetaRangeDirtyBranch",
    "CommitNotFound",
    "CompactionConflict",
    "CompactionThrottled",
    "CorruptRange",
    "CorruptRecord",
    "InvalidEntry",
    "InvalidInput",
    "InvalidName",
    "InvalidPath",
    "KvUnavailable",
    "MergeFailed",
    "MissingRange",
    "NoChanges",
    "NotFound",
    "NothingToCompact",
    "ObjectNotFound",
    "RangeError",
    "RepositoryExists",
    "RepositoryNotFound",
    "TooManyTries",
]
