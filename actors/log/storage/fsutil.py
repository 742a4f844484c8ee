"""Small durable-file helpers shared by the storage modules.

Why: every durability step is "write everything, fsync the file, fsync the directory
that names it"; getting one of those wrong loses data only after a power cut, so they
live in one place. Also the checksummed framing used by small metadata files (snapshot
meta, live indexes, compaction markers).
"""

from __future__ import annotations

import contextlib
import os
import stat
import struct
import zlib
from typing import Final

FRAME_MAGIC: Final = b"SDF1"
_FRAME = struct.Struct("<4s4sQI")  # magic, kind, payload length, crc32(payload)


class FrameError(ValueError):
    """A framed file is short, has the wrong magic or kind, or fails its checksum."""


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """os.write until every byte is written (os.write may write less)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def fsync_dir(path: str) -> None:
    """Make renames, creations and unlinks inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def makedirs_durable(path: str) -> None:
    """Create ``path`` (and parents) and fsync each parent that gained an entry."""
    path = os.path.abspath(path)
    missing: list[str] = []
    cur = path
    while not os.path.isdir(cur):
        missing.append(cur)
        parent = os.path.dirname(cur)
        if parent == cur:
            break
        cur = parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d)
        fsync_dir(os.path.dirname(d))


def write_file_durable(path: str, data: bytes, *, sync_dir: bool = True) -> None:
    """Create or replace ``path`` with ``data``, fsync it and (by default) its directory."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    if sync_dir:
        fsync_dir(os.path.dirname(os.path.abspath(path)))


def frame(kind: bytes, payload: bytes) -> bytes:
    """Checksummed framing: magic, 4-byte kind, length, crc32, payload."""
    if len(kind) != 4:
        raise ValueError("frame kind must be 4 bytes")
    return _FRAME.pack(FRAME_MAGIC, kind, len(payload), zlib.crc32(payload)) + payload


def unframe(kind: bytes, data: bytes) -> bytes:
    """The payload of a framed blob; FrameError if anything does not match."""
    if len(data) < _FRAME.size:
        raise FrameError(f"short frame: {len(data)} bytes")
    magic, got_kind, length, crc = _FRAME.unpack_from(data)
    if magic != FRAME_MAGIC:
        raise FrameError("bad frame magic")
    if got_kind != kind:
        raise FrameError(f"frame kind {got_kind!r}, expected {kind!r}")
    payload = data[_FRAME.size :]
    if len(payload) != length:
        raise FrameError(f"frame length {len(payload)}, header says {length}")
    if zlib.crc32(payload) != crc:
        raise FrameError("frame checksum mismatch")
    return payload


def read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def list_dir(path: str) -> list[str]:
    """Sorted names in ``path``; [] if it does not exist."""
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []


def is_regular(path: str) -> bool:
    """True for a regular file that is not a symlink."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def is_symlink(path: str) -> bool:
    return os.path.islink(path)


def unlink_if_exists(path: str) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True
