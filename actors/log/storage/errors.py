"""Typed errors of the log storage.

Why: recovery must tell an interrupted write (recoverable: cut it off) from damaged
durable data (never recoverable silently), and callers must be able to catch each kind
by type rather than by message.
"""

from __future__ import annotations


class StorageError(Exception):
    """Base class of every log storage error."""


class RecordError(StorageError):
    """A record could not be decoded at ``offset`` of ``source``."""

    def __init__(self, source: str, offset: int, reason: str) -> None:
        super().__init__(f"{source}: offset {offset}: {reason}")
        self.source = source
        self.offset = offset
        self.reason = reason


class TornTail(RecordError):
    """The data ends inside a record: an append that never completed. Cut it off."""


class CorruptRecord(RecordError):
    """A record fails its checksum and valid data follows it: durable data is damaged."""


class CorruptSegment(StorageError):
    """A segment file is damaged: a record at ``index`` (or ``offset``) or its index."""

    def __init__(
        self, path: str, reason: str, *, index: int | None = None, offset: int | None = None
    ) -> None:
        where = f"index {index}" if index is not None else f"offset {offset}"
        super().__init__(f"{path}: {where}: {reason}")
        self.path = path
        self.index = index
        self.offset = offset
        self.reason = reason


class CorruptSnapshot(StorageError):
    """A snapshot file fails its checksum or size check."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class CompactionError(StorageError):
    """Compaction or its recovery met a state the protocol cannot produce."""
