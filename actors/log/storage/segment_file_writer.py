"""Appending to one segment file: buffered appends, ``sync``, ``seal`` (index and trailer).

Defaults: 4096 entries, 64,000,000 bytes (Ra's ``segment_max_entries`` and
``segment_max_size_bytes``); a full segment raises `SegmentFull` and is sealed by its
owner, who starts the next. (Named apart from the process that drives it,
`actors/log/shell/segment_writer.py`.)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from sediment.log import get_logger

from .errors import StorageError
from .failpoints import Failpoint, no_fp
from .fsutil import fsync_dir, write_all
from .records import INDEX, Entry, encode
from .segment_format import (
    _BUFFER_LIMIT,
    DEFAULT_MAX_ENTRIES,
    DEFAULT_MAX_SIZE,
    FLAG_COMPACTED,
    _encode_header,
    _encode_trailer,
    _Index,
)
from .segment_reader import SegmentReader
from .segrefs import SegRef

_log = get_logger("sediment.log.storage.segment")


class SegmentFull(StorageError):
    """The segment reached max entries or max size; seal it and start the next."""


class SegmentSealed(StorageError):
    """A sealed segment cannot be appended to."""


@dataclass(frozen=True, slots=True)
class SegmentConfig:
    max_entries: int = DEFAULT_MAX_ENTRIES
    max_size: int = DEFAULT_MAX_SIZE


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
