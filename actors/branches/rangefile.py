"""Range and metarange files in the block store: Parquet, content-addressed, immutable.

A range file holds sorted entries (path -> address, size, checksum, user metadata, or
a tombstone flag for change sets); a metarange file holds the ordered list of its
ranges (id, first and last path, entry count, file size). A file's id is the
BLAKE2b-256 of its bytes, and its name is that id, so:
- writing is create-if-absent: a file with that name already holds exactly those bytes
  (a retried or concurrent write of the same range keeps it); new files are written
  to a temporary name, fsynced, linked in (never replacing anything) and the directory
  fsynced, the block store's protocol (`actors/blocks/block.py`);
- reading verifies: a file whose bytes do not hash to its name, that is not Parquet,
  has another schema or unsorted paths is `CorruptRange`; no file is `MissingRange`.
The bytes are a function of the entries alone (pyarrow's writer is deterministic for a
given version), so the same entries written twice get the same id.

Layout: `<root>/branches/<repo>/ranges/<id>.parquet` and `.../metaranges/<id>.parquet`.
Nothing else writes there, and the block store's own garbage rules (`blocks/gc.py`)
only list `shard-<n>` directories, so these files are never mistaken for blocks.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Sequence
from typing import Final, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from sediment.actors.branches.apply import RangeRef
from sediment.actors.branches.entry import Entry, Record, metadata_from_json, metadata_json
from sediment.actors.branches.errors import CorruptRange, MissingRange
from sediment.actors.log.storage.fsutil import fsync_dir, makedirs_durable

Kind = Literal["range", "metarange"]

RANGE_SCHEMA: Final = pa.schema([
    pa.field("path", pa.string(), nullable=False),
    pa.field("address", pa.string(), nullable=False),
    pa.field("size", pa.int64(), nullable=False),
    pa.field("checksum", pa.string(), nullable=False),
    pa.field("metadata", pa.string(), nullable=False),
    pa.field("tombstone", pa.bool_(), nullable=False),
])
METARANGE_SCHEMA: Final = pa.schema([
    pa.field("range_id", pa.string(), nullable=False),
    pa.field("min_path", pa.string(), nullable=False),
    pa.field("max_path", pa.string(), nullable=False),
    pa.field("count", pa.int64(), nullable=False),
    pa.field("size_bytes", pa.int64(), nullable=False),
])
COMPRESSION: Final = "zstd"
_DIRS: Final[dict[str, str]] = {"range": "ranges", "metarange": "metaranges"}


def repo_dir(root: str, repo: str) -> str:
    return os.path.join(root, "branches", repo)


def file_path(root: str, repo: str, kind: Kind, file_id: str) -> str:
    return os.path.join(repo_dir(root, repo), _DIRS[kind], f"{file_id}.parquet")


def content_id(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=32).hexdigest()


def _to_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression=COMPRESSION, write_statistics=False)
    return bytes(sink.getvalue().to_pybytes())


# ---- encoding -----------------------------------------------------------------------------


def encode_range(records: Sequence[Record]) -> bytes:
    """The Parquet bytes of a range of records sorted strictly by path."""
    for i in range(len(records) - 1):
        if not records[i][0] < records[i + 1][0]:
            raise ValueError(f"range records out of order at {records[i + 1][0]!r:.80}")
    entries = [e for _, e in records]
    table = pa.table({
        "path": pa.array([p for p, _ in records], pa.string()),
        "address": pa.array(["" if e is None else e.address for e in entries], pa.string()),
        "size": pa.array([0 if e is None else e.size for e in entries], pa.int64()),
        "checksum": pa.array(["" if e is None else e.checksum for e in entries], pa.string()),
        "metadata": pa.array(["" if e is None else metadata_json(e) for e in entries],
                             pa.string()),
        "tombstone": pa.array([e is None for e in entries], pa.bool_()),
    }, schema=RANGE_SCHEMA)
    return _to_bytes(table)


def encode_metarange(ranges: Sequence[RangeRef]) -> bytes:
    for i, r in enumerate(ranges):
        if r.count < 1 or r.min_path > r.max_path:
            raise ValueError(f"bad range {r}")
        if i and not ranges[i - 1].max_path < r.min_path:
            raise ValueError(f"ranges overlap or are out of order at {r.min_path!r:.80}")
    table = pa.table({
        "range_id": pa.array([r.id for r in ranges], pa.string()),
        "min_path": pa.array([r.min_path for r in ranges], pa.string()),
        "max_path": pa.array([r.max_path for r in ranges], pa.string()),
        "count": pa.array([r.count for r in ranges], pa.int64()),
        "size_bytes": pa.array([r.size_bytes for r in ranges], pa.int64()),
    }, schema=METARANGE_SCHEMA)
    return _to_bytes(table)


# ---- files ----------------------------------------------------------------------------------


def write_file(root: str, repo: str, kind: Kind, data: bytes) -> tuple[str, int]:
    """Store `data` under its content id (create-if-absent, durable); (id, size)."""
    file_id = content_id(data)
    path = file_path(root, repo, kind, file_id)
    if os.path.exists(path):
        with contextlib.suppress(FileNotFoundError):
            os.utime(path)  # reused: a flow counts on it now (garbage.py's grace)
        return file_id, len(data)
    directory = os.path.dirname(path)
    makedirs_durable(directory)
    fd, tmp = tempfile.mkstemp(prefix=f".{file_id}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(FileExistsError):  # a concurrent writer linked it first
            os.link(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(directory)
    return file_id, len(data)


def write_range(root: str, repo: str, records: Sequence[Record]) -> RangeRef:
    if not records:
        raise ValueError("a range holds at least one record")
    file_id, size = write_file(root, repo, "range", encode_range(records))
    return RangeRef(file_id, records[0][0], records[-1][0], len(records), size)


def write_metarange(root: str, repo: str, ranges: Sequence[RangeRef]) -> str:
    return write_file(root, repo, "metarange", encode_metarange(ranges))[0]


def _read_table(root: str, repo: str, kind: Kind, file_id: str,
                schema: pa.Schema) -> tuple[pa.Table, str]:
    path = file_path(root, repo, kind, file_id)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise MissingRange(kind, file_id, path, "no such file") from None
    if content_id(data) != file_id:
        raise CorruptRange(kind, file_id, path, "content does not match its id")
    try:
        # one thread, the plain file reader: a range is small, and Arrow's thread pools
        # left running at interpreter exit abort a short-lived process now and then
        # ("terminate called without an active exception", apache/arrow#34314)
        table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
    except (pa.ArrowException, OSError, ValueError) as err:
        raise CorruptRange(kind, file_id, path, f"{type(err).__name__}: {err}") from err
    if not table.schema.remove_metadata().equals(schema):
        raise CorruptRange(kind, file_id, path, "not the expected schema")
    return table, path


def decode_records(table: pa.Table) -> list[Record]:
    """The records of a table in `RANGE_SCHEMA`; ValueError unless paths increase."""
    cols = table.to_pydict()
    out: list[Record] = []
    last: str | None = None
    for p, a, s, c, m, t in zip(cols["path"], cols["address"], cols["size"],
                                cols["checksum"], cols["metadata"], cols["tombstone"],
                                strict=True):
        if last is not None and not last < p:
            raise ValueError(f"paths out of order at {p!r:.80}")
        last = p
        out.append((p, None if t else Entry(a, s, c, metadata_from_json(m))))
    return out


def read_range(root: str, repo: str, file_id: str) -> list[Record]:
    """The records of range `file_id`, verified (MissingRange, CorruptRange)."""
    table, path = _read_table(root, repo, "range", file_id, RANGE_SCHEMA)
    try:
        out = decode_records(table)
    except ValueError as err:
        raise CorruptRange("range", file_id, path, str(err)) from err
    if not out:
        raise CorruptRange("range", file_id, path, "no records")
    return out


def read_metarange(root: str, repo: str, file_id: str) -> list[RangeRef]:
    table, path = _read_table(root, repo, "metarange", file_id, METARANGE_SCHEMA)
    cols = table.to_pydict()
    ranges = [RangeRef(i, lo, hi, n, s) for i, lo, hi, n, s in zip(
        cols["range_id"], cols["min_path"], cols["max_path"], cols["count"], cols["size_bytes"],
        strict=True)]
    for k, r in enumerate(ranges):
        if r.count < 1 or r.min_path > r.max_path or (k and not ranges[k - 1].max_path
                                                          < r.min_path):
            raise CorruptRange("metarange", file_id, path, f"ranges out of order at {k}")
    return ranges


def list_files(root: str, repo: str, kind: Kind) -> list[str]:
    """The ids of the repository's files of `kind` (temporary files excluded)."""
    directory = os.path.join(repo_dir(root, repo), _DIRS[kind])
    if not os.path.isdir(directory):
        return []
    return sorted(name[:-len(".parquet")] for name in os.listdir(directory)
                  if name.endswith(".parquet") and not name.startswith("."))


def remove_file(root: str, repo: str, kind: Kind, file_id: str) -> bool:
    path = file_path(root, repo, kind, file_id)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    fsync_dir(os.path.dirname(path))
    return True


__all__ = [
    "METARANGE_SCHEMA",
    "RANGE_SCHEMA",
    "Kind",
    "content_id",
    "decode_records",
    "encode_metarange",
    "encode_range",
    "file_path",
    "list_files",
    "read_metarange",
    "read_range",
    "remove_file",
    "repo_dir",
    "write_file",
    "write_metarange",
    "write_range",
]
