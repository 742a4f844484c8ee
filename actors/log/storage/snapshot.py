"""Snapshots with a live-index file, and the snapshot state WAL and segments consult.

Why: a Ra-style snapshot holds the machine's state *without* the entries it still
needs (its live indexes: for a ra_kv machine, each key's latest put); those entries
stay in the log and the snapshot lists them. The WAL and the segment writer use the
resulting `SnapshotState` to avoid writing entries nobody needs any more.

Layout, per group: ``<root>/<index>-<term>/`` (both zero-padded to 16 digits) with

- ``snapshot``: the machine's bytes (size and crc32 recorded in ``meta``);
- ``indexes``: the live indexes as runs ``(first, last)``, framed with a crc32;
- ``meta``: JSON (index, term, smallest live index, sizes, crc, machine meta), framed.

Writing goes to ``<root>/.tmp-<index>-<term>``: every file fsynced, the temp dir fsynced,
renamed, the root fsynced (the snapshot exists from then on), and only then are older
snapshots removed. Because older snapshots are removed before any compaction can rely
on the new one, falling back to an older snapshot at recovery (the newest is damaged)
never meets a log compacted for the newer one.
"""

from __future__ import annotations

import bisect
import json
import os
import shutil
import sys
import zlib
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sediment.log import get_logger

from .errors import CorruptSnapshot
from .failpoints import Failpoint, no_fp
from .fsutil import (
    FrameError,
    frame,
    fsync_dir,
    list_dir,
    makedirs_durable,
    read_file,
    unframe,
    write_all,
    write_file_durable,
)

__all__ = [
    "CorruptSnapshot",
    "SnapshotInfo",
    "SnapshotRecovery",
    "SnapshotState",
    "SnapshotWriter",
    "decode_indexes",
    "encode_indexes",
    "latest",
    "read_data",
    "read_chunks",
    "recover",
    "write_snapshot",
]

_log = get_logger("sediment.log.storage.snapshot")

DATA_FILE: Final = "snapshot"
INDEXES_FILE: Final = "indexes"
META_FILE: Final = "meta"
TMP_PREFIX: Final = ".tmp-"
CORRUPT_SUFFIX: Final = ".corrupt"
_KIND_META: Final = b"META"
_KIND_INDEXES: Final = b"LIVE"


@dataclass(frozen=True, slots=True)
class SnapshotState:
    """What the WAL and the segment writer need to know about a group's snapshot.

    ``snapshot_index`` 0 means no snapshot. ``smallest_live_index`` is the minimum of
    ``snapshot_index + 1`` and the first live index: nothing below it is ever needed.
    ``live_indexes`` are sorted, unique and <= ``snapshot_index``.
    """

    snapshot_index: int
    smallest_live_index: int
    live_indexes: tuple[int, ...] = ()
    _live_set: frozenset[int] = field(default=frozenset(), repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_live_set", frozenset(self.live_indexes))

    @classmethod
    def initial(cls) -> SnapshotState:
        """The state of a group that never took a snapshot: keep everything."""
        return cls(0, 1, ())

    @classmethod
    def of(cls, snapshot_index: int, live_indexes: Iterable[int]) -> SnapshotState:
        """Normalise the machine's live indexes (any order, duplicates allowed)."""
        live = tuple(sorted(set(live_indexes)))
        if live and (live[0] < 1 or live[-1] > snapshot_index):
            raise ValueError(
                f"live indexes must be in [1, {snapshot_index}], got {live[0]}..{live[-1]}"
            )
        smallest = min(snapshot_index + 1, live[0]) if live else snapshot_index + 1
        return cls(snapshot_index, smallest, live)

    def keeps(self, index: int) -> bool:
        """True if an entry at ``index`` is still needed (normal section or live)."""
        if index < self.smallest_live_index:
            return False
        return index > self.snapshot_index or index in self._live_set

    def is_live(self, index: int) -> bool:
        return index in self._live_set

    def live_in(self, first: int, last: int) -> tuple[int, ...]:
        """Live indexes in ``[first, last]``, ascending."""
        lo = bisect.bisect_left(self.live_indexes, first)
        hi = bisect.bisect_right(self.live_indexes, last)
        return self.live_indexes[lo:hi]

    def has_live_in(self, first: int, last: int) -> bool:
        lo = bisect.bisect_left(self.live_indexes, first)
        return lo < len(self.live_indexes) and self.live_indexes[lo] <= last


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """A complete, verified snapshot on disk."""

    path: str
    index: int
    term: int
    state: SnapshotState
    data_size: int
    data_crc: int
    meta: Mapping[str, Any]

    @property
    def data_path(self) -> str:
        return os.path.join(self.path, DATA_FILE)


@dataclass(frozen=True, slots=True)
class SnapshotRecovery:
    """What `recover` found: the snapshot to use and what it cleaned up."""

    latest: SnapshotInfo | None
    state: SnapshotState
    removed_partials: tuple[str, ...]
    rejected: tuple[str, ...]  # damaged snapshots, renamed to <name>.corrupt
    removed_older: tuple[str, ...]


# -- live index file ---------------------------------------------------------------------


def _runs(indexes: Sequence[int]) -> Iterator[tuple[int, int]]:
    if not indexes:
        return
    start = prev = indexes[0]
    for i in indexes[1:]:
        if i != prev + 1:
            yield start, prev
            start = i
        prev = i
    yield start, prev


def encode_indexes(indexes: Sequence[int]) -> bytes:
    """Sorted unique indexes as little-endian int64 runs ``first, last, first, last...``.

    Ra's ``ra_seq`` keeps adjacent indexes as ranges for the same reason: a ra_kv
    machine's live indexes cluster.
    """
    flat = array("q")
    for a, b in _runs(indexes):
        flat.append(a)
        flat.append(b)
    if sys.byteorder != "little":
        flat.byteswap()
    return flat.tobytes()


def decode_indexes(data: bytes) -> tuple[int, ...]:
    if len(data) % 16:
        raise ValueError(f"live index data is {len(data)} bytes, not a multiple of 16")
    flat = array("q")
    flat.frombytes(data)
    if sys.byteorder != "little":
        flat.byteswap()
    out: list[int] = []
    prev = 0
    for k in range(0, len(flat), 2):
        a, b = flat[k], flat[k + 1]
        if a > b or a <= prev:
            raise ValueError(f"live index runs out of order at {a}..{b}")
        out.extend(range(a, b + 1))
        prev = b
    return tuple(out)


# -- naming -------------------------------------------------------------------------------


def dir_name(index: int, term: int) -> str:
    return f"{index:016d}-{term:016d}"


def parse_dir_name(name: str) -> tuple[int, int] | None:
    head, sep, tail = name.partition("-")
    if not sep or not head.isdigit() or not tail.isdigit():
        return None
    return int(head), int(tail)


# -- writing ------------------------------------------------------------------------------


class SnapshotWriter:
    """Writes one snapshot incrementally (a local snapshot, or chunks being installed).

    ``write`` the machine's bytes in any number of chunks, then ``commit`` with the live
    indexes; ``abort`` removes the temp dir. Nothing is visible until ``commit``
    renames the temp dir.
    """

    def __init__(self, root: str, index: int, term: int) -> None:
        if index < 1 or term < 0:
            raise ValueError(f"bad snapshot position index={index} term={term}")
        makedirs_durable(root)
        self.root = root
        self.index = index
        self.term = term
        self.tmp = os.path.join(root, f"{TMP_PREFIX}{dir_name(index, term)}")
        if os.path.exists(self.tmp):
            shutil.rmtree(self.tmp)
        os.mkdir(self.tmp)
        self._fd: int | None = os.open(
            os.path.join(self.tmp, DATA_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644
        )
        self._size = 0
        self._crc = 0

    def write(self, chunk: bytes) -> None:
        if self._fd is None:
            raise ValueError("snapshot writer is closed")
        write_all(self._fd, chunk)
        self._size += len(chunk)
        self._crc = zlib.crc32(chunk, self._crc)

    def abort(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        shutil.rmtree(self.tmp, ignore_errors=True)

    def commit(
        self,
        live_indexes: Iterable[int],
        meta: Mapping[str, Any] | None = None,
        fp: Failpoint = no_fp,
    ) -> SnapshotInfo:
        """Make the snapshot durable and visible, then drop older snapshots."""
        if self._fd is None:
            raise ValueError("snapshot writer is closed")
        state = SnapshotState.of(self.index, live_indexes)
        fd, self._fd = self._fd, None
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fp("snapshot.after_data_sync")
        write_file_durable(
            os.path.join(self.tmp, INDEXES_FILE),
            frame(_KIND_INDEXES, encode_indexes(state.live_indexes)),
            sync_dir=False,
        )
        fp("snapshot.after_indexes")
        doc = {
            "version": 1,
            "index": self.index,
            "term": self.term,
            "smallest_live_index": state.smallest_live_index,
            "live_count": len(state.live_indexes),
            "data_size": self._size,
            "data_crc": self._crc,
            "machine": dict(meta or {}),
        }
        write_file_durable(
            os.path.join(self.tmp, META_FILE),
            frame(_KIND_META, json.dumps(doc, sort_keys=True).encode()),
            sync_dir=False,
        )
        fp("snapshot.after_meta")
        fsync_dir(self.tmp)
        fp("snapshot.before_rename")
        final = os.path.join(self.root, dir_name(self.index, self.term))
        if os.path.exists(final):
            # The same snapshot again (an install resent): keep the one on disk if valid.
            try:
                existing = _load(final)
            except CorruptSnapshot:
                os.rename(final, final + CORRUPT_SUFFIX)
            else:
                shutil.rmtree(self.tmp)
                fsync_dir(self.root)
                return existing
        os.rename(self.tmp, final)
        fp("snapshot.after_rename")
        fsync_dir(self.root)
        fp("snapshot.after_dir_sync")
        info = SnapshotInfo(final, self.index, self.term, state, self._size, self._crc, doc)
        _delete_older(self.root, (self.index, self.term), fp)
        return info


def write_snapshot(
    root: str,
    index: int,
    term: int,
    data: bytes | Iterable[bytes],
    live_indexes: Iterable[int],
    meta: Mapping[str, Any] | None = None,
    fp: Failpoint = no_fp,
) -> SnapshotInfo:
    """Write a whole snapshot (see `SnapshotWriter` for the steps)."""
    w = SnapshotWriter(root, index, term)
    try:
        if isinstance(data, bytes | bytearray | memoryview):
            w.write(bytes(data))
        else:
            for chunk in data:
                w.write(chunk)
        return w.commit(live_indexes, meta, fp)
    except BaseException:
        if w._fd is not None:
            w.abort()
        raise


def _delete_older(root: str, keep: tuple[int, int], fp: Failpoint) -> list[str]:
    older = [
        name for name in list_dir(root) if (pos := parse_dir_name(name)) is not None and pos < keep
    ]
    if not older:
        return []
    fp("snapshot.before_delete_old")
    for name in older:
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    fsync_dir(root)
    fp("snapshot.after_delete_old")
    return older


# -- reading and recovery ----------------------------------------------------------------


def _load(path: str) -> SnapshotInfo:
    """Read and verify every file of the snapshot at ``path``."""
    name = os.path.basename(path)
    pos = parse_dir_name(name)
    if pos is None:
        raise CorruptSnapshot(path, "not a snapshot directory name")
    try:
        doc = json.loads(unframe(_KIND_META, read_file(os.path.join(path, META_FILE))))
        live = decode_indexes(unframe(_KIND_INDEXES, read_file(os.path.join(path, INDEXES_FILE))))
    except FileNotFoundError as exc:
        raise CorruptSnapshot(path, f"missing file {os.path.basename(str(exc.filename))}") from None
    except (FrameError, ValueError) as exc:
        raise CorruptSnapshot(path, str(exc)) from None
    if (doc.get("index"), doc.get("term")) != pos:
        raise CorruptSnapshot(path, "meta does not match the directory name")
    try:
        state = SnapshotState.of(pos[0], live)
    except ValueError as exc:
        raise CorruptSnapshot(path, str(exc)) from None
    if state.smallest_live_index != doc.get("smallest_live_index") or len(live) != doc.get(
        "live_count"
    ):
        raise CorruptSnapshot(path, "live indexes do not match meta")
    size, crc = _file_crc(os.path.join(path, DATA_FILE))
    if size != doc.get("data_size") or crc != doc.get("data_crc"):
        raise CorruptSnapshot(path, "snapshot data fails its size or checksum")
    return SnapshotInfo(path, pos[0], pos[1], state, size, crc, doc)


def _file_crc(path: str) -> tuple[int, int]:
    crc = size = 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                crc = zlib.crc32(chunk, crc)
                size += len(chunk)
    except FileNotFoundError:
        raise CorruptSnapshot(path, "missing snapshot data file") from None
    return size, crc


def _candidates(root: str) -> list[tuple[tuple[int, int], str]]:
    found = [(pos, n) for n in list_dir(root) if (pos := parse_dir_name(n)) is not None]
    return sorted(found, reverse=True)


def latest(root: str) -> SnapshotInfo | None:
    """The newest snapshot that verifies, without changing anything on disk."""
    for _pos, name in _candidates(root):
        try:
            return _load(os.path.join(root, name))
        except CorruptSnapshot:
            continue
    return None


def recover(root: str, fp: Failpoint = no_fp) -> SnapshotRecovery:
    """Clean up after a crash and pick the snapshot to restore from.

    Removes temp dirs of unfinished writes, renames damaged snapshots to
    ``<name>.corrupt`` (kept for inspection) and falls back to the previous valid one,
    removes snapshots older than the one chosen. Unknown entries are left alone with a
    warning.
    """
    partials: list[str] = []
    rejected: list[str] = []
    for name in list_dir(root):
        path = os.path.join(root, name)
        if name.startswith(TMP_PREFIX):
            shutil.rmtree(path, ignore_errors=True)
            partials.append(name)
        elif parse_dir_name(name) is None and not name.endswith(CORRUPT_SUFFIX):
            _log.warning("unknown file in snapshot directory left alone", path=path)
    chosen: SnapshotInfo | None = None
    for _pos, name in _candidates(root):
        path = os.path.join(root, name)
        try:
            chosen = _load(path)
            break
        except CorruptSnapshot as exc:
            _log.warning("damaged snapshot rejected", path=path, reason=exc.reason)
            os.rename(path, path + CORRUPT_SUFFIX)
            rejected.append(name)
    older: list[str] = []
    if chosen is not None:
        older = _delete_older(root, (chosen.index, chosen.term), fp)
    if partials or rejected or older:
        fsync_dir(root)
    state = chosen.state if chosen is not None else SnapshotState.initial()
    return SnapshotRecovery(chosen, state, tuple(partials), tuple(rejected), tuple(older))


def read_data(info: SnapshotInfo) -> bytes:
    """The machine's snapshot bytes, verified against the recorded crc."""
    data = read_file(info.data_path)
    if len(data) != info.data_size or zlib.crc32(data) != info.data_crc:
        raise CorruptSnapshot(info.path, "snapshot data fails its size or checksum")
    return data


def read_chunks(info: SnapshotInfo, chunk_size: int = 1 << 20) -> Iterator[bytes]:
    """The snapshot bytes in chunks (for sending to a follower)."""
    with open(info.data_path, "rb") as f:
        while chunk := f.read(chunk_size):
            yield chunk
