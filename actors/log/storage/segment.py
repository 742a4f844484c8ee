"""Segment files: one group's entries, with CRCs and an index, sealed when full.

Why: the WAL is shared and short-lived; segments are the per-group log the raft
server reads from and compaction rewrites. Entries are immutable once written: an
entry is never removed from a segment, compaction writes a new one.

The parts, one module each: the file layout and its index (`segment_format.py`),
reading one file (`segment_reader.py`), appending to and sealing one
(`segment_file_writer.py`), copying live records into a new one (`segment_copy.py`). This
module is the group's directory of segments (listing them, rebuilding their refs at
start) and the one import for all of it.
"""

from __future__ import annotations

import os

from sediment.log import get_logger

from .errors import CorruptSegment
from .fsutil import is_regular, list_dir
from .segment_copy import copy_live, copy_selections
from .segment_file_writer import SegmentConfig, SegmentFull, SegmentSealed, SegmentWriter
from .segment_format import (
    DEFAULT_MAX_ENTRIES,
    DEFAULT_MAX_SIZE,
    FLAG_COMPACTED,
    read_header,
)
from .segment_reader import SegmentReader, Selection
from .segrefs import SEGMENT_SUFFIX, SegRef, SegRefs, segment_number

__all__ = [
    "DEFAULT_MAX_ENTRIES",
    "DEFAULT_MAX_SIZE",
    "FLAG_COMPACTED",
    "CorruptSegment",
    "SegmentConfig",
    "SegmentFull",
    "SegmentReader",
    "SegmentSealed",
    "SegmentWriter",
    "Selection",
    "copy_live",
    "copy_selections",
    "list_segment_files",
    "read_header",
    "recover_segrefs",
]

_log = get_logger("sediment.log.storage.segment")


# -- directory ----------------------------------------------------------------------------


def list_segment_files(seg_dir: str) -> list[str]:
    """Regular ``*.segment`` files (symlinks left by compaction excluded), oldest first."""
    names = [
        n
        for n in list_dir(seg_dir)
        if n.endswith(SEGMENT_SUFFIX)
        and segment_number(n) is not None
        and is_regular(os.path.join(seg_dir, n))
    ]
    return sorted(names, key=lambda n: (segment_number(n) or 0, n))


def recover_segrefs(seg_dir: str) -> SegRefs:
    """Rebuild a group's segment refs from its directory (at start, after
    `compaction.recover_compaction`). Empty segments are skipped."""
    refs: list[SegRef] = []
    for name in list_segment_files(seg_dir):
        with SegmentReader.open(os.path.join(seg_dir, name)) as r:
            ref = r.segref()
            if r.torn_at is not None:
                _log.warning("segment has a torn tail", file=name, offset=r.torn_at)
        if ref is not None:
            refs.append(ref)
    return SegRefs(refs)
