"""What a raft server finds at start: its hard state (the meta file), its latest
snapshot, its segment refs (from the node's segment writer) and the WAL's memtable
over them, read into the contiguous log the core starts from."""

from __future__ import annotations

import os
from dataclasses import dataclass

from sediment.actors.log.raft.types import Entry, HardState
from sediment.actors.log.shell.codec import from_stored
from sediment.actors.log.shell.log_worker import snapshot_dir
from sediment.actors.log.shell.meta import MetaStore
from sediment.actors.log.shell.segment_writer import (
    SegmentRefs,
    SnapshotStateChanged,
    segment_dir,
)
from sediment.actors.log.shell.wal_server import RecoverGroup
from sediment.actors.log.storage import snapshot
from sediment.actors.log.storage.records import Entry as Stored
from sediment.actors.log.storage.segment import SegmentReader
from sediment.actors.log.storage.segrefs import SegRefs
from sediment.actors.log.storage.snapshot import SnapshotInfo, SnapshotState
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process


@dataclass
class Recovered:
    """A member's durable state, as found at start."""

    meta: MetaStore
    hard: HardState
    info: SnapshotInfo | None  # the latest snapshot
    snap_state: SnapshotState
    refs: SegRefs
    memtable: list[Stored]  # the WAL's entries of this group
    first: int  # the first index after the snapshot
    tail: list[Entry]  # the contiguous log from `first` on


async def recover(ctx: Process, group: str, gdir: str, segment_max_entries: int, wal: Pid,
                  segwriter: Pid) -> Recovered:
    """Read the member's state; tells the WAL and the segment writer the snapshot state
    first (they keep what it still needs)."""
    meta = MetaStore(gdir)
    hard = meta.load()
    info = snapshot.recover(snapshot_dir(gdir)).latest
    snap_state = info.state if info is not None else SnapshotState.initial()
    for pid in (wal, segwriter):
        ctx.send(pid, SnapshotStateChanged(group, snap_state))
    refs = SegRefs(await ctx.call(segwriter, SegmentRefs(group, gdir, segment_max_entries),
                                  timeout=60))
    memtable = await ctx.call(wal, RecoverGroup(group), timeout=60)
    first = (info.index if info is not None else 0) + 1
    tail = _contiguous(first, _log_entries(segment_dir(gdir), refs, first, memtable),
                       info.term if info is not None else 0)
    return Recovered(meta, hard, info, snap_state, refs, memtable, first, tail)


def _log_entries(seg_dir: str, refs: SegRefs, first: int, memtable: list[Stored]) -> list[Entry]:
    """Entries from `first` on: the segments, then the WAL's memtable over them."""
    by_index: dict[int, Stored] = {}
    for ref in refs:
        if ref.last < first:
            continue
        with SegmentReader.open(os.path.join(seg_dir, ref.file)) as reader:
            for stored in reader.entries(first=max(first, ref.first), last=ref.last):
                by_index[stored.index] = stored
    for stored in memtable:
        if stored.index >= first:
            by_index[stored.index] = stored
    return [from_stored(by_index[i]) for i in sorted(by_index)]


def _contiguous(first: int, entries: list[Entry], snap_term: int = 0) -> list[Entry]:
    """The recovered log up to its first gap or term regression (a stale tail an installed
    snapshot replaced; the leader sends what follows again)."""
    out: list[Entry] = []
    for entry in entries:
        if entry.index != (out[-1].index + 1 if out else first):
            break
        if entry.term < (out[-1].term if out else snap_term):
            break
        out.append(entry)
    return out


__all__ = ["Recovered", "recover"]
