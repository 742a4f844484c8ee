"""Reading one log entry from what this member holds locally: memory, then a segment.

The WAL's memtable is the third place; reaching it takes a message to the WAL process,
which each caller does its own way (a forwarded reply, or a call).
"""

from __future__ import annotations

import os

from sediment.actors.log.raft.state import RaftState
from sediment.actors.log.raft.types import Entry
from sediment.actors.log.shell.codec import from_stored
from sediment.actors.log.shell.segment_writer import segment_dir
from sediment.actors.log.storage.segment import SegmentReader
from sediment.actors.log.storage.segrefs import SegRefs


def local_entry(state: RaftState, refs: SegRefs, group_dir: str, index: int) -> Entry | None:
    pos = index - state.snap_index - 1
    if 0 <= pos < len(state.entries):
        return state.entries[pos]
    ref = refs.find(index)
    if ref is None:
        return None
    with SegmentReader.open(os.path.join(segment_dir(group_dir), ref.file)) as reader:
        stored = reader.get(index)
    return from_stored(stored) if stored is not None else None
