"""The entry record encoding shared by the WAL and segment files.

Why: one encoding, one checksum rule and one place that decides what a damaged byte
range means, so the WAL and the segments recover the same way.

A record is::

    header   <BBHIqqqqI I>  magic, kind, group_len, payload_len, index, term,
                            timestamp, prev_index, body_crc, header_crc
    group    utf-8 bytes    (WAL records only; empty in segments)
    payload  bytes

``body_crc`` is crc32(group + payload); ``header_crc`` is crc32 of the 44 header bytes
before it, body_crc included, so one chain of CRC32s covers header and payload. The
header carries its own CRC so a reader can trust the lengths: it can then tell "the
file ends inside this record" (an append that never finished) from "these bytes are
wrong", and look past a damaged payload to see whether valid data follows. (The body
CRC sits in the header so a writer checksums each group id once, not per record.)

How damage is classified, at the record starting at ``offset``:

- `TornTail`: the file ends inside the record, or nothing but zero bytes follows the
  damaged record (an interrupted append; a zero-filled tail). Recovery cuts it off.
- `CorruptRecord`: the record is bad and non-zero data follows it: bytes that were
  durable are damaged. Never skipped silently.

``kind``: `ENTRY` (a normal, contiguous write), `SPARSE` (a WAL write that names the
previous index of a sparse sequence, Ra's ``write/7``), `INDEX` (the index block that
seals a segment).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from .errors import CorruptRecord, RecordError, TornTail

__all__ = [
    "ENTRY",
    "HEADER_SIZE",
    "INDEX",
    "KINDS",
    "MAGIC",
    "NO_PREV",
    "SPARSE",
    "CorruptRecord",
    "Entry",
    "Record",
    "RecordError",
    "TornTail",
    "decode",
    "decode_raw",
    "encode",
    "encode_group",
    "encode_entry",
    "iter_records",
    "raw_index",
    "raw_is_valid",
]

MAGIC: Final = 0xC5
ENTRY: Final = 1
SPARSE: Final = 2
INDEX: Final = 3
KINDS: Final = frozenset({ENTRY, SPARSE, INDEX})

_HEAD = struct.Struct("<BBHIqqqqI")  # 44 bytes, then the header crc
_U32 = struct.Struct("<I")
HEADER_SIZE: Final = _HEAD.size + 4  # 48
NO_PREV: Final = -1
_crc32 = zlib.crc32


@dataclass(frozen=True, slots=True)
class Entry:
    """One raft log entry: position, term, the leader's append timestamp, the command.

    ``timestamp`` is an integer chosen by the caller (the leader's clock, e.g. ms); the
    storage never reads a clock.
    """

    index: int
    term: int
    timestamp: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class Record:
    """A decoded record and where it sits (``offset``, ``size`` in bytes)."""

    kind: int
    index: int
    term: int
    timestamp: int
    payload: bytes
    group: str
    prev_index: int  # NO_PREV (-1) unless kind == SPARSE
    offset: int
    size: int

    @property
    def entry(self) -> Entry:
        return Entry(self.index, self.term, self.timestamp, self.payload)


def encode(
    index: int,
    term: int,
    timestamp: int,
    payload: bytes,
    *,
    group: bytes = b"",
    prev_index: int = NO_PREV,
    kind: int = ENTRY,
) -> bytes:
    """Encode one record. ``group`` is the utf-8 group id (WAL only)."""
    body = _crc32(payload, _crc32(group)) if group else _crc32(payload)
    head = _HEAD.pack(
        MAGIC, kind, len(group), len(payload), index, term, timestamp, prev_index, body
    )
    return b"".join((head, _U32.pack(_crc32(head)), group, payload))


def encode_group(group: bytes, group_crc: int, items: Sequence[tuple[int, Entry]]) -> list[bytes]:
    """The parts (to be joined) of many records of one group: ``(prev_index, entry)``
    items, ``group_crc`` = ``zlib.crc32(group)``. The WAL's group-commit hot loop."""
    pack = _HEAD.pack
    u32 = _U32.pack
    crc32 = _crc32
    glen = len(group)
    parts: list[bytes] = []
    add = parts.extend
    for prev, e in items:
        payload = e.payload
        head = pack(
            MAGIC,
            ENTRY if prev == NO_PREV else SPARSE,
            glen,
            len(payload),
            e.index,
            e.term,
            e.timestamp,
            prev,
            crc32(payload, group_crc),
        )
        add((head, u32(crc32(head)), group, payload))
    return parts


def encode_entry(entry: Entry, *, group: bytes = b"", prev_index: int | None = None) -> bytes:
    """Encode an `Entry`; a ``prev_index`` makes it a `SPARSE` record."""
    if prev_index is None:
        return encode(entry.index, entry.term, entry.timestamp, entry.payload, group=group)
    return encode(
        entry.index,
        entry.term,
        entry.timestamp,
        entry.payload,
        group=group,
        prev_index=prev_index,
        kind=SPARSE,
    )


def _zeros_from(buf: bytes | memoryview, start: int) -> bool:
    """True if every byte of ``buf`` from ``start`` on is zero (or there are none)."""
    if start >= len(buf):
        return True
    tail = bytes(buf[start:])
    return not tail.strip(b"\x00")


def decode(buf: bytes | memoryview, offset: int = 0, *, source: str = "") -> Record:
    """Decode and verify the record at ``offset``; TornTail or CorruptRecord if bad."""
    n = len(buf)
    if n - offset < HEADER_SIZE:
        raise TornTail(source, offset, f"partial header ({n - offset} bytes)")
    magic, kind, glen, plen, index, term, ts, prev, body_crc = _HEAD.unpack_from(buf, offset)
    (hcrc,) = _U32.unpack_from(buf, offset + _HEAD.size)
    if magic != MAGIC or kind not in KINDS or _crc32(buf[offset : offset + _HEAD.size]) != hcrc:
        if _zeros_from(buf, offset + HEADER_SIZE):
            raise TornTail(source, offset, "damaged header at the end of the data")
        raise CorruptRecord(source, offset, "record header fails its checksum")
    body = offset + HEADER_SIZE
    end = body + glen + plen
    if end > n:
        raise TornTail(source, offset, f"record needs {end - offset} bytes, {n - offset} left")
    if _crc32(buf[body:end]) != body_crc:
        if _zeros_from(buf, end):
            raise TornTail(source, offset, "last record fails its checksum")
        raise CorruptRecord(source, offset, f"record {index} fails its checksum")
    group = bytes(buf[body : body + glen]).decode("utf-8") if glen else ""
    payload = bytes(buf[body + glen : end])
    return Record(kind, index, term, ts, payload, group, prev, offset, end - offset)


def iter_records(buf: bytes | memoryview, offset: int = 0, *, source: str = "") -> Iterator[Record]:
    """Every record from ``offset`` to the end of ``buf``; raises at the first bad one.

    The caller sees the records decoded so far before the error (it is a generator), so
    recovery can keep them and cut the file at ``err.offset`` on TornTail.
    """
    n = len(buf)
    while offset < n:
        rec = decode(buf, offset, source=source)
        yield rec
        offset += rec.size


def raw_is_valid(raw: bytes | memoryview) -> bool:
    """True if ``raw`` is exactly one intact record (used before copying it verbatim)."""
    try:
        raw_index(raw)
    except CorruptRecord:
        return False
    return True


def raw_index(raw: bytes | memoryview, *, source: str = "") -> int:
    """The index of the one intact record that is all of ``raw``; CorruptRecord if not.

    Cheaper than `decode_raw` (checksums only, no copies): what a verbatim copy needs.
    """
    n = len(raw)
    if n < HEADER_SIZE:
        raise CorruptRecord(source, 0, f"{n} bytes is shorter than a record")
    magic, _kind, glen, plen, index, _term, _ts, _prev, body_crc = _HEAD.unpack_from(raw)
    (hcrc,) = _U32.unpack_from(raw, _HEAD.size)
    if magic != MAGIC or HEADER_SIZE + glen + plen != n:
        raise CorruptRecord(source, 0, "record length does not match")
    if _crc32(raw[: _HEAD.size]) != hcrc or _crc32(raw[HEADER_SIZE:]) != body_crc:
        raise CorruptRecord(source, 0, f"record {index} fails its checksum")
    return int(index)


def decode_raw(raw: bytes | memoryview, *, source: str = "") -> Record:
    """Decode a buffer that must hold exactly one record; any damage is CorruptRecord."""
    try:
        rec = decode(raw, 0, source=source)
    except TornTail as exc:
        raise CorruptRecord(source, 0, exc.reason) from None
    if rec.size != len(raw):
        raise CorruptRecord(source, 0, f"record is {rec.size} bytes, expected {len(raw)}")
    return rec
