"""Segment files: one group's entries, with CRCs and an index, sealed when full.

Why: the WAL is shared and short-lived; segments are the per-group log the raft
server reads from and compaction rewrites. Entries are immutable once written: an
entry is never removed from a segment, compaction writes a new one.

File ``NNNNNNNN.segment``::

    header   <4sHHHI> magic "SDSG", version, flags, group_len, origin_len,
             group (utf-8), origin (JSON list of the files a compacted segment was
             made from; empty otherwise), crc32 of all of it
    records  `records` with an empty group, indexes strictly ascending (may be sparse)
    index    (at seal) one INDEX record whose payload is four little-endian int64
             columns of ``count`` values each: indexes, offsets, lengths, terms
    trailer  <4sQI> "SDIX", offset of the index record, entry count, + crc32

A sealed file is opened through its trailer and index; an unsealed one (the active
segment, or one whose seal was interrupted) by scanning the records, which stops at a
torn tail or at a partial index block. A record that fails its checksum raises
`CorruptSegment` with the file and index. Defaults: 4096 entries, 64,000,000 bytes
(Ra's ``segment_max_entries`` and ``segment_max_size_bytes``).
"""

from __future__ import annotations

import bisect
import json
import mmap
import operator
import os
import struct
import sys
import zlib
from array import array
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import accumulate, repeat
from typing import Final, cast

from sediment.log import get_logger

from .errors import CorruptRecord, CorruptSegment, StorageError, TornTail
from .failpoints import Failpoint, no_fp
from .fsutil import fsync_dir, is_regular, list_dir, write_all
from .records import HEADER_SIZE, INDEX, Entry, decode_raw, encode, iter_records, raw_index
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


class SegmentFull(StorageError):
    """The segment reached max entries or max size; seal it and start the next."""


class SegmentSealed(StorageError):
    """A sealed segment cannot be appended to."""


@dataclass(frozen=True, slots=True)
class SegmentConfig:
    max_entries: int = DEFAULT_MAX_ENTRIES
    max_size: int = DEFAULT_MAX_SIZE


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


@dataclass(frozen=True, slots=True, eq=False)
class Selection:
    """Some records of one open segment, looked up once (`SegmentReader.select`).

    Why: major compaction sizes the live records of every segment to plan its groups,
    then copies them; keeping the lookup lets the copy (`copy_selections`) skip the
    second search and gather. ``indexes`` and ``lengths`` are per record, ascending.
    """

    reader: SegmentReader
    positions: Sequence[int]
    indexes: Sequence[int]
    lengths: Sequence[int]
    size: int  # bytes of the selected records

    def __len__(self) -> int:
        return len(self.positions)


# -- reading ------------------------------------------------------------------------------


class SegmentReader:
    """Read access to one segment file (sealed or not); keeps one fd open."""

    def __init__(
        self,
        path: str,
        fd: int,
        group: str,
        flags: int,
        origin: tuple[str, ...],
        header_size: int,
        index: _Index,
        *,
        sealed: bool,
        data_end: int,
        torn_at: int | None,
    ) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self._fd: int | None = fd
        self.group = group
        self.flags = flags
        self.origin = origin
        self.header_size = header_size
        self._ix = index
        self.sealed = sealed
        self.data_end = data_end  # end of the last valid record
        self.torn_at = torn_at  # unsealed scan stopped at a torn tail here

    # -- opening -------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str) -> SegmentReader:
        fd = os.open(path, os.O_RDONLY)
        try:
            return cls._open(path, fd)
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def _open(cls, path: str, fd: int) -> SegmentReader:
        size = os.fstat(fd).st_size
        group, flags, origin, hsize = _read_header(path, fd, size)
        if size >= hsize + HEADER_SIZE + TRAILER_SIZE:
            t = os.pread(fd, TRAILER_SIZE, size - TRAILER_SIZE)
            magic, index_offset, count = _TRAILER.unpack_from(t)
            (tcrc,) = _U32.unpack_from(t, _TRAILER.size)
            if magic == TRAILER_MAGIC and zlib.crc32(t[: _TRAILER.size]) == tcrc:
                ix = _read_index(path, fd, index_offset, size - TRAILER_SIZE, count)
                return cls(
                    path,
                    fd,
                    group,
                    flags,
                    origin,
                    hsize,
                    ix,
                    sealed=True,
                    data_end=index_offset,
                    torn_at=None,
                )
        ix, data_end, torn_at = _scan(path, fd, hsize, size)
        return cls(
            path,
            fd,
            group,
            flags,
            origin,
            hsize,
            ix,
            sealed=False,
            data_end=data_end,
            torn_at=torn_at,
        )

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> SegmentReader:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- metadata ------------------------------------------------------------------------

    @property
    def compacted(self) -> bool:
        return bool(self.flags & FLAG_COMPACTED)

    @property
    def num_entries(self) -> int:
        return len(self._ix)

    @property
    def data_size(self) -> int:
        """Bytes of entry records (header and index excluded)."""
        return self.data_end - self.header_size

    def indexes(self) -> list[int]:
        return list(self._ix.idx)

    def __contains__(self, index: object) -> bool:
        return isinstance(index, int) and self._ix.pos(index) >= 0

    def range(self) -> tuple[int, int] | None:
        idx = self._ix.idx
        return (idx[0], idx[-1]) if idx else None

    def segref(self) -> SegRef | None:
        r = self.range()
        return SegRef(self.name, r[0], r[1]) if r else None

    def location(self, index: int) -> tuple[int, int, int] | None:
        """(offset, length, term) of the record of ``index``, None if absent."""
        p = self._ix.pos(index)
        if p < 0:
            return None
        ix = self._ix
        return ix.off[p], ix.length[p], ix.term[p]

    def term(self, index: int) -> int | None:
        p = self._ix.pos(index)
        return self._ix.term[p] if p >= 0 else None

    def positions(self, indexes: Sequence[int]) -> list[int]:
        """Positions of the ``indexes`` this file holds (ascending in, ascending out)."""
        return self._ix.positions(indexes)

    def indexes_at(self, positions: Sequence[int]) -> tuple[int, ...]:
        return tuple(map(self._ix.idx.__getitem__, positions))

    def size_of(self, positions: Sequence[int]) -> int:
        """Bytes of the records at ``positions``."""
        return sum(map(self._ix.length.__getitem__, positions))

    def select(self, indexes: Sequence[int]) -> Selection:
        """The records of those of the ascending ``indexes`` this file holds."""
        positions = self._ix.positions(indexes)
        if len(positions) != len(indexes):
            indexes = tuple(_gather(self._ix.idx, positions))
        lengths = _gather(self._ix.length, positions)
        return Selection(self, positions, indexes, lengths, sum(lengths))

    def live_count(self, live_indexes: Sequence[int]) -> int:
        """How many of ``live_indexes`` this file holds."""
        return len(self.positions(live_indexes))

    def live_size(self, live_indexes: Sequence[int]) -> int:
        """Bytes of the records of ``live_indexes`` this file holds."""
        ln = self._ix.length
        return sum(ln[p] for p in self.positions(live_indexes))

    # -- reading entries -----------------------------------------------------------------

    def _pread(self, n: int, offset: int) -> bytes:
        if self._fd is None:
            raise ValueError(f"{self.path}: segment reader is closed")
        data = os.pread(self._fd, n, offset)
        if len(data) != n:
            raise CorruptSegment(self.path, "file is shorter than its index", offset=offset)
        return data

    def _check_raw(self, raw: bytes | memoryview, index: int) -> None:
        try:
            got = raw_index(raw, source=self.path)
        except CorruptRecord as exc:
            raise CorruptSegment(self.path, exc.reason, index=index) from None
        if got != index:
            raise CorruptSegment(self.path, f"record holds index {got}", index=index)

    def read_raw(self, index: int) -> bytes:
        """The verified encoded record of ``index`` (KeyError if the file lacks it)."""
        loc = self.location(index)
        if loc is None:
            raise KeyError(index)
        raw = self._pread(loc[1], loc[0])
        self._check_raw(raw, index)
        return raw

    def read(self, index: int) -> Entry:
        """The entry at ``index``; KeyError if absent, CorruptSegment if damaged."""
        loc = self.location(index)
        if loc is None:
            raise KeyError(index)
        raw = self._pread(loc[1], loc[0])
        try:
            rec = decode_raw(raw, source=self.path)
        except CorruptRecord as exc:
            raise CorruptSegment(self.path, exc.reason, index=index) from None
        if rec.index != index:
            raise CorruptSegment(self.path, f"record holds index {rec.index}", index=index)
        return rec.entry

    def get(self, index: int) -> Entry | None:
        return self.read(index) if index in self else None

    @contextmanager
    def mapped(self) -> Iterator[mmap.mmap]:
        """The whole file mapped read-only, for bulk copies. Slicing it gives bytes:
        unlike memoryview slices, not objects the cyclic GC has to track (a copy makes
        one per record)."""
        if self._fd is None:
            raise ValueError(f"{self.path}: segment reader is closed")
        mm = mmap.mmap(self._fd, 0, access=mmap.ACCESS_READ)
        try:
            if len(mm) < self.data_end:
                raise CorruptSegment(self.path, "file is shorter than its index", offset=len(mm))
            yield mm
        finally:
            mm.close()

    def spans(self, positions: Sequence[int]) -> Iterator[tuple[memoryview, Sequence[int]]]:
        """Read the records at ascending ``positions`` in few large preads (<= 4 MiB
        unless one record is larger).

        Yields (buffer, positions in it); a record at position p sits at
        ``off[p] - off[first position]`` in the buffer. Not verified.
        """
        off, ln = self._ix.off, self._ix.length
        k, n = 0, len(positions)
        bl, br = bisect.bisect_left, bisect.bisect_right
        while k < n:
            start = off[positions[k]]
            # records are back to back: record p ends where p + 1 starts, so the last
            # record ending within the span is the one before the first starting past it
            cut = br(off, start + _READ_SPAN)
            if cut == len(off) and self.data_end - start <= _READ_SPAN:
                last_pos = cut - 1  # the file's last record fits too
            else:
                last_pos = cut - 2
            j = max(k, bl(positions, last_pos + 1, k) - 1)
            end = off[positions[j]] + ln[positions[j]]
            yield memoryview(self._pread(end - start, start)), positions[k : j + 1]
            k = j + 1

    def read_raws(self, indexes: Sequence[int]) -> Iterator[tuple[int, memoryview]]:
        """Verified raw records of ascending ``indexes`` (absent ones skipped), read in
        few large preads rather than one per entry; views into the read buffer."""
        ix = self._ix
        for buf, poss in self.spans(self.positions(indexes)):
            base = ix.off[poss[0]]
            for p in poss:
                o = ix.off[p] - base
                raw = buf[o : o + ix.length[p]]
                self._check_raw(raw, ix.idx[p])
                yield ix.idx[p], raw

    def entries(self, first: int | None = None, last: int | None = None) -> Iterator[Entry]:
        """Entries in index order, optionally limited to ``[first, last]``."""
        idx = self._ix.idx
        lo = 0 if first is None else bisect.bisect_left(idx, first)
        hi = len(idx) if last is None else bisect.bisect_right(idx, last)
        for _i, raw in self.read_raws(idx[lo:hi]):
            yield decode_raw(raw, source=self.path).entry  # verified by read_raws


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


# -- writing ------------------------------------------------------------------------------


class SegmentWriter:
    """Appends to one segment file; ``sync`` makes appends durable, ``seal`` closes it.

    Appends are buffered in memory and written on ``sync``/``seal`` (or past 1 MiB):
    nothing is durable before ``sync`` returns, which is why the WAL keeps every entry
    until the segment writer synced it.
    """

    def __init__(
        self,
        path: str,
        fd: int,
        group: str,
        end: int,
        header_size: int,
        *,
        max_entries: int,
        max_size: int,
        new_file: bool,
        index: _Index | None = None,
    ) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.group = group
        self.max_entries = max_entries
        self.max_size = max_size
        self._fd: int | None = fd
        self._end = end  # logical end (written + buffered)
        self._header_size = header_size
        self._pending: list[bytes | memoryview] = []
        self._pending_len = 0
        self._new_file = new_file
        self._ix = index if index is not None else _Index()
        self.sealed = False

    @classmethod
    def create(
        cls,
        path: str,
        group: str,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_size: int = DEFAULT_MAX_SIZE,
        origin: Sequence[str] = (),
        compacted: bool = False,
        fp: Failpoint = no_fp,
    ) -> SegmentWriter:
        """Create a new segment file (it must not exist)."""
        header = _encode_header(group, FLAG_COMPACTED if compacted else 0, origin)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        try:
            write_all(fd, header)
        except BaseException:
            os.close(fd)
            raise
        w = cls(
            path,
            fd,
            group,
            len(header),
            len(header),
            max_entries=max_entries,
            max_size=max_size,
            new_file=True,
        )
        fp("segment.after_create")
        return w

    @classmethod
    def reopen(
        cls,
        path: str,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_size: int = DEFAULT_MAX_SIZE,
        fp: Failpoint = no_fp,
    ) -> SegmentWriter:
        """Continue an unsealed segment after a restart: cut a torn tail or a partial
        index block (fsynced), then append after the last valid record."""
        with SegmentReader.open(path) as reader:
            if reader.sealed:
                raise SegmentSealed(f"{path} is sealed")
            size = os.path.getsize(path)
            group, hsize, end, ix = reader.group, reader.header_size, reader.data_end, reader._ix
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            if size > end:
                _log.warning("segment tail cut off", file=path, offset=end, size=size)
                os.ftruncate(fd, end)
                os.fsync(fd)
                fp("segment.after_truncate")
        except BaseException:
            os.close(fd)
            raise
        return cls(
            path,
            fd,
            group,
            end,
            hsize,
            max_entries=max_entries,
            max_size=max_size,
            new_file=False,
            index=ix,
        )

    # -- state ---------------------------------------------------------------------------

    @property
    def count(self) -> int:
        return len(self._ix)

    @property
    def size(self) -> int:
        return self._end

    @property
    def first_index(self) -> int | None:
        idx = self._ix.idx
        return idx[0] if idx else None

    @property
    def last_index(self) -> int | None:
        idx = self._ix.idx
        return idx[-1] if idx else None

    def indexes(self) -> list[int]:
        return list(self._ix.idx)

    def term(self, index: int) -> int | None:
        p = self._ix.pos(index)
        return self._ix.term[p] if p >= 0 else None

    def ref(self) -> SegRef | None:
        idx = self._ix.idx
        return SegRef(self.name, idx[0], idx[-1]) if idx else None

    def has_room(self, record_size: int) -> bool:
        """True if one more record of ``record_size`` bytes fits (a first one always)."""
        n = len(self._ix)
        if not n:
            return True
        return n < self.max_entries and self._end + record_size <= self.max_size

    # -- appending -----------------------------------------------------------------------

    def append(self, entry: Entry) -> int:
        """Append one entry; returns its encoded size. SegmentFull if it does not fit."""
        raw = encode(entry.index, entry.term, entry.timestamp, entry.payload)
        self.append_raw(raw, entry.index, entry.term)
        return len(raw)

    def append_raw(self, raw: bytes | memoryview, index: int, term: int) -> None:
        """Append an already encoded record as is (its CRC kept: Ra's ``append_raw``)."""
        if self.sealed or self._fd is None:
            raise SegmentSealed(f"{self.path} is sealed or closed")
        idx = self._ix.idx
        if idx and index <= idx[-1]:
            raise ValueError(f"{self.path}: index {index} after {idx[-1]}")
        if not self.has_room(len(raw)):
            raise SegmentFull(self.path)
        self._ix.add(index, self._end, len(raw), term)
        self._end += len(raw)
        self._pending.append(raw)
        self._pending_len += len(raw)
        if self._pending_len >= _BUFFER_LIMIT:
            self._write_pending()

    def _write_pending(self) -> None:
        if not self._pending:
            return
        assert self._fd is not None
        # one buffer (a compaction copy's gathered records) goes out without a copy
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        self._pending_len = 0
        write_all(self._fd, data)

    def sync(self, fp: Failpoint = no_fp) -> None:
        """Write buffered entries and fsync (and the directory, for a new file)."""
        if self._fd is None:
            raise SegmentSealed(f"{self.path} is closed")
        self._write_pending()
        fp("segment.before_sync")
        os.fsync(self._fd)
        if self._new_file:
            fsync_dir(os.path.dirname(os.path.abspath(self.path)))
            self._new_file = False
        fp("segment.after_sync")

    def seal(self, fp: Failpoint = no_fp, *, sync_dir: bool = True) -> SegRef | None:
        """Write the index block and trailer, fsync, close. Returns the final ref.

        A new file's directory entry is fsynced too unless ``sync_dir`` is False (the
        caller fsyncs the directory itself, once for several files)."""
        if self._fd is None:
            raise SegmentSealed(f"{self.path} is closed")
        fp("segment.before_seal")
        index_offset = self._end
        count = len(self._ix)
        self._pending.append(encode(count, 0, 0, self._ix.to_block(), kind=INDEX))
        self._pending.append(_encode_trailer(index_offset, count))
        self._write_pending()
        os.fsync(self._fd)
        if self._new_file and sync_dir:
            fsync_dir(os.path.dirname(os.path.abspath(self.path)))
        self._new_file = False
        os.close(self._fd)
        self._fd = None
        self.sealed = True
        fp("segment.after_seal")
        return self.ref()

    def close(self) -> None:
        """Write buffered entries (no fsync) and close; the file stays unsealed."""
        if self._fd is None:
            return
        try:
            self._write_pending()
        finally:
            os.close(self._fd)
            self._fd = None

    def abandon(self) -> None:
        """Close without writing buffered entries (a simulated crash)."""
        self._pending.clear()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# -- copying ------------------------------------------------------------------------------


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
