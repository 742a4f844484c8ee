"""Snapshots of a KV written through the etcd API (no Ray): every client request enters
the log as an auth `Wire(user, auth revision, request)`, and a snapshot holds no values,
so a restore (a follower's snapshot install, a restart from a snapshot) refills each
value from the entry that wrote it, through the Wire. Before this test the restore
refused every such entry ("entry 1 (Wire) holds no value for its row"): any member that
needed a snapshot in a cluster written over etcd's API could not install it."""

from __future__ import annotations

from pathlib import Path

from sediment.actors.kv.auth_store import Wire
from sediment.actors.kv.machine import NetsyMachine
from sediment.actors.kv.types import Compact, Compare, Put, Range, Txn
from sediment.actors.log.raft.types import Entry


def _machine(path: Path) -> tuple[NetsyMachine, list[Entry]]:
    return NetsyMachine(str(path)), []


def _apply(m: NetsyMachine, log: list[Entry], cmd: object) -> object:
    log.append(Entry(len(log) + 1, 1, 0.0, cmd))
    result = m.apply(log[-1])
    assert not isinstance(result, Exception), (cmd, result)
    return result


def test_a_snapshot_restores_values_written_through_the_etcd_api(tmp_path: Path) -> None:
    m, log = _machine(tmp_path / "a")
    _apply(m, log, Wire(None, 1, Put(b"k", b"v1")))
    _apply(m, log, Wire(None, 1, Txn((Compare(b"k", "value", "=", b"v1"),),
                                     (Put(b"k", b"v2"), Put(b"t", b"tv"),
                                      Txn((), (Put(b"n", b"nested"),), ())), ())))
    _apply(m, log, Put(b"native", b"x"))  # a process client's request, not wrapped
    _apply(m, log, Wire(None, 1, Compact(2)))
    data, _ = m.snapshot()
    other = NetsyMachine(str(tmp_path / "b"))
    try:
        other.restore(data, m.applied, log)
        for key in (b"k", b"t", b"n", b"native"):
            assert other.query(Range(key)).kvs == m.query(Range(key)).kvs, key
        assert other.snapshot()[0] == data
    finally:
        m.close()
        other.close()


def test_a_snapshot_restores_the_value_an_ignore_value_put_kept(tmp_path: Path) -> None:
    """The put's entry holds no value (it kept the key's previous one, whose entry is
    compacted away): the snapshot carries the value itself, and the restored member
    snapshots the same bytes."""
    m, log = _machine(tmp_path / "a")
    _apply(m, log, Wire(None, 1, Put(b"i", b"orig")))
    _apply(m, log, Wire(None, 1, Put(b"i", b"", ignore_value=True)))
    _apply(m, log, Compact(3))  # the put that held the value is compacted away
    data, _ = m.snapshot()
    other = NetsyMachine(str(tmp_path / "b"))
    try:
        other.restore(data, m.applied, log)
        assert other.query(Range(b"i")).kvs == m.query(Range(b"i")).kvs
        assert other.query(Range(b"i")).kvs[0].value == b"orig"
        assert other.snapshot()[0] == data
    finally:
        m.close()
        other.close()


def test_a_kept_value_compacted_away_leaves_the_snapshot_as_before(tmp_path: Path) -> None:
    """Once the ignore_value row is compacted its kept value is dropped, and a snapshot
    without kept values has the bytes it had before they existed (no `kept` field)."""
    m, log = _machine(tmp_path / "a")
    _apply(m, log, Put(b"i", b"orig"))
    _apply(m, log, Txn((), (Put(b"i", b"", ignore_value=True), Put(b"j", b"x")), ()))
    assert b'"kept"' in m.snapshot()[0]
    _apply(m, log, Put(b"i", b"new"))
    _apply(m, log, Compact(4))  # the ignore_value row (revision 3) is superseded
    while m.store.pending_compaction is not None:
        m.store.compact_batch()
    assert m.store.kept_values() == []
    data, _ = m.snapshot()
    assert b'"kept"' not in data
    m.close()
