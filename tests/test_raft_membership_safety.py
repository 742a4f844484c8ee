"""Raft safety while the membership changes, under the faults of test_raft_safety.

`MSim` is that harness's seeded cluster (crashes mid-step, torn unsynced writes,
loss, duplication, reordering, partitions, snapshots and installs) plus spare nodes and
a rebalancer: it adds a spare (or a removed node, from its old disk) as a learner,
promotes a learner once the leader says it caught up, removes voters (the leader too)
and learners, and stops a removed member a while after its removal commits. Snapshots
record the configuration at their index; installs carry it.

Checked after every step and at every fault, besides the base harness's election
safety, log matching, leader completeness and state machine safety: a member campaigns
or leads only while it may (a voter in its configuration at its commit index or in a
later one of its log: thesis figure 4.6); a leader appends a change only when
the previous one is committed and it has committed in its term, and the change moves
one server; every committed entry is durable on enough voters of the latest committed
configuration that every quorum of it holds the entry (a removal in flight may commit
on a quorum of the smaller configuration, which is not a quorum of the committed one
when it has an even number of voters: the overlap is what safety needs); at the end,
after healing, every member of the final configuration holds every committed entry.

A failing seed replays exactly: `python tests/test_raft_membership_safety.py SEED`.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from test_raft_safety import Checker, Disk, Faults, Node, SafetyViolation, Sim, Snap

from sediment.actors.log import kv_machine as kv
from sediment.actors.log.raft import (
    AppendToLog,
    Committed,
    ConfChange,
    Entry,
    Event,
    InstallSnapshot,
    LeaderChanged,
    Membership,
    ProposeChange,
    RaftConfig,
    RaftState,
    Refused,
    Reply,
    RequestVote,
    RestoreMachine,
    Send,
    SendSnapshot,
    SnapshotInstalled,
    SnapshotMeta,
    StoreSnapshotChunk,
    Tick,
    caught_up,
    current_membership,
    init,
    membership_at,
)
from sediment.actors.log.raft.membership import changed, latest_index, may_campaign
from sediment.actors.log.raft.state import last_index, term_at


@dataclass
class MSnap(Snap):
    membership: Membership | None = None  # None: the bootstrap configuration


@dataclass
class MDisk(Disk):
    """A disk whose staged snapshots keep the configuration their final chunk carried."""

    staged_conf: dict[int, Membership | None] = field(default_factory=dict)

    def apply(self, op: Any) -> tuple[int, int] | None:
        if isinstance(op, StoreSnapshotChunk) and op.last:
            self.staged_conf[op.snapshot_index] = op.membership
        return super().apply(op)


class MSim(Sim):
    def __init__(self, seed: int, ops: int, trace: bool = False) -> None:  # noqa: PLR0915
        self.seed = seed
        self.rng = rng = random.Random(seed)
        n = rng.choice([1, 2, 3, 3, 3, 4, 5])
        spares = rng.choice([1, 2, 2, 3])
        self.ids = [f"n{i}" for i in range(1, n + spares + 1)]
        self.cfg = RaftConfig(
            tuple(self.ids[:n]),
            pre_vote=rng.random() < 0.75,
            check_quorum=rng.random() < 0.75,
            max_append_entries=rng.choice([1, 2, 4, 16]),
            group="g",
            max_inflight=rng.choice([1, 2, 4]),
        )
        self.faults = Faults(
            loss=rng.choice([0.0, 0.02, 0.1]),
            dup=rng.choice([0.0, 0.02, 0.05]),
            slow=rng.choice([0.0, 0.05]),
            crash_every=rng.choice([0.0, 0.6, 1.5]),
            partition_every=rng.choice([0.0, 0.8, 2.0]),
        )
        self.change_every = rng.choice([0.05, 0.15, 0.4])
        self.nodes = {i: Node(i, rng.randint(2, 12), disk=MDisk()) for i in self.ids}
        self.now = 0.0
        self.queue: list[tuple[float, int, str, Any]] = []
        self.seq = 0
        self.group_of: dict[str, int] = {}
        self.ops_left = ops
        self.ops_done = 0
        self.trace: list[str] | None = [] if trace else None
        self.check: MChecker = MChecker(self)
        self.leader_hint: str | None = None
        self.acked: dict[int, tuple[Any, int]] = {}
        self.reads_served = 0
        self.steps = 0
        self.retired: set[str] = set(self.ids[n:])  # down for good until added (spares)
        self.linger = True  # removed members stay up a while before they are stopped
        self.changes: dict[str, int] = {}  # committed changes by op (and "remove_leader")
        self.refusals: dict[str, int] = {}
        for node in self.ids[:n]:
            self._start(self.nodes[node])
        self._at(0.01, "client", None)
        self._at(rng.expovariate(1 / self.change_every), "member", None)
        if self.faults.crash_every:
            self._at(rng.expovariate(1 / self.faults.crash_every), "crash", None)
        if self.faults.partition_every:
            self._at(rng.expovariate(1 / self.faults.partition_every), "partition", None)

    # -- the shell: configurations in snapshots and installs --

    def _start(self, node: Node) -> None:
        d = node.disk
        snap = d.snap
        meta = None
        if snap is not None:
            meta = SnapshotMeta(snap.index, snap.term, getattr(snap, "membership", None))
        tail = d.tail()
        node.core = init(self.cfg, node.id, d.hard, tail, meta, self.rng.randrange(1 << 30))
        node.machine = kv.restore(snap.data) if snap else kv.initial()
        node.applied = d.snap_index
        node.applied_term = snap.term if snap else 0
        self.log(f"{node.id} START at snapshot {d.snap_index}, log to {d.last}, "
                 f"config {current_membership(node.core)}")
        self.check.restored(node)
        self.feed(node, Tick(self.now))

    def _take_snapshot(self, node: Node) -> Event:
        event = super()._take_snapshot(node)
        snap = node.disk.snap
        assert snap is not None and node.core is not None
        conf = membership_at(node.core, snap.index)
        node.disk.snap = MSnap(snap.index, snap.term, snap.data, snap.live, conf)
        return event

    def _activate(self, node: Node, e: RestoreMachine) -> None:
        super()._activate(node, e)
        snap = node.disk.snap
        assert snap is not None
        node.disk.snap = MSnap(snap.index, snap.term, snap.data, snap.live, e.membership)

    def _build_install(self, node: Node, e: SendSnapshot) -> InstallSnapshot | None:
        msg = super()._build_install(node, e)
        snap = node.disk.snap
        if msg is not None and msg.phase == "last" and snap is not None:
            conf = getattr(snap, "membership", None) or self.cfg.bootstrap
            msg = replace(msg, membership=conf)
        return msg

    def _fsync(self, node: Node) -> list[Event]:
        disk = node.disk
        assert isinstance(disk, MDisk)
        return [SnapshotInstalled(ev.snapshot_index, ev.snapshot_term,
                                  disk.staged_conf.pop(ev.snapshot_index, None))
                if isinstance(ev, SnapshotInstalled) else ev for ev in super()._fsync(node)]

    def _execute(self, node: Node, e: Any, todo: Any) -> None:
        if isinstance(e, Reply) and isinstance(e.ref, tuple) and e.ref[0] == "conf":
            _, _, op, target, was_leader = e.ref
            if isinstance(e.result, Committed):
                key = "remove_leader" if op == "remove" and target == was_leader else op
                self.changes[key] = self.changes.get(key, 0) + 1
            elif isinstance(e.result, Refused):
                self.refusals[e.result.reason] = self.refusals.get(e.result.reason, 0) + 1
            return
        super()._execute(node, e, todo)

    # -- the rebalancer --

    def _leader(self) -> Node | None:
        leaders = [n for n in self.nodes.values() if n.core is not None
                   and n.core.role == "leader"]
        return max(leaders, key=lambda n: n.core.term if n.core else 0, default=None)

    def _on_member(self, _: Any) -> None:
        if self.ops_left <= 0:
            return
        self._at(self.now + self.rng.expovariate(1 / self.change_every), "member", None)
        self.retire_removed()
        lead = self._leader()
        if lead is None or lead.core is None:
            return
        op, target = self._pick(lead.core)
        if op == "add_learner":
            node = self.nodes[target]
            self.retired.discard(target)
            if not node.up:
                self._start(node)  # from nothing, or from the disk it left with
        to = lead
        if self.rng.random() < 0.1:  # a member that does not lead: NotLeader
            to = self.nodes[self.rng.choice(self.ids)]
        if to.up:
            self.log(f"CHANGE {op} {target} via {to.id}")
            self.feed(to, ProposeChange(op, target, ("conf", self.seq, op, target, lead.id),
                                        self.now))

    def _pick(self, s: RaftState) -> tuple[str, str]:
        conf = current_membership(s)
        rng = self.rng
        ready = [p for p in conf.learners if caught_up(s, p)]
        outside = [p for p in self.ids if p not in conf.members]
        r = rng.random()
        if r < 0.05:  # a bad change: refused, nothing changes
            return rng.choice([("promote", conf.voters[0]), ("remove", "nobody"),
                               ("add_learner", conf.voters[-1])])
        if ready and r < 0.6:
            return "promote", rng.choice(ready)
        if outside and (r < 0.8 or len(conf.voters) < 2):
            return "add_learner", rng.choice(outside)
        if conf.learners and (rng.random() < 0.2 or len(conf.voters) < 2):
            return "remove", rng.choice(conf.learners)
        if rng.random() < 0.3:
            return "remove", s.me  # the leader itself
        return "remove", rng.choice(conf.voters)

    def retire_removed(self) -> None:
        """Stop members the committed configuration dropped that no configuration
        appended above the commit point (in any log, up or down) adds back, as their
        operator would: a removed member left running could only disrupt elections.
        While `linger`, each one may be left up a while longer."""
        wanted = set(self.check.committed_conf().members)
        top = max(self.check.committed, default=0)
        for (index, _), (entry, _) in self.check.seen.items():
            if index > top and isinstance(entry.command, ConfChange):
                wanted |= set(entry.command.membership.members)  # may still commit
        for node in self.nodes.values():
            if node.id in wanted or node.id in self.retired:
                continue
            if self.linger and self.rng.random() < 0.5:
                continue
            self.retired.add(node.id)
            if node.up:
                self.log(f"{node.id} STOPPED (removed)")
                self.crash(node)

    # -- faults, healing and the end --

    def _on_restart(self, node_id: str) -> None:
        if node_id not in self.retired:
            super()._on_restart(node_id)

    def heal(self) -> None:
        self.group_of = {}
        self.faults = Faults(0.0, 0.0, 0.0, 0.0, 0.0)
        self.linger = False
        for node in self.nodes.values():
            if not node.up and node.id not in self.retired:
                self._start(node)

    def converged(self) -> bool:
        self.retire_removed()
        lead = self._leader()
        if lead is None or lead.core is None:
            return False
        s = lead.core
        ups = [n for n in self.nodes.values() if n.core is not None and n.core.role == "leader"]
        if len(ups) != 1:
            return False
        if term_at(s, s.commit) != s.term or s.commit != last_index(s):
            return False
        conf = current_membership(s)
        members = [self.nodes[p] for p in conf.members]
        return all(n.up and n.applied == s.commit for n in members)

    def execute(self) -> None:
        super().execute()
        self.check.final_membership()


# ---- invariants -------------------------------------------------------------------------


class MChecker(Checker):
    sim: MSim

    def __init__(self, sim: MSim) -> None:
        super().__init__(sim)
        self.confs: dict[int, Membership] = {}  # committed configuration entries

    def commit(self, entry: Entry, who: str) -> None:
        super().commit(entry, who)
        if isinstance(entry.command, ConfChange):
            self.confs[entry.index] = entry.command.membership

    def committed_conf(self) -> Membership:
        """The latest committed configuration (committed entries have no gaps)."""
        return self.confs[max(self.confs)] if self.confs else self.sim.cfg.bootstrap

    def after_step(self, node: Node, before: RaftState, after: RaftState, fx: list[Any]) -> None:
        """Besides the base checks: a member's configuration is the latest one in its log
        (truncated changes undone), and its snapshot's is the committed log's there."""
        super().after_step(node, before, after, fx)
        if after.snap_conf is not before.snap_conf or after.confs is not before.confs \
                or after.entries is not before.entries:
            self.configuration_follows_the_log(node, after)

    def configuration_follows_the_log(self, node: Node, s: RaftState) -> None:
        in_log = [e.command.membership for e in s.entries if isinstance(e.command, ConfChange)]
        expected = in_log[-1] if in_log else s.snap_conf
        self.require(current_membership(s) == expected, f"{node.id} uses "
                     f"{current_membership(s)} but its log says {expected}")
        at_snap = [conf for i, conf in self.confs.items() if i <= s.snap_index]
        committed = self.confs[max(i for i in self.confs if i <= s.snap_index)] \
            if at_snap else self.sim.cfg.bootstrap
        self.require(s.snap_conf == committed, f"{node.id}: snapshot {s.snap_index} has "
                     f"{s.snap_conf}, the committed log {committed}")

    def executed(self, node: Node, before: RaftState, after: RaftState, e: Any) -> None:
        super().executed(node, before, after, e)
        if isinstance(e, Send) and isinstance(e.msg, RequestVote):
            self.require(may_campaign(after), f"{node.id} campaigns but is no voter of "
                         f"{current_membership(after)} nor of a configuration above commit")
        elif isinstance(e, LeaderChanged) and e.leader == node.id:
            self.require(may_campaign(after), f"{node.id} leads but is no voter of "
                         f"{current_membership(after)} nor of a configuration above commit")
        elif isinstance(e, AppendToLog) and before.role == "leader":
            for entry in e.entries:
                if isinstance(entry.command, ConfChange):
                    self.one_at_a_time(node, before, entry.command)

    def one_at_a_time(self, node: Node, before: RaftState, change: ConfChange) -> None:
        self.require(latest_index(before) <= before.commit,
                     f"{node.id} appends {change} before the last change committed")
        self.require(term_at(before, before.commit) == before.term,
                     f"{node.id} appends {change} before committing in term {before.term}")
        base = current_membership(before)
        self.require(change.membership == changed(base, change.op, change.node),
                     f"{node.id}: {change} is not one server away from {base}")

    def quorum_durable(self) -> None:
        """Every committed entry is durable on voters of the latest committed configuration
        that every quorum of it meets."""
        conf = self.committed_conf()
        need = len(conf.voters) - conf.quorum + 1
        disks = [self.sim.nodes[p].disk for p in conf.voters]
        for i, entry in self.committed.items():
            have = sum(d.snap_index >= i or (i <= d.last and d.log.get(i) == entry)
                       for d in disks)
            self.require(have >= need, f"committed {entry} on {have} voters of {conf}, "
                         f"fewer than the {need} every quorum meets")

    def final_membership(self) -> None:
        """After healing: every member of the final configuration holds everything."""
        lead = self.sim._leader()
        assert lead is not None and lead.core is not None
        conf = current_membership(lead.core)
        self.require(conf == self.committed_conf(), f"final {conf} is not committed")
        for p in conf.members:
            d = self.sim.nodes[p].disk
            for i, entry in self.committed.items():
                ok = d.snap_index >= i or d.log.get(i) == entry
                self.require(ok, f"member {p} of {conf} lacks committed {entry}")


# ---- entry points -----------------------------------------------------------------------


OPS = 120


def run_seed(seed: int, ops: int = OPS, trace: bool = False) -> MSim:
    sim = MSim(seed, ops=ops, trace=trace)
    sim.execute()
    return sim


def replay(seed: int, ops: int = OPS, tail: int = 120) -> MSim:
    sim = MSim(seed, ops=ops, trace=True)
    try:
        sim.execute()
    except BaseException:
        print("\n".join((sim.trace or [])[-tail:]))
        raise
    print(f"seed {seed}: changes {sim.changes}, refusals {sim.refusals}, "
          f"committed {len(sim.check.committed)}")
    return sim


SEED_BLOCKS = [range(start, start + 25) for start in range(0, 400, 25)]


@pytest.mark.parametrize("seeds", SEED_BLOCKS, ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_safety_under_faults_and_membership_changes(seeds: range) -> None:
    totals: dict[str, int] = {}
    for seed in seeds:
        try:
            sim = run_seed(seed)
        except Exception as exc:
            raise AssertionError(f"seed {seed} failed; replay with `python "
                                 f"tests/test_raft_membership_safety.py {seed}`: {exc}") from exc
        for op, n in sim.changes.items():
            totals[op] = totals.get(op, 0) + n
    # the block really moved members around, the leader included
    assert all(totals.get(op, 0) >= 5 for op in ("add_learner", "promote", "remove")), totals
    assert totals.get("remove_leader", 0) >= 1, totals


def test_long_runs_move_the_whole_group() -> None:
    for seed in (2000, 2001, 2002):
        sim = run_seed(seed, ops=500)
        assert sum(sim.changes.values()) >= 10, sim.changes


def test_replay_is_deterministic() -> None:
    a, b = run_seed(11, trace=True), run_seed(11, trace=True)
    assert a.trace == b.trace and a.steps == b.steps


def test_the_checker_catches_a_leader_that_counts_a_learner() -> None:
    """The quorum check is not vacuous: a core whose commit counts learners' acks (etcd's
    bug class: learners in the quorum) fails it on some seed."""
    from sediment.actors.log.raft import election, replication

    original = replication.maybe_commit

    def counts_learners(s: RaftState, out: Any) -> None:
        conf = current_membership(s)
        matches = sorted([s.persisted if p == s.me else s.progress[p].match
                          for p in conf.members], reverse=True)
        n = matches[conf.quorum - 1]
        if n > s.commit and term_at(s, n) == s.term:
            replication.advance_commit(s, n, out)
            for peer in s.others:
                replication.nudge(s, peer, out)

    replication.maybe_commit = counts_learners  # type: ignore[assignment]
    election.maybe_commit = counts_learners  # type: ignore[assignment]
    try:
        caught = False
        for seed in range(60):
            try:
                run_seed(seed)
            except (SafetyViolation, AssertionError):
                caught = True
                break
        assert caught, "no seed noticed learners counted for commit"
    finally:
        replication.maybe_commit = original  # type: ignore[assignment]
        election.maybe_commit = original  # type: ignore[assignment]


if __name__ == "__main__":
    replay(int(sys.argv[1]), ops=int(sys.argv[2]) if len(sys.argv) > 2 else OPS)
