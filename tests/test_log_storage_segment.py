"""Segments (seal/open, unsealed scan, corruption, copy), segment refs, WAL flush."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sediment.actors.log.storage.errors import CorruptSegment
from sediment.actors.log.storage.flush import GroupSegmentWriter
from sediment.actors.log.storage.records import Entry
from sediment.actors.log.storage.segment import (
    SegmentConfig,
    SegmentFull,
    SegmentReader,
    SegmentSealed,
    SegmentWriter,
    copy_live,
    recover_segrefs,
)
from sediment.actors.log.storage.segrefs import SegRef, SegRefs, compactable
from sediment.actors.log.storage.snapshot import SnapshotState


def e(i: int, term: int = 1) -> Entry:
    return Entry(i, term, 10 * i, f"payload-{i}-".encode() * 4)


def write_segment(path: str, idxs: list[int], *, seal: bool = True) -> None:
    w = SegmentWriter.create(path, "grp")
    for i in idxs:
        w.append(e(i))
    if seal:
        w.seal()
    else:
        w.sync()
        w.close()


def test_seal_then_open_by_index(tmp_path: Path) -> None:
    p = str(tmp_path / "00000001.segment")
    write_segment(p, [1, 2, 3, 5, 8])
    with SegmentReader.open(p) as r:
        assert r.sealed and r.group == "grp"
        assert r.range() == (1, 8)
        assert r.indexes() == [1, 2, 3, 5, 8]
        assert r.read(5) == e(5)
        assert r.term(8) == 1 and r.term(4) is None
        assert r.get(4) is None
        with pytest.raises(KeyError):
            r.read(4)
        assert list(r.entries(2, 5)) == [e(2), e(3), e(5)]
        assert r.segref() == SegRef("00000001.segment", 1, 8)


def test_unsealed_segment_is_opened_by_scanning(tmp_path: Path) -> None:
    p = str(tmp_path / "00000001.segment")
    write_segment(p, list(range(1, 11)), seal=False)
    with SegmentReader.open(p) as r:
        assert not r.sealed and r.torn_at is None
        assert [x.index for x in r.entries()] == list(range(1, 11))


def test_unsealed_scan_stops_at_a_torn_tail_and_reopen_cuts_it(tmp_path: Path) -> None:
    p = str(tmp_path / "00000001.segment")
    write_segment(p, list(range(1, 11)), seal=False)
    size = os.path.getsize(p)
    os.truncate(p, size - 7)
    with SegmentReader.open(p) as r:
        assert r.indexes() == list(range(1, 10))
        assert r.torn_at is not None
        end = r.data_end
    w = SegmentWriter.reopen(p)
    assert os.path.getsize(p) == end
    assert w.last_index == 9
    w.append(e(10, term=2))
    w.seal()
    with SegmentReader.open(p) as r:
        assert r.sealed and r.read(10) == e(10, term=2) and r.read(9) == e(9)


def test_interrupted_seal_reads_as_unsealed(tmp_path: Path) -> None:
    p = str(tmp_path / "00000001.segment")
    write_segment(p, list(range(1, 6)))
    os.truncate(p, os.path.getsize(p) - 10)  # trailer and part of the index block lost
    with SegmentReader.open(p) as r:
        assert not r.sealed
        assert r.indexes() == [1, 2, 3, 4, 5]
    w = SegmentWriter.reopen(p)
    w.append(e(6))
    w.seal()
    with SegmentReader.open(p) as r:
        assert r.sealed and r.indexes() == [1, 2, 3, 4, 5, 6]


def test_reopen_refuses_a_sealed_segment(tmp_path: Path) -> None:
    p = str(tmp_path / "00000001.segment")
    write_segment(p, [1])
    with pytest.raises(SegmentSealed):
        SegmentWriter.reopen(p)


def _flip(path: str, offset: int) -> None:
    data = bytearray(Path(path).read_bytes())
    data[offset] ^= 0x5A
    Path(path).write_bytes(bytes(data))


@pytest.mark.parametrize("sealed", [True, False])
def test_crc_mismatch_raises_corrupt_segment(tmp_path: Path, sealed: bool) -> None:
    p = str(tmp_path / "00000001.segment")
    write_segment(p, list(range(1, 6)), seal=sealed)
    with SegmentReader.open(p) as r:
        loc = r.location(3)
        assert loc is not None
        off, length, _ = loc
    _flip(p, off + length - 8)  # a payload byte of entry 3
    if sealed:
        with SegmentReader.open(p) as r:
            assert r.read(2) == e(2)
            with pytest.raises(CorruptSegment) as err:
                r.read(3)
            assert err.value.index == 3 and err.value.path == p
            with pytest.raises(CorruptSegment):
                list(r.entries())
    else:
        with pytest.raises(CorruptSegment) as err2:
            SegmentReader.open(p)
        assert err2.value.offset == off


def test_damaged_index_block_raises(tmp_path: Path) -> None:
    p = str(tmp_path / "00000001.segment")
    write_segment(p, list(range(1, 6)))
    _flip(p, os.path.getsize(p) - 40)  # inside the index block, trailer intact
    with pytest.raises(CorruptSegment):
        SegmentReader.open(p)


def test_limits(tmp_path: Path) -> None:
    w = SegmentWriter.create(str(tmp_path / "00000001.segment"), "g", max_entries=3)
    for i in (1, 2, 3):
        w.append(e(i))
    with pytest.raises(SegmentFull):
        w.append(e(4))
    w1 = SegmentWriter.create(str(tmp_path / "00000002.segment"), "g")
    w1.append(e(5))
    with pytest.raises(ValueError):
        w1.append(e(5))  # indexes strictly ascending within a file
    w1.seal()
    w2 = SegmentWriter.create(str(tmp_path / "00000003.segment"), "g", max_size=300)
    w2.append(e(1))  # a first entry always fits
    assert not w2.has_room(1000)
    w.seal()
    w2.seal()


def test_copy_live_keeps_source_crcs_and_ranges(tmp_path: Path) -> None:
    a, b = str(tmp_path / "00000001.segment"), str(tmp_path / "00000002.segment")
    write_segment(a, list(range(1, 11)))
    write_segment(b, list(range(8, 16)))  # overwrote 8..10 of a
    dst_path = str(tmp_path / "00000001.compacting")
    dst = SegmentWriter.create(dst_path, "grp", compacted=True, origin=["x", "y"])
    ra, rb = SegmentReader.open(a), SegmentReader.open(b)
    live = [2, 5, 9, 12, 15]
    n = copy_live([ra, rb], live, dst, ranges=[(1, 7), (8, 15)])
    dst.seal()
    assert n == 5
    with SegmentReader.open(dst_path) as out:
        assert out.compacted and out.origin == ("x", "y")
        assert out.indexes() == live
        for i in (2, 5):
            assert out.read_raw(i) == ra.read_raw(i)
        for i in (9, 12, 15):
            assert out.read_raw(i) == rb.read_raw(i)  # 9 from b, not the overwritten a
    ra.close()
    rb.close()


@pytest.mark.parametrize("verify", [True, False])
def test_copy_of_a_damaged_record_never_launders_it(tmp_path: Path, verify: bool) -> None:
    a = str(tmp_path / "00000001.segment")
    write_segment(a, list(range(1, 21)))
    with SegmentReader.open(a) as r:
        loc = r.location(7)
        assert loc is not None
    _flip(a, loc[0] + loc[1] - 3)
    dst_path = str(tmp_path / "00000001.compacting")
    dst = SegmentWriter.create(dst_path, "grp", compacted=True)
    with SegmentReader.open(a) as src:
        if verify:
            with pytest.raises(CorruptSegment) as err:
                copy_live([src], [3, 7, 8], dst)
            assert err.value.index == 7
            dst.abandon()
            return
        assert copy_live([src], list(range(1, 21)), dst, verify=False) == 20
    dst.seal()
    with SegmentReader.open(dst_path) as out:
        assert out.read(6) == e(6) and out.read(8) == e(8)
        with pytest.raises(CorruptSegment) as err2:
            out.read(7)  # the original CRC came along: still detected
        assert err2.value.index == 7


def test_spans_cover_large_files_in_bounded_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sediment.actors.log.storage import segment_reader as segmod

    monkeypatch.setattr(segmod, "_READ_SPAN", 500)
    p = str(tmp_path / "00000001.segment")
    write_segment(p, list(range(1, 41)))
    with SegmentReader.open(p) as r:
        for sel in (list(range(1, 41)), [1, 2, 9, 10, 11, 30, 40], [40], [1]):
            got = [i for i, _raw in r.read_raws(sel)]
            assert got == sel
            spans = list(r.spans(r.positions(sel)))
            assert all(len(buf) <= 500 or len(poss) == 1 for buf, poss in spans)


# -- segment refs -----------------------------------------------------------------------


def R(n: int, first: int, last: int) -> SegRef:
    return SegRef(f"{n:08d}.segment", first, last)


def test_segrefs_limit_overwritten_ranges() -> None:
    # Ra's compact_segref_1_test
    refs = SegRefs([R(20, 20, 29), R(30, 30, 39)])
    new = [
        R(40, 40, 49),
        R(50, 50, 59),
        R(60, 60, 69),
        R(65, 65, 69),
        R(70, 70, 85),
        R(71, 70, 79),
        R(80, 80, 89),
    ]
    out, gone = refs.update(new)
    assert list(out) == [
        R(20, 20, 29),
        R(30, 30, 39),
        R(40, 40, 49),
        R(50, 50, 59),
        R(60, 60, 64),
        R(65, 65, 69),
        R(71, 70, 79),
        R(80, 80, 89),
    ]
    assert gone == [R(70, 70, 85)]
    # compact_segref_3_test: B overwrote A's tail and C overwrote B entirely
    out3 = SegRefs([R(1, 1, 4), R(2, 5, 10), R(3, 2, 7)])
    assert list(out3) == [R(1, 1, 1), R(3, 2, 7)]
    # a grown active segment replaces its own ref
    grown, gone2 = SegRefs([R(1, 1, 9), R(2, 10, 75)]).update([R(2, 10, 100)])
    assert list(grown) == [R(1, 1, 9), R(2, 10, 100)] and gone2 == []


def test_segrefs_find_compactable_apply() -> None:
    refs = SegRefs([R(1, 1, 10), R(2, 11, 20), R(3, 21, 30)])
    assert refs.find(15) == R(2, 11, 20)
    assert refs.find(31) is None and refs.find(0) is None
    assert refs.compactable(20) == [R(1, 1, 10), R(2, 11, 20)]
    assert refs.compactable(1000) == [R(1, 1, 10), R(2, 11, 20)]  # never the newest
    assert compactable([R(1, 1, 10)], 100) == []
    after = refs.apply(["00000002.segment"], [], [R(1, 3, 7)])
    assert list(after) == [R(1, 3, 7), R(3, 21, 30)]


# -- flushing WAL entries into segments -------------------------------------------------


def test_flush_rolls_segments_and_reopens_the_active_one(tmp_path: Path) -> None:
    d = str(tmp_path / "seg")
    w = GroupSegmentWriter(d, "g", SegmentConfig(max_entries=4))
    refs = w.flush([e(i) for i in range(1, 11)], SnapshotState.initial())
    assert refs == [R(1, 1, 4), R(2, 5, 8), R(3, 9, 10)]
    w.close()
    assert list(recover_segrefs(d)) == refs
    w2 = GroupSegmentWriter(d, "g", SegmentConfig(max_entries=4))
    assert w2.active is not None and w2.active.name == "00000003.segment"
    assert w2.flush([e(11), e(12), e(13)], SnapshotState.initial()) == [R(3, 9, 12), R(4, 13, 13)]
    w2.close()


def test_flush_skips_entries_the_snapshot_covers(tmp_path: Path) -> None:
    w = GroupSegmentWriter(str(tmp_path / "seg"), "g")
    state = SnapshotState.of(10, [4, 7])
    refs = w.flush([e(i) for i in range(1, 15)], state)
    assert refs == [R(1, 4, 14)]
    assert SegmentReaderIndexes(tmp_path / "seg" / "00000001.segment") == [4, 7, 11, 12, 13, 14]
    w.close()


def SegmentReaderIndexes(path: Path) -> list[int]:
    with SegmentReader.open(str(path)) as r:
        return r.indexes()


def test_reflush_of_the_same_entries_is_a_no_op(tmp_path: Path) -> None:
    d = str(tmp_path / "seg")
    w = GroupSegmentWriter(d, "g", SegmentConfig(max_entries=4))
    w.flush([e(i) for i in range(1, 11)], SnapshotState.initial())
    w.close()
    w2 = GroupSegmentWriter(d, "g", SegmentConfig(max_entries=4))
    assert w2.flush([e(i) for i in range(1, 11)], SnapshotState.initial()) == []
    assert sorted(os.listdir(d)) == [f"0000000{n}.segment" for n in (1, 2, 3)]
    w2.close()


def test_flush_overwrite_starts_a_new_segment_and_limits_refs(tmp_path: Path) -> None:
    d = str(tmp_path / "seg")
    w = GroupSegmentWriter(d, "g", SegmentConfig(max_entries=4))
    server = SegRefs()
    server, _ = server.update(w.flush([e(i) for i in range(1, 11)], SnapshotState.initial()))
    # a new leader (term 2) overwrites from index 6
    new = w.flush([e(6, 2), e(7, 2)], SnapshotState.initial())
    assert new == [R(3, 9, 10), R(4, 6, 7)] or new == [R(4, 6, 7)]
    server, gone = server.update(new)
    assert list(server) == [R(1, 1, 4), R(2, 5, 5), R(4, 6, 7)]
    assert gone == [R(3, 9, 10)]
    w.close()
    assert list(recover_segrefs(d)) == list(server)
    ref = server.find(6)
    assert ref is not None
    with SegmentReader.open(os.path.join(d, ref.file)) as r:
        assert r.read(6).term == 2
