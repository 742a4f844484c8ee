"""The node's write-ahead log, shared by every raft group on the node.

Why: one sequential file and one fsync per batch for all groups (group commit) is what
makes many raft groups per node cheap (Ra's design). Entries stay here until the
segment writer has flushed them into the groups' segment files and synced those; then
the flushed WAL files are deleted.

Files are ``NNNNNNNN.wal`` in one directory: a 12-byte header (magic, version, crc)
then records (`records`). A new file is started when the current one passes
``max_size`` after a batch, and on every open (a WAL never appends to a file written by
an earlier process).

Per group the WAL tracks the last index written, to detect gaps:

- a normal write must continue the group (``last + 1``), overwrite it (``<= last``, a
  new leader truncating), or jump over a gap the group's snapshot covers;
- a sparse write (snapshot install with live entries, Ra's ``write/7``) names the
  previous index of its sparse sequence and may skip indexes, but that previous index
  must not be ahead of what the WAL has;
- a group's writes from a gap on are not written; `AppendResult.rejected` says from
  which index the writer must resend (other groups in the batch are unaffected).

Entries below a group's smallest live index (`SnapshotState`) are not written at all:
a snapshot already covers them (`AppendResult.skipped`).

Recovery reads every file in order and applies the same overwrite rules per group. A
torn tail (a batch whose append never finished) is cut off, with a warning; a record
that fails its checksum with valid data after it raises `CorruptRecord` naming the
file and offset.
"""

from __future__ import annotations

import bisect
import os
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from sediment.log import get_logger

from .errors import CorruptRecord, StorageError, TornTail
from .failpoints import Failpoint, no_fp
from .fsutil import fsync_dir, list_dir, makedirs_durable, unlink_if_exists, write_all
from .records import ENTRY, NO_PREV, SPARSE, Entry, Record, encode_group, iter_records
from .snapshot import SnapshotState

__all__ = [
    "DEFAULT_MAX_SIZE",
    "AppendResult",
    "GroupLog",
    "Wal",
    "WalBroken",
    "WalRecovery",
    "WalWrite",
    "file_name",
    "file_number",
    "read_file",
    "recover",
]

_log = get_logger("sediment.log.storage.wal")

DEFAULT_MAX_SIZE: Final = 256_000_000  # Ra's default
SUFFIX: Final = ".wal"
_FILE_HEAD = struct.Struct("<4sHH")
FILE_MAGIC: Final = b"SDWL"
FILE_VERSION: Final = 1
FILE_HEADER_SIZE: Final = _FILE_HEAD.size + 4


class WalBroken(StorageError):
    """A write or fsync failed; this WAL instance must not be used any more."""


def file_name(number: int) -> str:
    return f"{number:08d}{SUFFIX}"


def file_number(name: str) -> int | None:
    stem, _, ext = name.rpartition(".")
    if "." + ext != SUFFIX or not stem.isdigit():
        return None
    return int(stem)


def _file_header() -> bytes:
    head = _FILE_HEAD.pack(FILE_MAGIC, FILE_VERSION, 0)
    return head + struct.pack("<I", zlib.crc32(head))


@dataclass(frozen=True, slots=True)
class WalWrite:
    """One entry for one group. ``prev_index`` set: a sparse write (snapshot install)."""

    group: str
    entry: Entry
    prev_index: int | None = None


@dataclass(slots=True)
class AppendResult:
    """What one `Wal.append` did, per group.

    ``written``: durable in the WAL once append returns. ``skipped``: below the group's
    smallest live index, not written and not needed (acknowledge them too).
    ``rejected``: group -> the index the writer must resend from (a gap).
    ``rolled``: the file that was closed because it passed max_size (flush it).
    """

    file: str
    written: dict[str, list[int]] = field(default_factory=dict)
    skipped: dict[str, list[int]] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)
    rolled: str | None = None


class GroupLog:
    """One group's entries in WAL order, with raft's overwrite rule applied."""

    __slots__ = ("entries", "indexes")

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.indexes: list[int] = []

    def add(self, entry: Entry, prev_index: int | None = None) -> None:
        """Append; a normal write at ``i`` drops entries >= i, a sparse one those > prev."""
        cut = entry.index if prev_index is None else prev_index + 1
        if self.indexes and self.indexes[-1] >= cut:
            k = bisect.bisect_left(self.indexes, cut)
            del self.entries[k:]
            del self.indexes[k:]
        self.entries.append(entry)
        self.indexes.append(entry.index)

    @property
    def last_index(self) -> int | None:
        return self.indexes[-1] if self.indexes else None


def _apply(groups: dict[str, GroupLog], rec: Record) -> None:
    log = groups.get(rec.group)
    if log is None:
        log = groups[rec.group] = GroupLog()
    log.add(rec.entry, rec.prev_index if rec.kind == SPARSE else None)


@dataclass(frozen=True, slots=True)
class WalRecovery:
    """Everything the WAL files hold, per group, after the overwrite rules."""

    groups: dict[str, list[Entry]]
    files: tuple[str, ...]  # names, oldest first
    truncated: tuple[tuple[str, int], ...]  # (file, offset) where a torn tail was cut
    last_number: int  # highest file number seen (0 if none)

    def last_index(self, group: str) -> int | None:
        entries = self.groups.get(group)
        return entries[-1].index if entries else None


def _read_records(path: str, *, repair: bool, fp: Failpoint) -> tuple[list[Record], int | None]:
    """Records of one WAL file; on a torn tail, cut it (if ``repair``) and say where."""
    with open(path, "rb") as f:
        data = f.read()
    name = os.path.basename(path)
    if len(data) < FILE_HEADER_SIZE or not _header_ok(data):
        if data[FILE_HEADER_SIZE:].strip(b"\x00"):
            raise CorruptRecord(name, 0, "bad WAL file header")
        if not data:
            return [], None
        # The file's creation was interrupted before its header was durable.
        _log.warning("WAL file with a torn header emptied", file=name)
        if repair:
            _truncate(path, 0, fp)
        return [], 0
    out: list[Record] = []
    try:
        for rec in iter_records(memoryview(data), FILE_HEADER_SIZE, source=name):
            if rec.kind not in (ENTRY, SPARSE):
                raise CorruptRecord(name, rec.offset, f"record kind {rec.kind} in a WAL")
            out.append(rec)
    except TornTail as torn:
        _log.warning(
            "WAL torn tail cut off",
            file=name,
            offset=torn.offset,
            reason=torn.reason,
            records_kept=len(out),
        )
        if repair:
            _truncate(path, torn.offset, fp)
        return out, torn.offset
    return out, None


def _header_ok(data: bytes) -> bool:
    head = data[: _FILE_HEAD.size]
    (crc,) = struct.unpack_from("<I", data, _FILE_HEAD.size)
    magic, version, _ = _FILE_HEAD.unpack(head)
    return bool(magic == FILE_MAGIC and version == FILE_VERSION and zlib.crc32(head) == crc)


def _truncate(path: str, size: int, fp: Failpoint) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)
    fp("wal.after_truncate")


def read_file(path: str) -> dict[str, list[Entry]]:
    """One (closed) WAL file's entries per group, for the segment writer to flush.

    Read-only: a torn tail is ignored here, a damaged record raises CorruptRecord.
    """
    records, _ = _read_records(path, repair=False, fp=no_fp)
    groups: dict[str, GroupLog] = {}
    for rec in records:
        _apply(groups, rec)
    return {g: log.entries for g, log in groups.items()}


def _wal_files(directory: str, *, warn: bool = False) -> list[tuple[int, str]]:
    out = []
    for name in list_dir(directory):
        n = file_number(name)
        if n is None:
            if warn:
                _log.warning("unknown file in WAL directory left alone", file=name)
            continue
        out.append((n, name))
    return sorted(out)


def recover(directory: str, fp: Failpoint = no_fp) -> WalRecovery:
    """Read every WAL file in order: entries per group, torn tails cut off."""
    groups: dict[str, GroupLog] = {}
    truncated: list[tuple[str, int]] = []
    files = _wal_files(directory, warn=True)
    for _n, name in files:
        records, torn_at = _read_records(os.path.join(directory, name), repair=True, fp=fp)
        if torn_at is not None:
            truncated.append((name, torn_at))
        for rec in records:
            _apply(groups, rec)
    return WalRecovery(
        {g: log.entries for g, log in groups.items() if log.entries},
        tuple(name for _n, name in files),
        tuple(truncated),
        files[-1][0] if files else 0,
    )


class Wal:
    """The WAL writer: ``append`` a batch (one write, one fsync), roll, delete flushed.

    ``snapshot_states`` is read on every append (the shell keeps it current: a dict it
    updates when a snapshot is written or installed). ``last_indexes`` seeds gap
    detection after a restart (`WalRecovery`); without it a group's first write is
    accepted at any index.
    """

    def __init__(
        self,
        directory: str,
        max_size: int = DEFAULT_MAX_SIZE,
        snapshot_states: Mapping[str, SnapshotState] | None = None,
        *,
        last_indexes: Mapping[str, int] | None = None,
        fp: Failpoint = no_fp,
    ) -> None:
        if max_size < FILE_HEADER_SIZE:
            raise ValueError(f"max_size must be >= {FILE_HEADER_SIZE}")
        makedirs_durable(directory)
        self.directory = directory
        self.max_size = max_size
        self.snapshot_states: Mapping[str, SnapshotState] = (
            snapshot_states if snapshot_states is not None else {}
        )
        self._last: dict[str, int] = dict(last_indexes or {})
        self._group_ids: dict[str, tuple[bytes, int]] = {}  # utf-8 and its crc32
        existing = _wal_files(directory)
        self._number = existing[-1][0] if existing else 0
        self._fd: int | None = None
        self._size = 0
        self._broken = False
        self._open_next(fp)

    @classmethod
    def open(
        cls,
        directory: str,
        max_size: int = DEFAULT_MAX_SIZE,
        snapshot_states: Mapping[str, SnapshotState] | None = None,
        fp: Failpoint = no_fp,
    ) -> tuple[Wal, WalRecovery]:
        """Recover the directory, then start a new file. Flush ``recovery.groups`` to
        segments, then ``delete_files_upto(recovery.last_number)``."""
        rec = recover(directory, fp)
        last = {g: entries[-1].index for g, entries in rec.groups.items() if entries}
        wal = cls(directory, max_size, snapshot_states, last_indexes=last, fp=fp)
        return wal, rec

    # -- files ---------------------------------------------------------------------------

    @property
    def current_file(self) -> str:
        return file_name(self._number)

    @property
    def current_number(self) -> int:
        return self._number

    @property
    def size(self) -> int:
        return self._size

    def files(self) -> list[str]:
        return [name for _n, name in _wal_files(self.directory)]

    def _open_next(self, fp: Failpoint) -> None:
        self._number += 1
        path = os.path.join(self.directory, file_name(self._number))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        try:
            header = _file_header()
            write_all(fd, header)
            os.fsync(fd)
            fsync_dir(self.directory)
        except BaseException:
            os.close(fd)
            self._broken = True
            raise
        self._fd = fd
        self._size = len(header)
        fp("wal.after_create")

    def roll(self, fp: Failpoint = no_fp) -> str:
        """Close the current file (everything in it is already durable), start the next.

        Returns the closed file's name, ready to be flushed to segments.
        """
        self._check()
        closed = self.current_file
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
        fp("wal.before_roll")
        self._open_next(fp)
        return closed

    def delete_files_upto(self, number: int, fp: Failpoint = no_fp) -> list[str]:
        """Delete WAL files numbered <= ``number`` (never the current one).

        Call only after every group's entries from those files are synced in segments.
        """
        doomed = [
            name for n, name in _wal_files(self.directory) if n <= number and n != self._number
        ]
        if not doomed:
            return []
        fp("wal.before_delete")
        for name in doomed:
            unlink_if_exists(os.path.join(self.directory, name))
        fsync_dir(self.directory)
        fp("wal.after_delete")
        return doomed

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def last_index(self, group: str) -> int | None:
        return self._last.get(group)

    def forget(self, group: str) -> None:
        """Drop gap tracking for a group (deleted, or its log reset by the server)."""
        self._last.pop(group, None)

    # -- writing -------------------------------------------------------------------------

    def _check(self) -> None:
        if self._broken:
            raise WalBroken(f"{self.directory}: an earlier write failed; reopen the WAL")
        if self._fd is None:
            raise WalBroken(f"{self.directory}: WAL is closed")

    def append(self, batch: Sequence[WalWrite], fp: Failpoint = no_fp) -> AppendResult:
        """Write a batch of entries (any groups) with one write and one fsync.

        Returns once the written entries are durable. Rolls to a new file afterwards if
        the current one passed ``max_size`` (``result.rolled`` names the closed file).
        """
        self._check()
        result = AppendResult(self.current_file)
        by_group: dict[str, list[WalWrite]] = {}
        for w in batch:
            lst = by_group.get(w.group)
            if lst is None:
                by_group[w.group] = [w]
            else:
                lst.append(w)
        parts: list[bytes] = []
        new_last: dict[str, int] = {}
        for g, writes in by_group.items():
            cur = self._last.get(g)
            st = self.snapshot_states.get(g)
            snap = st.snapshot_index if st is not None else None
            smallest = st.smallest_live_index if st is not None else 0
            items: list[tuple[int, Entry]] = []
            idxs: list[int] = []
            for w in writes:
                e = w.entry
                i = e.index
                prev = w.prev_index
                if i < 1:
                    raise ValueError(f"raft indexes start at 1, got {i}")
                if prev is None:
                    if cur is not None and i > cur + 1 and (snap is None or i - 1 > snap):
                        result.rejected[g] = cur + 1  # a gap no snapshot covers
                        break
                    prev = NO_PREV
                else:
                    if prev >= i or prev < 0:
                        raise ValueError(f"sparse write {i} must be above its prev_index {prev}")
                    if cur is not None and prev > cur:
                        result.rejected[g] = cur + 1  # a gap in the sparse sequence
                        break
                cur = i
                if i < smallest:
                    result.skipped.setdefault(g, []).append(i)
                    continue
                items.append((prev, e))
                idxs.append(i)
            if cur is not None:
                new_last[g] = cur
            if items:
                gid = self._group_ids.get(g)
                if gid is None:
                    gb = g.encode("utf-8")
                    gid = self._group_ids[g] = (gb, zlib.crc32(gb))
                parts += encode_group(gid[0], gid[1], items)
                result.written[g] = idxs
        if parts:
            data = b"".join(parts)
            fd = self._fd
            assert fd is not None
            try:
                write_all(fd, data)
                fp("wal.before_fsync")
                os.fsync(fd)
            except BaseException:
                self._broken = True
                raise
            self._size += len(data)
            self._last.update(new_last)
            fp("wal.after_fsync")
        else:
            self._last.update(new_last)
        if self._size >= self.max_size:
            result.rolled = self.roll(fp)
        return result
