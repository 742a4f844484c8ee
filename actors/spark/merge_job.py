"""The block merge as a Spark job: `merge.merge_blocks`, run by Spark.

Why a second implementation: the pyarrow merge holds every source in memory, which is
fine for small jobs; Spark is the path that scales (DESIGN.md §3). Its result must be
the same block, so `merge.py`'s docstring is the specification and the tests compare the
two. The steps:

1. Verify every source (`block.verify_block`: size, checksum, footer, embedded
   metadata) before anything is written: a missing or corrupt source raises
   MissingBlock / CorruptBlock, as `merge_blocks` does, and leaves nothing behind.
2. Spark reads the files and range-partitions the rows by key, so a key's rows share
   one partition and partition order is key order. Per key, ordered by (revision,
   flags, value), `lag` finds exact duplicates (dropped) and conflicts (two different
   rows of one (key, revision): marked, so the merge refuses them even when compaction
   would drop them, as `merge.combine` does); a whole-key `max` finds the latest
   revision at or below C; the compaction rule filters. The result goes, as Parquet,
   into a hidden temporary directory next to the output, never under the final name.
3. The part files, in partition order, are streamed into `block.write_block_batches`,
   which checks the global (key, revision) order and writes the file `write_block`
   would write for the same rows, byte for byte. A conflict mark raises BlockConflict
   before the block file is created. The temporary directory is removed in every case.

Paths are plain absolute paths: Spark's default filesystem must be the local one (or a
mount every executor shares), as it is in local mode and under RayDP on one machine.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sediment.actors.blocks import block as blk
from sediment.actors.blocks.errors import BlockConflict, BlockError, InvalidRows
from sediment.actors.blocks.merge import history_floor
from sediment.actors.blocks.meta import BlockMeta
from sediment.actors.log.storage.failpoints import Failpoint, no_fp
from sediment.log import get_logger

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

_log = get_logger("sediment.spark.merge")

CONFLICT: Final = "_conflict"  # the mark step 2 puts on a row that disagrees with its twin
ROWS_PER_PARTITION: Final = 2_000_000  # source rows per Spark partition (before dedup)
MAX_PARTITIONS: Final = 64
BATCH_ROWS: Final = 64 * 1024  # rows per record batch when streaming the part files
TEMP_SUFFIX: Final = ".spark"  # not ".tmp": block.remove_temp_files unlinks files only
_PART: Final = re.compile(r"^part-(\d+)-.*?(?:-c(\d+))?(?:\.[a-z0-9]+)*\.parquet$")


class SparkMergeFailed(BlockError):
    """Spark itself failed the merge (a lost executor, a cancelled job, a file that went
    away after it was verified); nothing was written under the output's name."""


def spark_merge(spark: SparkSession, root: str, sources: Sequence[BlockMeta], *,
                block_id: str, level: int, compaction_revision: int, created_at: float,
                partitions: int | None = None, fp: Failpoint = no_fp) -> BlockMeta:
    """Merge `sources` (one shard) into block `block_id` on `spark`: `merge_blocks`'s
    arguments, result and errors. `partitions`: Spark partitions of the shuffle (None:
    one per `ROWS_PER_PARTITION` source rows)."""
    if not sources:
        raise InvalidRows("a merge needs at least one source block")
    shards = {s.shard for s in sources}
    if len(shards) != 1:
        raise InvalidRows(f"source blocks of several shards: {sorted(shards)}")
    if partitions is not None and partitions < 1:
        raise ValueError(f"partitions must be positive, got {partitions}")
    shard = sources[0].shard
    paths = [os.path.abspath(blk.verify_block(root, s)) for s in sources]
    if partitions is None:
        rows = sum(s.row_count for s in sources)
        partitions = max(1, min(MAX_PARTITIONS, math.ceil(rows / ROWS_PER_PARTITION)))
    directory = os.path.dirname(blk.block_path(root, shard, block_id))
    os.makedirs(directory, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=f".{block_id}.", suffix=TEMP_SUFFIX, dir=directory)
    try:
        output = os.path.join(scratch, "rows")
        _run_spark(spark, paths, output, compaction_revision, partitions, block_id)
        parts = part_files(output)
        meta = blk.write_block_batches(
            root, lambda: _output_batches(parts), block_id=block_id, shard=shard,
            level=level, created_at=created_at,
            compaction_revision=history_floor(sources, compaction_revision), fp=fp)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    _log.info("spark merge done", block=block_id, sources=len(sources), rows=meta.row_count,
              partitions=partitions, part_files=len(parts))
    return meta


# ---- the Spark job -------------------------------------------------------------


def merged_rows(frame: DataFrame, compaction_revision: int, partitions: int) -> DataFrame:
    """The merge as a DataFrame transformation: the surviving rows of `frame` (block
    rows from any number of sources), range-partitioned by key and sorted by (key,
    revision) within partitions, plus the `CONFLICT` mark (see the module docstring)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    revision, flags, value = F.col("revision"), F.col("flags"), F.col("value")
    by_row = Window.partitionBy("key").orderBy("revision", "flags", "value")
    c = compaction_revision
    windowed = [F.lag(name).over(by_row).alias(f"_previous_{name}")
                for name in ("revision", "flags", "value")]
    if c > 0:
        latest = F.max(F.when(revision <= c, revision)).over(Window.partitionBy("key"))
        windowed.append(latest.alias("_latest"))
    framed = frame.repartitionByRange(partitions, "key").select("*", *windowed)

    same_revision = F.coalesce(F.col("_previous_revision") == revision, F.lit(False))
    duplicate = (same_revision & (F.col("_previous_flags") == flags)
                 & F.col("_previous_value").eqNullSafe(value))
    conflict = same_revision & ~duplicate
    survives: Column = F.lit(True)
    if c > 0:
        is_latest = F.coalesce(revision == F.col("_latest"), F.lit(False))
        survives = (revision > c) | is_latest  # merge.py: a latest tombstone stays
    return (framed.where(~duplicate & (conflict | survives))
            .select("revision", "key", "value", "flags", conflict.alias(CONFLICT))
            .sortWithinPartitions("key", "revision"))


def _run_spark(spark: SparkSession, paths: Sequence[str], output: str,
               compaction_revision: int, partitions: int, block_id: str) -> None:
    from pyspark.sql.types import BinaryType, LongType, ShortType, StructField, StructType

    # Spark's reading of the block schema: uint8 flags arrive as ShortType.
    schema = StructType([
        StructField("revision", LongType(), False),
        StructField("key", BinaryType(), False),
        StructField("value", BinaryType(), True),
        StructField("flags", ShortType(), False),
    ])
    spark.sparkContext.setJobDescription(f"sediment merge {block_id}")  # this thread's jobs
    try:
        frame = spark.read.schema(schema).parquet(*paths)
        rows = merged_rows(frame, compaction_revision, partitions)
        rows.write.mode("errorifexists").option("compression", "snappy").parquet(output)
    except Exception as exc:  # noqa: BLE001 - Py4J/Spark errors are not picklable values
        raise SparkMergeFailed(f"Spark failed merging {block_id}: "
                               f"{type(exc).__name__}: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:500] if text else ""


# ---- reading the job's output ------------------------------------------------------


def part_files(directory: str) -> list[str]:
    """Spark's output files in partition order (part number, then file number): with a
    range partitioning that is the key order. Empty partitions have no file."""
    found: list[tuple[int, int, str]] = []
    for name in os.listdir(directory):
        match = _PART.match(name)
        if match is not None:
            found.append((int(match[1]), int(match[2] or 0), os.path.join(directory, name)))
    return [path for _, _, path in sorted(found)]


def _output_batches(paths: Sequence[str]) -> Iterator[pa.RecordBatch]:
    """The rows of the part files as block-schema batches; BlockConflict at the first
    conflict mark (the smallest conflicting (key, revision): the files are in order)."""
    for path in paths:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS):
            marks = batch.column(CONFLICT)
            if pc.any(marks).as_py():
                at = pc.index(marks, True).as_py()
                key, rev = batch.column("key")[at].as_py(), batch.column("revision")[at].as_py()
                raise BlockConflict(f"sources disagree on key {key!r} at revision {rev}")
            yield to_block_batch(batch)


def to_block_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A batch Spark wrote, in the block schema (flags back to uint8, exact bytes)."""
    columns = [pc.cast(batch.column(f.name), f.type) for f in blk.SCHEMA]
    return pa.RecordBatch.from_arrays(columns, schema=blk.SCHEMA)


def remove_scratch_dirs(root: str) -> list[str]:
    """Delete the temporary directories of merges a crash interrupted (at start, before
    any merge runs; `block.remove_temp_files` handles only the writer's files)."""
    removed: list[str] = []
    if not os.path.isdir(root):
        return removed
    for shard_dir in sorted(os.listdir(root)):
        directory = os.path.join(root, shard_dir)
        if not os.path.isdir(directory):
            continue
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            if name.startswith(".") and name.endswith(TEMP_SUFFIX) and os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


__all__ = [
    "CONFLICT",
    "SparkMergeFailed",
    "merged_rows",
    "part_files",
    "remove_scratch_dirs",
    "spark_merge",
    "to_block_batch",
]
