"""The metastore's flush cursor: `AddBlocks(blocks, through)` makes level-0 blocks live and
moves the flushed-through revision in one command, forward only; a retried or replayed
one changes nothing; the cursor survives snapshots; `ReadFlushCursor` (through the log)
and `FlushCursorQuery` (a replica's applied state) read it back."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sediment.actors.blocks import codec
from sediment.actors.blocks import metastore as ms
from sediment.actors.blocks import service as svc
from sediment.actors.blocks.errors import ErrInvalidBlock, ErrMalformedCommand
from sediment.actors.blocks.meta import BlockMeta, level0_block_id
from sediment.actors.log.raft.types import Entry


def l0(shard: int, low: int, high: int) -> BlockMeta:
    return BlockMeta(level0_block_id(shard, low, high), shard, 0, low, high, b"a", b"z",
                     high - low + 1, 64, 1.0)


class Replica:
    def __init__(self) -> None:
        self.machine = ms.metastore("")
        self.entries: list[Entry] = []

    def run(self, command: Any) -> Any:
        entry = Entry(len(self.entries) + 1, 1, 1.0, command)
        self.entries.append(entry)
        return self.machine.apply(entry)

    @property
    def cursor(self) -> ms.FlushCursor:
        result: ms.FlushCursor = ms.query(self.machine.state, ms.FlushCursorQuery())
        return result


def test_blocks_and_cursor_commit_together() -> None:
    r = Replica()
    a, b = l0(0, 1, 4), l0(1, 2, 6)
    assert r.run(ms.AddBlocks((a, b), through=5)) == svc.AddBlocksResult((a.id, b.id), (), 5)
    assert r.cursor == ms.FlushCursor(5, ((0, 4), (1, 6)))
    assert r.run(ms.ReadFlushCursor()) == r.cursor  # the same, read through the log
    assert r.machine.status()["flushed_through"] == 5


def test_the_cursor_only_moves_forward() -> None:
    r = Replica()
    r.run(ms.AddBlocks((l0(0, 1, 4),), through=9))
    assert r.run(ms.AddBlocks((l0(0, 5, 7),), through=6)).through == 9
    assert r.cursor.through == 9 and r.cursor.flushed == ((0, 7),)


def test_a_cursor_without_blocks_moves_alone() -> None:
    r = Replica()
    assert r.run(ms.AddBlocks((), through=12)) == svc.AddBlocksResult((), (), 12)
    assert r.cursor == ms.FlushCursor(12, ())
    assert r.machine.state.index.block_count() == 0 and r.machine.state.planner.size() == 0


def test_a_retried_or_replayed_flush_changes_nothing() -> None:
    r = Replica()
    a = l0(0, 1, 4)
    r.run(ms.AddBlocks((a,), through=4))
    state = r.machine.state
    assert r.run(ms.AddBlocks((a,), through=4)) == svc.AddBlocksResult((), (a.id,), 4)
    assert r.machine.state == state
    # a replica replaying the same log from scratch reaches the same state
    other = ms.metastore("")
    for entry in r.entries:
        other.apply(entry)
    assert other.state == r.machine.state and other.snapshot() == r.machine.snapshot()


@pytest.mark.parametrize(("command", "error"), [
    (ms.AddBlocks((), through=0), ErrMalformedCommand),  # nothing at all
    (ms.AddBlocks((), through=-1), ErrMalformedCommand),
    (ms.AddBlocks((), through=True), ErrMalformedCommand),  # a bool is not a revision
    (ms.AddBlocks((), through="7"), ErrMalformedCommand),  # type: ignore[arg-type]
    (ms.AddBlocks((l0(0, 3, 5),), through=20), ErrInvalidBlock),  # overlaps: refused whole
])
def test_a_refused_flush_moves_neither_blocks_nor_cursor(command: Any, error: type) -> None:
    r = Replica()
    r.run(ms.AddBlocks((l0(0, 1, 4),), through=4))
    before = r.machine.state
    assert isinstance(r.run(command), error)
    assert r.machine.state == before and r.cursor.through == 4


def test_the_cursor_survives_a_snapshot() -> None:
    r = Replica()
    r.run(ms.AddBlocks((l0(0, 1, 4), l0(2, 3, 3)), through=4))
    data, live = r.machine.snapshot()
    other = ms.metastore("")
    other.restore(data, r.machine.applied, live)
    assert other.state == r.machine.state and ms.flush_cursor(other.state).through == 4


def test_a_snapshot_from_before_the_cursor_existed_restores_it_as_zero() -> None:
    r = Replica()
    r.run(ms.AddBlocks((l0(0, 1, 4),)))
    data, _ = r.machine.snapshot()
    doc = json.loads(data[len(codec.MAGIC):])
    del doc["flushed_through"]
    state, applied = codec.decode(codec.MAGIC + json.dumps(doc).encode())
    assert state.flushed_through == 0 and state.index.flushed == {0: 4} and applied == 1
