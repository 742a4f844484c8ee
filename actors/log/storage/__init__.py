"""On-disk storage of Sediment's Ra-style raft log: a synchronous library.

Why a library: the WAL process, the segment writer, the log worker and the raft server
are process shells that own one piece each and call into this code; keeping it free of
Ray and asyncio makes every durable step testable by a crash at a named failpoint
followed by recovery on the directory.

Modules: `records` (entry encoding, torn vs corrupt), `wal` (one per node, group
commit), `segment` (per-group files with CRCs and an index: `segment_format`,
`segment_reader`, `segment_file_writer`, `segment_copy`), `segrefs` (the server's list of
segment ranges), `flush` (WAL -> segments), `snapshot` (snapshots with live indexes,
`SnapshotState`), `compaction` (minor, major; `compaction_plan`, `compaction_recovery`,
`compaction_files`, `compaction_result`), `failpoints` (names).

Layout the shells use, per node: ``<node>/wal/NNNNNNNN.wal`` and, per group,
``<node>/groups/<group>/segments/`` and ``<node>/groups/<group>/snapshots/``.

Start-up order: per group `snapshot.recover`, `compaction.recover_compaction`, then
`flush.GroupSegmentWriter` (rebuilds refs: `segment.recover_segrefs`); then
`wal.Wal.open` (recovers the WAL), flush the recovered entries per group, and
`Wal.delete_files_upto(recovery.last_number)`.

Steady state: ``Wal.append`` (one fsync per batch) -> on ``rolled``:
`wal.read_file` + ``GroupSegmentWriter.flush`` per group (synced) -> the server's
``SegRefs.update`` -> ``Wal.delete_files_upto``. Snapshot: `snapshot.write_snapshot`
-> update the `SnapshotState` the WAL and flush consult -> ``CompactionGuard.schedule``
-> `compaction.minor_compaction` (server) or `compaction.major_compaction` (worker) ->
``CompactionResult.apply_to(refs)`` (server) -> `compaction.delete_unreferenced` ->
later `compaction.purge_symlinks` -> ``CompactionGuard.finish``.
"""

from __future__ import annotations

import os
from typing import Final

from .compaction import (
    CompactionGuard,
    CompactionResult,
    delete_unreferenced,
    major_compaction,
    minor_compaction,
    purge_dangling_symlinks,
    purge_symlinks,
    recover_compaction,
)
from .errors import (
    CompactionError,
    CorruptRecord,
    CorruptSegment,
    CorruptSnapshot,
    StorageError,
    TornTail,
)
from .failpoints import FAILPOINTS, Failpoint, no_fp
from .flush import GroupSegmentWriter
from .records import Entry
from .segment import SegmentConfig, SegmentReader, SegmentWriter, copy_live, recover_segrefs
from .segrefs import SegRef, SegRefs, compactable
from .snapshot import SnapshotInfo, SnapshotState, SnapshotWriter, write_snapshot
from .wal import AppendResult, Wal, WalRecovery, WalWrite

__all__ = [
    "FAILPOINTS",
    "AppendResult",
    "CompactionError",
    "CompactionGuard",
    "CompactionResult",
    "CorruptRecord",
    "CorruptSegment",
    "CorruptSnapshot",
    "Entry",
    "Failpoint",
    "GroupSegmentWriter",
    "SegRef",
    "SegRefs",
    "SegmentConfig",
    "SegmentReader",
    "SegmentWriter",
    "SnapshotInfo",
    "SnapshotState",
    "SnapshotWriter",
    "StorageError",
    "TornTail",
    "Wal",
    "WalRecovery",
    "WalWrite",
    "compactable",
    "copy_live",
    "delete_unreferenced",
    "group_dirs",
    "major_compaction",
    "minor_compaction",
    "no_fp",
    "purge_dangling_symlinks",
    "purge_symlinks",
    "recover_compaction",
    "recover_segrefs",
    "wal_dir",
    "write_snapshot",
]

WAL_DIR: Final = "wal"
GROUPS_DIR: Final = "groups"


def wal_dir(node_dir: str) -> str:
    return os.path.join(node_dir, WAL_DIR)


def group_dirs(node_dir: str, group: str) -> tuple[str, str]:
    """(segments dir, snapshots dir) of ``group`` under ``node_dir``."""
    if not group or os.sep in group or group.startswith("."):
        raise ValueError(f"bad group id {group!r}")
    base = os.path.join(node_dir, GROUPS_DIR, group)
    return os.path.join(base, "segments"), os.path.join(base, "snapshots")
