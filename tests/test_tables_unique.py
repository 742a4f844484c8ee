"""Unique indexes enforced by claim rows (`unique_claims.py`, `unique_check.py`,
`unique_writes.py`, `unique_build.py`): the partition's claim rule by table, the
claims a write needs by table, the partition machine through commits and aborts, and
on sim through `TablesCluster`: duplicates refused with a typed error and nothing
changed (committed holder, pending holder, same transaction, across partitions), values
released by an update or a delete taken again, and a unique index over rows that
already share values refused at its build."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import eventually

from sediment.actors.catalog import catalog_log, ddl
from sediment.actors.catalog.descriptors import Column, Index, IndexStatus, ZonePartition
from sediment.actors.catalog.errors import CatalogError
from sediment.actors.catalog.hlc import hts
from sediment.actors.catalog.low_watermark import LowWatermarkConfig
from sediment.actors.log.raft.types import Entry
from sediment.actors.tables import mvcc, partition
from sediment.actors.tables import unique_check as uc
from sediment.actors.tables import unique_claims as ucl
from sediment.actors.tables.errors import UniqueConstraintViolation, WriteConflict
from sediment.actors.tables.mvcc import PartitionRows, RowVersion, WriteIntent
from sediment.actors.tables.partition_machine import PartitionMachine
from sediment.scenarios.checkers.catalog_compaction import atomic_visibility, compaction_safety
from sediment.wiring.tables import TablesCluster

G = ZonePartition(0, 1)
U = 9  # the unique index's id
V = (5,)  # the values claimed


def claim(tx: str, pk: int, release: bool = False, begin: int = 10,
          values: tuple[Any, ...] = V) -> ucl.UniqueClaimCmd:
    return ucl.UniqueClaimCmd(tx, U, "T_u", values, (pk,), release, hts(begin), G, 1)


def committed(pk: int | None, at: int = 5) -> RowVersion:
    return RowVersion(hts(at), 0, None if pk is None else {"pk": (pk,)}, "old")


def pending(tx: str, pk: int | None) -> WriteIntent:
    return WriteIntent(tx, G, hts(1), 0, 1, None if pk is None else {"pk": (pk,)})


def state(chain: tuple[RowVersion, ...] = (), intent: WriteIntent | None = None) -> PartitionRows:
    key = ucl.claim_key(U, V)
    return PartitionRows({key: chain} if chain else {}, {key: intent} if intent else {})


# ---- the partition's rule ------------------------------------------------------------

OK = "ok"


@pytest.mark.parametrize("rows, cmd, expect", [
    (state(), claim("a", 1), (1,)),  # free: claimed
    (state((committed(2), committed(None, 6))), claim("a", 1), (1,)),  # released: free
    (state((committed(1),)), claim("a", 1), (1,)),  # its own row again
    (state((committed(2),)), claim("a", 1), UniqueConstraintViolation),  # another live row
    (state((committed(2, at=20),)), claim("a", 1), UniqueConstraintViolation),  # even newer
    (state((committed(None, at=20),)), claim("a", 1), WriteConflict),  # released after begin
    (state((), pending("b", 2)), claim("a", 1), UniqueConstraintViolation),  # pending holder
    (state((committed(2),), pending("b", None)), claim("a", 1), WriteConflict),  # releasing
    (state((), pending("a", 2)), claim("a", 1), UniqueConstraintViolation),  # same tx
    (state((committed(2),), pending("a", None)), claim("a", 1), (1,)),  # same tx released
    (state((committed(1),)), claim("a", 1, release=True), None),  # released
    (state((committed(2),)), claim("a", 1, release=True), OK),  # not ours: unchanged
    (state(), claim("a", 1, release=True), OK),
    (state((committed(1),), pending("b", 1)), claim("a", 1, release=True), WriteConflict),
])
def test_a_claim_by_table(rows: PartitionRows, cmd: ucl.UniqueClaimCmd, expect: Any) -> None:
    if isinstance(expect, type):
        with pytest.raises(expect) as err:
            ucl.apply_claim(rows, cmd)
        if expect is UniqueConstraintViolation:
            assert err.value.values == V and err.value.key == cmd.pk
            assert err.value.pending == (V in [k[1] for k in rows.intents]
                                         and next(iter(rows.intents.values())).tx_id != "a")
        return
    after = ucl.apply_claim(rows, cmd)
    if expect == OK:
        assert after is rows
        return
    intent = after.intents[ucl.claim_key(U, V)]
    assert intent.tx_id == cmd.tx_id
    assert ucl.holder(intent.row) == expect


def index(id_: int, columns: tuple[str, ...], unique: bool = True) -> Index:
    return Index(id_, f"i{id_}", 1, columns, unique, IndexStatus.AVAILABLE, 1, 1)


@pytest.mark.parametrize("old, new, expect", [
    (None, {"k": 1, "e": "x"}, [("x", False)]),  # insert: claim
    ({"k": 1, "e": "x"}, {"k": 1, "e": "x"}, [("x", False)]),  # unchanged: claim again
    ({"k": 1, "e": "x"}, {"k": 1, "e": "y"}, [("x", True), ("y", False)]),  # change
    ({"k": 1, "e": "x"}, None, [("x", True)]),  # delete: release
    ({"k": 1, "e": "x"}, {"k": 1, "e": None}, [("x", True)]),  # to NULL: release only
    (None, {"k": 1, "e": None}, []),  # NULLs are distinct: nothing claimed
])
def test_the_claims_a_write_needs(old: dict[str, Any] | None, new: dict[str, Any] | None,
                                  expect: list[tuple[str, bool]]) -> None:
    claims = uc.claims_for([index(3, ("e",)), index(4, ("e",), unique=False)], (1,), old, new)
    assert [(c.values[0], c.release) for c in claims] == expect
    assert all(c.index_id == 3 and c.pk == (1,) for c in claims)


def test_only_unique_indexes_without_the_whole_key_need_claims() -> None:
    log = catalog_log.initial()
    log, _ = catalog_log.execute(log, (
        ddl.CreateZone("Z", 2, 1),
        ddl.CreateTable("T", "Z", (Column("k", "int", False), Column("e", "str")), ("k",)),
        ddl.CreateIndex("T_e", "T", ("e",), True), ddl.CreateIndex("T_ek", "T", ("e", "k"), True),
        ddl.CreateIndex("T_v", "T", ("e",), False)), hts(100), 0)
    cat = log.latest
    table = cat.table_named("T")
    assert table is not None
    assert {i.name for i in cat.indexes_of(table.id) if i.unique} == {"T_PK", "T_e", "T_ek"}
    assert [i.name for i in uc.unique_indexes(cat, table)] == ["T_e"]


# ---- the partition machine -----------------------------------------------------------


def e(i: int, command: object) -> Entry:
    return Entry(i, 1, 0.0, command)


def test_claims_commit_and_abort_with_their_transaction(tmp_path: Path) -> None:
    m = PartitionMachine(str(tmp_path / "p"), G)
    assert isinstance(m.apply(e(1, claim("a", 1))), partition.Ok)
    refused = m.apply(e(2, claim("b", 2)))  # a's claim is pending
    assert isinstance(refused, partition.Failed)
    assert isinstance(refused.error, UniqueConstraintViolation) and refused.error.pending
    m.apply(e(3, partition.CleanupCmd("a", hts(20), 1)))  # a commits
    refused = m.apply(e(4, claim("c", 3, begin=30)))
    assert isinstance(refused, partition.Failed)
    assert isinstance(refused.error, UniqueConstraintViolation) and not refused.error.pending
    assert refused.error.holder == (1,)
    m.apply(e(5, claim("d", 1, release=True, begin=30)))  # row 1 lets the values go
    m.apply(e(6, partition.CleanupCmd("d", None, 1)))  # ... and aborts: still held
    assert isinstance(m.apply(e(7, claim("f", 3, begin=30))), partition.Failed)
    m.apply(e(8, claim("g", 1, release=True, begin=30)))
    m.apply(e(9, partition.CleanupCmd("g", hts(40), 1)))  # released for good
    assert isinstance(m.apply(e(10, claim("h", 3, begin=50))), partition.Ok)
    key = ucl.claim_key(U, V)
    assert mvcc.committed_at(m.state.rows, key, hts(45)) is None
    assert mvcc.committed_at(m.state.rows, key, hts(25)) == {"pk": (1,)}


# ---- interleavings (pure) --------------------------------------------------------------

T = 1  # the table's id
UNIQUE = Index(U, "T_u", T, ("e",), True, IndexStatus.AVAILABLE, 1, 1)


@dataclass
class _Open:
    begin: int
    planned: list[tuple[int, str | None, Any]] = field(default_factory=list)  # k, e, old


def _committed_rows(rows: PartitionRows) -> dict[int, Any]:
    return {k[1][0]: chain[-1].row for k, chain in rows.versions.items()
            if k[0] == T and chain[-1].row is not None}


def _check(rows: PartitionRows) -> None:
    live = _committed_rows(rows)
    values = [r["e"] for r in live.values() if r["e"] is not None]
    assert len(values) == len(set(values)), live  # no two live rows share a value
    for k, r in live.items():  # and each one's claim names it
        if r["e"] is not None:
            chain = rows.versions[ucl.claim_key(U, (r["e"],))]
            assert ucl.holder(chain[-1].row) == (k,)


@pytest.mark.parametrize("seed", range(40))
def test_interleaved_writers_never_commit_a_duplicate(seed: int) -> None:
    """Transactions interleaved at random, as the shell runs them: a write reads the
    row's old value, later sends the row and its claims in any order; a refused one
    aborts the transaction. After every step the committed rows are unique and claimed."""
    rng = random.Random(seed)
    rows, clock, open_txs, commits, refusals = PartitionRows(), 10, {}, 0, 0
    for step in range(300):
        clock += 1
        r = rng.random()
        name = rng.choice(sorted(open_txs)) if open_txs else None
        if r < 0.2 and len(open_txs) < 4:
            open_txs[f"t{step}"] = _Open(clock)
        elif r < 0.55 and name is not None:  # read the old row (the shell's first step)
            k, e = rng.randrange(5), rng.choice(["a", "b", "c", None, "DEL"])
            try:
                old = mvcc.read_latest(rows, (T, (k,)), name)
                open_txs[name].planned.append((k, e, old))
            except CatalogError:
                rows, _ = mvcc.finalize(rows, name, None), open_txs.pop(name)
        elif r < 0.8 and name is not None and open_txs[name].planned:  # send it
            tx = open_txs[name]
            k, e, old = tx.planned.pop(0)
            new = None if e == "DEL" else {"k": k, "e": e}
            claims = uc.claims_for([UNIQUE], (k,), old, new)
            writes: list[Any] = [None, *claims]
            rng.shuffle(writes)
            try:
                for w in writes:
                    if w is None:
                        rows = mvcc.write_intent(rows, (T, (k,)), WriteIntent(
                            name, G, hts(tx.begin), 1, 1, new))
                    else:
                        rows = ucl.apply_claim(rows, ucl.UniqueClaimCmd(
                            name, U, "T_u", w.values, w.pk, w.release, hts(tx.begin), G, 1))
            except CatalogError as err:
                refusals += isinstance(err, UniqueConstraintViolation)
                rows = mvcc.finalize(rows, name, None)
                open_txs.pop(name)
        elif name is not None and not open_txs[name].planned:
            commit = rng.random() < 0.8
            rows = mvcc.finalize(rows, name, hts(clock) if commit else None)
            commits += commit
            open_txs.pop(name)
        _check(rows)
    assert commits > 5


# ---- on sim ---------------------------------------------------------------------------

LWM = LowWatermarkConfig(data_availability_ms=30_000, update_interval_ms=300,
                         max_clock_skew_ms=10)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[TablesCluster]:
    with TablesCluster.start(nodes=3, backend="sim", data_dir=str(tmp_path), seed=11,
                             lwm=LWM) as c:
        c.create_zone("Z", partitions=4, replicas=2)
        c.create_table("T", "Z", [("k", "int", False), ("e", "str"), ("n", "int")], ["k"])
        yield c


def commit_rows(c: TablesCluster, node: str, *rows: tuple[int, str | None]) -> None:
    """Commit the rows in one transaction; a refused write rolls it back and raises."""
    tx = c.begin(node)
    try:
        for k, email in rows:
            tx.insert("T", {"k": k, "e": email, "n": k})
    except CatalogError:
        tx.rollback()
        raise
    assert tx.commit()


def emails(c: TablesCluster) -> dict[int, str | None]:
    return {r["k"]: r["e"] for r in c.scan("T")}


def test_duplicates_are_refused_across_partitions_and_nothing_changes(
        cluster: TablesCluster) -> None:
    c = cluster
    c.create_index("T_e", "T", ["e"], unique=True)
    c.wait_index_available("T_e")
    commit_rows(c, "n1", *((k, f"u{k}") for k in range(8)), (8, None), (9, None))  # NULLs
    before = emails(c)
    # a committed holder, from every node (the rows' partitions differ from the claims')
    for node, k in zip(c.nodes, (20, 21, 22), strict=True):
        tx = c.begin(node)
        tx.insert("T", {"k": k, "e": "fresh"})
        with pytest.raises(UniqueConstraintViolation) as err:
            tx.insert("T", {"k": 30 + k, "e": "u3"})
        assert err.value.holder == (3,) and not err.value.pending
        assert not tx.commit()  # it aborts: its other write goes too
    # two rows of one transaction
    tx = c.begin("n2")
    tx.insert("T", {"k": 40, "e": "same"})
    with pytest.raises(UniqueConstraintViolation):
        tx.insert("T", {"k": 41, "e": "same"})
    assert not tx.commit()
    # a pending holder: the second writer fails after its bounded wait (lock_wait, on by
    # default), the holder staying pending through it
    first, second = c.begin("n1"), c.begin("n3")
    first.insert("T", {"k": 50, "e": "race"})
    with pytest.raises(UniqueConstraintViolation) as err:
        second.insert("T", {"k": 51, "e": "race"})
    assert err.value.pending
    assert first.commit() and not second.commit()
    assert emails(c) == {**before, 50: "race"}
    assert [r["k"] for r in c.lookup("T_e", ["race"])] == [50]


def test_released_values_are_free_again(cluster: TablesCluster) -> None:
    c = cluster
    c.create_index("T_e", "T", ["e"], unique=True)
    c.wait_index_available("T_e")
    commit_rows(c, "n1", (1, "a"), (2, "b"))
    commit_rows(c, "n2", (1, "a2"))  # row 1 lets "a" go ...
    commit_rows(c, "n3", (3, "a"))  # ... so row 3 takes it
    tx = c.begin("n1")
    tx.delete("T", (2,))  # a delete lets "b" go, within the transaction
    tx.insert("T", {"k": 4, "e": "b"})
    assert tx.commit()
    tx = c.begin("n2")
    tx.insert("T", {"k": 1, "e": "x"})  # a change and a swap in one transaction
    tx.insert("T", {"k": 3, "e": "a2"})
    assert tx.commit()
    assert emails(c) == {1: "x", 3: "a2", 4: "b"}
    with pytest.raises(UniqueConstraintViolation):
        commit_rows(c, "n3", (5, "a2"))
    # the checks pass over the whole history
    c.poll()
    history = c.recorder.history()
    assert compaction_safety(history).ok, compaction_safety(history)
    assert atomic_visibility(history).ok, atomic_visibility(history)


def test_a_unique_index_over_rows_that_share_values_is_refused(
        cluster: TablesCluster) -> None:
    c = cluster
    commit_rows(c, "n1", (1, "a"), (2, "b"), (3, "a"))
    c.create_index("T_e", "T", ["e"], unique=True)
    with pytest.raises(UniqueConstraintViolation) as err:
        c.wait_index_available("T_e")
    assert err.value.values == ("a",) and {err.value.key, err.value.holder} == {(1,), (3,)}
    assert c.catalog().index_named("T_e") is None  # dropped: the table writable as before
    commit_rows(c, "n2", (4, "a"))
    commit_rows(c, "n2", (3, "c"))  # the duplicate goes away ...
    c.create_index("T_e2", "T", ["e"], unique=True)
    with pytest.raises(UniqueConstraintViolation):  # ... but rows 1 and 4 still share "a"
        c.wait_index_available("T_e2")
    commit_rows(c, "n3", (4, "d"))
    c.create_index("T_e3", "T", ["e"], unique=True)
    c.wait_index_available("T_e3")  # the existing rows claimed: enforced for them too
    with pytest.raises(UniqueConstraintViolation) as err:
        commit_rows(c, "n1", (9, "b"))
    assert err.value.holder == (2,)
    assert emails(c) == {1: "a", 2: "b", 3: "c", 4: "d"}


def test_a_dead_coordinators_pending_claim_is_resolved(cluster: TablesCluster) -> None:
    """A claim intent no read ever meets: the writer refused on it resolves it
    (`intent_resolver.py`) and claims the values at once, its coordinator being gone."""
    c = cluster
    c.create_index("T_e", "T", ["e"], unique=True)
    c.wait_index_available("T_e")
    held = c.begin("n2")
    held.insert("T", {"k": 1, "e": "held"})  # claimed, never finished
    c.kill_node("n2")  # its coordinator dies with it
    assert eventually(c.rt, lambda: c.node_status("n2") is not None, timeout=30)
    commit_rows(c, "n1", (2, "held"))  # the first writer, with no read before
    assert emails(c) == {2: "held"}  # the dead transaction aborted, row 1 never came
    held = c.begin("n3")  # a live pending claim still refuses (after the bounded wait)
    held.insert("T", {"k": 3, "e": "live"})
    with pytest.raises(UniqueConstraintViolation) as err:
        commit_rows(c, "n1", (4, "live"))
    assert err.value.pending and err.value.holder == (3,)
    assert held.commit()
    assert emails(c) == {2: "held", 3: "live"}


def test_bad_unique_writes_change_nothing(cluster: TablesCluster) -> None:
    c = cluster
    c.create_index("T_e", "T", ["e"], unique=True)
    c.wait_index_available("T_e")
    tx = c.begin("n1")
    for bad in ({"e": "x"}, {"k": "one", "e": "x"}, {"k": 1, "nope": 1}):
        with pytest.raises(CatalogError):
            tx.insert("T", bad)
    tx.insert("T", {"k": 1, "e": "x"})
    assert tx.commit()
    assert emails(c) == {1: "x"}
