"""A block's rows as an Arrow table: the schema, rows to and from tables, the checks
every block table passes, and the metadata a table describes.

In memory only (no files: `block.py` writes, reads and verifies block files). A block
is the committed history of one shard over a revision range: rows (revision, key,
value, flags) sorted by (key, revision), each (key, revision) once; a tombstone (a
delete) has FLAG_TOMBSTONE and a null value, a put has a value (b"" allowed).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from sediment.actors.blocks.errors import InvalidRows
from sediment.actors.blocks.meta import BlockMeta

SCHEMA: Final = pa.schema(
    [
        pa.field("revision", pa.int64(), nullable=False),
        pa.field("key", pa.binary(), nullable=False),
        pa.field("value", pa.binary(), nullable=True),
        pa.field("flags", pa.uint8(), nullable=False),
    ]
)
FLAG_TOMBSTONE: Final = 1
KNOWN_FLAGS: Final = FLAG_TOMBSTONE

@dataclass(frozen=True, slots=True)
class Row:
    """One row of history; `value` None is a tombstone."""

    revision: int
    key: bytes
    value: bytes | None

    @property
    def tombstone(self) -> bool:
        return self.value is None


# ---- tables ------------------------------------------------------------------


def empty_table() -> pa.Table:
    return SCHEMA.empty_table()


def rows_to_table(rows: Iterable[Row]) -> pa.Table:
    """A block table of `rows` in any order; InvalidRows if they break the format."""
    ordered = sorted(rows, key=lambda r: (r.key, r.revision))
    for r in ordered:
        if not isinstance(r.revision, int) or isinstance(r.revision, bool) or r.revision < 1:
            raise InvalidRows(f"revision must be a positive int: {r.revision!r}")
        if not isinstance(r.key, bytes) or not r.key:
            raise InvalidRows(f"key must be non-empty bytes: {r.key!r}")
        if r.value is not None and not isinstance(r.value, bytes):
            raise InvalidRows(f"value must be bytes or None: {type(r.value).__name__}")
    table = pa.table(
        {
            "revision": pa.array([r.revision for r in ordered], pa.int64()),
            "key": pa.array([r.key for r in ordered], pa.binary()),
            "value": pa.array([r.value for r in ordered], pa.binary()),
            "flags": pa.array([FLAG_TOMBSTONE if r.value is None else 0 for r in ordered],
                              pa.uint8()),
        },
        schema=SCHEMA,
    )
    problem = check_table(table)
    if problem is not None:
        raise InvalidRows(problem)
    return table


def table_rows(table: pa.Table) -> list[Row]:
    """The rows of a block table, in table order."""
    cols = table.select(["revision", "key", "value"]).to_pydict()
    return [Row(r, k, v) for r, k, v in zip(cols["revision"], cols["key"], cols["value"],
                                            strict=True)]


def sorted_unique(keys: pa.ChunkedArray | pa.Array, revisions: pa.ChunkedArray | pa.Array) -> bool:
    """Whether (key, revision) strictly increases from row to row."""
    if len(keys) < 2:
        return True
    k0, k1 = keys[:-1], keys[1:]
    r0, r1 = revisions[:-1], revisions[1:]
    ok = pc.or_(pc.less(k0, k1), pc.and_(pc.equal(k0, k1), pc.less(r0, r1)))
    return bool(pc.all(ok).as_py())


def check_table(table: pa.Table) -> str | None:
    """Why `table` is not a block table, or None."""
    if not table.schema.remove_metadata().equals(SCHEMA):
        return f"schema {table.schema.remove_metadata()} is not the block schema"
    for name in ("revision", "key", "flags"):
        if table[name].null_count:
            return f"null in column {name}"
    if table.num_rows == 0:
        return None
    if pc.min(table["revision"]).as_py() < 1:
        return "revision below 1"
    if pc.min(pc.binary_length(table["key"])).as_py() < 1:
        return "empty key"
    flags = table["flags"]
    if pc.any(pc.not_equal(pc.bit_wise_and(flags, pa.scalar(~KNOWN_FLAGS & 0xFF, pa.uint8())),
                           pa.scalar(0, pa.uint8()))).as_py():
        return "unknown flag bits"
    tomb = pc.not_equal(pc.bit_wise_and(flags, pa.scalar(FLAG_TOMBSTONE, pa.uint8())),
                        pa.scalar(0, pa.uint8()))
    if not pc.all(pc.equal(tomb, pc.is_null(table["value"]))).as_py():
        return "a tombstone with a value, or a put without one"
    if not sorted_unique(table["key"], table["revision"]):
        return "rows not sorted by (key, revision), or a (key, revision) twice"
    return None


def describe(table: pa.Table, *, block_id: str, shard: int, level: int, created_at: float,
             compaction_revision: int = 0, size_bytes: int = 0) -> BlockMeta:
    """The metadata of a (valid) block table."""
    if table.num_rows == 0:
        bounds: tuple[int, int, bytes, bytes] = (0, 0, b"", b"")
    else:
        keys = table["key"]
        bounds = (
            int(pc.min(table["revision"]).as_py()),
            int(pc.max(table["revision"]).as_py()),
            bytes(keys[0].as_py()),
            bytes(keys[-1].as_py()),
        )
    return BlockMeta(block_id, shard, level, bounds[0], bounds[1], bounds[2], bounds[3],
                     table.num_rows, size_bytes, float(created_at), compaction_revision)


__all__ = ["FLAG_TOMBSTONE", "KNOWN_FLAGS", "SCHEMA", "Row", "check_table", "describe",
           "empty_table", "rows_to_table", "sorted_unique", "table_rows"]
