"""Object entries: what a path points at (lakeFS's catalog entry, trimmed), and how a
staged entry or tombstone is stored as a KV value.

An `Entry` is a pointer: the object's physical address, size, checksum and user
metadata; the bytes live elsewhere. A `Record` is `(path, entry)` with entry None for
a tombstone (a staged delete). Staged values in the KV: an entry is compact JSON, a
tombstone is the empty value, so 100,000 deletes cost 100,000 short keys and no JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from sediment.actors.branches.errors import CorruptRecord, InvalidEntry

MAX_ADDRESS_CHARS: Final = 2048
MAX_CHECKSUM_CHARS: Final = 256
MAX_METADATA_BYTES: Final = 8192  # keys and values together, in UTF-8 (S3 allows 2 KiB)
TOMBSTONE: Final = b""


@dataclass(frozen=True, slots=True)
class Entry:
    """Where an object's bytes are and what they are. `metadata` is sorted (key, value)
    pairs, so equal entries compare and hash equal."""

    address: str
    size: int
    checksum: str
    metadata: tuple[tuple[str, str], ...] = ()

    @property
    def user_metadata(self) -> dict[str, str]:
        return dict(self.metadata)


Record = tuple[str, Entry | None]
"""(path, entry); entry None is a tombstone: the path is deleted in this layer."""


def make_entry(address: object, size: object, checksum: object,
               metadata: Mapping[str, str] | None = None) -> Entry:
    """A checked Entry: InvalidEntry for a bad field, before anything is written."""
    if not isinstance(address, str) or not address or len(address) > MAX_ADDRESS_CHARS:
        raise InvalidEntry(f"address must be a non-empty str of at most {MAX_ADDRESS_CHARS} "
                           f"characters: {address!r:.80}")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0 or size >= 1 << 63:
        raise InvalidEntry(f"size must be an int in [0, 2**63): {size!r:.80}")
    if not isinstance(checksum, str) or len(checksum) > MAX_CHECKSUM_CHARS:
        raise InvalidEntry(f"checksum must be a str of at most {MAX_CHECKSUM_CHARS} "
                           f"characters: {checksum!r:.80}")
    pairs: list[tuple[str, str]] = []
    total = 0
    if metadata is not None:
        if not isinstance(metadata, Mapping):
            raise InvalidEntry(f"metadata must be a mapping of str to str: {metadata!r:.80}")
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str) or not k:
                raise InvalidEntry(f"metadata must map non-empty str to str: {k!r:.40}")
            try:
                total += len(k.encode()) + len(v.encode())
            except UnicodeEncodeError as err:
                raise InvalidEntry("metadata is not valid Unicode") from err
            pairs.append((k, v))
    if total > MAX_METADATA_BYTES:
        raise InvalidEntry(f"metadata is {total} bytes, more than {MAX_METADATA_BYTES}")
    for text in (address, checksum):
        try:
            text.encode()
        except UnicodeEncodeError as err:
            raise InvalidEntry("address and checksum must be valid Unicode") from err
    return Entry(address, size, checksum, tuple(sorted(pairs)))


def metadata_json(entry: Entry) -> str:
    """The metadata as canonical JSON ("" when there is none)."""
    if not entry.metadata:
        return ""
    return json.dumps(dict(entry.metadata), separators=(",", ":"), sort_keys=True,
                      ensure_ascii=False)


def metadata_from_json(text: str) -> tuple[tuple[str, str], ...]:
    if not text:
        return ()
    doc = json.loads(text)
    if not isinstance(doc, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in doc.items()):
        raise ValueError("metadata is not an object of strings")
    return tuple(sorted(doc.items()))


def encode_value(entry: Entry | None) -> bytes:
    """The KV value of a staged entry (or tombstone)."""
    if entry is None:
        return TOMBSTONE
    doc: dict[str, object] = {"a": entry.address, "s": entry.size, "c": entry.checksum}
    if entry.metadata:
        doc["m"] = dict(entry.metadata)
    return json.dumps(doc, separators=(",", ":"), sort_keys=True,
                      ensure_ascii=False).encode("utf-8")


def decode_value(value: bytes, key: bytes = b"") -> Entry | None:
    """A staged KV value back to an entry (None: tombstone); CorruptRecord if it is
    not one this module wrote."""
    if value == TOMBSTONE:
        return None
    try:
        doc = json.loads(value.decode("utf-8"))
        if not isinstance(doc, dict) or set(doc) - {"a", "s", "c", "m"}:
            raise ValueError("unexpected fields")
        return make_entry(doc["a"], doc["s"], doc["c"], doc.get("m"))
    except (ValueError, KeyError, TypeError, InvalidEntry) as err:
        raise CorruptRecord(f"staged value at {key!r:.120} does not decode: {err}") from None


__all__ = [
    "MAX_ADDRESS_CHARS",
    "MAX_CHECKSUM_CHARS",
    "MAX_METADATA_BYTES",
    "TOMBSTONE",
    "Entry",
    "Record",
    "decode_value",
    "encode_value",
    "make_entry",
    "metadata_from_json",
    "metadata_json",
]
