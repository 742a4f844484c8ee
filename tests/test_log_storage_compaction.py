"""Minor and major compaction, grouping rules, the v3 recovery table (Ra recover1-4),
the guard, symlink purge, and a crash at every compaction failpoint."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sediment.actors.log.storage import compaction as comp
from sediment.actors.log.storage.compaction import (
    CompactionGuard,
    CompactionResult,
    SegmentInfo,
    compaction_groups,
    delete_unreferenced,
    major_compaction,
    minor_compaction,
    purge_dangling_symlinks,
    purge_symlinks,
    recover_compaction,
)
from sediment.actors.log.storage.errors import CompactionError
from sediment.actors.log.storage.failpoints import COMPACTION_FAILPOINTS
from sediment.actors.log.storage.flush import GroupSegmentWriter
from sediment.actors.log.storage.fsutil import frame, write_file_durable
from sediment.actors.log.storage.records import Entry
from sediment.actors.log.storage.segment import (
    SegmentConfig,
    SegmentReader,
    SegmentWriter,
    copy_live,
    recover_segrefs,
)
from sediment.actors.log.storage.segrefs import SegRef, SegRefs
from sediment.actors.log.storage.snapshot import SnapshotState

PER_SEG = 32


def e(i: int) -> Entry:
    return Entry(i, 1, i, f"value-{i}".encode() * 6)


def build(seg_dir: str, n_entries: int, per_seg: int = PER_SEG) -> SegRefs:
    w = GroupSegmentWriter(seg_dir, "g", SegmentConfig(max_entries=per_seg))
    w.flush([e(i) for i in range(1, n_entries + 1)], SnapshotState.initial())
    refs = w.refs
    w.close()
    return refs


def read_via(seg_dir: str, refs: SegRefs, i: int) -> Entry | None:
    ref = refs.find(i)
    if ref is None:
        return None
    with SegmentReader.open(os.path.join(seg_dir, ref.file)) as r:
        return r.get(i)


def seg(n: int) -> str:
    return f"{n:08d}.segment"


def assert_readable(seg_dir: str, refs: SegRefs, idxs: list[int] | tuple[int, ...]) -> None:
    for i in idxs:
        assert read_via(seg_dir, refs, i) == e(i), i


# -- minor ------------------------------------------------------------------------------


def test_minor_deletes_only_dead_segments_never_the_active_one(tmp_path: Path) -> None:
    d = str(tmp_path)
    refs = build(d, 4 * PER_SEG)  # segments 1..4, 4 is the active one
    live = [3, 2 * PER_SEG + 5]  # in segments 1 and 3
    state = SnapshotState.of(4 * PER_SEG, live)  # even the active segment is <= snapshot
    res = minor_compaction(refs, state)
    assert res == CompactionResult("minor", unreferenced=(seg(2),))
    refs2 = res.apply_to(refs)
    assert delete_unreferenced(d, res.unreferenced) == [seg(2)]
    assert sorted(os.listdir(d)) == [seg(1), seg(3), seg(4)]
    assert_readable(d, refs2, live)
    assert_readable(d, refs2, list(range(3 * PER_SEG + 1, 4 * PER_SEG + 1)))


def test_minor_with_no_live_indexes_deletes_every_compactable_segment(tmp_path: Path) -> None:
    refs = build(str(tmp_path), 4 * PER_SEG)
    res = minor_compaction(refs, SnapshotState.of(3 * PER_SEG + 1, []))
    assert res.unreferenced == (seg(1), seg(2), seg(3))
    assert minor_compaction(refs, SnapshotState.of(3 * PER_SEG - 1, [])).unreferenced == (
        seg(1),
        seg(2),
    )


# -- grouping ---------------------------------------------------------------------------


def info(n: int, live: int, total: int = 100, size_per: int = 10) -> SegmentInfo:
    ref = SegRef(seg(n), n * 1000, n * 1000 + total - 1)
    lv = tuple(range(n * 1000, n * 1000 + live))
    return SegmentInfo(ref, total, total * size_per, lv, live * size_per)


def names(groups: list[list[SegmentInfo]]) -> list[list[int]]:
    return [[g.ref.number for g in grp] for grp in groups]


def test_grouping_example_from_the_ra_docs() -> None:
    infos = [info(1, 20), info(2, 30), info(3, 80), info(4, 10), info(5, 15)]
    assert names(compaction_groups(infos, 4096, 10**9)) == [[1, 2], [4, 5]]


def test_grouping_respects_max_count_and_max_size() -> None:
    infos = [info(n, 40) for n in range(1, 6)]
    assert names(compaction_groups(infos, 100, 10**9)) == [[1, 2], [3, 4], [5]]
    assert names(compaction_groups(infos, 10**6, 850)) == [[1, 2], [3, 4], [5]]


def test_grouping_skips_an_oversized_sparse_segment_pr590() -> None:
    # a sparse segment whose live entries alone exceed max_count used to loop forever
    infos = [info(1, 45, total=100), info(2, 10), info(3, 10)]
    assert names(compaction_groups(infos, 40, 10**9)) == [[2, 3]]
    assert names(compaction_groups([info(1, 45)], 40, 10**9)) == []


def test_live_bytes_under_half_makes_a_segment_sparse() -> None:
    ref = SegRef(seg(1), 1, 10)
    big_dead = SegmentInfo(ref, 10, 1000, tuple(range(1, 7)), 100)  # 60% entries, 10% bytes
    dense = SegmentInfo(ref, 10, 1000, tuple(range(1, 7)), 600)
    assert big_dead.sparse and not dense.sparse


# -- major ------------------------------------------------------------------------------


def test_major_compacts_sparse_groups_and_reports_for_the_server(tmp_path: Path) -> None:
    d = str(tmp_path)
    refs = build(d, 6 * PER_SEG)  # 6 segments, 6 is active
    snap = 5 * PER_SEG
    live = (
        [1, 5, 9]  # segment 1: sparse
        + [PER_SEG + 2]  # segment 2: sparse
        + list(range(2 * PER_SEG + 1, 3 * PER_SEG + 1))  # segment 3: dense
        # segment 4: dead
        + [4 * PER_SEG + 7, 4 * PER_SEG + 8]  # segment 5: sparse
    )
    state = SnapshotState.of(snap, live)
    res = major_compaction(d, refs, state, max_count=PER_SEG)
    assert res.type == "major"
    assert res.unreferenced == (seg(4),)
    assert res.linked == (seg(2),)
    assert res.compacted_segrefs == (
        SegRef(seg(1), 1, PER_SEG + 2),
        SegRef(seg(5), 4 * PER_SEG + 7, 4 * PER_SEG + 8),
    )
    # nothing referenced was deleted; segment 2 is now a symlink to segment 1
    assert os.path.islink(os.path.join(d, seg(2))) and os.readlink(os.path.join(d, seg(2))) == seg(
        1
    )
    assert os.path.exists(os.path.join(d, seg(4)))
    refs2 = res.apply_to(refs)
    assert [r.file for r in refs2] == [seg(1), seg(3), seg(5), seg(6)]
    delete_unreferenced(d, res.unreferenced)
    assert_readable(d, refs2, live)
    assert_readable(d, refs2, list(range(snap + 1, 6 * PER_SEG + 1)))
    with SegmentReader.open(os.path.join(d, seg(1))) as r:
        assert r.compacted and r.indexes() == [1, 5, 9, PER_SEG + 2]
    # after a restart the refs rebuilt from the directory agree with the server's
    assert recover_compaction(d).is_empty
    assert recover_segrefs(d) == refs2
    # the old name still reads through the symlink until it is purged
    with SegmentReader.open(os.path.join(d, seg(2))) as r:
        assert r.read(PER_SEG + 2) == e(PER_SEG + 2)
    assert purge_symlinks(d, 60, now=os.lstat(os.path.join(d, seg(2))).st_ctime + 10) == []
    assert purge_symlinks(d, 60, now=os.lstat(os.path.join(d, seg(2))).st_ctime + 61) == [seg(2)]


def test_major_keeps_source_crcs(tmp_path: Path) -> None:
    d = str(tmp_path)
    refs = build(d, 3 * PER_SEG)
    with SegmentReader.open(os.path.join(d, seg(2))) as r:
        before = r.read_raw(PER_SEG + 3)
    res = major_compaction(d, refs, SnapshotState.of(2 * PER_SEG, [4, PER_SEG + 3]))
    assert res.linked == (seg(2),)
    with SegmentReader.open(os.path.join(d, seg(1))) as r:
        assert r.read_raw(PER_SEG + 3) == before


def test_major_deletes_orphaned_segments(tmp_path: Path) -> None:
    d = str(tmp_path)
    refs = build(d, 4 * PER_SEG)
    orphan = os.path.join(d, seg(2))
    # the server no longer references segment 2 (it was overwritten)
    server = SegRefs([r for r in refs if r.file != seg(2)])
    res = major_compaction(d, server, SnapshotState.of(3 * PER_SEG, [1, 2 * PER_SEG + 1]))
    assert not os.path.exists(orphan)
    assert seg(2) not in res.unreferenced


def test_overwritten_tail_is_not_copied(tmp_path: Path) -> None:
    d = str(tmp_path)
    w = GroupSegmentWriter(d, "g", SegmentConfig(max_entries=PER_SEG))
    w.flush([e(i) for i in range(1, 2 * PER_SEG + 1)], SnapshotState.initial())
    w.flush(
        [Entry(i, 2, i, b"new") for i in range(PER_SEG - 3, 3 * PER_SEG + 2)],
        SnapshotState.initial(),
    )
    refs = w.refs
    w.close()
    assert refs.find(PER_SEG - 3).file == seg(3)  # type: ignore[union-attr]
    state = SnapshotState.of(3 * PER_SEG, [2, PER_SEG - 2])
    res = major_compaction(d, refs, state)
    refs2 = res.apply_to(refs)
    delete_unreferenced(d, res.unreferenced)
    assert read_via(d, refs2, 2) == e(2)
    got = read_via(d, refs2, PER_SEG - 2)
    assert got is not None and got.term == 2 and got.payload == b"new"


def test_empty_live_list_major_is_a_truncation(tmp_path: Path) -> None:
    d = str(tmp_path)
    refs = build(d, 3 * PER_SEG)
    res = major_compaction(d, refs, SnapshotState.of(3 * PER_SEG, []))
    assert res.unreferenced == (seg(1), seg(2)) and not res.linked


# -- the guard ----------------------------------------------------------------------------


def test_compactions_are_not_triggered_concurrently() -> None:
    g = CompactionGuard()
    assert g.schedule("major", 10) == "major"
    assert g.schedule("major", 20) is None
    assert g.schedule("minor", 30) is None
    assert g.finish() == 30  # a newer snapshot came in: run a minor for it
    assert g.schedule("minor", 30) == "minor"
    assert g.finish() is None


def test_major_strategy_num_minors() -> None:
    g = CompactionGuard(num_minors=8)
    kinds = []
    for k in range(18):
        kinds.append(g.schedule("minor", k))
        g.finish()
    assert kinds.count("major") == 2 and kinds[8] == "major" and kinds[17] == "major"
    manual = CompactionGuard(num_minors=None)
    for k in range(20):
        assert manual.schedule("minor", k) == "minor"
        manual.finish()


# -- recovery: Ra's recover1..recover4 ---------------------------------------------------


def marker(d: str, names: list[str]) -> str:
    p = os.path.join(d, names[0].split(".")[0] + comp.MARKER_SUFFIX)
    write_file_durable(p, frame(b"CGRP", json.dumps(names).encode()))
    return p


def compacting_for(d: str, names: list[str], live: list[int], refs: SegRefs) -> str:
    """Write the .compacting file exactly as major compaction would."""
    path = os.path.join(d, names[0].split(".")[0] + comp.COMPACTING_SUFFIX)
    readers = [SegmentReader.open(os.path.join(d, n)) for n in names]
    dst = SegmentWriter.create(path, "g", origin=names, compacted=True)
    byname = {r.file: r for r in refs}
    copy_live(readers, live, dst, ranges=[(byname[n].first, byname[n].last) for n in names])
    dst.seal()
    for r in readers:
        r.close()
    return path


def test_recover1_single_segment_and_corrupt_markers(tmp_path: Path) -> None:
    d = str(tmp_path)
    refs = build(d, 4 * PER_SEG)
    all_idx = list(range(1, 4 * PER_SEG + 1))
    # a leftover single-segment marker plus .compacting
    m = marker(d, [seg(1)])
    c = os.path.join(d, "00000001" + comp.COMPACTING_SUFFIX)
    Path(c).write_bytes(b"")
    assert recover_compaction(d).compacted_segrefs == ()
    assert not os.path.exists(m) and not os.path.exists(c)
    # marker only
    marker(d, [seg(1)])
    recover_compaction(d)
    assert not os.path.exists(m)
    # a partially written marker
    Path(m).write_bytes(b"banana")
    recover_compaction(d)
    assert not os.path.exists(m) and not os.path.exists(c)
    assert recover_segrefs(d) == refs
    assert_readable(d, refs, all_idx)


LIVE = list(range(1, 3 * PER_SEG + 1, 8))


def _half_done(tmp_path: Path) -> tuple[str, SegRefs, list[str], str]:
    d = str(tmp_path)
    refs = build(d, 4 * PER_SEG)
    group = [seg(1), seg(2), seg(3)]
    marker(d, group)
    c = compacting_for(d, group, LIVE, refs)
    return d, refs, group, c


def _assert_complete(d: str, group: list[str], res: CompactionResult) -> None:
    assert res.linked == tuple(group[1:])
    assert res.compacted_segrefs == (SegRef(group[0], LIVE[0], LIVE[-1]),)
    assert [n for n in os.listdir(d) if not n.endswith(".segment")] == []
    for n in group[1:]:
        assert os.readlink(os.path.join(d, n)) == group[0]
    refs = recover_segrefs(d)
    assert [r.file for r in refs] == [group[0], seg(4)]
    assert_readable(d, refs, LIVE)


def test_recover2_rename_done_some_symlinks_made(tmp_path: Path) -> None:
    d, _refs, group, c = _half_done(tmp_path)
    os.rename(c, os.path.join(d, group[0]))
    os.symlink(group[0], os.path.join(d, "00000002.link"))
    os.rename(os.path.join(d, "00000002.link"), os.path.join(d, group[1]))
    _assert_complete(d, group, recover_compaction(d))


def test_recover3_link_created_not_renamed(tmp_path: Path) -> None:
    d, _refs, group, c = _half_done(tmp_path)
    os.rename(c, os.path.join(d, group[0]))
    os.symlink(group[0], os.path.join(d, "00000002.link"))
    _assert_complete(d, group, recover_compaction(d))


def test_recover4_compacting_still_present_aborts(tmp_path: Path) -> None:
    d, refs, _group, c = _half_done(tmp_path)
    res = recover_compaction(d)
    assert res.compacted_segrefs == () and res.linked == ()
    assert sorted(os.listdir(d)) == [seg(n) for n in (1, 2, 3, 4)]
    assert not any(os.path.islink(os.path.join(d, n)) for n in os.listdir(d))
    assert recover_segrefs(d) == refs
    assert_readable(d, refs, list(range(1, 4 * PER_SEG + 1)))


def test_recover_finishes_a_committed_compaction_whose_marker_was_lost(tmp_path: Path) -> None:
    # the marker is unreadable (say damaged after the commit): the compacted leader's
    # header names its group, and one member is already a symlink to it
    d, _refs, group, c = _half_done(tmp_path)
    os.rename(c, os.path.join(d, group[0]))
    os.symlink(group[0], os.path.join(d, "00000002.link"))
    os.rename(os.path.join(d, "00000002.link"), os.path.join(d, group[1]))
    Path(d, "00000001" + comp.MARKER_SUFFIX).write_bytes(b"banana")
    res = recover_compaction(d)
    _assert_complete(d, group, res)


def test_recover_marker_without_compacting_output_aborts(tmp_path: Path) -> None:
    # beyond Ra: the crash came after the marker but before .compacting reached disk
    d = str(tmp_path)
    refs = build(d, 4 * PER_SEG)
    marker(d, [seg(1), seg(2)])
    res = recover_compaction(d)
    assert res.compacted_segrefs == ()
    assert recover_segrefs(d) == refs
    assert_readable(d, refs, list(range(1, 4 * PER_SEG + 1)))


def test_recover_refuses_symlinks_to_an_uncompacted_leader(tmp_path: Path) -> None:
    d = str(tmp_path)
    build(d, 4 * PER_SEG)
    marker(d, [seg(1), seg(2)])
    os.symlink(seg(1), os.path.join(d, "x.link"))
    os.rename(os.path.join(d, "x.link"), os.path.join(d, seg(2)))
    with pytest.raises(CompactionError):
        recover_compaction(d)


def test_recovery_cleans_leftovers_and_leaves_unknown_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = str(tmp_path)
    build(d, 2 * PER_SEG)
    Path(d, "00000009.compacting").write_bytes(b"partial")
    os.symlink(seg(1), os.path.join(d, "00000002.link"))
    Path(d, "notes.txt").write_text("mine")
    recover_compaction(d)
    assert sorted(os.listdir(d)) == [seg(1), seg(2), "notes.txt"]
    assert "unknown file" in capsys.readouterr().err


def test_purge_dangling_symlinks(tmp_path: Path) -> None:
    d = str(tmp_path)
    build(d, PER_SEG)
    os.symlink("00000077.segment", os.path.join(d, seg(5)))
    assert purge_dangling_symlinks(d) == [seg(5)]


# -- a crash at every compaction failpoint ------------------------------------------------


class Crash(Exception):
    pass


def crash_at(target: str, nth: int = 1):  # type: ignore[no-untyped-def]
    seen = {"n": 0}

    def fp(name: str) -> None:
        if name == target:
            seen["n"] += 1
            if seen["n"] == nth:
                raise Crash(name)

    return fp


MAJOR_POINTS = [p for p in COMPACTION_FAILPOINTS if not p.startswith("minor.")] + [
    "segment.before_seal",
    "segment.after_seal",
]


@pytest.mark.parametrize("nth", [1, 2])
@pytest.mark.parametrize("point", MAJOR_POINTS)
def test_crash_at_every_major_failpoint(tmp_path: Path, point: str, nth: int) -> None:
    d = str(tmp_path)
    refs = build(d, 7 * PER_SEG)
    # two groups of sparse segments, 1-3 and 5-6, split by the dense segment 4 (7 is
    # the active one); plus an orphan: a copy of an old segment no ref names
    dense = list(range(3 * PER_SEG + 1, 4 * PER_SEG + 1))
    live = [2, PER_SEG + 3, 2 * PER_SEG + 4, *dense, 4 * PER_SEG + 5, 5 * PER_SEG + 6]
    state = SnapshotState.of(6 * PER_SEG, live)
    server = refs
    orphan = os.path.join(d, "00000000.segment")
    Path(orphan).write_bytes(Path(d, seg(1)).read_bytes())
    originals = {}
    for n in range(1, 8):
        with SegmentReader.open(os.path.join(d, seg(n))) as r:
            originals[n] = r.indexes()
    try:
        res = major_compaction(d, server, state, max_count=PER_SEG, fp=crash_at(point, nth))
        crashed = False
    except Crash:
        crashed = True
    if crashed:
        # restart: recovery, then the refs rebuilt from the directory
        rec = recover_compaction(d)
        after = recover_segrefs(d)
        for grp in ([1, 2, 3], [5, 6]):
            leader = os.path.join(d, seg(grp[0]))
            with SegmentReader.open(leader) as r:
                done = r.compacted
            others = [os.path.join(d, seg(n)) for n in grp[1:]]
            if done:  # compaction complete: the others are symlinks to the leader
                assert all(os.readlink(p) == seg(grp[0]) for p in others)
            else:  # originals intact
                for n in grp:
                    p = os.path.join(d, seg(n))
                    assert not os.path.islink(p)
                    with SegmentReader.open(p) as r:
                        assert r.indexes() == originals[n]
        assert [n for n in os.listdir(d) if not n.endswith(".segment")] == []
        assert rec.type in ("major", "minor")
        with SegmentReader.open(os.path.join(d, seg(4))) as dense_reader:
            assert not dense_reader.compacted  # a dense segment is never rewritten
        # a compaction run again after recovery finishes the job
        res = major_compaction(d, after, state, max_count=PER_SEG)
        refs2 = res.apply_to(after)
    else:
        refs2 = res.apply_to(server)
    delete_unreferenced(d, res.unreferenced)
    assert_readable(d, refs2, live)
    assert_readable(d, refs2, list(range(6 * PER_SEG + 1, 7 * PER_SEG + 1)))
    assert recover_compaction(d).is_empty
    assert [r.file for r in recover_segrefs(d)] == [r.file for r in refs2]
    assert [r.file for r in refs2] == [seg(1), seg(4), seg(5), seg(7)]
    assert not os.path.exists(orphan)


@pytest.mark.parametrize("point", ["minor.before_delete", "minor.after_delete"])
def test_crash_while_deleting_unreferenced(tmp_path: Path, point: str) -> None:
    d = str(tmp_path)
    refs = build(d, 4 * PER_SEG)
    state = SnapshotState.of(3 * PER_SEG, [5])
    res = minor_compaction(refs, state)
    server = res.apply_to(refs)
    with pytest.raises(Crash):
        delete_unreferenced(d, res.unreferenced, fp=crash_at(point))
    # restart: leftovers are harmless and the next minor removes them
    again = recover_segrefs(d)
    res2 = minor_compaction(again, state)
    delete_unreferenced(d, res2.unreferenced)
    final = res2.apply_to(again)
    assert [r.file for r in final] == [r.file for r in server]
    assert_readable(d, final, [5] + list(range(3 * PER_SEG + 1, 4 * PER_SEG + 1)))
