"""Snapshots of a KV written through the etcd API (no Ray): every client request enters
the log as an auth `Wire(user, auth revision, request)`, and a snapshot holds no values,
so a restore (a follower's snapshot install, a restart from a snapshot) refills each
value from the entry that wrote it, through the Wire. Before this test the restore
refused every such entry ("entry 1 (Wire) holds no value for its row"): any member that
needed a snapshot in a cluster written over etcd's API could not install it."""

from __future__ import annotations

from pathlib import Path

import pytest

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


@pytest.mark.xfail(strict=True, reason="an ignore_value Put's entry holds no value and the "
                   "snapshot carries none: the restore writes b'' (docs/etcd_semantics.md)")
def test_a_snapshot_restores_the_value_an_ignore_value_put_kept(tmp_path: Path) -> None:
    m, log = _machine(tmp_path / "a")
    _apply(m, log, Wire(None, 1, Put(b"i", b"orig")))
    _apply(m, log, Wire(None, 1, Put(b"i", b"", ignore_value=True)))
    _apply(m, log, Compact(3))  # the put that held the value is compacted away
    data, _ = m.snapshot()
    other = NetsyMachine(str(tmp_path / "b"))
    try:
        other.restore(data, m.applied, log)
        assert other.query(Range(b"i")).kvs == m.query(Range(b"i")).kvs
    finally:
        m.close()
        other.close()
