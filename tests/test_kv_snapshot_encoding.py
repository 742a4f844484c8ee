"""The KV machine's snapshot encoded off the raft host's loop (`snapshot_encoding.py`):
the same bytes as one `json.dumps` of the whole document, and the state pinned when the
snapshot began, whatever is written while a thread encodes it."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from sediment.actors.kv import lease_store
from sediment.actors.kv import snapshot_encoding as se
from sediment.actors.kv.machine import NetsyMachine, netsy
from sediment.actors.kv.types import Compact, DeleteRange, LeaseGrant, Put, Txn
from sediment.actors.log.raft.types import Entry


def _feed(m: NetsyMachine, commands: list[Any]) -> None:
    for c in commands:
        m.apply(Entry(m.applied + 1, 1, 0.0, c))


def _whole_dumps(m: NetsyMachine) -> bytes:
    """The document as the machine encoded it before pieces: one json.dumps."""
    s = m.store
    compactions = [rev for rev, _ in s.compactions()]
    rows = se.logical_rows(s.skeleton(), compactions)
    keys = sorted({bytes(r[2]) for r in rows})
    number = {k: i for i, k in enumerate(keys)}
    doc = {
        "applied": m.applied, "head": s.head, "compactions": compactions,
        "keys": [k.hex() for k in keys],
        "rows": [[r[0], r[1], number[bytes(r[2])], *r[3:]] for r in rows],
        "entries": [[r, i, p] for r, i, p in s.entries()],
        "leases": [list(row) for row in lease_store.rows(s)],
        "auth": m.auth.state.to_json(),
    }
    return se.SNAPSHOT_MAGIC + json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def _busy_history(n: int) -> list[Any]:
    cmds: list[Any] = [LeaseGrant(7, 60)]
    cmds += [Put(b"k%04d" % (i % 997), b"v%d" % i) for i in range(n)]
    cmds += [Txn((), (Put(b"t", b"1"), DeleteRange(b"k0001")), ()), Compact(n // 2),
             Put(b"late", b"x")]
    return cmds


def test_the_pieces_make_the_bytes_one_dumps_made(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(se, "PIECE", 7)  # many pieces, some of them short
    m = netsy(str(tmp_path / "g"))
    _feed(m, _busy_history(3000))
    data, _ = m.snapshot()
    assert data == _whole_dumps(m)
    m.close()


def test_an_empty_machine_encodes_as_before(tmp_path: Path) -> None:
    m = netsy(str(tmp_path / "g"))
    assert m.snapshot()[0] == _whole_dumps(m)
    m.close()


def test_a_job_encodes_the_state_pinned_at_its_start(tmp_path: Path) -> None:
    m = netsy(str(tmp_path / "g"))
    _feed(m, _busy_history(500))
    expected = m.snapshot()
    job = m.begin_snapshot()
    with m.batch():  # the loop goes on writing before the thread has read anything
        _feed(m, [Put(b"after-%d" % i, b"y") for i in range(50)] + [Compact(300)])
    while m.background():
        pass
    assert job() == expected
    assert m.snapshot() != expected  # the writes did land
    m.close()


def test_the_job_runs_in_another_thread_beside_writes(tmp_path: Path) -> None:
    m = netsy(str(tmp_path / "g"))
    _feed(m, _busy_history(2000))
    expected = m.snapshot()
    job = m.begin_snapshot()
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(job()))
    thread.start()
    for i in range(200):
        with m.batch():
            _feed(m, [Put(b"w%d" % i, b"z")])
    thread.join()
    assert out == [expected]
    m.close()


def test_a_restore_waits_for_the_snapshot_being_read(tmp_path: Path) -> None:
    """A FULL checkpoint (restore's last step) cannot finish beside a reader: restore
    waits for the job instead of failing."""
    src = netsy(str(tmp_path / "src"))
    cmds = _busy_history(200)
    _feed(src, cmds)
    data, _ = src.snapshot()
    es = {i + 1: Entry(i + 1, 1, 0.0, c) for i, c in enumerate(cmds)}
    m = netsy(str(tmp_path / "g"))
    _feed(m, [Put(b"x", b"1")])
    job = m.begin_snapshot()
    started = threading.Event()

    def late() -> None:
        started.wait()
        job()

    thread = threading.Thread(target=late)
    thread.start()
    started.set()
    m.restore(data, src.applied, es.get)
    thread.join()
    assert m.applied == src.applied and m.store.rows() == src.store.rows()
    m.close()
    src.close()


def test_a_second_snapshot_waits_for_the_first_and_close_for_both(tmp_path: Path) -> None:
    m = netsy(str(tmp_path / "g"))
    _feed(m, _busy_history(100))
    first = m.begin_snapshot()
    thread = threading.Thread(target=first)
    thread.start()
    second = m.begin_snapshot()  # blocks until `first` has run
    thread.join()
    assert second()[0] == m.snapshot()[0]
    m.close()
