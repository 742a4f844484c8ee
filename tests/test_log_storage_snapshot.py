"""Snapshots: atomic write, live-index file, recovery of partial and damaged snapshots."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sediment.actors.log.storage import snapshot as snap
from sediment.actors.log.storage.failpoints import SNAPSHOT_FAILPOINTS
from sediment.actors.log.storage.snapshot import (
    SnapshotState,
    SnapshotWriter,
    decode_indexes,
    encode_indexes,
    latest,
    read_chunks,
    read_data,
    recover,
    write_snapshot,
)


class Crash(Exception):
    pass


def crash_at(target: str):  # type: ignore[no-untyped-def]
    def fp(name: str) -> None:
        if name == target:
            raise Crash(name)

    return fp


@settings(max_examples=100, deadline=None)
@given(st.sets(st.integers(min_value=1, max_value=5000), max_size=300))
def test_live_index_encoding_round_trip(live: set[int]) -> None:
    ordered = sorted(live)
    assert decode_indexes(encode_indexes(ordered)) == tuple(ordered)


def test_runs_are_compact() -> None:
    assert len(encode_indexes(list(range(1, 100_001)))) == 16


def test_snapshot_state_rules() -> None:
    s = SnapshotState.of(100, [50, 7, 7, 60])
    assert s.live_indexes == (7, 50, 60) and s.smallest_live_index == 7
    assert s.keeps(7) and not s.keeps(6) and not s.keeps(8) and s.keeps(101)
    assert s.live_in(8, 60) == (50, 60) and s.has_live_in(50, 50) and not s.has_live_in(61, 99)
    assert SnapshotState.of(100, []).smallest_live_index == 101
    assert SnapshotState.initial().keeps(1)
    with pytest.raises(ValueError):
        SnapshotState.of(10, [11])


def test_write_and_read_back(tmp_path: Path) -> None:
    root = str(tmp_path / "snapshots")
    info = write_snapshot(root, 42, 3, [b"abc", b"def"], [5, 9, 10], meta={"cluster": [1, 2]})
    assert os.path.basename(info.path) == snap.dir_name(42, 3)
    assert sorted(os.listdir(info.path)) == ["indexes", "meta", "snapshot"]
    assert read_data(info) == b"abcdef"
    assert b"".join(read_chunks(info, 4)) == b"abcdef"
    again = latest(root)
    assert again is not None
    assert again.state == SnapshotState.of(42, [5, 9, 10])
    assert again.meta["machine"] == {"cluster": [1, 2]}


def test_new_snapshot_removes_older_ones(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    write_snapshot(root, 10, 1, b"a", [])
    write_snapshot(root, 20, 1, b"b", [3])
    assert os.listdir(root) == [snap.dir_name(20, 1)]


def test_chunked_writer_abort_leaves_nothing(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    w = SnapshotWriter(root, 5, 1)
    w.write(b"part")
    w.abort()
    assert os.listdir(root) == []
    assert recover(root).latest is None


@pytest.mark.parametrize("point", SNAPSHOT_FAILPOINTS)
def test_crash_at_every_snapshot_failpoint(tmp_path: Path, point: str) -> None:
    root = str(tmp_path / "s")
    write_snapshot(root, 10, 1, b"old", [2])
    with pytest.raises(Crash):
        write_snapshot(root, 20, 2, b"new", [2, 15], fp=crash_at(point))
    rec = recover(root)
    assert rec.latest is not None
    new_visible = SNAPSHOT_FAILPOINTS.index(point) >= SNAPSHOT_FAILPOINTS.index(
        "snapshot.after_rename"
    )
    if new_visible:
        assert (rec.latest.index, read_data(rec.latest)) == (20, b"new")
        assert rec.state == SnapshotState.of(20, [2, 15])
    else:
        assert (rec.latest.index, read_data(rec.latest)) == (10, b"old")
        assert rec.removed_partials == (snap.TMP_PREFIX + snap.dir_name(20, 2),)
    # exactly one snapshot left, no temp dir
    assert os.listdir(root) == [os.path.basename(rec.latest.path)]


def test_corrupt_live_index_file_is_rejected_and_falls_back(tmp_path: Path) -> None:
    root = str(tmp_path / "s")
    write_snapshot(root, 10, 1, b"old", [2])
    # crash after the new snapshot became visible but before the old one was removed
    with pytest.raises(Crash):
        write_snapshot(root, 20, 1, b"new", [2, 15], fp=crash_at("snapshot.before_delete_old"))
    path = os.path.join(root, snap.dir_name(20, 1), "indexes")
    data = bytearray(Path(path).read_bytes())
    data[-3] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    assert latest(root) is not None and latest(root).index == 10  # type: ignore[union-attr]
    rec = recover(root)
    assert rec.latest is not None and rec.latest.index == 10
    assert rec.rejected == (snap.dir_name(20, 1),)
    assert os.path.isdir(os.path.join(root, snap.dir_name(20, 1) + snap.CORRUPT_SUFFIX))


@pytest.mark.parametrize("victim", ["snapshot", "meta"])
def test_damaged_data_or_meta_is_rejected(tmp_path: Path, victim: str) -> None:
    root = str(tmp_path / "s")
    info = write_snapshot(root, 7, 1, b"machine-state", [1])
    p = os.path.join(info.path, victim)
    data = bytearray(Path(p).read_bytes())
    data[-1] ^= 0x01
    Path(p).write_bytes(bytes(data))
    rec = recover(root)
    assert rec.latest is None and rec.state == SnapshotState.initial()
    assert rec.rejected == (snap.dir_name(7, 1),)


def test_unknown_entries_are_left_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "s"
    write_snapshot(str(root), 7, 1, b"x", [])
    (root / "README").write_text("mine")
    assert recover(str(root)).latest is not None
    assert (root / "README").exists()
    assert "unknown file" in capsys.readouterr().err
