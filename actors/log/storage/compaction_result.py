"""What a compaction did, handed to the raft server (Ra's ``#compaction_result{}``).

Why its own module: minor and major compaction and crash recovery all answer one; the
server applies it to its refs (`SegRefs.apply`) before any file is deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .segrefs import SegRef, SegRefs

CompactionType = Literal["minor", "major"]


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What a compaction did (Ra's ``#compaction_result{}``).

    ``unreferenced``: segment files with no live entry; the server drops their refs,
    then deletes them (`delete_unreferenced`). ``linked``: files now symlinks to a
    compacted leader; drop their refs (the links are purged later). ``compacted_segrefs``:
    the new refs of the compacted leaders; they replace the leaders' refs.
    """

    type: CompactionType = "minor"
    unreferenced: tuple[str, ...] = ()
    linked: tuple[str, ...] = ()
    compacted_segrefs: tuple[SegRef, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not (self.unreferenced or self.linked or self.compacted_segrefs)

    def apply_to(self, refs: SegRefs) -> SegRefs:
        """The server's refs after this result (do this before deleting files)."""
        return refs.apply(self.unreferenced, self.linked, self.compacted_segrefs)
