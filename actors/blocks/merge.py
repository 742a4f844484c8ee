"""Merging blocks with the history compaction revision, and history reads from blocks.

Semantics (etcd's key index compaction, `real_systems.md` §1, made physical): with
compaction revision C, for every key
- every row above C is kept;
- of its rows at or below C only the latest is kept (what a read at C returns), even
  when it is a tombstone. A job merges some of a shard's blocks, not all: an older put
  of the key may sit in a live block outside the job (a higher level), and dropping the
  delete that supersedes it would bring it back in every read at or above C. (A
  tombstone exactly at C must stay anyway: a watch starting at C sees that delete,
  etcd #18089/#19179.) Dropping dead tombstones needs a merge that holds every older
  row of the key; none is planned yet, so they cost one row per deleted key.
C = 0 drops nothing. This is the row set the hot store's value-only compaction keeps
values for (`actors/kv/store.py`), minus the compacted rows themselves, which the hot
store keeps as value-less skeletons only for create_revision/version bookkeeping; so
reads at or above C from the blocks answer what the hot store answered before it
compacted, and reads below C are refused (ErrCompacted), as etcd refuses them.

Merging is idempotent: merge(merge(x)) == merge(x), and a block merged with itself
(exact duplicate rows) gives the block. Two sources disagreeing on a (key, revision)
are a BlockConflict: history is written once, so one of them is wrong.

`merge_blocks` / `run_job` are the file-level wrappers a worker calls: every source is
read and verified before anything is written, and the output appears under its final
name only complete (`block.write_block`), so a missing or corrupt source fails the job
with a typed error and leaves no output that could replace its sources.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sediment.actors.blocks import block as blk
from sediment.actors.blocks.errors import BlockConflict, InvalidRows
from sediment.actors.blocks.jobs import AssignedJob, CompactedBlocks, Tombstone
from sediment.actors.blocks.meta import BlockMeta, compacted_block_id
from sediment.actors.log.storage.failpoints import Failpoint, no_fp
from sediment.actors.mvcc_errors import ErrCompacted, ErrFutureRev

# ---- tables ------------------------------------------------------------------


def _bool(values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    out: np.ndarray = np.asarray(pc.fill_null(values, False).to_numpy(zero_copy_only=False),
                                 dtype=bool)
    return out


def combine(tables: Sequence[pa.Table]) -> pa.Table:
    """The rows of `tables` as one block table: sorted by (key, revision), exact
    duplicates once; BlockConflict if two rows of one (key, revision) differ."""
    if not tables:
        return blk.empty_table()
    for table in tables:
        if not table.schema.remove_metadata().equals(blk.SCHEMA):
            raise InvalidRows(f"not a block table: {table.schema.remove_metadata()}")
    table = pa.concat_tables([t.replace_schema_metadata(None) for t in tables])
    table = table.sort_by([("key", "ascending"), ("revision", "ascending")]).combine_chunks()
    if table.num_rows < 2:
        return table
    keys, revs = table["key"], table["revision"]
    values, flags = table["value"], table["flags"]
    same = _bool(pc.and_(pc.equal(keys[:-1], keys[1:]), pc.equal(revs[:-1], revs[1:])))
    if not same.any():
        return table
    both_null = pc.and_(pc.is_null(values[:-1]), pc.is_null(values[1:]))
    equal_value = pc.or_(pc.fill_null(pc.equal(values[:-1], values[1:]), False), both_null)
    identical = _bool(pc.and_(equal_value, pc.equal(flags[:-1], flags[1:])))
    clash = same & ~identical
    if clash.any():
        at = int(np.argmax(clash)) + 1
        key, rev = keys[at].as_py(), revs[at].as_py()
        raise BlockConflict(f"sources disagree on key {key!r} at revision {rev}")
    keep = np.concatenate([[True], ~same])
    return table.filter(pa.array(keep))


def compact_table(table: pa.Table, compaction_revision: int) -> pa.Table:
    """The rows of a sorted, unique block table that survive compaction at
    `compaction_revision` (see the module docstring)."""
    c = compaction_revision
    if c <= 0 or table.num_rows == 0:
        return table
    revs = table["revision"].to_numpy()
    at_or_below = revs <= c
    next_same_key = np.zeros(table.num_rows, dtype=bool)
    if table.num_rows > 1:
        next_same_key[:-1] = _bool(pc.equal(table["key"][:-1], table["key"][1:]))
    next_at_or_below = np.zeros(table.num_rows, dtype=bool)
    next_at_or_below[:-1] = at_or_below[1:]
    latest = at_or_below & ~(next_same_key & next_at_or_below)
    keep = ~at_or_below | latest  # a latest tombstone stays: see the module docstring
    return table.filter(pa.array(keep))


def merge_tables(tables: Sequence[pa.Table], compaction_revision: int) -> pa.Table:
    """N source tables -> one output table: combined, then compacted."""
    return compact_table(combine(tables), compaction_revision)


# ---- history reads -----------------------------------------------------------


def history_floor(blocks: Sequence[BlockMeta], compaction_revision: int) -> int:
    """The oldest revision the blocks can answer for: the logical compaction revision or
    the highest one a block was merged at, whichever is higher."""
    return max([compaction_revision, *(b.compaction_revision for b in blocks)])


def key_history_of(table: pa.Table, key: bytes, start: int | None = None,
                   end: int | None = None) -> list[blk.Row]:
    """The rows of `key` with start <= revision <= end (None: unbounded), by revision."""
    mask = pc.equal(table["key"], pa.scalar(key, pa.binary()))
    if start is not None:
        mask = pc.and_(mask, pc.greater_equal(table["revision"], start))
    if end is not None:
        mask = pc.and_(mask, pc.less_equal(table["revision"], end))
    return blk.table_rows(table.filter(mask))


def keyspace_of(table: pa.Table, revision: int) -> list[tuple[bytes, bytes]]:
    """(key, value) of every key that exists at `revision`, by key."""
    table = table.filter(pc.less_equal(table["revision"], revision))
    n = table.num_rows
    if n == 0:
        return []
    last = np.ones(n, dtype=bool)
    if n > 1:
        last[:-1] = ~_bool(pc.equal(table["key"][:-1], table["key"][1:]))
    latest = table.filter(pa.array(last))
    live = latest.filter(pc.is_valid(latest["value"]))
    return [(r.key, r.value) for r in blk.table_rows(live) if r.value is not None]


def _check_read(floor: int, revision: int, head: int | None) -> None:
    if head is not None and revision > head:
        raise ErrFutureRev()
    if revision < floor:
        raise ErrCompacted(floor)


def read_key_history(root: str, blocks: Sequence[BlockMeta], key: bytes,
                     start: int | None = None, end: int | None = None, *,
                     compaction_revision: int = 0, head: int | None = None) -> list[blk.Row]:
    """A key's history from the blocks of its shard (pass all its live blocks: their
    compaction revisions decide what is still answerable). `start` None: every row
    retained; a start below the floor is ErrCompacted, above `head` ErrFutureRev."""
    if start is not None:
        _check_read(history_floor(blocks, compaction_revision), start, head)
    low = start if start is not None else 0
    wanted = [b for b in blocks if b.may_hold_key(key) and b.overlaps_revisions(low, end)]
    table = combine([blk.read_block(root, b) for b in wanted])
    return key_history_of(table, key, start, end)


def read_keyspace(root: str, blocks: Sequence[BlockMeta], revision: int, *,
                  compaction_revision: int = 0,
                  head: int | None = None) -> list[tuple[bytes, bytes]]:
    """The keyspace as of `revision` from the given live blocks (every shard's, for the
    whole keyspace), by key; ErrCompacted below the floor."""
    _check_read(history_floor(blocks, compaction_revision), revision, head)
    wanted = [b for b in blocks if b.overlaps_revisions(0, revision)]
    return keyspace_of(combine([blk.read_block(root, b) for b in wanted]), revision)


# ---- jobs --------------------------------------------------------------------


def merge_blocks(root: str, sources: Sequence[BlockMeta], *, block_id: str, level: int,
                 compaction_revision: int, created_at: float,
                 fp: Failpoint = no_fp) -> BlockMeta:
    """Merge `sources` (one shard) into block `block_id`. Every source is read and
    verified first (MissingBlock / CorruptBlock / BlockConflict raise before any write);
    the output's compaction revision is the highest applied to any of its rows."""
    if not sources:
        raise InvalidRows("a merge needs at least one source block")
    shards = {s.shard for s in sources}
    if len(shards) != 1:
        raise InvalidRows(f"source blocks of several shards: {sorted(shards)}")
    tables = [blk.read_block(root, s) for s in sources]
    merged = merge_tables(tables, compaction_revision)
    applied = history_floor(sources, compaction_revision)
    return blk.write_block(root, merged, block_id=block_id, shard=sources[0].shard,
                           level=level, created_at=created_at, compaction_revision=applied,
                           fp=fp)


def run_job(root: str, job: AssignedJob, sources: Sequence[BlockMeta], created_at: float,
            fp: Failpoint = no_fp) -> CompactedBlocks:
    """Execute an assigned job: merge its sources (their metadata from the index, in the
    plan's order) into the output block its token names. Raises the typed errors above;
    the worker then abandons the job and the lease expiry counts the failure."""
    plan = job.plan
    if tuple(s.id for s in sources) != plan.source_blocks:
        raise InvalidRows(f"job {plan.name}: source metadata does not match the plan")
    block_id = compacted_block_id(plan.shard, plan.level, plan.source_blocks, job.state.token)
    output = merge_blocks(root, sources, block_id=block_id, level=plan.level + 1,
                          compaction_revision=job.compaction_revision, created_at=created_at,
                          fp=fp)
    return CompactedBlocks(plan.source_blocks, output)


def cleanup(root: str, tombstones: Sequence[Tombstone]) -> int:
    """Delete the files of tombstoned blocks (idempotent); the number removed."""
    return sum(blk.delete_block_file(root, t.shard, b) for t in tombstones for b in t.blocks)


__all__ = [
    "cleanup",
    "combine",
    "compact_table",
    "history_floor",
    "key_history_of",
    "keyspace_of",
    "merge_blocks",
    "merge_tables",
    "read_key_history",
    "read_keyspace",
    "run_job",
]
