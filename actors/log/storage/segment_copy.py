"""Copying live records from old segments into a new one (what compaction writes).

Why: compaction never edits a segment; it copies the records still needed into a new
file, verifying each record's checksums on the way (`verify`), in whole spans when
records are adjacent.
"""

from __future__ import annotations

import bisect
import operator
import zlib
from collections.abc import Sequence
from itertools import accumulate

from .errors import CorruptSegment
from .records import HEADER_SIZE
from .segment_file_writer import SegmentFull, SegmentSealed, SegmentWriter
from .segment_format import _BUFFER_LIMIT, _REC_CHECK, _extend, _gather
from .segment_reader import SegmentReader, Selection


def _verify_records(
    path: str,
    buf: memoryview,
    offsets: Sequence[int],
    lengths: Sequence[int],
    indexes: Sequence[int],
) -> None:
    """Both CRCs and the index of each record in ``buf`` (the copy's hot loop:
    `records.raw_index` inlined)."""
    crc32 = zlib.crc32
    unpack = _REC_CHECK.unpack_from
    hs = HEADER_SIZE - 4
    for o, n, i in zip(offsets, lengths, indexes, strict=True):
        index, body_crc, hcrc = unpack(buf, o)
        if (
            index != i
            or crc32(buf[o : o + hs]) != hcrc
            or crc32(buf[o + HEADER_SIZE : o + n]) != body_crc
        ):
            raise CorruptSegment(path, "record fails its checksum", index=i)


def copy_live(
    src_readers: Sequence[SegmentReader],
    live_indexes: Sequence[int],
    dst: SegmentWriter,
    *,
    ranges: Sequence[tuple[int, int]] | None = None,
    verify: bool = True,
) -> int:
    """Copy the live entries of ``src_readers`` (oldest first) into ``dst``.

    Each source contributes the live indexes it holds inside its range (``ranges[k]``,
    the server's ref range: entries past it were overwritten and must not be copied).
    Records are copied verbatim, CRCs included (Ra's ``append_raw``): a damaged record
    could never be laundered into a valid one. With ``verify`` (the default) each is
    checked first and damage raises CorruptSegment, so compaction stops and the
    originals stay. Adjacent records go out as one buffer. Returns the count.
    """
    live = sorted(set(live_indexes))
    sels = []
    for k, src in enumerate(src_readers):
        rng = ranges[k] if ranges is not None else src.range()
        if rng is not None:
            lo = bisect.bisect_left(live, rng[0])
            sels.append(src.select(live[lo : bisect.bisect_right(live, rng[1])]))
    return copy_selections(sels, dst, verify=verify)


def copy_selections(sels: Sequence[Selection], dst: SegmentWriter, *, verify: bool = True) -> int:
    """`copy_live` for records already selected (sources oldest first): the lookups
    planning did are not repeated. Returns the count."""
    if dst.sealed or dst._fd is None:
        raise SegmentSealed(f"{dst.path} is sealed or closed")
    copied = 0
    for sel in sels:
        if sel.positions:
            _append_selection(dst, sel, verify)
            copied += len(sel)
    return copied


def _append_selection(dst: SegmentWriter, sel: Selection, verify: bool) -> None:
    """Append one source's selected records to ``dst`` as one buffer, index included."""
    dix, sx = dst._ix, sel.reader._ix
    first = sel.indexes[0]
    if dix.idx and first <= dix.idx[-1]:
        raise ValueError(f"{dst.path}: index {first} after {dix.idx[-1]}")
    if len(dix) + len(sel) > dst.max_entries:
        raise SegmentFull(dst.path)
    new_offs = list(accumulate(sel.lengths, initial=dst._end))
    new_end = new_offs.pop()
    if new_end > dst.max_size:
        raise SegmentFull(dst.path)
    offs = _gather(sx.off, sel.positions)
    data = _gather_records(sel, offs, verify)
    _extend(dix.idx, sel.indexes)
    _extend(dix.length, sel.lengths)
    _extend(dix.term, _gather(sx.term, sel.positions))
    dix.off.fromlist(new_offs)
    dst._end = new_end
    dst._pending.append(data)
    dst._pending_len += len(data)
    if dst._pending_len >= _BUFFER_LIMIT:
        dst._write_pending()


def _gather_records(sel: Selection, offs: Sequence[int], verify: bool) -> bytes:
    """The selected records' bytes, back to back: one pread when they are adjacent,
    else slices of the mapped file joined in C (one per record, no pread each)."""
    src, lens = sel.reader, sel.lengths
    start, end = offs[0], offs[-1] + lens[-1]
    if not verify and end - start == sel.size:  # adjacent: one read
        return src._pread(end - start, start)
    with src.mapped() as mm:
        if verify:
            with memoryview(mm) as mv:  # views: the CRCs read the records in place
                _verify_records(src.path, mv, offs, lens, sel.indexes)
        if end - start == sel.size:
            return mm[start:end]
        return b"".join(map(mm.__getitem__, map(slice, offs, map(operator.add, offs, lens))))
