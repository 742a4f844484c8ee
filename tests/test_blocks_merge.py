"""Block files and the merge (sediment.actors.blocks.block, .merge).

Tables of merge cases around the compaction revision (tombstones below, at and above
it), properties against a model and against the KV store's own value-only compaction,
idempotency, history reads (including revisions the hot store has compacted), and bad
input: missing, corrupt or conflicting blocks give typed errors and no output.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sediment.actors.blocks import block as blk
from sediment.actors.blocks import merge as mg
from sediment.actors.blocks.block import Row
from sediment.actors.blocks.errors import (
    BlockConflict,
    CorruptBlock,
    InvalidRows,
    MissingBlock,
)
from sediment.actors.blocks.jobs import AssignedJob, JobPlan, JobState, JobStatus, Tombstone
from sediment.actors.blocks.meta import BlockMeta, compacted_block_id, level0_block_id
from sediment.actors.kv.errors import ErrCompacted, ErrFutureRev
from sediment.actors.kv.store import ALL_KEYS, Store

Spec = tuple[int, str, str | None]  # (revision, key, value); value None: tombstone


def rows(*specs: Spec) -> list[Row]:
    return [Row(r, k.encode(), None if v is None else v.encode()) for r, k, v in specs]


def table(*specs: Spec) -> pa.Table:
    return blk.rows_to_table(rows(*specs))


def specs_of(t: pa.Table) -> list[Spec]:
    return [(r.revision, r.key.decode(), None if r.value is None else r.value.decode())
            for r in blk.table_rows(t)]


# ---- merge semantics ---------------------------------------------------------------

MERGE_CASES: list[tuple[str, list[list[Spec]], int, list[Spec]]] = [
    ("no compaction keeps everything, sorted by key then revision",
     [[(3, "b", "x"), (1, "a", "1")], [(2, "a", "2")]], 0,
     [(1, "a", "1"), (2, "a", "2"), (3, "b", "x")]),
    ("superseded put at or below C is dropped",
     [[(1, "k", "a"), (3, "k", "b")]], 5, [(3, "k", "b")]),
    ("a put exactly at C is the kept latest",
     [[(1, "k", "a"), (5, "k", "b")]], 5, [(5, "k", "b")]),
    ("latest at or below C plus everything above",
     [[(1, "k", "a"), (3, "k", "b")], [(7, "k", "c"), (9, "k", "d")]], 5,
     [(3, "k", "b"), (7, "k", "c"), (9, "k", "d")]),
    ("tombstone below C as the latest is kept: it hides older puts in other blocks",
     [[(1, "k", "a"), (3, "k", None)]], 5, [(3, "k", None)]),
    ("tombstone exactly at C is kept (a watch from C replays it)",
     [[(1, "k", "a"), (5, "k", None)]], 5, [(5, "k", None)]),
    ("tombstone below C with a newer put above C",
     [[(1, "k", "a"), (3, "k", None)], [(7, "k", "b")]], 5, [(3, "k", None), (7, "k", "b")]),
    ("put after a tombstone, both at or below C",
     [[(1, "k", "a"), (2, "k", None), (4, "k", "b")]], 5, [(4, "k", "b")]),
    ("tombstone above C is kept with the latest put below",
     [[(1, "k", "a"), (7, "k", None)]], 5, [(1, "k", "a"), (7, "k", None)]),
    ("tombstone just below C is kept as the latest",
     [[(1, "k", "a"), (4, "k", None)]], 5, [(4, "k", None)]),
    ("C below every row keeps every row",
     [[(6, "k", "a"), (8, "k", "b")]], 5, [(6, "k", "a"), (8, "k", "b")]),
    ("keys are compacted independently",
     [[(1, "a", "1"), (2, "b", "1"), (3, "a", None)], [(4, "b", "2"), (6, "a", "3")]], 5,
     [(3, "a", None), (6, "a", "3"), (4, "b", "2")]),
    ("exact duplicates across sources count once",
     [[(1, "k", "a"), (2, "k", "b")], [(2, "k", "b")]], 0, [(1, "k", "a"), (2, "k", "b")]),
    ("no sources, no rows", [], 5, []),
    ("an empty value is a put, not a tombstone",
     [[(1, "k", "a"), (3, "k", "")]], 5, [(3, "k", "")]),
]


@pytest.mark.parametrize("sources,revision,expected",
                         [c[1:] for c in MERGE_CASES], ids=[c[0] for c in MERGE_CASES])
def test_merge_cases(sources: list[list[Spec]], revision: int, expected: list[Spec]) -> None:
    tables = [table(*s) for s in sources]
    merged = mg.merge_tables(tables, revision)
    assert specs_of(merged) == sorted(expected, key=lambda s: (s[1], s[0]))
    assert blk.check_table(merged) is None
    # idempotent: merging the output again (alone or with itself) changes nothing
    assert mg.merge_tables([merged], revision).equals(merged)
    assert mg.merge_tables([merged, merged], revision).equals(merged)


def test_conflicting_sources_are_refused() -> None:
    with pytest.raises(BlockConflict, match="revision 2"):
        mg.merge_tables([table((2, "k", "a")), table((2, "k", "b"))], 0)
    with pytest.raises(BlockConflict):  # a put and a tombstone at one (key, revision)
        mg.merge_tables([table((2, "k", "a")), table((2, "k", None))], 0)


@pytest.mark.parametrize("bad", [
    [Row(0, b"k", b"v")],  # revision below 1
    [Row(1, b"", b"v")],  # empty key
    [Row(1, b"k", b"a"), Row(1, b"k", b"b")],  # a (key, revision) twice
])
def test_rows_that_break_the_format_are_refused(bad: list[Row]) -> None:
    with pytest.raises(InvalidRows):
        blk.rows_to_table(bad)


# ---- against a model and the KV store ----------------------------------------------

KEYS = [b"a", b"b", b"c"]
op_st = st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(max_size=3)))


def history(ops: Sequence[tuple[bytes, bytes | None]]) -> list[Row]:
    return [Row(i + 1, k, v) for i, (k, v) in enumerate(ops)]


def model_keyspace(hist: Sequence[Row], at: int) -> list[tuple[bytes, bytes]]:
    state: dict[bytes, bytes | None] = {}
    for r in hist:
        if r.revision <= at:
            state[r.key] = r.value
    return sorted((k, v) for k, v in state.items() if v is not None)


def split(hist: Sequence[Row], cuts: Sequence[int]) -> list[pa.Table]:
    """History cut into level-0-like blocks at the given revision boundaries."""
    bounds = sorted({c for c in cuts if 0 < c < len(hist)})
    parts, last = [], 0
    for b in [*bounds, len(hist)]:
        parts.append(blk.rows_to_table(hist[last:b]))
        last = b
    return parts


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(op_st, min_size=1, max_size=25), data=st.data())
def test_merge_answers_every_read_at_or_above_the_compaction_revision(
    ops: list[tuple[bytes, bytes | None]], data: st.DataObject
) -> None:
    hist = history(ops)
    head = len(hist)
    c = data.draw(st.integers(0, head), label="compaction revision")
    cuts = data.draw(st.lists(st.integers(1, head), max_size=4), label="block cuts")
    merged = mg.merge_tables(split(hist, cuts), c)
    for at in range(max(c, 1), head + 1):
        assert mg.keyspace_of(merged, at) == model_keyspace(hist, at)
    for key in KEYS:
        start = max(c, 1)
        expected = [r for r in hist if r.key == key and r.revision >= start]
        assert mg.key_history_of(merged, key, start) == expected
    # compacting in two steps is compacting once at the higher revision
    c1 = data.draw(st.integers(0, c), label="earlier compaction")
    staged = mg.merge_tables([mg.merge_tables(split(hist, cuts), c1)], c)
    assert staged.equals(merged)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op_st, min_size=1, max_size=20), data=st.data())
def test_blocks_match_the_kv_stores_value_only_compaction(
    tmp_path: Path, ops: list[tuple[bytes, bytes | None]], data: st.DataObject
) -> None:
    """Rows flushed from the hot store before it compacts, merged at the same revision,
    answer every read the compacted store still answers, events included."""
    path = tmp_path / f"kv-{data.draw(st.integers(0, 10**9), label='db')}.sqlite"
    with Store(path) as store:
        for key, value in ops:
            if value is None:
                store.delete_range(key)
            else:
                store.put(key, value)
        flushed = [Row(r[0], bytes(r[1]), None if r[6] else bytes(r[2])) for r in store.rows()]
        if store.head == 1:  # nothing written (etcd: the empty store is revision 1)
            return
        c = data.draw(st.integers(1, store.head), label="compaction revision")
        store.compact(c)
        merged = mg.merge_tables([blk.rows_to_table(flushed)], c)
        for at in range(c, store.head + 1):
            kvs = store.range(b"a", ALL_KEYS, revision=at).kvs
            assert mg.keyspace_of(merged, at) == [(kv.key, kv.value) for kv in kvs]
        events = store.events(c, b"a", ALL_KEYS)
        for key in KEYS:
            expected = [Row(e.kv.mod_revision, key, e.kv.value if e.kind == "put" else None)
                        for e in events if e.kv.key == key]
            assert mg.key_history_of(merged, key, c) == expected
        if c > 1:
            with pytest.raises(ErrCompacted):
                store.range(b"a", ALL_KEYS, revision=c - 1)
    path.unlink()


# ---- files ---------------------------------------------------------------------------


def write(root: Path, shard: int, *specs: Spec, created_at: float = 10.0) -> BlockMeta:
    return blk.write_level0(str(root), shard, rows(*specs), created_at)


def test_write_and_read_a_block(tmp_path: Path) -> None:
    meta = write(tmp_path, 3, (7, "b", "x"), (5, "a", "1"), (9, "a", None))
    assert meta.id == level0_block_id(3, 5, 9)
    assert (meta.shard, meta.level, meta.row_count, meta.created_at) == (3, 0, 3, 10.0)
    assert (meta.min_revision, meta.max_revision) == (5, 9)
    assert (meta.min_key, meta.max_key) == (b"a", b"b")
    path = blk.block_path(str(tmp_path), 3, meta.id)
    assert os.path.getsize(path) == meta.size_bytes
    assert specs_of(blk.read_block(str(tmp_path), meta)) == [
        (5, "a", "1"), (9, "a", None), (7, "b", "x")]
    assert [n for n in os.listdir(os.path.dirname(path)) if n.endswith(".tmp")] == []


def test_rewriting_the_same_block_is_a_no_op_and_other_rows_conflict(tmp_path: Path) -> None:
    meta = write(tmp_path, 0, (1, "a", "1"), (2, "b", "2"))
    again = write(tmp_path, 0, (1, "a", "1"), (2, "b", "2"), created_at=10.0)
    assert again == meta
    t = table((1, "a", "1"), (2, "b", "other"))
    with pytest.raises(BlockConflict):
        blk.write_block(str(tmp_path), t, block_id=meta.id, shard=0, level=0, created_at=10.0)
    assert blk.read_block(str(tmp_path), meta).equals(table((1, "a", "1"), (2, "b", "2")))


def _bytes(root: Path, meta: BlockMeta) -> bytes:
    return Path(blk.block_path(str(root), meta.shard, meta.id)).read_bytes()


# A retry differs from the first write only in metadata that does not change the rows.
RETRIES: list[tuple[str, dict[str, object]]] = [
    ("a later created_at (a flusher's retry after a crash)", {"created_at": 99.0}),
    ("another compaction revision", {"compaction_revision": 7}),
    ("both", {"created_at": 0.5, "compaction_revision": 3}),
]


@pytest.mark.parametrize("how", [name for name, _ in RETRIES])
def test_a_retry_keeps_the_block_on_disk_and_returns_its_metadata(tmp_path: Path,
                                                                  how: str) -> None:
    """Same rows under the same id: the existing file stays byte for byte, and the
    metadata returned is the file's own (what the index must then reference)."""
    t = table((1, "a", "1"), (2, "b", None))
    first = blk.write_block(str(tmp_path), t, block_id="B", shard=0, level=1, created_at=10.0)
    before = _bytes(tmp_path, first)
    change = dict(RETRIES)[how]
    fields: dict[str, Any] = {"created_at": 10.0, "compaction_revision": 0, **change}
    again = blk.write_block(str(tmp_path), t, block_id="B", shard=0, level=1, **fields)
    streamed = blk.write_block_batches(str(tmp_path), t.to_batches, block_id="B", shard=0,
                                       level=1, **fields)
    assert again == streamed == first
    assert (again.created_at, again.compaction_revision) == (10.0, 0)
    assert _bytes(tmp_path, first) == before
    assert blk.read_block(str(tmp_path), again).equals(t)
    assert _files(tmp_path) == ["shard-0/B.parquet"]


def test_a_retried_level0_flush_and_a_retried_merge_return_the_first_write(
        tmp_path: Path) -> None:
    flushed = write(tmp_path, 0, (1, "a", "1"), (2, "b", "2"), created_at=10.0)
    assert write(tmp_path, 0, (2, "b", "2"), (1, "a", "1"), created_at=20.0) == flushed
    other = write(tmp_path, 0, (3, "a", "3"))
    job = _job([flushed, other], token=5)
    done = mg.run_job(str(tmp_path), job, [flushed, other], created_at=30.0)
    retried = mg.run_job(str(tmp_path), job, [flushed, other], created_at=40.0)
    assert retried == done and retried.new_block.created_at == 30.0


@pytest.mark.parametrize("rows_differ", [False, True])
def test_a_writer_that_installs_the_block_first_wins_the_race(tmp_path: Path,
                                                              rows_differ: bool) -> None:
    """Another writer installs the same id between this write's check and its commit
    point: a link never replaces it; same rows return its metadata, other rows are a
    conflict, and the temporary file goes either way."""
    mine = table((1, "a", "1"))
    theirs = table((1, "a", "other")) if rows_differ else mine
    installed: list[BlockMeta] = []

    def competitor(point: str) -> None:
        if point == "block.before_rename":
            installed.append(blk.write_block(str(tmp_path), theirs, block_id="B", shard=0,
                                             level=1, created_at=1.0))

    def attempt() -> BlockMeta:
        return blk.write_block(str(tmp_path), mine, block_id="B", shard=0, level=1,
                               created_at=2.0, fp=competitor)

    if rows_differ:
        with pytest.raises(BlockConflict):
            attempt()
    else:
        assert attempt() == installed[0]
    assert blk.read_block(str(tmp_path), installed[0]).equals(theirs)
    assert _files(tmp_path) == ["shard-0/B.parquet"]


def test_a_damaged_or_foreign_file_under_the_name_is_not_replaced(tmp_path: Path) -> None:
    meta = write(tmp_path, 0, (1, "a", "1"))
    path = Path(blk.block_path(str(tmp_path), 0, meta.id))
    path.write_bytes(b"not a block")
    with pytest.raises(CorruptBlock):
        write(tmp_path, 0, (1, "a", "1"), created_at=11.0)
    assert path.read_bytes() == b"not a block"
    other = write(tmp_path, 0, (2, "a", "1"))  # another block's file moved under the name
    os.replace(blk.block_path(str(tmp_path), 0, other.id), path)
    with pytest.raises(CorruptBlock, match="embedded metadata"):
        write(tmp_path, 0, (1, "a", "1"), created_at=11.0)


def _flip_byte(path: str, at: int) -> None:
    data = bytearray(Path(path).read_bytes())
    data[at] ^= 0xFF
    Path(path).write_bytes(bytes(data))


DAMAGE: dict[str, Callable[[str], object]] = {
    "missing": lambda p: os.unlink(p),
    "truncated": lambda p: Path(p).write_bytes(Path(p).read_bytes()[:40]),
    "flipped byte in a page": lambda p: _flip_byte(p, 30),
    "flipped byte in the footer": lambda p: _flip_byte(p, os.path.getsize(p) - 12),
    "not parquet": lambda p: Path(p).write_bytes(b"x" * os.path.getsize(p)),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_blocks_give_typed_errors(tmp_path: Path, damage: str) -> None:
    meta = write(tmp_path, 0, *[(i, f"k{i % 7}", "v" * 20) for i in range(1, 60)])
    DAMAGE[damage](blk.block_path(str(tmp_path), 0, meta.id))
    expected = MissingBlock if damage == "missing" else CorruptBlock
    with pytest.raises(expected) as info:
        blk.read_block(str(tmp_path), meta)
    err = info.value
    assert isinstance(err, MissingBlock | CorruptBlock) and err.block_id == meta.id


def test_another_blocks_file_under_this_name_is_corrupt(tmp_path: Path) -> None:
    a = write(tmp_path, 0, (1, "a", "1"))
    b = write(tmp_path, 0, (2, "a", "2"))
    os.replace(blk.block_path(str(tmp_path), 0, b.id), blk.block_path(str(tmp_path), 0, a.id))
    with pytest.raises(CorruptBlock, match="embedded metadata"):
        blk.read_block(str(tmp_path), replace(a, size_bytes=b.size_bytes, checksum=b.checksum))


def test_metadata_that_does_not_match_the_rows_is_corrupt(tmp_path: Path) -> None:
    meta = write(tmp_path, 0, (1, "a", "1"), (2, "b", "2"))
    for wrong in (replace(meta, row_count=3), replace(meta, max_key=b"c"),
                  replace(meta, size_bytes=meta.size_bytes + 1), replace(meta, level=1),
                  replace(meta, checksum="0" * 32)):
        with pytest.raises(CorruptBlock):
            blk.read_block(str(tmp_path), wrong)


def _job(sources: Sequence[BlockMeta], token: int = 7, revision: int = 0) -> AssignedJob:
    ids = tuple(s.id for s in sources)
    plan = JobPlan("job", sources[0].shard, sources[0].level, ids)
    state = JobState("job", sources[0].level, JobStatus.IN_PROGRESS, 0.0, token, 15.0, 0)
    return AssignedJob(state, plan, revision)


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_run_job_merges_into_the_block_its_token_names(tmp_path: Path) -> None:
    a = write(tmp_path, 2, (1, "a", "1"), (2, "b", "1"))
    b = write(tmp_path, 2, (3, "a", None), (4, "b", "2"), (5, "c", "1"))
    job = _job([a, b], token=7, revision=4)
    result = mg.run_job(str(tmp_path), job, [a, b], created_at=50.0)
    out = result.new_block
    assert result.source_blocks == (a.id, b.id)
    assert out.id == compacted_block_id(2, 0, (a.id, b.id), 7)
    assert (out.shard, out.level, out.compaction_revision, out.created_at) == (2, 1, 4, 50.0)
    assert specs_of(blk.read_block(str(tmp_path), out)) == [
        (3, "a", None), (4, "b", "2"), (5, "c", "1")]


@pytest.mark.parametrize("damage", ["missing", "flipped byte in a page", "truncated"])
def test_a_bad_source_fails_the_job_and_writes_nothing(tmp_path: Path, damage: str) -> None:
    a = write(tmp_path, 0, *[(i, f"k{i % 5}", "v" * 20) for i in range(1, 40)])
    b = write(tmp_path, 0, (50, "a", "1"))
    DAMAGE[damage](blk.block_path(str(tmp_path), 0, a.id))
    before = _files(tmp_path)
    with pytest.raises(MissingBlock if damage == "missing" else CorruptBlock):
        mg.run_job(str(tmp_path), _job([a, b]), [a, b], created_at=1.0)
    assert _files(tmp_path) == before


def test_conflicting_sources_fail_the_job_and_write_nothing(tmp_path: Path) -> None:
    a = write(tmp_path, 0, (1, "a", "1"))
    b = blk.write_block(str(tmp_path), table((1, "a", "2")), block_id="other", shard=0,
                        level=0, created_at=1.0)
    before = _files(tmp_path)
    with pytest.raises(BlockConflict):
        mg.run_job(str(tmp_path), _job([a, b]), [a, b], created_at=1.0)
    assert _files(tmp_path) == before


@pytest.mark.parametrize("point", blk.BLOCK_FAILPOINTS[:2])
def test_a_crash_before_the_rename_leaves_no_output(tmp_path: Path, point: str) -> None:
    a = write(tmp_path, 0, (1, "a", "1"))
    b = write(tmp_path, 0, (2, "a", "2"))
    before = _files(tmp_path)

    def crash(name: str) -> None:
        if name == point:
            raise RuntimeError(f"crash at {name}")

    with pytest.raises(RuntimeError):
        mg.run_job(str(tmp_path), _job([a, b]), [a, b], created_at=1.0, fp=crash)
    assert _files(tmp_path) == before


def test_source_metadata_must_match_the_plan(tmp_path: Path) -> None:
    a = write(tmp_path, 0, (1, "a", "1"))
    b = write(tmp_path, 0, (2, "a", "2"))
    with pytest.raises(InvalidRows):
        mg.run_job(str(tmp_path), _job([a, b]), [b, a], created_at=1.0)


def test_remove_temp_files_and_cleanup(tmp_path: Path) -> None:
    a = write(tmp_path, 1, (1, "a", "1"))
    stray = tmp_path / "shard-1" / f".{a.id}.abc.tmp"
    stray.write_bytes(b"partial")
    assert blk.remove_temp_files(str(tmp_path)) == [str(stray)]
    tomb = Tombstone("job", 1, (a.id, "gone-already"), 0.0, 1)
    assert mg.cleanup(str(tmp_path), [tomb]) == 1
    assert mg.cleanup(str(tmp_path), [tomb]) == 0
    assert _files(tmp_path) == []


# ---- history reads from files -----------------------------------------------------------


def test_history_reads_answer_revisions_the_hot_store_compacted(tmp_path: Path) -> None:
    """The hot store compacts at 6; the blocks were merged at 3 and still answer 3..5."""
    with Store(tmp_path / "kv.sqlite") as store:
        for key, value in [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"a", None),
                           (b"b", b"2"), (b"a", b"3"), (b"c", b"1")]:
            if value is None:
                store.delete_range(key)
            else:
                store.put(key, value)
        # the store numbers from 2 (etcd: the empty store is revision 1): the rows are
        # relabelled one lower, so the blocks below hold revisions 1..7
        flushed = [Row(r[0] - 1, bytes(r[1]), None if r[6] else bytes(r[2]))
                   for r in store.rows()]
        expected_at_4 = [(kv.key, kv.value) for kv in store.range(b"a", ALL_KEYS, revision=5).kvs]
        store.compact(7)
        with pytest.raises(ErrCompacted):
            store.range(b"a", ALL_KEYS, revision=5)
    root = str(tmp_path / "blocks")
    l0 = [blk.write_level0(root, 0, flushed[:4], 1.0), blk.write_level0(root, 0, flushed[4:], 2.0)]
    job = _job(l0, token=9, revision=3)
    merged = mg.run_job(root, job, l0, created_at=3.0).new_block
    live = [merged]
    assert mg.read_keyspace(root, live, 4, compaction_revision=3) == expected_at_4
    assert mg.read_keyspace(root, live, 7, compaction_revision=3, head=7) == [
        (b"a", b"3"), (b"b", b"2"), (b"c", b"1")]
    assert mg.read_key_history(root, live, b"a", 3, compaction_revision=3) == [
        Row(3, b"a", b"2"), Row(4, b"a", None), Row(6, b"a", b"3")]
    assert mg.read_key_history(root, live, b"a", 5, 5) == []
    with pytest.raises(ErrCompacted) as info:
        mg.read_keyspace(root, live, 2)  # the block itself was merged at 3
    assert info.value.compact_revision == 3
    with pytest.raises(ErrCompacted):
        mg.read_key_history(root, live, b"a", 2)
    with pytest.raises(ErrCompacted):
        mg.read_keyspace(root, live, 4, compaction_revision=5)
    with pytest.raises(ErrFutureRev):
        mg.read_keyspace(root, live, 8, head=7)
    # reading the level-0 blocks directly gives the same answers
    assert mg.read_keyspace(root, l0, 4) == expected_at_4
    assert mg.read_key_history(root, l0, b"a") == [
        Row(1, b"a", b"1"), Row(3, b"a", b"2"), Row(4, b"a", None), Row(6, b"a", b"3")]


def test_history_reads_of_a_missing_block_fail_typed(tmp_path: Path) -> None:
    a = write(tmp_path, 0, (1, "a", "1"))
    os.unlink(blk.block_path(str(tmp_path), 0, a.id))
    with pytest.raises(MissingBlock):
        mg.read_keyspace(str(tmp_path), [a], 1)
    # a block that cannot hold the key is not even opened
    assert mg.read_key_history(str(tmp_path), [a], b"z") == []
