"""On sim, the bounded wait of a writer that meets a live, pending holder's intent
(`lock_wait`, intent_resolver.py): the holder rolls back while the writer waits and the
writer's write then succeeds (fails with no-wait: the write is refused at once); the
holder commits meanwhile and the writer gets `WriteConflict` (first committer wins);
the holder stays pending past the wait and the writer gets the same `WriteConflict`
naming it; the same for a unique index's pending claim (`UniqueConstraintViolation`,
`pending`), which succeeds once its holder rolls back. Both checks pass. The wait is on
by default (`DEFAULT_LOCK_WAIT`): a cluster started without `lock_wait` waits too, and
`lock_wait=0` (no-wait) refuses at once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import eventually

from sediment.actors.tables.errors import UniqueConstraintViolation, WriteConflict
from sediment.actors.tables.names import table_node_name
from sediment.actors.tables.shell import node_protocol as p
from sediment.actors.tables.shell.node_state import DEFAULT_LOCK_WAIT
from sediment.runtime.process import Process
from sediment.scenarios.checkers.catalog_compaction import atomic_visibility
from sediment.wiring.tables import TEST_LWM, TablesCluster
from sediment.wiring.tables_transaction import Transaction

WAIT = 2.0


def _start(tmp_path: Path, lock_wait: float | None) -> TablesCluster:
    """`lock_wait` None: the cluster's default."""
    waits = {} if lock_wait is None else {"lock_wait": lock_wait}
    c = TablesCluster.start(nodes=3, backend="sim", data_dir=str(tmp_path), seed=5, lwm=TEST_LWM,
                            **waits)
    c.create_zone("Z", partitions=4, replicas=2)
    c.create_table("T", "Z", [("k", "int", False), ("v", "int")], ["k"])
    return c


@pytest.fixture
def waiting(tmp_path: Path) -> Iterator[TablesCluster]:
    c = _start(tmp_path, WAIT)
    try:
        yield c
    finally:
        c.stop()


def _write_in_background(c: TablesCluster, tx: Transaction, row: dict[str, Any],
                         out: list[Any]) -> None:
    """The writer's insert as a process of its own, so the test can end the holder
    while the write waits; its reply (Written or Failed) lands in `out`."""

    async def writer(ctx: Process) -> None:
        out.append(await ctx.call(table_node_name(tx.node), p.Write(tx.id, "T", row),
                                  timeout=30))

    c.rt.spawn(writer, node=tx.node)


def test_the_writer_waits_for_a_holder_that_rolls_back(waiting: TablesCluster) -> None:
    c = waiting
    holder = c.begin("n2")
    holder.insert("T", {"k": 1, "v": 1})
    writer = c.begin("n1")
    out: list[Any] = []
    _write_in_background(c, writer, {"k": 1, "v": 2}, out)
    c.rt.sleep(WAIT / 4)
    assert out == []  # still waiting
    holder.rollback()
    assert eventually(c.rt, lambda: bool(out), timeout=10)
    assert isinstance(out[0], p.Written), out
    c.recorder.write(writer.id, writer._cell("T", {"k": 1, "v": 2}), {"k": 1, "v": 2})
    assert writer.commit()
    assert c.get("T", (1,)) == {"k": 1, "v": 2}
    history = c.recorder.history()
    assert atomic_visibility(history).ok, atomic_visibility(history)


def test_a_holder_that_commits_meanwhile_fails_the_writer(waiting: TablesCluster) -> None:
    c = waiting
    holder = c.begin("n2")
    holder.insert("T", {"k": 1, "v": 1})
    writer = c.begin("n1")
    out: list[Any] = []
    _write_in_background(c, writer, {"k": 1, "v": 2}, out)
    c.rt.sleep(WAIT / 4)
    assert holder.commit()
    assert eventually(c.rt, lambda: bool(out), timeout=10)
    assert isinstance(out[0], p.Failed) and isinstance(out[0].error, WriteConflict), out
    assert not writer.commit()
    assert c.get("T", (1,)) == {"k": 1, "v": 1}


def test_a_holder_pending_past_the_wait_fails_the_writer(waiting: TablesCluster) -> None:
    c = waiting
    holder = c.begin("n2")
    holder.insert("T", {"k": 1, "v": 1})
    writer = c.begin("n1")
    with pytest.raises(WriteConflict) as err:
        writer.insert("T", {"k": 1, "v": 2})
    assert err.value.holder == holder.id
    assert holder.commit()
    assert c.get("T", (1,)) == {"k": 1, "v": 1}


def test_a_pending_claim_waited_for(waiting: TablesCluster) -> None:
    c = waiting
    c.create_index("T_v", "T", ["v"], unique=True)
    c.wait_index_available("T_v")
    holder = c.begin("n2")
    holder.insert("T", {"k": 1, "v": 7})
    writer = c.begin("n1")
    with pytest.raises(UniqueConstraintViolation) as err:  # pending past the wait
        writer.insert("T", {"k": 2, "v": 7})
    assert err.value.pending
    holder.rollback()
    again = c.begin("n2")
    again.insert("T", {"k": 3, "v": 8})
    other = c.begin("n1")
    out: list[Any] = []
    _write_in_background(c, other, {"k": 4, "v": 8}, out)
    c.rt.sleep(WAIT / 4)
    assert out == []
    again.rollback()
    assert eventually(c.rt, lambda: bool(out), timeout=10)
    assert isinstance(out[0], p.Written), out
    assert other.commit()
    assert c.lookup("T_v", (8,)) == [{"k": 4, "v": 8}]


def test_no_wait_refuses_at_once(tmp_path: Path) -> None:
    c = _start(tmp_path, 0.0)
    try:
        holder = c.begin("n2")
        holder.insert("T", {"k": 1, "v": 1})
        writer = c.begin("n1")
        out: list[Any] = []
        _write_in_background(c, writer, {"k": 1, "v": 2}, out)
        assert eventually(c.rt, lambda: bool(out), timeout=10)
        assert isinstance(out[0], p.Failed) and isinstance(out[0].error, WriteConflict)
        holder.rollback()
    finally:
        c.stop()


def test_the_wait_is_on_by_default(tmp_path: Path) -> None:
    """No `lock_wait` given: the writer waits (fails with no-wait, above) and goes
    through once its holder rolls back."""
    assert DEFAULT_LOCK_WAIT > 0
    c = _start(tmp_path, None)
    try:
        assert c.config.lock_wait == DEFAULT_LOCK_WAIT
        holder = c.begin("n2")
        holder.insert("T", {"k": 1, "v": 1})
        writer = c.begin("n1")
        out: list[Any] = []
        _write_in_background(c, writer, {"k": 1, "v": 2}, out)
        c.rt.sleep(DEFAULT_LOCK_WAIT / 4)
        assert out == []  # still waiting
        holder.rollback()
        assert eventually(c.rt, lambda: bool(out), timeout=10)
        assert isinstance(out[0], p.Written), out
        assert writer.commit()
        assert c.get("T", (1,)) == {"k": 1, "v": 2}
    finally:
        c.stop()
