"""The Spark merge path (sediment.actors.spark.merge_job, .bridge) on local-mode Spark.

`merge.merge_blocks` is the specification: for seeded random block sets (overlapping
sources, exact duplicates, puts, empty values and tombstones, C below, at and above the
rows) `spark_merge` must write the very same block, byte for byte, so the two metadata
(checksum included) compare equal. Bad input (conflict, corrupt or missing source, a
Spark failure) gives the same typed error and leaves the shard directory as it was. The
bridge process runs on the `sim` backend with a local-mode session injected.

One local-mode SparkSession per module (a few seconds to start); no Ray, no RayDP.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import random
import shutil
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sediment.actors.blocks import block as blk
from sediment.actors.blocks import merge as mg
from sediment.actors.blocks.block import Row
from sediment.actors.blocks.errors import (
    BlockConflict,
    BlockError,
    CorruptBlock,
    InvalidRows,
    MissingBlock,
)
from sediment.actors.blocks.meta import BlockMeta
from sediment.actors.spark import merge_job as mj
from sediment.actors.spark.session import SparkSettings, spark_configs
from sediment.actors.spark.shell.bridge import (
    BRIDGE_NAME,
    BadBridgeRequest,
    BridgeBusy,
    BridgeStatus,
    BridgeStopped,
    MergeRequest,
    merge_via_bridge,
    run_inline,
    spark_bridge,
)
from sediment.actors.spark.shell.bridge_protocol import JobFailed, Merge, Merged, Stop, Stopped
from sediment.runtime import api
from sediment.runtime.common_calls import Status
from sediment.runtime.process import Process

pytestmark = pytest.mark.slow

SHARD = 0
OUT = "S0-L2-merged"
KEYS = [b"a", b"b", b"k/1", b"k/10", b"k/2", b"\x00", b"\x00\x01", b"\xff\xfe", b"key\x00x",
        bytes(range(1, 256))]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """A local-mode session with the production settings (JDK 17 options, quiet logs)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[1]").appName("sediment-test-spark-merge")
    for key, value in spark_configs(SparkSettings(shuffle_partitions=2)).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


# ---- helpers -----------------------------------------------------------------------


def write_sources(root: Path, sources: list[list[Row]],
                  floors: list[int] | None = None) -> list[BlockMeta]:
    """Each row list as a block `S0-L1-src<i>` (its compaction revision from `floors`)."""
    metas = []
    for i, rows in enumerate(sources):
        floor = floors[i] if floors else 0
        metas.append(blk.write_block(str(root), blk.rows_to_table(rows), block_id=f"S0-L1-src{i}",
                                     shard=SHARD, level=1, created_at=1.0,
                                     compaction_revision=floor))
    return metas


def twin(root: Path, tmp_path: Path) -> Path:
    """A copy of a block store, so both merges start from the same files."""
    other = tmp_path / "twin"
    shutil.copytree(root, other)
    return other


def listing(root: Path) -> list[str]:
    """Every entry under the block store, hidden ones included."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def merge_both(spark: Any, root: Path, tmp_path: Path, sources: list[BlockMeta], c: int,
               partitions: int | None = None) -> tuple[BlockMeta, BlockMeta]:
    other = twin(root, tmp_path)
    by_pyarrow = mg.merge_blocks(str(root), sources, block_id=OUT, level=2,
                                 compaction_revision=c, created_at=7.0)
    by_spark = mj.spark_merge(spark, str(other), sources, block_id=OUT, level=2,
                              compaction_revision=c, created_at=7.0, partitions=partitions)
    assert blk.table_rows(blk.read_block(str(other), by_spark)) == \
        blk.table_rows(blk.read_block(str(root), by_pyarrow))
    assert listing(other) == listing(root)  # no scratch directory, no temporary file left
    return by_pyarrow, by_spark


def error_of(fn: Callable[[], object]) -> BaseException:
    with pytest.raises(BlockError) as info:
        fn()
    return info.value


def random_case(rnd: random.Random) -> tuple[list[list[Row]], list[int], int]:
    """A KV-like history (one key per revision) spread over 1-4 overlapping sources."""
    keys = rnd.sample(KEYS, rnd.randint(1, 5))
    head = rnd.randint(1, 40)
    history = []
    for revision in range(1, head + 1):
        value = None if rnd.random() < 0.3 else rnd.choice([b"", rnd.randbytes(rnd.randint(1, 9))])
        history.append(Row(revision, rnd.choice(keys), value))
    sources: list[list[Row]] = [[] for _ in range(rnd.randint(1, 4))]
    for row in history:
        copies = 1 if rnd.random() < 0.6 else rnd.randint(1, len(sources))
        for i in rnd.sample(range(len(sources)), copies):
            sources[i].append(row)
    tombstones = [r.revision for r in history if r.value is None] or [head]
    c = rnd.choice([0, 1, head // 2, head, head + 3, rnd.choice(tombstones)])
    floors = [rnd.choice([0, 0, 2]) for _ in sources]
    return sources, floors, c


# ---- equivalence with the pyarrow merge ----------------------------------------------


@pytest.mark.parametrize("seed", range(10))
def test_spark_merge_writes_the_pyarrow_merge_block(spark: Any, tmp_path: Path,
                                                    seed: int) -> None:
    sources, floors, c = random_case(random.Random(seed))
    root = tmp_path / "blocks"
    metas = write_sources(root, sources, floors)
    by_pyarrow, by_spark = merge_both(spark, root, tmp_path, metas, c,
                                      partitions=3 if seed % 2 else None)
    assert by_spark == by_pyarrow  # same rows, same file: same size and checksum


def test_every_compaction_rule_in_one_merge(spark: Any, tmp_path: Path) -> None:
    """C = 5; each key is one rule of merge.py's docstring, over two overlapping sources
    with exact duplicates, on three partitions."""
    history = [
        (1, b"superseded", b"a"), (3, b"superseded", b"b"),
        (1, b"put-at-c", b"a"), (5, b"put-at-c", b""),
        (1, b"tomb-below", b"a"), (4, b"tomb-below", None),
        (1, b"tomb-at-c", b"a"), (5, b"tomb-at-c", None),
        (1, b"tomb-above", b"a"), (7, b"tomb-above", None),
        (2, b"tomb-then-put", None), (4, b"tomb-then-put", b"b"),
        (3, b"tomb-below-put-above", None), (8, b"tomb-below-put-above", b"c"),
        (6, b"above-only", b"a"), (9, b"above-only", b"b"),
    ]
    rows = [Row(r, k, v) for r, k, v in history]
    root = tmp_path / "blocks"
    metas = write_sources(root, [rows[::2] + rows[1:4:2], rows[1::2] + rows[0:4:2]])
    by_pyarrow, by_spark = merge_both(spark, root, tmp_path, metas, 5, partitions=3)
    assert by_spark == by_pyarrow
    kept = {(r.key, r.revision) for r in blk.table_rows(blk.read_block(str(root), by_pyarrow))}
    assert kept == {(b"superseded", 3), (b"put-at-c", 5), (b"tomb-at-c", 5),
                    (b"tomb-below", 4), (b"tomb-above", 1), (b"tomb-above", 7),
                    (b"tomb-then-put", 4), (b"tomb-below-put-above", 3),
                    (b"tomb-below-put-above", 8), (b"above-only", 6), (b"above-only", 9)}


def test_a_merge_of_deleted_keys_keeps_only_their_deletes(spark: Any, tmp_path: Path) -> None:
    """Each key's latest row at or below C stays even when it is a delete: an older put of
    the key may live in a block outside the job (merge.py's rule)."""
    root = tmp_path / "blocks"
    metas = write_sources(root, [[Row(1, b"k", b"v"), Row(2, b"k", None)],
                                 [Row(3, b"j", None)]])
    by_pyarrow, by_spark = merge_both(spark, root, tmp_path, metas, 10, partitions=2)
    assert by_spark == by_pyarrow
    assert (by_spark.row_count, by_spark.min_key, by_spark.compaction_revision) == (2, b"j", 10)
    rows = blk.table_rows(blk.read_block(str(root), by_spark))
    assert [(r.revision, r.key, r.value) for r in rows] == [(3, b"j", None), (2, b"k", None)]


def test_merging_the_output_again_changes_nothing(spark: Any, tmp_path: Path) -> None:
    sources, _, _ = random_case(random.Random(42))
    root = tmp_path / "blocks"
    metas = write_sources(root, sources)
    once = mj.spark_merge(spark, str(root), metas, block_id="S0-L2-once", level=2,
                          compaction_revision=12, created_at=1.0)
    twice = mj.spark_merge(spark, str(root), [once, once], block_id="S0-L3-twice", level=3,
                           compaction_revision=12, created_at=1.0)
    assert blk.table_rows(blk.read_block(str(root), twice)) == \
        blk.table_rows(blk.read_block(str(root), once))
    assert once.row_count > 0


# ---- bad input -------------------------------------------------------------------------


CONFLICTS = [
    ("values differ above C", [Row(6, b"k", b"x")], [Row(6, b"k", b"y")], 5),
    ("rows compaction would drop still conflict",
     [Row(1, b"k", b"x"), Row(3, b"k", b"z")], [Row(1, b"k", b"y"), Row(3, b"k", b"z")], 5),
    ("an empty value is not a tombstone", [Row(2, b"k", b"")], [Row(2, b"k", None)], 0),
]


@pytest.mark.parametrize(("case", "first", "second", "c"), CONFLICTS,
                         ids=[case[0] for case in CONFLICTS])
def test_a_conflict_fails_both_merges_alike(spark: Any, tmp_path: Path, case: str,
                                            first: list[Row], second: list[Row], c: int) -> None:
    root = tmp_path / "blocks"
    metas = write_sources(root, [[Row(1, b"a", b"ok")] + first, second])
    other, before = twin(root, tmp_path), listing(root)
    expected = error_of(lambda: mg.merge_blocks(str(root), metas, block_id=OUT, level=2,
                                                compaction_revision=c, created_at=1.0))
    got = error_of(lambda: mj.spark_merge(spark, str(other), metas, block_id=OUT, level=2,
                                          compaction_revision=c, created_at=1.0, partitions=2))
    assert isinstance(got, BlockConflict)
    assert got == expected  # same type, same message (the first conflicting key/revision)
    assert listing(root) == listing(other) == before


def damage_truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-7])


def damage_flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def damage_remove(path: Path) -> None:
    path.unlink()


@pytest.mark.parametrize("damage", [damage_truncate, damage_flip, damage_remove])
def test_a_damaged_source_fails_before_anything_is_written(
        spark: Any, tmp_path: Path, damage: Callable[[Path], None]) -> None:
    root = tmp_path / "blocks"
    metas = write_sources(root, [[Row(1, b"a", b"1")], [Row(2, b"b", b"2")]])
    damage(Path(blk.block_path(str(root), SHARD, metas[1].id)))
    before = listing(root)
    got = error_of(lambda: mj.spark_merge(spark, str(root), metas, block_id=OUT, level=2,
                                          compaction_revision=0, created_at=1.0))
    assert isinstance(got, MissingBlock if damage is damage_remove else CorruptBlock)
    assert got == error_of(lambda: mg.merge_blocks(str(root), metas, block_id=OUT, level=2,
                                                   compaction_revision=0, created_at=1.0))
    assert listing(root) == before


def test_a_spark_failure_is_typed_and_leaves_nothing(spark: Any, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A source that passes verification but that Spark cannot read (changed under it)."""
    root = tmp_path / "blocks"
    metas = write_sources(root, [[Row(1, b"a", b"1")]])
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"not parquet at all")
    monkeypatch.setattr(mj.blk, "verify_block", lambda _root, _meta: str(garbage))
    before = listing(root)
    got = error_of(lambda: mj.spark_merge(spark, str(root), metas, block_id=OUT, level=2,
                                          compaction_revision=0, created_at=1.0))
    assert isinstance(got, mj.SparkMergeFailed)
    assert listing(root) == before


def test_sources_are_checked_like_merge_blocks(spark: Any, tmp_path: Path) -> None:
    metas = write_sources(tmp_path, [[Row(1, b"a", b"1")]])
    other_shard = replace(metas[0], shard=1)
    for sources in ([], [metas[0], other_shard]):
        with pytest.raises(InvalidRows):
            mj.spark_merge(spark, str(tmp_path), sources, block_id=OUT, level=2,
                           compaction_revision=0, created_at=1.0)


# ---- the pieces around Spark (no Spark job) -------------------------------------------


def test_part_files_are_taken_in_partition_order(tmp_path: Path) -> None:
    names = ["part-00010-u-c000.snappy.parquet", "part-00002-u-c001.snappy.parquet",
             "part-00002-u-c000.snappy.parquet", ".part-00001-u-c000.snappy.parquet.crc",
             "_SUCCESS", "part-00001-u-c000.parquet"]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    assert [os.path.basename(p) for p in mj.part_files(str(tmp_path))] == [
        "part-00001-u-c000.parquet", "part-00002-u-c000.snappy.parquet",
        "part-00002-u-c001.snappy.parquet", "part-00010-u-c000.snappy.parquet"]


def big_table(rows: int) -> pa.Table:
    rnd = random.Random(rows)
    values = [None if rnd.random() < 0.1 else rnd.randbytes(rnd.randrange(0, 12))
              for _ in range(rows)]
    return pa.table({
        "revision": pa.array(range(1, rows + 1), pa.int64()),
        "key": pa.array([b"k%09d" % i for i in range(rows)], pa.binary()),
        "value": pa.array(values, pa.binary()),
        "flags": pa.array([blk.FLAG_TOMBSTONE if v is None else 0 for v in values], pa.uint8()),
    }, schema=blk.SCHEMA)


def test_the_streaming_writer_writes_write_blocks_file(tmp_path: Path) -> None:
    """Over a row-group boundary, from uneven batches: the same bytes as write_block,
    and a retried write keeps the existing block."""
    table = big_table(1024 * 1024 + 4000)
    whole = blk.write_block(str(tmp_path / "a"), table, block_id="B", shard=0, level=1,
                            created_at=1.0, compaction_revision=3)

    def batches() -> Iterator[pa.RecordBatch]:
        rnd, offset = random.Random(1), 0
        while offset < table.num_rows:
            size = rnd.randrange(1, 300_000)
            yield from table.slice(offset, size).to_batches()
            offset += size

    for _ in range(2):
        streamed = blk.write_block_batches(str(tmp_path / "b"), batches, block_id="B",
                                           shard=0, level=1, created_at=1.0,
                                           compaction_revision=3)
        assert streamed == whole
    assert blk.verify_block(str(tmp_path / "b"), streamed).endswith("B.parquet")


def test_the_streaming_writer_refuses_rows_out_of_order_across_batches(tmp_path: Path) -> None:
    first = blk.rows_to_table([Row(1, b"b", b"1")]).to_batches()
    second = blk.rows_to_table([Row(2, b"a", b"2")]).to_batches()
    with pytest.raises(InvalidRows, match="across batches"):
        blk.write_block_batches(str(tmp_path), lambda: first + second, block_id="B", shard=0,
                                level=1, created_at=1.0)
    assert listing(tmp_path) == []  # refused in the first pass, before any file


def test_verify_block_reports_what_read_block_reports(tmp_path: Path) -> None:
    (meta,) = write_sources(tmp_path, [[Row(1, b"a", b"1"), Row(2, b"b", None)]])
    path = Path(blk.block_path(str(tmp_path), SHARD, meta.id))
    assert blk.verify_block(str(tmp_path), meta) == str(path)
    for wrong in (replace(meta, row_count=5), replace(meta, created_at=2.0),
                  replace(meta, checksum="0" * 32)):
        assert error_of(lambda m=wrong: blk.verify_block(str(tmp_path), m)) == \
            error_of(lambda m=wrong: blk.read_block(str(tmp_path), m))
    damage_flip(path)
    assert error_of(lambda: blk.verify_block(str(tmp_path), meta)) == \
        error_of(lambda: blk.read_block(str(tmp_path), meta))


def test_scratch_directories_of_a_crash_are_removed(tmp_path: Path) -> None:
    scratch = tmp_path / "shard-0" / f".{OUT}.abc{mj.TEMP_SUFFIX}"
    (scratch / "rows").mkdir(parents=True)
    (tmp_path / "shard-0" / "S0-L1-x.parquet").write_bytes(b"")
    assert mj.remove_scratch_dirs(str(tmp_path)) == [str(scratch)]
    assert listing(tmp_path) == ["shard-0", "shard-0/S0-L1-x.parquet"]


def test_bridge_errors_survive_pickling() -> None:
    for error in (BridgeBusy("full"), BadBridgeRequest("bad"), BridgeStopped("bye"),
                  mj.SparkMergeFailed("lost executor")):
        back = pickle.loads(pickle.dumps(error))
        assert (type(back), back.args) == (type(error), error.args)


# ---- the bridge process on the sim backend --------------------------------------------


class FakeSessions:
    """The injected session factory and stopper: the module's local session, counted."""

    def __init__(self, spark: Any) -> None:
        self.spark, self.started, self.stopped = spark, 0, 0

    def factory(self, _settings: SparkSettings) -> Any:
        self.started += 1
        return self.spark

    def stopper(self) -> None:
        self.stopped += 1


def delayed(seconds: float) -> Callable[[Callable[[], Any]], Any]:
    """An offload for the simulator: the job holds the bridge's slot for `seconds` of
    virtual time (the process keeps serving meanwhile), then runs inline."""
    async def offload(job: Callable[[], Any]) -> Any:
        await asyncio.sleep(seconds)
        return job()
    return offload


def request(root: Path, sources: list[BlockMeta], block_id: str) -> MergeRequest:
    return MergeRequest(str(root), tuple(sources), block_id, 2, 0, 5.0)


async def busy_client(ctx: Process, first: MergeRequest, second: MergeRequest,
                      third: MergeRequest) -> tuple[Any, ...]:
    before = await ctx.call(BRIDGE_NAME, Status(), timeout=10)
    loop = asyncio.get_running_loop()
    running = loop.create_task(ctx.call(BRIDGE_NAME, Merge(first), timeout=600))
    queued = loop.create_task(ctx.call(BRIDGE_NAME, Merge(second), timeout=600))
    await ctx.sleep(1.0)
    refused = await ctx.call(BRIDGE_NAME, Merge(third), timeout=10)
    during = await ctx.call(BRIDGE_NAME, Status(), timeout=10)
    results = (await running, await queued)
    after = await ctx.call(BRIDGE_NAME, Status(), timeout=10)
    return before, refused, during, results, after


def test_bridge_serves_status_while_a_job_runs_and_bounds_its_queue(
        spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "blocks"
    metas = write_sources(root, [[Row(1, b"a", b"1"), Row(3, b"a", b"3")],
                                 [Row(2, b"b", b"2"), Row(3, b"a", b"3")]])
    expected = mg.merge_blocks(str(twin(root, tmp_path)), metas, block_id="S0-L2-x", level=2,
                               compaction_revision=0, created_at=5.0)
    sessions = FakeSessions(spark)
    with api.start("sim", seed=3, nodes=("n1",)) as rt:
        rt.spawn(spark_bridge, SparkSettings(), sessions.factory, sessions.stopper, 1,
                 delayed(5.0))
        before, refused, during, results, after = rt.run(
            busy_client, request(root, metas, "S0-L2-x"),
            request(root, metas[:1], "S0-L2-y"), request(root, metas, "S0-L2-z"),
            timeout=120)
    assert before == BridgeStatus("not started", None, 0, 0, 0, 0)
    assert isinstance(refused, JobFailed) and isinstance(refused.error, BridgeBusy)
    assert during == BridgeStatus("not started", "S0-L2-x", 1, 0, 0, 1)
    assert results[0] == Merged(expected)
    assert isinstance(results[1], Merged) and results[1].result.id == "S0-L2-y"
    assert after == BridgeStatus("running", None, 0, 2, 0, 1)
    assert sessions.started == 1  # started lazily, once, and reused


async def careful_client(ctx: Process, good: MergeRequest,
                         missing: MergeRequest) -> tuple[Any, ...]:
    answers = [await ctx.call(BRIDGE_NAME, bad, timeout=10) for bad in (
        Merge("not a request"), ("frobnicate",), "status",
        Merge(replace(good, level=-1)), Merge(replace(good, sources=())),
        Merge(replace(good, block_id="../escape")))]
    try:
        await merge_via_bridge(ctx, missing, 60)
        failure: BaseException | None = None
    except MissingBlock as exc:
        failure = exc
    meta = await merge_via_bridge(ctx, good, 60)
    status = await ctx.call(BRIDGE_NAME, Status(), timeout=10)
    stopped = await ctx.call(BRIDGE_NAME, Stop(), timeout=60)
    return answers, failure, meta, status, stopped


def test_bridge_answers_bad_requests_and_failures_with_typed_errors(
        spark: Any, tmp_path: Path) -> None:
    metas = write_sources(tmp_path, [[Row(1, b"a", b"1")], [Row(2, b"b", b"2")]])
    gone = replace(metas[1], id="S0-L1-gone")
    sessions = FakeSessions(spark)
    with api.start("sim", seed=4, nodes=("n1",)) as rt:
        pid = rt.spawn(spark_bridge, SparkSettings(), sessions.factory, sessions.stopper, 2,
                       run_inline)
        answers, failure, meta, status, stopped = rt.run(
            careful_client, request(tmp_path, metas, "S0-L2-ok"),
            request(tmp_path, [metas[0], gone], "S0-L2-no"), timeout=120)
        assert rt.whereis(BRIDGE_NAME) is None
        assert rt.exit_reason(pid) == "normal"
    assert all(isinstance(a, JobFailed) for a in answers) and len(answers) == 6
    assert all(isinstance(a.error, BadBridgeRequest) for a in answers)
    assert isinstance(failure, MissingBlock) and failure.block_id == "S0-L1-gone"
    assert blk.table_rows(blk.read_block(str(tmp_path), meta)) == [
        Row(1, b"a", b"1"), Row(2, b"b", b"2")]
    assert not os.path.exists(blk.block_path(str(tmp_path), SHARD, "S0-L2-no"))
    assert status == BridgeStatus("running", None, 0, 1, 1, 6)
    assert stopped == Stopped()
    assert (sessions.started, sessions.stopped) == (1, 1)


async def stopping_client(ctx: Process, first: MergeRequest,
                          second: MergeRequest) -> tuple[Any, ...]:
    loop = asyncio.get_running_loop()
    running = loop.create_task(ctx.call(BRIDGE_NAME, Merge(first), timeout=600))
    queued = loop.create_task(ctx.call(BRIDGE_NAME, Merge(second), timeout=600))
    await ctx.sleep(1.0)
    stopping = loop.create_task(ctx.call(BRIDGE_NAME, Stop(), timeout=600))
    await ctx.sleep(1.0)
    late = await ctx.call(BRIDGE_NAME, Merge(second), timeout=10)
    status = await ctx.call(BRIDGE_NAME, Status(), timeout=10)
    return await running, await queued, late, status, await stopping


def test_stop_refuses_queued_jobs_and_lets_the_running_one_answer(
        spark: Any, tmp_path: Path) -> None:
    metas = write_sources(tmp_path, [[Row(1, b"a", b"1")]])
    sessions = FakeSessions(spark)
    with api.start("sim", seed=5, nodes=("n1",)) as rt:
        rt.spawn(spark_bridge, SparkSettings(), sessions.factory, sessions.stopper, 4,
                 delayed(5.0))
        running, queued, late, status, stopped = rt.run(
            stopping_client, request(tmp_path, metas, "S0-L2-a"),
            request(tmp_path, metas, "S0-L2-b"), timeout=120)
    assert isinstance(running, Merged) and running.result.id == "S0-L2-a"
    assert isinstance(queued, JobFailed) and isinstance(queued.error, BridgeStopped)
    assert isinstance(late, JobFailed) and isinstance(late.error, BridgeStopped)
    assert status == BridgeStatus("stopping", "S0-L2-a", 0, 0, 0, 2)
    assert stopped == Stopped()
    assert (sessions.started, sessions.stopped) == (1, 1)
    assert not os.path.exists(blk.block_path(str(tmp_path), SHARD, "S0-L2-b"))
