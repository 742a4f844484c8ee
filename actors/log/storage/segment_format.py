"""A segment file's layout: header, trailer, the columnar index, and opening a file.

File ``NNNNNNNN.segment``::

    header   <4sHHHI> magic "SDSG", version, flags, group_len, origin_len,
             group (utf-8), origin (JSON list of the files a compacted segment was
             made from; empty otherwise), crc32 of all of it
    records  `records` with an empty group, indexes strictly ascending (may be sparse)
    index    (at seal) one INDEX record whose payload is four little-endian int64
             columns of ``count`` values each: indexes, offsets, lengths, terms
    trailer  <4sQI> "SDIX", offset of the index record, entry count, + crc32

A sealed file is opened through its trailer and index; an unsealed one (the active
segment, or one whose seal was interrupted) by scanning the records (`_scan`), which
stops at a torn tail or at a partial index block. The reader (`segment_reader.py`) and
the writer (`segment_file_writer.py`) share what is here.
"""

from __future__ import annotations

import bisect
import json
import operator
import os
import struct
import sys
import zlib
from array import array
from collections.abc import Sequence
from itertools import repeat
from typing import Final, cast

from .errors import CorruptRecord, CorruptSegment, TornTail
from .records import INDEX, decode_raw, iter_records

DEFAULT_MAX_ENTRIES: Final = 4096
DEFAULT_MAX_SIZE: Final = 64_000_000
SEG_MAGIC: Final = b"SDSG"
SEG_VERSION: Final = 1
FLAG_COMPACTED: Final = 1
_HEAD = struct.Struct("<4sHHHI")
_U32 = struct.Struct("<I")
_TRAILER = struct.Struct("<4sQI")
# within a record header: index at 8, body crc at 40, header crc at 44
_REC_CHECK = struct.Struct("<8xq24xII")
TRAILER_MAGIC: Final = b"SDIX"
TRAILER_SIZE: Final = _TRAILER.size + 4
_BUFFER_LIMIT: Final = 1 << 20
_READ_SPAN: Final = 4 << 20


def _encode_header(group: str, flags: int, origin: Sequence[str]) -> bytes:
    gb = group.encode("utf-8")
    ob = json.dumps(list(origin)).encode() if origin else b""
    head = _HEAD.pack(SEG_MAGIC, SEG_VERSION, flags, len(gb), len(ob)) + gb + ob
    return head + _U32.pack(zlib.crc32(head))


def _encode_trailer(index_offset: int, count: int) -> bytes:
    t = _TRAILER.pack(TRAILER_MAGIC, index_offset, count)
    return t + _U32.pack(zlib.crc32(t))


# -- the index: four int64 columns -------------------------------------------------------


class _Index:
    """Positions of a file's records: ascending indexes and, per position, the record's
    offset, length and term. Columnar arrays: a 4096-entry index loads in microseconds
    (one ``frombytes`` per column) and lookups are a C bisect."""

    __slots__ = ("idx", "length", "off", "term")

    def __init__(self) -> None:
        self.idx = array("q")
        self.off = array("q")
        self.length = array("q")
        self.term = array("q")

    def __len__(self) -> int:
        return len(self.idx)

    def pos(self, index: int) -> int:
        """The position of ``index``, or -1."""
        k = bisect.bisect_left(self.idx, index)
        if k < len(self.idx) and self.idx[k] == index:
            return k
        return -1

    def positions(self, indexes: Sequence[int]) -> list[int]:
        """Positions of those of the ascending ``indexes`` present, ascending."""
        idx = self.idx
        n = len(idx)
        if not n or not indexes:
            return []
        first = idx[0]
        last = idx[-1]
        if last - first + 1 == n:  # dense: a position is an offset from the first
            if indexes[0] >= first and indexes[-1] <= last:
                return list(map(operator.sub, indexes, repeat(first, len(indexes))))
            return [i - first for i in indexes if first <= i <= last]
        out: list[int] = []
        lo = 0
        bl = bisect.bisect_left
        for i in indexes:
            lo = bl(idx, i, lo)
            if lo == n:
                break
            if idx[lo] == i:
                out.append(lo)
        return out

    def add(self, index: int, offset: int, length: int, term: int) -> None:
        self.idx.append(index)
        self.off.append(offset)
        self.length.append(length)
        self.term.append(term)

    def to_block(self) -> bytes:
        cols = [array("q", c) for c in (self.idx, self.off, self.length, self.term)]
        if sys.byteorder != "little":
            for c in cols:
                c.byteswap()
        return b"".join(c.tobytes() for c in cols)

    @classmethod
    def from_block(cls, data: bytes, count: int) -> _Index:
        ix = cls()
        n = count * 8
        for k, col in enumerate((ix.idx, ix.off, ix.length, ix.term)):
            col.frombytes(data[k * n : (k + 1) * n])
            if sys.byteorder != "little":
                col.byteswap()
        return ix


def _gather(col: array[int], positions: Sequence[int]) -> Sequence[int]:
    """``col`` at ascending ``positions``: an array slice (a memcpy) when they are
    adjacent, else one C-level itemgetter call (twice as fast as mapping
    ``col.__getitem__``: this runs once per copied record and column)."""
    n = len(positions)
    if n and positions[-1] - positions[0] + 1 == n:
        return col[positions[0] : positions[-1] + 1]
    if n > 1:
        return cast("tuple[int, ...]", operator.itemgetter(*positions)(col))
    return [col[p] for p in positions]


def _extend(col: array[int], values: Sequence[int]) -> None:
    """Append ``values`` to ``col``: a memcpy from an array, else ``fromlist`` (half the
    cost of ``extend``, which grows the array one item at a time)."""
    if isinstance(values, array):
        col.extend(values)
    else:
        col.fromlist(values if isinstance(values, list) else list(values))


def read_header(path: str) -> tuple[str, int, tuple[str, ...]]:
    """(group, flags, origin) from a segment's header alone, without its index."""
    fd = os.open(path, os.O_RDONLY)
    try:
        group, flags, origin, _hsize = _read_header(path, fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    return group, flags, origin


def _read_header(path: str, fd: int, size: int) -> tuple[str, int, tuple[str, ...], int]:
    fixed = os.pread(fd, _HEAD.size, 0)
    if len(fixed) < _HEAD.size:
        raise CorruptSegment(path, "file shorter than a segment header", offset=0)
    magic, version, flags, glen, olen = _HEAD.unpack(fixed)
    if magic != SEG_MAGIC or version != SEG_VERSION:
        raise CorruptSegment(path, "not a segment file (bad magic or version)", offset=0)
    hsize = _HEAD.size + glen + olen + 4
    head = os.pread(fd, hsize, 0)
    if len(head) < hsize or zlib.crc32(head[:-4]) != _U32.unpack_from(head, hsize - 4)[0]:
        raise CorruptSegment(path, "segment header fails its checksum", offset=0)
    group = head[_HEAD.size : _HEAD.size + glen].decode("utf-8")
    origin: tuple[str, ...] = ()
    if olen:
        origin = tuple(json.loads(head[_HEAD.size + glen : _HEAD.size + glen + olen]))
    return group, flags, origin, hsize


def _read_index(path: str, fd: int, start: int, end: int, count: int) -> _Index:
    raw = os.pread(fd, end - start, start)
    try:
        rec = decode_raw(raw, source=path)
    except CorruptRecord as exc:
        raise CorruptSegment(path, f"index block: {exc.reason}", offset=start) from None
    if rec.kind != INDEX or rec.index != count or len(rec.payload) != count * 32:
        raise CorruptSegment(path, "index block does not match the trailer", offset=start)
    return _Index.from_block(rec.payload, count)


def _scan(path: str, fd: int, hsize: int, size: int) -> tuple[_Index, int, int | None]:
    data = memoryview(os.pread(fd, size - hsize, hsize))
    ix = _Index()
    end = 0
    torn_at: int | None = None
    try:
        for rec in iter_records(data, 0, source=path):
            if rec.kind == INDEX:
                break  # an interrupted seal: the records end here
            if ix.idx and rec.index <= ix.idx[-1]:
                raise CorruptSegment(path, "indexes out of order", index=rec.index)
            ix.add(rec.index, hsize + rec.offset, rec.size, rec.term)
            end = rec.offset + rec.size
    except TornTail as torn:
        torn_at = hsize + torn.offset
    except CorruptRecord as exc:
        raise CorruptSegment(path, exc.reason, offset=hsize + exc.offset) from None
    return ix, hsize + end, torn_at
