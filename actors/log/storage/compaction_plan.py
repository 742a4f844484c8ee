"""Planning a major compaction: which adjacent, sparse segments are rewritten together.

A segment is worth compacting when under half of its entries (or bytes) are live
(`GROUPING_THRESHOLD`); adjacent such segments form a group as long as their live
records fit one segment. Planning opens each compactable segment once and keeps its
lookup (a `Selection`), so the copy reads no index twice.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from sediment.log import get_logger

from .segment import (
    SegmentReader,
    Selection,
)
from .segrefs import SegRef
from .snapshot import SnapshotState

_log = get_logger("sediment.log.storage.compaction")


GROUPING_THRESHOLD: Final = 0.5


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """A compactable segment with live entries: what grouping decides on."""

    ref: SegRef
    num_entries: int  # every record in the file
    data_size: int  # bytes of every record in the file
    live: tuple[int, ...]  # live indexes the file holds inside the ref's range
    live_size: int  # bytes of those records

    @property
    def sparse(self) -> bool:
        """Fewer than half its entries, or under half its bytes, are live."""
        if self.num_entries == 0 or self.data_size == 0:
            return True
        return (
            len(self.live) / self.num_entries < GROUPING_THRESHOLD
            or self.live_size / self.data_size < GROUPING_THRESHOLD
        )


def compaction_groups(
    infos: Sequence[SegmentInfo], max_count: int, max_size: int
) -> list[list[SegmentInfo]]:
    """Groups of adjacent sparse segments whose live entries fit one segment.

    Ra's ``take_group``: oldest first, a sparse segment joins the current group while
    the group's live count stays <= ``max_count`` and its live bytes <= ``max_size``; a
    segment that would overflow closes the group (and starts the next one); a dense
    segment closes the group and is skipped; a sparse segment too big to fit even an
    empty group is skipped (PR #590: it used to loop forever).
    """
    groups: list[list[SegmentInfo]] = []
    cur: list[SegmentInfo] = []
    cnt = size = 0
    k = 0
    while k < len(infos):
        info = infos[k]
        n, s = len(info.live), info.live_size
        if not info.sparse:
            if cur:
                groups.append(cur)
                cur, cnt, size = [], 0, 0
            k += 1
            continue
        if cnt + n > max_count or size + s > max_size:
            if not cur:
                k += 1  # alone it does not fit: skip it
                continue
            groups.append(cur)
            cur, cnt, size = [], 0, 0
            continue  # reconsider this segment for a new group
        cur.append(info)
        cnt += n
        size += s
        k += 1
    if cur:
        groups.append(cur)
    return groups


def segment_infos(
    seg_dir: str, refs: Sequence[SegRef], state: SnapshotState
) -> tuple[list[str], list[SegmentInfo]]:
    """Split ``refs`` into files with no live entry and infos of those with some."""
    dead, infos, sels = _plan(seg_dir, refs, state)
    _close(sels)
    return dead, infos


def _close(sels: dict[str, Selection]) -> None:
    for s in sels.values():
        s.reader.close()


def _plan(
    seg_dir: str, refs: Sequence[SegRef], state: SnapshotState
) -> tuple[list[str], list[SegmentInfo], dict[str, Selection]]:
    """`segment_infos`, keeping each live segment's selection (its reader open, its
    live records looked up once) for the copy."""
    dead: list[str] = []
    infos: list[SegmentInfo] = []
    sels: dict[str, Selection] = {}
    try:
        for ref in refs:
            live = state.live_in(ref.first, ref.last)
            sel = _select(seg_dir, ref, live) if live else None
            if sel is None:
                dead.append(ref.file)
                continue
            sels[ref.file] = sel
            r = sel.reader
            present = live if len(sel) == len(live) else tuple(sel.indexes)
            infos.append(SegmentInfo(ref, r.num_entries, r.data_size, present, sel.size))
    except BaseException:
        _close(sels)
        raise
    return dead, infos, sels


def _select(seg_dir: str, ref: SegRef, live: tuple[int, ...]) -> Selection | None:
    """The live records ``ref``'s file holds (its reader open), None if there are none."""
    r = SegmentReader.open(os.path.join(seg_dir, ref.file))
    try:
        sel = r.select(live)
    except BaseException:
        r.close()
        raise
    if len(sel) != len(live):
        _log.warning(
            "live indexes missing from their segment",
            file=ref.file,
            missing=len(live) - len(sel),
        )
    if not sel.positions:
        r.close()
        return None
    return sel
