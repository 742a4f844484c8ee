"""Segment files: one group's entries, with CRCs and an index, sealed when full.

Why: the WAL is shared and short-lived; segments are the per-group log the raft
server reads from and compaction rewrites. Entries are immutable once written: an
entry is never removed from a segment, compaction writes a new one.

File ``NNNNNNNN.segment``::

    header   <4sHHHI> magic "SDSG", version, flags, group_len, origin_len,
             group (utf-8), origin (JSON list of the files a compacted segment was
             made from; empty otherwise), crc32 of all of it
    records  `records` with an empty group, indexes strictly ascending (may be sparse)
    index    (at seal) one INDEX record whose payload is, per entry,
             <qQIq> index, offset, length, term
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
import os
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from sediment.log import get_logger

from .errors import CorruptRecord, CorruptSegment, StorageError, TornTail
from .failpoints import Failpoint, no_fp
from .fsutil import fsync_dir, is_regular, list_dir, write_all
from .records import HEADER_SIZE, INDEX, Entry, decode_raw, encode, iter_records
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
    "copy_live",
    "list_segment_files",
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
_IDX = struct.Struct("<qQIq")
_TRAILER = struct.Struct("<4sQI")
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
        locs: dict[int, tuple[int, int, int]],
        order: list[int],
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
        self._locs = locs  # index -> (offset, length, term)
        self._order = order  # ascending indexes
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
                locs, order = _read_index(path, fd, index_offset, size - TRAILER_SIZE, count)
                return cls(
                    path, fd, group, flags, origin, hsize, locs, order,
                    sealed=True, data_end=index_offset, torn_at=None,
                )
        locs, order, data_end, torn_at = _scan(path, fd, hsize, size)
        return cls(
            path, fd, group, flags, origin, hsize, locs, order,
            sealed=False, data_end=data_end, torn_at=torn_at,
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
        return len(self._order)

    @property
    def data_size(self) -> int:
        """Bytes of entry records (header and index excluded)."""
        return self.data_end - self.header_size

    def indexes(self) -> list[int]:
        return list(self._order)

    def __contains__(self, index: object) -> bool:
        return index in self._locs

    def range(self) -> tuple[int, int] | None:
        if not self._order:
            return None
        return self._order[0], self._order[-1]

    def segref(self) -> SegRef | None:
        r = self.range()
        return SegRef(self.name, r[0], r[1]) if r else None

    def term(self, index: int) -> int | None:
        loc = self._locs.get(index)
        return loc[2] if loc else None

    def record_size(self, index: int) -> int:
        return self._locs[index][1]

    def live_count(self, live_indexes: Sequence[int]) -> int:
        """How many of ``live_indexes`` this file holds."""
        locs = self._locs
        return sum(1 for i in live_indexes if i in locs)

    def live_size(self, live_indexes: Sequence[int]) -> int:
        """Bytes of the records of ``live_indexes`` this file holds."""
        locs = self._locs
        return sum(locs[i][1] for i in live_indexes if i in locs)

    # -- reading entries -----------------------------------------------------------------

    def _pread(self, n: int, offset: int) -> bytes:
        if self._fd is None:
            raise ValueError(f"{self.path}: segment reader is closed")
        data = os.pread(self._fd, n, offset)
        if len(data) != n:
            raise CorruptSegment(self.path, "file is shorter than its index", offset=offset)
        return data

    def read_raw(self, index: int) -> bytes:
        """The verified encoded record of ``index`` (KeyError if the file lacks it)."""
        off, length, _term = self._locs[index]
        raw = self._pread(length, off)
        self._check_raw(raw, index)
        return raw

    def _check_raw(self, raw: bytes | memoryview, index: int) -> None:
        try:
            rec = decode_raw(raw, source=self.path)
        except CorruptRecord as exc:
            raise CorruptSegment(self.path, exc.reason, index=index) from None
        if rec.index != index:
            raise CorruptSegment(self.path, f"record holds index {rec.index}", index=index)

    def read(self, index: int) -> Entry:
        """The entry at ``index``; KeyError if absent, CorruptSegment if damaged."""
        raw = self.read_raw(index)
        return decode_raw(raw, source=self.path).entry

    def get(self, index: int) -> Entry | None:
        return self.read(index) if index in self._locs else None

    def read_raws(self, indexes: Sequence[int]) -> Iterator[tuple[int, bytes]]:
        """Verified raw records of ascending ``indexes`` (absent ones skipped), read in
        few large preads rather than one per entry."""
        locs = self._locs
        wanted = [i for i in indexes if i in locs]
        k = 0
        while k < len(wanted):
            start = locs[wanted[k]][0]
            j = k
            while j + 1 < len(wanted):
                off, length, _ = locs[wanted[j + 1]]
                if off + length - start > _READ_SPAN:
                    break
                j += 1
            last_off, last_len, _ = locs[wanted[j]]
            buf = memoryview(self._pread(last_off + last_len - start, start))
            for i in wanted[k : j + 1]:
                off, length, _ = locs[i]
                raw = buf[off - start : off - start + length]
                self._check_raw(raw, i)
                yield i, bytes(raw)
            k = j + 1

    def entries(self, first: int | None = None, last: int | None = None) -> Iterator[Entry]:
        """Entries in index order, optionally limited to ``[first, last]``."""
        sel = [
            i
            for i in self._order
            if (first is None or i >= first) and (last is None or i <= last)
        ]
        for _i, raw in self.read_raws(sel):
            yield decode_raw(raw, source=self.path).entry


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


def _read_index(
    path: str, fd: int, start: int, end: int, count: int
) -> tuple[dict[int, tuple[int, int, int]], list[int]]:
    raw = os.pread(fd, end - start, start)
    try:
        rec = decode_raw(raw, source=path)
    except CorruptRecord as exc:
        raise CorruptSegment(path, f"index block: {exc.reason}", offset=start) from None
    if rec.kind != INDEX or rec.index != count or len(rec.payload) != count * _IDX.size:
        raise CorruptSegment(path, "index block does not match the trailer", offset=start)
    locs: dict[int, tuple[int, int, int]] = {}
    order: list[int] = []
    for i, off, length, term in _IDX.iter_unpack(rec.payload):
        locs[i] = (off, length, term)
        order.append(i)
    return locs, order


def _scan(
    path: str, fd: int, hsize: int, size: int
) -> tuple[dict[int, tuple[int, int, int]], list[int], int, int | None]:
    data = memoryview(os.pread(fd, size - hsize, hsize))
    locs: dict[int, tuple[int, int, int]] = {}
    order: list[int] = []
    end = 0
    torn_at: int | None = None
    try:
        for rec in iter_records(data, 0, source=path):
            if rec.kind == INDEX:
                break  # an interrupted seal: the records end here
            if order and rec.index <= order[-1]:
                raise CorruptSegment(path, "indexes out of order", index=rec.index)
            locs[rec.index] = (hsize + rec.offset, rec.size, rec.term)
            order.append(rec.index)
            end = rec.offset + rec.size
    except TornTail as torn:
        torn_at = hsize + torn.offset
    except CorruptRecord as exc:
        raise CorruptSegment(path, exc.reason, offset=hsize + exc.offset) from None
    return locs, order, hsize + end, torn_at


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
    ) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.group = group
        self.max_entries = max_entries
        self.max_size = max_size
        self._fd: int | None = fd
        self._end = end  # logical end (written + buffered)
        self._header_size = header_size
        self._pending: list[bytes] = []
        self._pending_len = 0
        self._new_file = new_file
        self._idx: list[int] = []
        self._off: list[int] = []
        self._len: list[int] = []
        self._term: list[int] = []
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
            path, fd, group, len(header), len(header),
            max_entries=max_entries, max_size=max_size, new_file=True,
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
        reader = SegmentReader.open(path)
        try:
            if reader.sealed:
                raise SegmentSealed(f"{path} is sealed")
            size = os.fstat(reader._fd).st_size if reader._fd is not None else 0
            group, hsize, end = reader.group, reader.header_size, reader.data_end
            locs = reader._locs
            order = reader.indexes()
        finally:
            reader.close()
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
        w = cls(
            path, fd, group, end, hsize,
            max_entries=max_entries, max_size=max_size, new_file=False,
        )
        for i in order:
            off, length, term = locs[i]
            w._idx.append(i)
            w._off.append(off)
            w._len.append(length)
            w._term.append(term)
        return w

    # -- state ---------------------------------------------------------------------------

    @property
    def count(self) -> int:
        return len(self._idx)

    @property
    def size(self) -> int:
        return self._end

    @property
    def first_index(self) -> int | None:
        return self._idx[0] if self._idx else None

    @property
    def last_index(self) -> int | None:
        return self._idx[-1] if self._idx else None

    def indexes(self) -> list[int]:
        return list(self._idx)

    def term(self, index: int) -> int | None:
        k = bisect.bisect_left(self._idx, index)
        if k < len(self._idx) and self._idx[k] == index:
            return self._term[k]
        return None

    def ref(self) -> SegRef | None:
        if not self._idx:
            return None
        return SegRef(self.name, self._idx[0], self._idx[-1])

    def has_room(self, record_size: int) -> bool:
        """True if one more record of ``record_size`` bytes fits (a first one always)."""
        if not self._idx:
            return True
        return len(self._idx) < self.max_entries and self._end + record_size <= self.max_size

    # -- appending -----------------------------------------------------------------------

    def append(self, entry: Entry) -> int:
        """Append one entry; returns its encoded size. SegmentFull if it does not fit."""
        raw = encode(entry.index, entry.term, entry.timestamp, entry.payload)
        self.append_raw(raw, entry.index, entry.term)
        return len(raw)

    def append_raw(self, raw: bytes, index: int, term: int) -> None:
        """Append an already encoded, verified record as is (its CRC kept: Ra's
        ``append_raw``, used by compaction's copy)."""
        if self.sealed or self._fd is None:
            raise SegmentSealed(f"{self.path} is sealed or closed")
        if self._idx and index <= self._idx[-1]:
            raise ValueError(f"{self.path}: index {index} after {self._idx[-1]}")
        if not self.has_room(len(raw)):
            raise SegmentFull(self.path)
        self._idx.append(index)
        self._off.append(self._end)
        self._len.append(len(raw))
        self._term.append(term)
        self._end += len(raw)
        self._pending.append(raw)
        self._pending_len += len(raw)
        if self._pending_len >= _BUFFER_LIMIT:
            self._write_pending()

    def _write_pending(self) -> None:
        if not self._pending:
            return
        assert self._fd is not None
        data = b"".join(self._pending)
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

    def seal(self, fp: Failpoint = no_fp) -> SegRef | None:
        """Write the index block and trailer, fsync, close. Returns the final ref."""
        if self._fd is None:
            raise SegmentSealed(f"{self.path} is closed")
        fp("segment.before_seal")
        payload = b"".join(
            _IDX.pack(i, o, n, t)
            for i, o, n, t in zip(self._idx, self._off, self._len, self._term, strict=True)
        )
        index_offset = self._end
        block = encode(len(self._idx), 0, 0, payload, kind=INDEX)
        self._pending.append(block)
        self._pending.append(_encode_trailer(index_offset, len(self._idx)))
        self._write_pending()
        os.fsync(self._fd)
        if self._new_file:
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


def copy_live(
    src_readers: Sequence[SegmentReader],
    live_indexes: Sequence[int],
    dst: SegmentWriter,
    *,
    ranges: Sequence[tuple[int, int]] | None = None,
) -> int:
    """Copy the live entries of ``src_readers`` (oldest first) into ``dst``.

    Each source contributes the live indexes it holds inside its range (``ranges[k]``,
    the server's ref range: entries past it were overwritten and must not be copied).
    Records are copied verbatim, CRC included, after verifying it. Returns the count.
    """
    live = sorted(set(live_indexes))
    copied = 0
    for k, src in enumerate(src_readers):
        rng = ranges[k] if ranges is not None else src.range()
        if rng is None:
            continue
        lo = bisect.bisect_left(live, rng[0])
        hi = bisect.bisect_right(live, rng[1])
        for i, raw in src.read_raws(live[lo:hi]):
            term = src.term(i)
            assert term is not None
            dst.append_raw(raw, i, term)
            copied += 1
    return copied


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

