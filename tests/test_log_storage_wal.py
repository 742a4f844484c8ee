"""The node WAL: group commit, rollover, torn tails, corruption, skips, sparse writes."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from sediment.actors.log.storage import wal as walmod
from sediment.actors.log.storage.errors import CorruptRecord
from sediment.actors.log.storage.records import Entry, encode
from sediment.actors.log.storage.snapshot import SnapshotState
from sediment.actors.log.storage.wal import Wal, WalBroken, WalWrite, recover


def e(i: int, term: int = 1, payload: bytes | None = None) -> Entry:
    return Entry(i, term, 1000 + i, payload if payload is not None else f"v{i}".encode() * 8)


def writes(group: str, lo: int, hi: int, term: int = 1) -> list[WalWrite]:
    return [WalWrite(group, e(i, term)) for i in range(lo, hi + 1)]


def indexes(entries: list[Entry]) -> list[int]:
    return [x.index for x in entries]


def test_group_commit_one_fsync_per_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = Wal(str(tmp_path / "wal"), max_size=1 << 30)
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    batch = writes("a", 1, 64) + writes("b", 1, 64)
    res = w.append(batch)
    assert len(calls) == 1
    assert res.written == {"a": list(range(1, 65)), "b": list(range(1, 65))}
    assert res.rolled is None
    w.close()
    rec = recover(str(tmp_path / "wal"))
    assert indexes(rec.groups["a"]) == list(range(1, 65))
    assert rec.groups["b"][10] == e(11)


def test_rollover_numbers_files_and_recovers_in_order(tmp_path: Path) -> None:
    d = str(tmp_path / "wal")
    w = Wal(d, max_size=800)
    rolled = []
    for k in range(10):
        res = w.append(writes("g", k * 5 + 1, k * 5 + 5))
        if res.rolled:
            rolled.append(res.rolled)
    assert len(rolled) >= 3
    assert rolled == sorted(rolled)
    assert w.current_file not in rolled
    w.close()
    rec = recover(d)
    assert indexes(rec.groups["g"]) == list(range(1, 51))
    assert rec.files == tuple(sorted(os.listdir(d)))
    assert walmod.read_file(os.path.join(d, rolled[0]))["g"][0] == e(1)


def test_open_starts_a_new_file_and_seeds_gap_detection(tmp_path: Path) -> None:
    d = str(tmp_path / "wal")
    w = Wal(d)
    w.append(writes("g", 1, 5))
    w.close()
    w2, rec = Wal.open(d)
    assert rec.last_index("g") == 5
    assert w2.current_number == rec.last_number + 1
    res = w2.append([WalWrite("g", e(7))])
    assert res.rejected == {"g": 6}
    assert w2.append([WalWrite("g", e(6))]).written == {"g": [6]}
    assert w2.delete_files_upto(rec.last_number) == list(rec.files)
    w2.close()
    assert indexes(recover(d).groups["g"]) == [6]


def _wal_with_batches(d: str, n_batches: int = 3) -> tuple[str, int]:
    """Write batches; return the file path and the offset of its last record."""
    w = Wal(d)
    for k in range(n_batches):
        w.append(writes("g", k * 4 + 1, k * 4 + 4) + writes("h", k + 1, k + 1))
    path = os.path.join(d, w.current_file)
    w.close()
    last_len = len(encode(n_batches, 1, 1000 + n_batches, e(n_batches).payload, group=b"h"))
    return path, os.path.getsize(path) - last_len


def test_torn_tail_at_every_byte_of_the_last_record(tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    path, last_start = _wal_with_batches(src)
    size = os.path.getsize(path)
    expected_g = list(range(1, 13))
    for cut in range(last_start, size):
        d = str(tmp_path / f"cut{cut}")
        shutil.copytree(src, d)
        p = os.path.join(d, os.path.basename(path))
        os.truncate(p, cut)
        rec = recover(d)
        assert indexes(rec.groups["g"]) == expected_g
        assert indexes(rec.groups["h"]) == [1, 2]  # the torn record was h:3
        assert os.path.getsize(p) == last_start
        if cut > last_start:
            assert rec.truncated == ((os.path.basename(path), last_start),)
        shutil.rmtree(d)


def test_zero_filled_tail_is_cut(tmp_path: Path) -> None:
    d = str(tmp_path / "wal")
    path, _ = _wal_with_batches(d)
    size = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(bytes(4096))
    rec = recover(d)
    assert indexes(rec.groups["h"]) == [1, 2, 3]
    assert os.path.getsize(path) == size


def test_crc_corruption_in_the_middle_raises_with_file_and_offset(tmp_path: Path) -> None:
    d = str(tmp_path / "wal")
    path, _ = _wal_with_batches(d)
    data = bytearray(Path(path).read_bytes())
    data[walmod.FILE_HEADER_SIZE + 60] ^= 0x55  # inside the first record's payload
    Path(path).write_bytes(bytes(data))
    with pytest.raises(CorruptRecord) as err:
        recover(d)
    assert err.value.source == os.path.basename(path)
    assert err.value.offset == walmod.FILE_HEADER_SIZE
    assert os.path.getsize(path) == len(data)  # nothing was cut


def test_bad_file_header_raises(tmp_path: Path) -> None:
    d = str(tmp_path / "wal")
    path, _ = _wal_with_batches(d)
    data = bytearray(Path(path).read_bytes())
    data[0] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    with pytest.raises(CorruptRecord):
        recover(d)


def test_torn_file_creation_is_an_empty_file(tmp_path: Path) -> None:
    d = tmp_path / "wal"
    d.mkdir()
    (d / "00000003.wal").write_bytes(b"SDW")
    rec = recover(str(d))
    assert rec.groups == {}
    assert rec.last_number == 3
    assert (d / "00000003.wal").stat().st_size == 0


def test_skip_below_smallest_live_index(tmp_path: Path) -> None:
    states = {"g": SnapshotState.of(10, [3, 7])}
    w = Wal(str(tmp_path / "wal"), snapshot_states=states)
    res = w.append(writes("g", 1, 12) + writes("other", 1, 2))
    assert res.skipped == {"g": [1, 2]}
    assert res.written["g"] == list(range(3, 13))
    assert res.written["other"] == [1, 2]
    # a snapshot with no live entries: nothing at or below it is written
    states["g"] = SnapshotState.of(20, [])
    res = w.append(writes("g", 13, 22))
    assert res.skipped == {"g": list(range(13, 21))}
    assert res.written == {"g": [21, 22]}
    w.close()
    assert indexes(recover(str(tmp_path / "wal")).groups["g"]) == list(range(3, 13)) + [21, 22]


def test_gap_rejected_per_group_unless_a_snapshot_covers_it(tmp_path: Path) -> None:
    states: dict[str, SnapshotState] = {}
    w = Wal(str(tmp_path / "wal"), snapshot_states=states)
    w.append(writes("a", 1, 3) + writes("b", 1, 3))
    res = w.append([WalWrite("a", e(6)), WalWrite("b", e(4)), WalWrite("a", e(7))])
    assert res.rejected == {"a": 4}
    assert res.written == {"b": [4]}
    states["a"] = SnapshotState.of(5, [])
    assert w.append([WalWrite("a", e(6))]).written == {"a": [6]}


def test_overwrite_truncates_on_recovery(tmp_path: Path) -> None:
    d = str(tmp_path / "wal")
    w = Wal(d, max_size=600)  # several files: the overwrite crosses a file boundary
    w.append(writes("g", 1, 10, term=1))
    w.append(writes("g", 6, 7, term=2))
    w.close()
    got = recover(d).groups["g"]
    assert [(x.index, x.term) for x in got] == [(i, 1) for i in range(1, 6)] + [(6, 2), (7, 2)]


def test_sparse_writes(tmp_path: Path) -> None:
    d = str(tmp_path / "wal")
    w = Wal(d)
    w.append(writes("g", 1, 20))
    # snapshot install: live entries above the follower's last applied (12)
    res = w.append(
        [
            WalWrite("g", e(15, 2), prev_index=12),
            WalWrite("g", e(18, 2), prev_index=15),
            WalWrite("g", e(30, 2), prev_index=18),
        ]
    )
    assert res.written == {"g": [15, 18, 30]}
    # a gap inside the sparse sequence (prev ahead of what the WAL has) is rejected
    res = w.append([WalWrite("g", e(40, 2), prev_index=35)])
    assert res.rejected == {"g": 31}
    # a normal write may not jump, a sparse one may
    assert w.append([WalWrite("g", e(33, 2))]).rejected == {"g": 31}
    assert w.append([WalWrite("g", e(33, 2), prev_index=30)]).written == {"g": [33]}
    with pytest.raises(ValueError):
        w.append([WalWrite("g", e(33, 2), prev_index=33)])
    w.close()
    got = recover(d).groups["g"]
    assert [(x.index, x.term) for x in got] == [(i, 1) for i in range(1, 13)] + [
        (15, 2),
        (18, 2),
        (30, 2),
        (33, 2),
    ]


def test_delete_files_upto_never_deletes_the_current_file(tmp_path: Path) -> None:
    d = str(tmp_path / "wal")
    w = Wal(d, max_size=500)
    for k in range(6):
        w.append(writes("g", k * 3 + 1, k * 3 + 3))
    deleted = w.delete_files_upto(10**6)
    assert w.current_file not in deleted
    assert os.listdir(d) == [w.current_file]


def test_failed_write_breaks_the_wal(tmp_path: Path) -> None:
    w = Wal(str(tmp_path / "wal"))

    def boom(name: str) -> None:
        if name == "wal.before_fsync":
            raise OSError("disk gone")

    with pytest.raises(OSError):
        w.append(writes("g", 1, 2), fp=boom)
    with pytest.raises(WalBroken):
        w.append(writes("g", 3, 3))


def test_unknown_files_are_left_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "wal"
    w = Wal(str(d))
    w.append(writes("g", 1, 2))
    w.close()
    (d / "notes.txt").write_text("hi")
    rec = recover(str(d))
    assert indexes(rec.groups["g"]) == [1, 2]
    assert (d / "notes.txt").exists()
    assert "unknown file" in capsys.readouterr().err
