"""Block files: the Parquet schema, writing a block durably, reading and verifying one.

A block is the committed history of one shard over a revision range: rows (revision,
key, value, flags) sorted by (key, revision), each (key, revision) once. A tombstone
(a delete) has FLAG_TOMBSTONE and a null value; a put has a value (b"" allowed).

Writing is crash-safe: the table goes to a temporary file in the block's directory,
which is fsynced, then linked to `<root>/shard-<n>/<id>.parquet` (a link never replaces
an existing file) and the directory fsynced. A crash leaves either no file under the
final name or the whole block; the temporary files a crash leaves behind start with "."
and end in ".tmp" (`remove_temp_files`; `meta.parse_file_name` names their block).
Pages carry checksums, and the file embeds the block's metadata (all but its own
size), so `read_block` can tell a missing file (`MissingBlock`) from one that is
damaged or is another block (`CorruptBlock`).

Block files are write-once. A write of an id whose file exists (a retry after a crash,
a second flusher, a concurrent writer that linked first) keeps that file when it holds
exactly the same rows and returns the file's own metadata (its `created_at`,
compaction revision, size and checksum), so the caller proposes what is on disk;
different rows are a `BlockConflict`.

`BlockMeta` and the names live in `meta.py` (no pyarrow there, for the pure cores), the
schema, `Row` and the table checks in `block_table.py`; both are re-exported here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import BinaryIO, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sediment.actors.blocks.block_table import (
    FLAG_TOMBSTONE,
    SCHEMA,
    Row,
    check_table,
    describe,
    empty_table,
    rows_to_table,
    sorted_unique,
    table_rows,
)
from sediment.actors.blocks.errors import BlockConflict, CorruptBlock, InvalidRows, MissingBlock
from sediment.actors.blocks.meta import (
    BlockMeta,
    block_relpath,
    compacted_block_id,
    level0_block_id,
    meta_from_json,
    meta_to_json,
)
from sediment.actors.log.storage.failpoints import Failpoint, no_fp
from sediment.actors.log.storage.fsutil import fsync_dir, makedirs_durable

META_KEY: Final = b"sediment.block"
COMPRESSION: Final = "zstd"

BLOCK_FAILPOINTS: Final[tuple[str, ...]] = (
    "block.after_temp_sync",  # the whole block is durable in its temporary file
    "block.before_rename",  # about to link it under the final name
    "block.after_rename",  # linked, the directory not yet fsynced
)


# ---- files -------------------------------------------------------------------


def block_path(root: str, shard: int, block_id: str) -> str:
    return os.path.join(root, block_relpath(shard, block_id))


def file_checksum(data: bytes) -> str:
    """The checksum a block's metadata records for its file."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _unsized(meta: BlockMeta) -> BlockMeta:
    """What the file itself embeds: everything but its size and checksum."""
    return replace(meta, size_bytes=0, checksum="")


def _embedded(meta: BlockMeta) -> bytes:
    doc = meta_to_json(_unsized(meta))
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def write_block(root: str, table: pa.Table, *, block_id: str, shard: int, level: int,
                created_at: float, compaction_revision: int = 0,
                fp: Failpoint = no_fp) -> BlockMeta:
    """Write `table` as block `block_id` durably and return its metadata.

    InvalidRows if the table is not a block table. If the file already exists (a retried
    write), it is kept when it holds exactly these rows and its metadata is returned,
    whatever `created_at` this call had; BlockConflict if its rows differ, CorruptBlock
    if it is damaged: an existing block is never replaced."""
    table = table.combine_chunks()
    problem = check_table(table)
    if problem is not None:
        raise InvalidRows(problem)
    table = table.replace_schema_metadata(None)
    meta = describe(table, block_id=block_id, shard=shard, level=level, created_at=created_at,
                    compaction_revision=compaction_revision)
    path = block_path(root, shard, block_id)
    directory = os.path.dirname(path)
    makedirs_durable(directory)
    if os.path.exists(path):
        return _existing(path, table, meta)

    def write(out: BinaryIO) -> None:
        stamped = table.replace_schema_metadata({META_KEY: _embedded(meta)})
        pq.write_table(stamped, out, compression=COMPRESSION, write_page_checksum=True)

    return _install(path, meta, write, lambda: _existing(path, table, meta), fp)


def _install(path: str, meta: BlockMeta, write: Callable[[BinaryIO], None],
             existing: Callable[[], BlockMeta], fp: Failpoint) -> BlockMeta:
    """Write a block file durably: `write` fills a temporary file next to `path`, which
    is fsynced, linked to `path` (the commit point) and its directory fsynced; `meta`
    with the file's size and checksum. The link fails if another writer installed the
    block first: then `existing()` decides (its file, or BlockConflict). Nothing is left
    under the final name on failure, and the temporary file goes in every case."""
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{meta.id}.", suffix=".tmp", dir=directory)
    raced = False
    try:
        with os.fdopen(fd, "wb") as raw:
            out = _Hashing(raw)
            write(out)  # type: ignore[arg-type]  # a write-only file, all pyarrow needs
            raw.flush()
            os.fsync(raw.fileno())
        fp("block.after_temp_sync")
        fp("block.before_rename")
        try:
            os.link(tmp, path)
        except FileExistsError:
            raced = True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    if raced:
        return existing()
    fp("block.after_rename")
    fsync_dir(directory)
    return replace(meta, size_bytes=out.size, checksum=out.hash.hexdigest())


class _Hashing:
    """A write-only file that checksums what goes through it, so a block's checksum
    costs no second read of a file that may be gigabytes (same digest as
    `file_checksum`)."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.hash = hashlib.blake2b(digest_size=16)
        self.size = 0
        self.closed = False

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.size += len(data)
        return self.raw.write(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self.raw.flush()

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def close(self) -> None:  # the caller closes the real file after its fsync
        self.closed = True


def _existing(path: str, table: pa.Table, meta: BlockMeta) -> BlockMeta:
    """The metadata of the block file already at `path` when it holds exactly `table`'s
    rows: the file's own (created_at and compaction revision as first written, its size
    and checksum), since that file is what the index must describe. BlockConflict if
    its rows differ; CorruptBlock if it is damaged or is another block's file."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        schema = pq.read_schema(pa.BufferReader(data))
    except (pa.ArrowException, OSError, ValueError) as err:
        raise CorruptBlock(meta.id, path, f"{type(err).__name__}: {err}") from err
    stamped = _stamp(schema.metadata)
    if stamped is None or (stamped.id, stamped.shard, stamped.level) != (
            meta.id, meta.shard, meta.level):
        raise CorruptBlock(meta.id, path, "embedded metadata is not the block's")
    on_disk = replace(stamped, size_bytes=len(data), checksum=file_checksum(data))
    if not _verified(path, data, on_disk).equals(table):
        raise BlockConflict(f"block {meta.id} exists with other rows: {path}")
    return on_disk


def _stamp(metadata: dict[bytes, bytes] | None) -> BlockMeta | None:
    """The block metadata a file's schema embeds, or None if it has none or bad one."""
    embedded = (metadata or {}).get(META_KEY)
    try:
        return meta_from_json(json.loads(embedded)) if embedded else None
    except ValueError:
        return None


def read_block(root: str, meta: BlockMeta) -> pa.Table:
    """The rows of block `meta`, verified: MissingBlock if the file is not there,
    CorruptBlock if it cannot be read or is not exactly the block `meta` describes."""
    return read_block_file(block_path(root, meta.shard, meta.id), meta)


def read_block_file(path: str, meta: BlockMeta) -> pa.Table:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise MissingBlock(meta.id, path) from None
    return _verified(path, data, meta)


def _verified(path: str, data: bytes, meta: BlockMeta) -> pa.Table:
    """The rows of file contents `data`, checked to be exactly the block `meta`."""
    if len(data) != meta.size_bytes:
        raise CorruptBlock(meta.id, path, f"{len(data)} bytes, metadata says {meta.size_bytes}")
    if file_checksum(data) != meta.checksum:
        raise CorruptBlock(meta.id, path, "checksum mismatch")
    try:
        table = pq.read_table(pa.BufferReader(data), page_checksum_verification=True)
    except (pa.ArrowException, OSError, ValueError) as err:
        raise CorruptBlock(meta.id, path, f"{type(err).__name__}: {err}") from err
    if _stamp(table.schema.metadata) != _unsized(meta):
        raise CorruptBlock(meta.id, path, "embedded metadata is not the block's")
    table = table.replace_schema_metadata(None)
    problem = check_table(table)
    if problem is not None:
        raise CorruptBlock(meta.id, path, problem)
    actual = describe(table, block_id=meta.id, shard=meta.shard, level=meta.level,
                      created_at=meta.created_at, compaction_revision=meta.compaction_revision,
                      size_bytes=meta.size_bytes)
    if replace(actual, checksum=meta.checksum) != meta:
        raise CorruptBlock(meta.id, path, "rows do not match the metadata")
    return table


_HASH_CHUNK: Final = 1 << 20


def verify_block(root: str, meta: BlockMeta) -> str:
    """`read_block`'s checks without loading the rows; the file's path.

    For a reader that scans the file itself (Spark): MissingBlock if it is not there,
    CorruptBlock if its size, checksum, footer, schema, embedded metadata or row count is
    not the block's. The file is hashed in chunks, so memory stays flat. A file whose
    checksum is the one recorded at write time holds exactly the rows the writer
    validated, so the rows themselves need no second check here."""
    return verify_block_file(block_path(root, meta.shard, meta.id), meta)


def verify_block_file(path: str, meta: BlockMeta) -> str:
    digest = hashlib.blake2b(digest_size=16)
    size = 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_HASH_CHUNK):
                digest.update(chunk)
                size += len(chunk)
    except FileNotFoundError:
        raise MissingBlock(meta.id, path) from None
    if size != meta.size_bytes:
        raise CorruptBlock(meta.id, path, f"{size} bytes, metadata says {meta.size_bytes}")
    if digest.hexdigest() != meta.checksum:
        raise CorruptBlock(meta.id, path, "checksum mismatch")
    try:
        parquet = pq.ParquetFile(path)
        schema, num_rows = parquet.schema_arrow, parquet.metadata.num_rows
    except (pa.ArrowException, OSError, ValueError) as err:
        raise CorruptBlock(meta.id, path, f"{type(err).__name__}: {err}") from err
    if _stamp(schema.metadata) != _unsized(meta):
        raise CorruptBlock(meta.id, path, "embedded metadata is not the block's")
    if not schema.remove_metadata().equals(SCHEMA):
        raise CorruptBlock(meta.id, path, "not the block schema")
    if num_rows != meta.row_count:
        raise CorruptBlock(meta.id, path, "rows do not match the metadata")
    return path


# ---- streaming writes ---------------------------------------------------------

BatchSource = Callable[[], Iterable[pa.RecordBatch]]
"""Record batches of a block in (key, revision) order; every call starts them again."""

# pq.write_table's own row-group length: the streaming writer cuts row groups where
# write_table would, so the same rows give the same file, byte for byte.
_ROW_GROUP_ROWS: Final = 1024 * 1024


@dataclass(slots=True)
class _Scan:
    """What one pass over a batch stream has seen: the block's bounds so far."""

    rows: int = 0
    min_revision: int = 0
    max_revision: int = 0
    first_key: bytes = b""
    last: tuple[bytes, int] | None = None

    def add(self, batch: pa.RecordBatch) -> None:
        """Check one batch (InvalidRows) and extend the bounds with it."""
        table = pa.Table.from_batches([batch])
        problem = check_table(table)
        if problem is not None:
            raise InvalidRows(problem)
        if table.num_rows == 0:
            return
        first = (bytes(table["key"][0].as_py()), int(table["revision"][0].as_py()))
        if self.last is not None and not self.last < first:
            raise InvalidRows("rows not sorted by (key, revision) across batches, "
                              "or a (key, revision) twice")
        low, high = (int(v.as_py()) for v in pc.min_max(table["revision"]).values())
        if self.rows == 0:
            self.first_key, self.min_revision, self.max_revision = first[0], low, high
        self.min_revision = min(self.min_revision, low)
        self.max_revision = max(self.max_revision, high)
        self.rows += table.num_rows
        self.last = (bytes(table["key"][-1].as_py()), int(table["revision"][-1].as_py()))

    def meta(self, *, block_id: str, shard: int, level: int, created_at: float,
             compaction_revision: int) -> BlockMeta:
        """The metadata `describe` gives for the whole stream as one table."""
        if self.rows == 0 or self.last is None:
            return describe(empty_table(), block_id=block_id, shard=shard, level=level,
                            created_at=created_at, compaction_revision=compaction_revision)
        return BlockMeta(block_id, shard, level, self.min_revision, self.max_revision,
                         self.first_key, self.last[0], self.rows, 0, float(created_at),
                         compaction_revision)


def _scan(source: BatchSource) -> _Scan:
    scan = _Scan()
    for batch in source():
        scan.add(batch)
    return scan


def _row_groups(source: BatchSource, scan: _Scan) -> Iterator[pa.Table]:
    """The stream regrouped into tables of `_ROW_GROUP_ROWS` rows (the last may be
    shorter), each one contiguous chunk; `scan` checks it again on the way."""
    pending: list[pa.RecordBatch] = []
    held = 0
    for batch in source():
        scan.add(batch)
        pending.append(batch)
        held += batch.num_rows
        while held >= _ROW_GROUP_ROWS:
            table = pa.Table.from_batches(pending, schema=SCHEMA).combine_chunks()
            yield table.slice(0, _ROW_GROUP_ROWS)
            rest = table.slice(_ROW_GROUP_ROWS)
            pending, held = rest.to_batches(), rest.num_rows
    if held:
        yield pa.Table.from_batches(pending, schema=SCHEMA).combine_chunks()


def write_block_batches(root: str, source: BatchSource, *, block_id: str, shard: int,
                        level: int, created_at: float, compaction_revision: int = 0,
                        fp: Failpoint = no_fp) -> BlockMeta:
    """`write_block` for rows that arrive as record batches (a merge's output files).

    Two passes over `source`, so memory holds one row group, not the block: the first
    checks the rows (InvalidRows, before any file is created) and computes the
    metadata the file embeds; the second writes. The file is the one `write_block`
    writes for the same rows, and the same rules hold: temporary file, fsync, link;
    an existing block is kept, and its metadata returned, only if it holds exactly
    these rows (else BlockConflict).
    """
    first = _scan(source)
    meta = first.meta(block_id=block_id, shard=shard, level=level, created_at=created_at,
                      compaction_revision=compaction_revision)
    path = block_path(root, shard, block_id)
    directory = os.path.dirname(path)
    makedirs_durable(directory)
    def existing() -> BlockMeta:
        rows = pa.Table.from_batches(list(source()), schema=SCHEMA).combine_chunks()
        return _existing(path, rows, meta)

    if os.path.exists(path):
        return existing()

    def write(out: BinaryIO) -> None:
        stamped = SCHEMA.with_metadata({META_KEY: _embedded(meta)})
        second = _Scan()
        with pq.ParquetWriter(out, stamped, compression=COMPRESSION,
                              write_page_checksum=True) as writer:
            wrote = False
            for group in _row_groups(source, second):
                writer.write_table(group)
                wrote = True
            if not wrote:
                writer.write_table(empty_table())
        if second != first:
            raise InvalidRows("the batch source changed between its two passes")

    return _install(path, meta, write, existing, fp)


def delete_block_file(root: str, shard: int, block_id: str) -> bool:
    """Remove a block's file (a tombstone's cleanup); False if it was already gone."""
    path = block_path(root, shard, block_id)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    fsync_dir(os.path.dirname(path))
    return True


def remove_temp_files(root: str) -> list[str]:
    """Delete the temporary files interrupted writes left (at start, before any write)."""
    removed: list[str] = []
    if not os.path.isdir(root):
        return removed
    for shard_dir in sorted(os.listdir(root)):
        directory = os.path.join(root, shard_dir)
        if not os.path.isdir(directory):
            continue
        for name in sorted(os.listdir(directory)):
            if name.startswith(".") and name.endswith(".tmp"):
                os.unlink(os.path.join(directory, name))
                removed.append(os.path.join(directory, name))
    return removed


def write_level0(root: str, shard: int, rows: Sequence[Row], created_at: float,
                 fp: Failpoint = no_fp) -> BlockMeta:
    """A level-0 block of `rows` (a flush of one shard's committed history)."""
    table = rows_to_table(rows)
    if table.num_rows == 0:
        raise InvalidRows("a level-0 block needs at least one row")
    low = int(pc.min(table["revision"]).as_py())
    high = int(pc.max(table["revision"]).as_py())
    return write_block(root, table, block_id=level0_block_id(shard, low, high), shard=shard,
                       level=0, created_at=created_at, fp=fp)


__all__ = [
    "BLOCK_FAILPOINTS",
    "FLAG_TOMBSTONE",
    "SCHEMA",
    "BatchSource",
    "BlockMeta",
    "Row",
    "block_path",
    "check_table",
    "compacted_block_id",
    "delete_block_file",
    "describe",
    "empty_table",
    "file_checksum",
    "level0_block_id",
    "read_block",
    "read_block_file",
    "remove_temp_files",
    "rows_to_table",
    "sorted_unique",
    "table_rows",
    "verify_block",
    "verify_block_file",
    "write_block",
    "write_block_batches",
    "write_level0",
]
