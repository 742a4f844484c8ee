"""Failpoint names of the log storage and the hook type every durable step takes.

Why: a crash test must be able to stop the storage between any two durable steps and
then run recovery on the directory as a restarted process would. Every function that
crosses a durability step takes ``fp: Failpoint`` and calls it with one of the names
below, in the order listed; the process shells pass a hook that consults the runtime's
armed failpoints, tests pass one that raises at a chosen name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

Failpoint = Callable[[str], None]


def no_fp(_name: str) -> None:
    """The default hook: does nothing."""


WAL_FAILPOINTS: Final[tuple[str, ...]] = (
    "wal.after_create",  # a new WAL file exists with its header, file + dir fsynced
    "wal.before_fsync",  # a batch is written to the OS, not yet fsynced
    "wal.after_fsync",  # the batch is durable (the group commit point)
    "wal.before_roll",  # the full file is closed, the next one not yet created
    "wal.before_delete",  # flushed WAL files are about to be unlinked
    "wal.after_delete",  # they are unlinked and the directory fsynced
    "wal.after_truncate",  # recovery cut a torn tail and fsynced the file
)

SEGMENT_FAILPOINTS: Final[tuple[str, ...]] = (
    "segment.after_create",  # a new segment file exists with its header (not synced)
    "segment.before_sync",  # entries written to the OS, not yet fsynced
    "segment.after_sync",  # entries durable (and the new file's dir entry)
    "segment.before_seal",  # the index block and trailer are about to be written
    "segment.after_seal",  # the sealed segment is durable
    "segment.after_truncate",  # reopening cut a torn tail / partial footer, fsynced
)

SNAPSHOT_FAILPOINTS: Final[tuple[str, ...]] = (
    "snapshot.after_data_sync",  # machine bytes durable in the temp dir
    "snapshot.after_indexes",  # live-index file durable in the temp dir
    "snapshot.after_meta",  # meta file durable in the temp dir
    "snapshot.before_rename",  # temp dir fsynced, not yet renamed
    "snapshot.after_rename",  # renamed to snapshots/<index>-<term>/, dir not fsynced
    "snapshot.after_dir_sync",  # the rename is durable: the snapshot exists
    "snapshot.before_delete_old",  # older snapshots are about to be removed
    "snapshot.after_delete_old",  # they are gone and the directory fsynced
)

COMPACTION_FAILPOINTS: Final[tuple[str, ...]] = (
    "compaction.after_orphan_delete",  # orphaned segments removed before grouping
    "compaction.after_marker",  # <leader>.compaction_group written and fsynced
    "compaction.after_compacting_sync",  # .compacting sealed, fsynced; dir fsynced
    "compaction.after_rename",  # .compacting -> <leader>.segment (the commit point)
    "compaction.after_rename_sync",  # the commit point is durable (dir fsynced)
    "compaction.after_symlink",  # X.link -> leader created, not yet renamed
    "compaction.after_link_rename",  # X.link renamed over X.segment
    "compaction.before_marker_delete",  # every symlink in place and durable
    "compaction.after_marker_delete",  # marker gone, directory not yet fsynced
    "compaction.after_dir_sync",  # the group is complete and durable
    "minor.before_delete",  # refs updated by the server; unreferenced files still there
    "minor.after_delete",  # unreferenced files unlinked, dir fsynced
)

FAILPOINTS: Final[tuple[str, ...]] = (
    WAL_FAILPOINTS + SEGMENT_FAILPOINTS + SNAPSHOT_FAILPOINTS + COMPACTION_FAILPOINTS
)
