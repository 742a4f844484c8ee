"""The machines' side of the pins, entry by entry: the metastore's pending and stable
rebalance records (kept through a snapshot, refused for a dropped zone), the partition
machine's replay-floor record (set or lowered by an entry under an older catalog
version, cleared by a flush) and its index backfill (kept through a flush and a
reopen); the recorder turns the replay record into pins the checker enforces."""

from __future__ import annotations

from pathlib import Path

from sediment.actors.catalog import ddl
from sediment.actors.catalog.descriptors import Column, ZonePartition
from sediment.actors.catalog.errors import CatalogVersionCompacted
from sediment.actors.catalog.hlc import hts
from sediment.actors.catalog.machine import ExecuteDdl, Rejected
from sediment.actors.catalog.metastore_machine import (
    AssignmentChanged,
    AssignmentsQuery,
    CancelPending,
    CatalogMetastore,
    Pending,
    RebalancesQuery,
    RecordStable,
    SetPending,
)
from sediment.actors.log.raft.types import Entry
from sediment.actors.tables import partition
from sediment.actors.tables.partition_machine import (
    FlushCmd,
    IndexQuery,
    PartitionMachine,
    ReplayEventsQuery,
)
from sediment.actors.tables.recorder import Recorder
from sediment.scenarios.checkers.catalog_compaction import compaction_safety

K = Column("k", "int", nullable=False)
NODES = ("n1", "n2", "n3")
G = ZonePartition(0, 1)


def e(i: int, command: object) -> Entry:
    return Entry(i, 1, 0.0, command)


def test_metastore_pending_and_stable_rebalance_records() -> None:
    m = CatalogMetastore("", NODES)
    m.apply(e(1, ExecuteDdl((ddl.CreateZone("Z", 2, 1),), hts(100), 10)))
    stable = m.query(AssignmentsQuery())
    target = frozenset(NODES[:2])
    assert isinstance(m.apply(e(2, SetPending(G, target, 1, hts(110)))), AssignmentChanged)
    assert m.query(RebalancesQuery()) == {G: Pending(target, 1, hts(110))}
    assert m.query(AssignmentsQuery()) == stable  # pending moves nothing yet
    data, _ = m.snapshot()
    copy = CatalogMetastore("", NODES)
    copy.restore(data, 2, lambda i: None)
    assert copy.query(RebalancesQuery()) == m.query(RebalancesQuery())
    m.apply(e(3, RecordStable(G, target)))
    assert m.query(AssignmentsQuery())[G] == target and m.query(RebalancesQuery()) == {}
    m.apply(e(4, SetPending(G, frozenset(NODES), 1, hts(110))))
    m.apply(e(5, CancelPending(G)))
    assert m.query(RebalancesQuery()) == {} and m.query(AssignmentsQuery())[G] == target
    # bad records: no replicas, a partition of no zone; nothing changes
    before = (m.query(AssignmentsQuery()), m.query(RebalancesQuery()))
    assert isinstance(m.apply(e(6, SetPending(G, frozenset(), 1, hts(110)))), Rejected)
    assert isinstance(m.apply(e(7, RecordStable(ZonePartition(9, 0), target))), Rejected)
    assert (m.query(AssignmentsQuery()), m.query(RebalancesQuery())) == before
    # a dropped zone's pending rebalances go with its assignments
    m.apply(e(8, SetPending(G, frozenset(NODES), 1, hts(110))))
    m.apply(e(9, ExecuteDdl((ddl.DropZone("Z"),), hts(200), 10)))
    assert m.query(RebalancesQuery()) == {} and m.query(AssignmentsQuery()) == {}


def write(tx: str, key: int, version: int) -> partition.WriteIntentCmd:
    return partition.WriteIntentCmd(tx, 7, (key,), {"k": key}, 1, version, hts(10), G)


def test_partition_machine_records_its_replay_floor(tmp_path: Path) -> None:
    m = PartitionMachine(str(tmp_path / "p"), G)
    now = [1.0]
    m.set_clock(lambda: now[0])
    m.apply(e(1, write("a", 1, 3)))  # the floor: 3
    now[0] = 2.0
    m.apply(e(2, write("b", 2, 5)))  # above it: no event
    now[0] = 3.0
    m.apply(e(3, write("c", 3, 2)))  # lowered: 2
    now[0] = 4.0
    m.apply(e(4, FlushCmd()))  # cleared
    m.apply(e(5, FlushCmd()))  # nothing to clear: no event
    inc, events = m.query(ReplayEventsQuery(0))
    assert inc == 1.0
    assert [x[1:] for x in events] == [(1.0, "apply", 3), (3.0, "apply", 2), (4.0, "flush", 0)]
    assert m.query(ReplayEventsQuery(events[1][0]))[1] == events[2:]
    r = Recorder()
    r.version(1, hts(1))
    for v in (2, 3, 4):
        r.version(v, hts(v * 10))
    r.replay_events("p@n1", inc, events, 4.0)
    pins = [p for p in r.history().pins if p.kind == "replay"]
    assert [(p.version, p.start, p.end) for p in pins] == [(3, 1.0, 3.0), (2, 3.0, 4.0)]
    r.compactions[3] = 3.5  # removed version 2 while the partition needed it to replay
    assert not compaction_safety(r.history()).ok
    r.compactions = {3: 4.5}  # after the flush: fine
    assert compaction_safety(r.history()).ok


def test_a_gone_member_ends_its_replay_pin_when_it_last_answered() -> None:
    r = Recorder()
    r.replay_events("p@n1", 0.0, [(1, 1.0, "apply", 2)], at=2.0)
    assert [p.end for p in r.history().pins] == [None]
    r.replay_member_gone("p@n1")
    assert [p.end for p in r.history().pins] == [2.0]


def test_an_index_backfill_survives_a_flush_and_a_reopen(tmp_path: Path) -> None:
    gdir = str(tmp_path / "p")
    m = PartitionMachine(gdir, G)
    m.apply(e(1, write("a", 1, 1)))
    m.apply(e(2, partition.CleanupCmd("a", hts(20), 1)))
    built = m.apply(e(3, partition.BuildIndexCmd(9, 7, ("k",), hts(30), 4)))
    assert built == partition.IndexBuilt(9, 4, 1)
    assert partition.replay_floor(m.state) == 1
    m.apply(e(4, FlushCmd()))
    again = PartitionMachine(gdir, G)
    assert again.query(IndexQuery(9)) == (4, (((1,), (1,)),))
    assert again.query(IndexQuery(8)) is None


def test_a_partition_refuses_commands_under_a_compacted_catalog_version(
        tmp_path: Path) -> None:
    """Rule 4: after `CatalogCompactedCmd(3)` a command written under version 2 is a
    typed `CatalogVersionCompacted` and changes nothing but the applied index; the
    floor survives a flush and a reopen."""
    gdir = str(tmp_path / "p")
    m = PartitionMachine(gdir, G)
    assert m.apply(e(1, partition.CatalogCompactedCmd(3))) == partition.Ok()
    before = m.state
    r = m.apply(e(2, write("a", 1, 2)))
    assert isinstance(r, partition.Failed) and isinstance(r.error, CatalogVersionCompacted)
    assert m.state.rows == before.rows and m.state.applied == 2
    for late in (partition.CleanupCmd("a", hts(20), 2),
                 partition.FinishTxCmd("a", True, hts(20), frozenset({G}), 1)):
        r = m.apply(e(m.applied + 1, late))
        assert isinstance(r, partition.Failed)
    assert m.apply(e(m.applied + 1, write("b", 2, 3))) == partition.Ok()
    m.apply(e(m.applied + 1, partition.CatalogCompactedCmd(1)))  # never backwards
    m.apply(e(m.applied + 1, FlushCmd()))
    again = PartitionMachine(gdir, G)
    assert again.state.catalog_floor == 3


def test_a_snapshot_install_ends_the_replay_pin(tmp_path: Path) -> None:
    """A member with an unflushed entry caught up by a snapshot install from its leader
    no longer needs the entry's version (the snapshot covers it): the install is a
    flush in its record too."""
    leader = PartitionMachine(str(tmp_path / "leader"), G)
    for i, key in enumerate((1, 2), start=1):
        leader.apply(e(i, write(f"t{key}", key, 3)))
    data, _ = leader.snapshot()
    m = PartitionMachine(str(tmp_path / "follower"), G)
    now = [1.0]
    m.set_clock(lambda: now[0])
    m.apply(e(1, write("t1", 1, 3)))  # unflushed: a crash replays it under version 3
    now[0] = 2.0
    m.restore(data, 2, lambda i: None)
    _, events = m.query(ReplayEventsQuery(0))
    assert [x[1:] for x in events] == [(1.0, "apply", 3), (2.0, "flush", 0)]


def test_a_restarted_members_old_pin_ends_when_it_last_answered(tmp_path: Path) -> None:
    """Found by `scenarios/tables/tables-coordinator-killed-mid-compaction.yaml` seed 0:
    a member applied an entry under version 3, flushed it (publishing a newer minimum
    tx time) and was killed before the recorder saw the flush; its pin stayed open to
    the restart and the checker called a compaction past 3 a violation. The old
    incarnation's pin ends at its last answer; what the new one replays pins anew."""
    gdir = str(tmp_path / "p")
    m = PartitionMachine(gdir, G)
    m.set_clock(lambda: 1.0)
    m.apply(e(1, write("a", 1, 3)))
    r = Recorder()
    for v in (3, 7):
        r.version(v, hts(v * 10))
    r.replay_events("p@n1", 1.0, m.query(ReplayEventsQuery(0))[1], 1.5)  # polled: open
    m.set_clock(lambda: 2.0)
    m.apply(e(2, FlushCmd()))  # flushed at 2.0, unseen: killed before the next poll
    m.close()
    again = PartitionMachine(gdir, G)
    again.set_clock(lambda: 4.0)  # restarted; nothing to replay
    r.replay_events("p@n1", 4.0, again.query(ReplayEventsQuery(0))[1], 4.0)
    pins = [p for p in r.history().pins if p.kind == "replay"]
    assert [(p.version, p.start, p.end) for p in pins] == [(3, 1.0, 1.5)]
    r.compactions[7] = 3.0  # decided on the flushed member's report, applied meanwhile
    assert compaction_safety(r.history()).ok
    # an entry the old incarnation had not flushed is replayed, and pinned, anew
    again.apply(e(3, write("b", 2, 3)))
    r.replay_events("p@n1", 4.0, again.query(ReplayEventsQuery(0))[1], 4.5)
    r.compactions[7] = 4.6
    assert not compaction_safety(r.history()).ok


def test_a_members_last_answer_is_no_earlier_than_its_newest_event() -> None:
    """Found by `tables-coordinator-killed-mid-compaction` seed 13: the poll's clock was
    read before the member answered, so an event stamped after it came later than its
    "last answer", and the restart's end of the old pin landed before the pin began:
    it stayed open to the run's end."""
    r = Recorder()
    r.version(4, hts(40))
    r.version(6, hts(60))
    r.replay_events("p@n1", 1.0, [(1, 6.4965, "apply", 4)], 6.492)  # polled at 6.492
    r.replay_events("p@n1", 8.9, [], 9.0)  # restarted, nothing to replay
    pins = [p for p in r.history().pins if p.kind == "replay"]
    assert [(p.version, p.start, p.end) for p in pins] == [(4, 6.4965, 6.4965)]
    r.compactions[6] = 10.9
    assert compaction_safety(r.history()).ok
