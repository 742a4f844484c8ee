"""The log worker of one group member: snapshots and compactions, off the server's path.

The raft server asks it to write a snapshot (the machine's bytes and live indexes); the
worker writes it durably, then runs a minor compaction (every `num_minors`-th one is
promoted to a major, Ra's {num_minors, 8}) and reports the result. It never deletes a
segment the server still references: the server first applies the result to its refs,
then asks the worker to delete (`DeleteSegments`). One compaction at a time.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sediment import log
from sediment.actors.log.shell.segment_writer import segment_dir
from sediment.actors.log.storage import compaction, snapshot
from sediment.actors.log.storage.failpoints import Failpoint
from sediment.actors.log.storage.segrefs import SegRef
from sediment.actors.log.storage.snapshot import SnapshotState
from sediment.runtime.common_calls import UnknownRequest
from sediment.runtime.messages import Call
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.log.worker")


@dataclass(frozen=True)
class TakeSnapshot:
    index: int
    term: int
    data: bytes
    live_indexes: tuple[int, ...]
    refs: tuple[SegRef, ...]
    reply_to: Pid
    meta: Mapping[str, Any] | None = None  # recorded beside it (the raft configuration)


@dataclass(frozen=True)
class SnapshotWritten:
    index: int
    term: int
    state: SnapshotState
    result: compaction.CompactionResult


@dataclass(frozen=True)
class MajorCompaction:
    """On demand (`CompactLog()` to the server)."""

    refs: tuple[SegRef, ...]
    state: SnapshotState
    reply_to: Pid


@dataclass(frozen=True)
class CompactionDone:
    result: compaction.CompactionResult


@dataclass(frozen=True)
class DeleteSegments:
    files: tuple[str, ...]


def snapshot_dir(group_dir: str) -> str:
    return os.path.join(group_dir, "snapshots")


async def log_worker(ctx: Process, group: str, group_dir: str, num_minors: int,
                     segment_max_entries: int) -> None:
    """Process entry: serve snapshot, compaction and delete requests for one member.

    A major compaction merges adjacent sparse segments into one of at most
    `segment_max_entries` entries (Ra's max_count)."""
    seg_dir, snap_root = segment_dir(group_dir), snapshot_dir(group_dir)
    os.makedirs(snap_root, exist_ok=True)
    os.makedirs(seg_dir, exist_ok=True)
    compaction.recover_compaction(seg_dir, fp=ctx.failpoint_sync)  # Ra's v3 recovery table
    compaction.purge_dangling_symlinks(seg_dir)
    snapshot.recover(snap_root)  # drops partial snapshot directories
    guard = compaction.CompactionGuard(num_minors)
    while True:
        msg = await ctx.receive()
        fp = ctx.failpoint_sync
        if isinstance(msg, TakeSnapshot):
            info = snapshot.write_snapshot(snap_root, msg.index, msg.term, msg.data,
                                           msg.live_indexes, msg.meta, fp=fp)
            kind = guard.schedule("minor", msg.index)
            result = _compact(seg_dir, kind, msg.refs, info.state, segment_max_entries, fp)
            guard.finish()
            ctx.send(msg.reply_to, SnapshotWritten(msg.index, msg.term, info.state, result))
        elif isinstance(msg, MajorCompaction):
            kind = guard.schedule("major", msg.state.snapshot_index)
            result = _compact(seg_dir, kind, msg.refs, msg.state, segment_max_entries, fp)
            guard.finish()
            ctx.send(msg.reply_to, CompactionDone(result))
        elif isinstance(msg, DeleteSegments):
            compaction.delete_unreferenced(seg_dir, msg.files, fp=fp)
            compaction.purge_symlinks(seg_dir, now=time.time())
        elif isinstance(msg, Call):
            ctx.reply(msg.from_, UnknownRequest.of(msg.request))


def _compact(seg_dir: str, kind: str | None, refs: tuple[SegRef, ...], state: SnapshotState,
             max_count: int, fp: Failpoint) -> compaction.CompactionResult:
    if kind is None:
        return compaction.CompactionResult()
    if kind == "major":
        result = compaction.major_compaction(seg_dir, refs, state, max_count=max_count, fp=fp)
    else:
        result = compaction.minor_compaction(refs, state)
    _logger.info("compaction", kind=kind, unreferenced=len(result.unreferenced),
                 linked=len(result.linked), compacted=len(result.compacted_segrefs))
    return result
