"""Write intent resolution on the write path (`intent_resolver.py`, `node_reads._rw`):
which refusals name a resolvable intent, by table; on sim, a row intent left by a
coordinator that was killed no longer blocks the row: a later writer succeeds at once
with no read first, and so does a read inside a transaction, while a holder that is
alive and pending still makes a writer fail once the writer's bounded wait is over
(`lock_wait`, on by default: the holder here stays pending through it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_helpers import eventually
from tables_helpers import sim_tables

from sediment.actors.catalog.descriptors import ZonePartition
from sediment.actors.catalog.hlc import hts
from sediment.actors.tables import mvcc
from sediment.actors.tables.errors import (
    TableDropped,
    UniqueConstraintViolation,
    WriteConflict,
)
from sediment.actors.tables.mvcc import PartitionRows, RowVersion, WriteIntent
from sediment.actors.tables.shell.intent_resolver import met_intent
from sediment.scenarios.checkers.catalog_compaction import atomic_visibility
from sediment.wiring.tables import TablesCluster

G = ZonePartition(0, 0)
KEY = (1, (7,))


def intent(tx: str) -> WriteIntent:
    return WriteIntent(tx, G, hts(10), 0, 1, {"k": 7})


def refusal(rows: PartitionRows, tx: str) -> Exception:
    with pytest.raises(WriteConflict) as err:
        mvcc.write_intent(rows, KEY, intent(tx))
    return err.value


def test_which_refusals_name_an_intent() -> None:
    pending = PartitionRows({}, {KEY: intent("other")})
    newer = PartitionRows({KEY: (RowVersion(hts(20), 0, {"k": 7}, "other"),)}, {})
    met = refusal(pending, "me")
    assert met_intent(met) and met.intent_key == KEY  # type: ignore[attr-defined]
    assert not met_intent(refusal(newer, "me"))  # a newer commit: nothing to resolve
    with pytest.raises(WriteConflict) as err:
        mvcc.read_latest(pending, KEY, "me")
    assert met_intent(err.value) and err.value.intent_key == KEY
    assert met_intent(UniqueConstraintViolation("U", (1,), (2,), (3,), pending=True))
    assert not met_intent(UniqueConstraintViolation("U", (1,), (2,), (3,)))
    assert not met_intent(TableDropped("t", "T")) and not met_intent(None)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[TablesCluster]:
    with sim_tables(tmp_path, seed=3, columns=[("k", "int", False), ("v", "int")]) as c:
        yield c


def leave_intents(c: TablesCluster, node: str, *keys: int) -> None:
    """A transaction on `node` writes the keys and its coordinator is killed."""
    held = c.begin(node)
    for k in keys:
        held.insert("T", {"k": k, "v": -1})
    c.kill_node(node)
    assert eventually(c.rt, lambda: c.node_status(node) is not None, timeout=30)


def test_a_dead_coordinators_row_intent_does_not_block_the_next_writer(
        cluster: TablesCluster) -> None:
    c = cluster
    leave_intents(c, "n2", 1, 2, 3)
    tx = c.begin("n1")  # no read-only read first: only the write meets the intents
    for k in (1, 2, 3):
        tx.insert("T", {"k": k, "v": k})
    assert tx.commit()
    assert [r["v"] for r in c.scan("T")] == [1, 2, 3]
    history = c.recorder.history()
    assert atomic_visibility(history).ok, atomic_visibility(history)


def test_a_read_in_a_transaction_resolves_a_dead_coordinators_intent(
        cluster: TablesCluster) -> None:
    c = cluster
    tx = c.begin("n3")
    tx.insert("T", {"k": 1, "v": 1})
    assert tx.commit()
    leave_intents(c, "n2", 1, 2)
    tx = c.begin("n1")
    assert tx.get("T", (1,)) == {"k": 1, "v": 1}  # the committed row, not a conflict
    assert tx.scan("T") == [{"k": 1, "v": 1}]  # the intent on 2 aborted and gone
    tx.delete("T", (1,))
    assert tx.commit()
    assert c.scan("T") == []


def test_a_live_pending_holder_still_fails_the_writer(cluster: TablesCluster) -> None:
    c = cluster
    holder = c.begin("n2")
    holder.insert("T", {"k": 1, "v": 1})
    writer = c.begin("n1")
    with pytest.raises(WriteConflict) as err:
        writer.insert("T", {"k": 1, "v": 2})
    assert err.value.holder == holder.id
    with pytest.raises(WriteConflict):
        writer.get("T", (1,))
    assert not writer.commit()  # a failed write: it aborts
    assert holder.commit()
    assert c.get("T", (1,)) == {"k": 1, "v": 1}
