"""Reading one segment file (sealed or not): entries by index, and record selections.

Why its own module: the raft server's reads, snapshot installs and compaction all open
segments to read, and only the segment writer appends. A record that fails its
checksum raises `CorruptSegment` with the file and index.
"""

from __future__ import annotations

import bisect
import mmap
import os
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from .errors import CorruptRecord, CorruptSegment
from .records import HEADER_SIZE, Entry, decode_raw, raw_index
from .segment_format import (
    _READ_SPAN,
    _TRAILER,
    _U32,
    FLAG_COMPACTED,
    TRAILER_MAGIC,
    TRAILER_SIZE,
    _gather,
    _Index,
    _read_header,
    _read_index,
    _scan,
)
from .segrefs import SegRef


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
