"""The node's segment writer process: moves closed WAL files into per-group segments.

When the WAL closes a file it sends `FlushWal`. For every group in that file the writer
appends the entries the group still needs (not below its smallest live index) to the
group's segments and syncs them, tells the group's raft server its new segment refs,
and only then lets the WAL delete the file (`WalFlushed`). At start it runs the
crash recovery of interrupted compactions for every group directory of the node, so the
segment refs rebuilt afterwards are consistent.

Groups may join a running node (the partition groups of a zone created later): a raft
server registers its group when it asks for its refs (`SegmentRefs(group, group_dir,
max_entries)`), and a writer that restarts also picks up every group directory
beside the ones it was started with, so a closed WAL file never meets a group the
writer does not know while that group has a directory on the node.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from sediment import log
from sediment.actors.log.shell.names import raft_name, wal_name
from sediment.actors.log.storage import compaction
from sediment.actors.log.storage.flush import GroupSegmentWriter
from sediment.actors.log.storage.segment import SegmentConfig
from sediment.actors.log.storage.segrefs import SegRef
from sediment.actors.log.storage.snapshot import SnapshotState
from sediment.actors.log.storage.wal import read_file
from sediment.runtime.common_calls import UnknownRequest
from sediment.runtime.messages import Call
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.log.segments")


@dataclass(frozen=True, slots=True)
class SegmentRefs:
    """A call from a raft server: its group's segment refs (a tuple of `SegRef`); the
    first one registers the group, its directory and its segment size."""

    group: str
    group_dir: str
    max_entries: int


@dataclass(frozen=True)
class FlushWal:
    path: str
    number: int


@dataclass(frozen=True)
class WalFlushed:
    number: int
    last_indexes: dict[str, int]


@dataclass(frozen=True)
class SegmentsFlushed:
    group: str
    refs: tuple[SegRef, ...]


@dataclass(frozen=True)
class SnapshotStateChanged:
    group: str
    state: SnapshotState


@dataclass(frozen=True)
class CompactionApplied:
    """The server applied a compaction result to its refs; the writer does the same to
    its own view (new segments it flushed meanwhile are untouched: compaction never
    touches the newest segment)."""

    group: str
    result: compaction.CompactionResult


def segment_dir(group_dir: str) -> str:
    return os.path.join(group_dir, "segments")


async def segment_writer(ctx: Process, node: str,
                         group_dirs: dict[str, tuple[str, int]]) -> None:
    """Process entry: recover compactions, then flush closed WAL files as they come.

    `group_dirs`: group -> (its directory on this node, segment max entries)."""
    writers: dict[str, GroupSegmentWriter] = {}
    states: dict[str, SnapshotState] = {}
    for group, (gdir, max_entries) in _with_siblings(group_dirs).items():
        _open_group(ctx, writers, group, gdir, max_entries)
    while True:
        msg = await ctx.receive()
        if isinstance(msg, FlushWal):
            await _flush(ctx, node, writers, states, msg)
        elif isinstance(msg, SnapshotStateChanged):
            states[msg.group] = msg.state
        elif isinstance(msg, CompactionApplied) and msg.group in writers:
            writer = writers[msg.group]
            writer.set_refs(msg.result.apply_to(writer.refs))
        elif isinstance(msg, Call):
            request = msg.request
            if isinstance(request, SegmentRefs) and request.group not in writers:
                _open_group(ctx, writers, request.group, request.group_dir,
                            request.max_entries)
            ctx.reply(msg.from_, _answer(writers, request))


DEFAULT_MAX_ENTRIES = 4096


def _with_siblings(group_dirs: dict[str, tuple[str, int]]) -> dict[str, tuple[str, int]]:
    """The groups given, plus every other group directory under the same parent (groups
    that joined the node while it ran), with the default segment size."""
    out = dict(group_dirs)
    parents = {os.path.dirname(gdir) for gdir, _ in group_dirs.values()}
    for parent in sorted(parents):
        if not os.path.isdir(parent):
            continue
        for name in sorted(os.listdir(parent)):
            path = os.path.join(parent, name)
            if name not in out and os.path.isdir(segment_dir(path)):
                out[name] = (path, DEFAULT_MAX_ENTRIES)
    return out


def _open_group(ctx: Process, writers: dict[str, GroupSegmentWriter], group: str, gdir: str,
                max_entries: int) -> None:
    seg_dir = segment_dir(gdir)
    os.makedirs(seg_dir, exist_ok=True)
    compaction.recover_compaction(seg_dir, fp=ctx.failpoint_sync)
    compaction.purge_dangling_symlinks(seg_dir)
    writers[group] = GroupSegmentWriter(seg_dir, group, SegmentConfig(max_entries=max_entries),
                                        fp=ctx.failpoint_sync)


def _answer(writers: dict[str, GroupSegmentWriter], request: Any) -> Any:
    if isinstance(request, SegmentRefs):
        writer = writers.get(request.group)
        return tuple(writer.refs) if writer is not None else ()
    return UnknownRequest.of(request)


async def _flush(ctx: Process, node: str, writers: dict[str, GroupSegmentWriter],
                 states: dict[str, SnapshotState], msg: FlushWal) -> None:
    by_group = read_file(msg.path)
    last: dict[str, int] = {}
    for group, entries in by_group.items():
        writer = writers.get(group)
        if writer is None or not entries:
            if entries:
                _logger.warning("WAL holds entries of an unknown group", group=group)
            continue
        refs = writer.flush(entries, states.get(group, SnapshotState.initial()),
                            fp=ctx.failpoint_sync)
        last[group] = entries[-1].index
        server = await ctx.whereis(raft_name(group, node))
        if server is not None and refs:
            ctx.send(server, SegmentsFlushed(group, tuple(refs)))
    wal = await ctx.whereis(wal_name(node))
    if wal is not None:
        ctx.send(wal, WalFlushed(msg.number, last))
