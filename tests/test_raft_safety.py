"""Raft safety over many seeded fault schedules, in the spirit of Ra's ra_kv_harness.

`Sim` is a deterministic in-memory cluster: it plays every node's shell itself (a disk
per node that survives crashes, unsynced writes of which a crash keeps a random prefix,
snapshots every few applied entries with the kv machine's live indexes and Ra-style
minor compaction) over a seeded network with delay, loss, duplication, reordering and
partitions, plus crash-restarts. After every step it asserts election safety, log
matching, leader completeness, state machine safety and that committed entries are
never truncated; at crashes and every few client operations, that every committed entry
is durable on a quorum and every live index is readable; at the end, after healing,
that all nodes converge and every acknowledged write is in the log.

A failing seed replays exactly: `python tests/test_raft_safety.py SEED` (or `replay`).
"""

from __future__ import annotations

import heapq
import random
import sys
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import pytest

from sediment.actors.log import kv_machine as kv
from sediment.actors.log.raft import (
    AppendEntries,
    AppendToLog,
    Apply,
    Committed,
    Entry,
    Event,
    HardState,
    InstallSnapshot,
    LeaderChanged,
    Message,
    Persisted,
    PersistHardState,
    Propose,
    ProposeBatch,
    RaftConfig,
    RaftState,
    ReadIndex,
    ReadReady,
    Receive,
    Reply,
    RestoreMachine,
    Send,
    SendSnapshot,
    SnapshotInstalled,
    SnapshotMeta,
    SnapshotSendFailed,
    SnapshotTaken,
    StoreSnapshotChunk,
    Tick,
    TruncateLog,
    WriteSparse,
    init,
    step,
    wakeup_at,
)
from sediment.actors.log.raft.state import last_index, term_at

CHUNK = 48  # snapshot chunk bytes: small, so installs take several chunks
PRE_BATCH = 3  # live entries per "pre" message
KEYS = [f"k{i}" for i in range(8)]


class SafetyViolation(AssertionError):
    pass


# ---- disk -------------------------------------------------------------------------------


@dataclass
class Snap:
    index: int
    term: int
    data: bytes
    live: list[int]


@dataclass
class Staged:
    """An incoming snapshot: durable but ignored until RestoreMachine activates it."""

    term: int
    chunks: dict[int, bytes] = field(default_factory=dict)
    sparse: dict[int, Entry] = field(default_factory=dict)
    last_chunk: int | None = None


@dataclass
class Disk:
    hard: HardState = HardState()
    log: dict[int, Entry] = field(default_factory=dict)  # contiguous tail + live below snap
    last: int = 0  # end of the contiguous tail
    snap: Snap | None = None
    staged: dict[int, Staged] = field(default_factory=dict)

    @property
    def snap_index(self) -> int:
        return self.snap.index if self.snap else 0

    def apply(self, op: Any) -> tuple[int, int] | None:
        """One storage effect reaches the disk; returns (index, term) of a completed install."""
        if isinstance(op, TruncateLog):
            for i in range(op.from_index, self.last + 1):
                self.log.pop(i, None)
            self.last = min(self.last, op.from_index - 1)
        elif isinstance(op, AppendToLog):
            assert op.entries[0].index == self.last + 1, (op.entries[0].index, self.last)
            for e in op.entries:
                self.log[e.index] = e
            self.last = op.entries[-1].index
        elif isinstance(op, WriteSparse):
            st = self.staged.setdefault(op.snapshot_index, Staged(-1))
            st.sparse.update((e.index, e) for e in op.entries)
        elif isinstance(op, StoreSnapshotChunk):
            st = self.staged.setdefault(op.snapshot_index, Staged(op.snapshot_term))
            st.term = op.snapshot_term
            st.chunks[op.chunk_no] = op.data
            if op.last:
                st.last_chunk = op.chunk_no
                return op.snapshot_index, op.snapshot_term
        else:
            raise AssertionError(op)
        return None

    def tail(self) -> list[Entry]:
        return [self.log[i] for i in range(self.snap_index + 1, self.last + 1)]

    def compact(self) -> None:
        """Ra's minor compaction: below the snapshot keep only its live entries."""
        assert self.snap is not None
        live = set(self.snap.live)
        for i in [i for i in self.log if i <= self.snap.index and i not in live]:
            del self.log[i]


# ---- nodes ------------------------------------------------------------------------------


@dataclass
class Node:
    id: str
    snap_every: int
    disk: Disk = field(default_factory=Disk)
    core: RaftState | None = None
    machine: kv.KvState = field(default_factory=kv.KvState)
    applied: int = 0
    applied_term: int = 0
    incarnation: int = 0
    unsynced: list[Any] = field(default_factory=list)
    fsync_due: float | None = None
    tick_due: float | None = None
    crash_after: int | None = None  # armed: crash after this many more effects

    @property
    def up(self) -> bool:
        return self.core is not None


@dataclass
class Faults:
    loss: float
    dup: float
    slow: float  # probability of a long delay (reorders messages)
    crash_every: float  # mean seconds between crashes (0: never)
    partition_every: float


class Sim:
    def __init__(self, seed: int, ops: int, trace: bool = False) -> None:
        self.seed = seed
        self.rng = rng = random.Random(seed)
        n = rng.choice([1, 2, 3, 3, 3, 3, 4, 5, 5])
        self.ids = [f"n{i}" for i in range(1, n + 1)]
        self.cfg = RaftConfig(
            tuple(self.ids),
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
        self.nodes = {i: Node(i, rng.randint(2, 12)) for i in self.ids}
        self.now = 0.0
        self.queue: list[tuple[float, int, str, Any]] = []
        self.seq = 0
        self.group_of: dict[str, int] = {}  # partition side per node; absent = majority side
        self.ops_left = ops
        self.ops_done = 0
        self.trace: list[str] | None = [] if trace else None
        self.check = Checker(self)
        self.leader_hint: str | None = None
        self.acked: dict[int, tuple[Any, int]] = {}  # op id -> (command, index)
        self.reads_served = 0
        self.steps = 0
        for node in self.nodes.values():
            self._start(node)
        self._at(0.01, "client", None)
        if self.faults.crash_every:
            self._at(rng.expovariate(1 / self.faults.crash_every), "crash", None)
        if self.faults.partition_every:
            self._at(rng.expovariate(1 / self.faults.partition_every), "partition", None)

    # -- scheduling --

    def _at(self, t: float, kind: str, arg: Any) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (t, self.seq, kind, arg))

    def log(self, text: str) -> None:
        if self.trace is not None:
            self.trace.append(f"{self.now:9.4f} {text}")

    def run(self, until: float) -> None:
        while self.queue and self.queue[0][0] <= until:
            t, _, kind, arg = heapq.heappop(self.queue)
            self.now = t
            getattr(self, "_on_" + kind)(arg)
        self.now = max(self.now, until)

    # -- the shell: feed an event and execute the effects in order --

    def feed(self, node: Node, event: Event) -> None:
        todo: deque[Event] = deque([event])
        while todo and node.core is not None:
            ev = todo.popleft()
            before = node.core
            node.core, fx = step(before, ev)
            self.steps += 1
            if self.trace is not None:
                self.log(f"{node.id} <- {ev}")
                for e in fx:
                    self.log(f"{node.id}    -> {e}")
            after = node.core
            self.check.after_step(node, before, after, fx)
            for effect in fx:
                if node.crash_after is not None:
                    if node.crash_after == 0:
                        self.log(f"{node.id} crashes before {effect}")
                        self.crash_restart(node)
                        return
                    node.crash_after -= 1
                self.check.executed(node, before, after, effect)
                self._execute(node, effect, todo)
        if node.core is not None:
            due = wakeup_at(node.core)
            if node.tick_due is None or due < node.tick_due:
                node.tick_due = due
                self._at(max(due, self.now), "tick", (node.id, node.incarnation, due))

    def _execute(self, node: Node, e: Any, todo: deque[Event]) -> None:
        if isinstance(e, PersistHardState):
            node.disk.hard = HardState(e.term, e.voted_for)
        elif isinstance(e, TruncateLog | AppendToLog | WriteSparse | StoreSnapshotChunk):
            node.unsynced.append(e)
            if node.fsync_due is None:
                delay = self.rng.uniform(0.0005, 0.004)
                if self.rng.random() < 0.05:
                    delay = self.rng.uniform(0.02, 0.1)  # a slow disk
                node.fsync_due = self.now + delay
                self._at(node.fsync_due, "fsync", (node.id, node.incarnation))
        elif isinstance(e, RestoreMachine):
            todo.extend(self._fsync(node))  # earlier writes first, then the atomic switch
            self._activate(node, e)
        elif isinstance(e, Send):
            self._send(node.id, e.to, e.msg)
        elif isinstance(e, SendSnapshot):
            msg = self._build_install(node, e)
            if msg is None:
                todo.append(SnapshotSendFailed(e.to, e.snapshot_index))
            else:
                self._send(node.id, e.to, msg)
        elif isinstance(e, Apply):
            for entry in e.entries:
                self._apply(node, entry)
            if node.applied - node.disk.snap_index >= node.snap_every:
                todo.append(self._take_snapshot(node))
        elif isinstance(e, Reply):
            if isinstance(e.result, ReadReady):
                self.check.read_served(node, e.ref, e.result.index)
            elif isinstance(e.result, Committed):
                op_id, command = e.ref  # type: ignore[misc]
                self.acked[op_id] = (command, e.result.index)
        elif isinstance(e, LeaderChanged):
            if e.leader == node.id:
                self.leader_hint = node.id
        else:
            raise AssertionError(e)

    def _fsync(self, node: Node) -> list[Event]:
        ops, node.unsynced = node.unsynced, []
        node.fsync_due = None
        out: list[Event] = []
        wrote = False
        for op in ops:
            done = node.disk.apply(op)
            wrote |= isinstance(op, TruncateLog | AppendToLog)
            if done is not None:
                out.append(SnapshotInstalled(*done))
        if wrote:
            d = node.disk
            term = d.log[d.last].term if d.last in d.log else (d.snap.term if d.snap else 0)
            out.insert(0, Persisted(d.last, term))
        return out

    def _activate(self, node: Node, e: RestoreMachine) -> None:
        d = node.disk
        st = d.staged.pop(e.snapshot_index)
        assert st.last_chunk is not None and st.term == e.snapshot_term
        data = b"".join(st.chunks[i] for i in range(st.last_chunk + 1))
        machine = kv.restore(data)
        d.snap = Snap(e.snapshot_index, e.snapshot_term, data, kv.live_indexes(machine))
        for i, entry in st.sparse.items():
            if i <= e.snapshot_index:
                d.log[i] = entry
        if e.discard_log:
            for i in range(e.snapshot_index + 1, d.last + 1):
                d.log.pop(i, None)
            d.last = e.snapshot_index
        else:
            assert d.last >= e.snapshot_index
        d.staged = {i: s for i, s in d.staged.items() if i > e.snapshot_index}
        d.compact()
        node.machine, node.applied, node.applied_term = machine, e.snapshot_index, e.snapshot_term
        self.check.restored(node)

    def _build_install(self, node: Node, e: SendSnapshot) -> InstallSnapshot | None:
        snap = node.disk.snap
        if snap is None or snap.index != e.snapshot_index:
            return None  # we only keep the newest snapshot
        base = dict(group=self.cfg.group, term=e.term, leader=node.id,
                    snapshot_index=snap.index, snapshot_term=snap.term)
        if e.step == "init":
            return InstallSnapshot(phase="init", **base)  # type: ignore[arg-type]
        if e.step == "pre":
            todo = [i for i in snap.live if i > e.live_from]
            batch = todo[:PRE_BATCH]
            for i in batch:
                self.check.require(i in node.disk.log, f"{node.id}: live entry {i} missing")
            entries = tuple(node.disk.log[i] for i in batch)
            return InstallSnapshot(phase="pre", live_entries=entries,  # type: ignore[arg-type]
                                   last=len(todo) <= PRE_BATCH, **base)
        chunks = [snap.data[i : i + CHUNK] for i in range(0, len(snap.data), CHUNK)] or [b""]
        assert e.chunk_no < len(chunks), (e, len(chunks))
        phase = "last" if e.chunk_no == len(chunks) - 1 else "next"
        return InstallSnapshot(phase=phase, chunk=chunks[e.chunk_no],  # type: ignore[arg-type]
                               chunk_no=e.chunk_no, **base)

    def _apply(self, node: Node, entry: Entry) -> None:
        self.check.applied(node, entry)
        node.machine, result = kv.apply(node.machine, entry)
        node.applied, node.applied_term = entry.index, entry.term
        if isinstance(entry.command, tuple) and entry.command[0] == "get" and result is not None:
            # The value lives in the log: read it from this node's storage.
            stored = node.disk.log.get(result)
            ok = stored is not None and stored.command[:2] == ("put", entry.command[1])
            self.check.require(ok, f"{node.id}: get at {entry.index} -> {result}: {stored}")

    def _take_snapshot(self, node: Node) -> Event:
        d = node.disk
        live = kv.live_indexes(node.machine)
        d.snap = Snap(node.applied, node.applied_term, kv.snapshot(node.machine), live)
        d.compact()
        self.check.live_readable(node)
        return SnapshotTaken(node.applied, node.applied_term)

    # -- network --

    def _send(self, frm: str, to: str, msg: Message) -> None:
        f, r = self.faults, self.rng
        copies = 2 if r.random() < f.dup else 1
        for _ in range(copies):
            if r.random() < f.loss:
                continue
            delay = r.uniform(0.0005, 0.008)
            if r.random() < f.slow:
                delay = r.uniform(0.02, 0.25)
            self._at(self.now + delay, "deliver", (frm, to, msg))

    def _connected(self, a: str, b: str) -> bool:
        return self.group_of.get(a, 0) == self.group_of.get(b, 0)

    def _on_deliver(self, arg: tuple[str, str, Message]) -> None:
        frm, to, msg = arg
        node = self.nodes[to]
        if node.up and self._connected(frm, to):
            self.feed(node, Receive(msg, self.now))

    def _on_tick(self, arg: tuple[str, int, float]) -> None:
        node = self.nodes[arg[0]]
        if node.up and node.incarnation == arg[1] and node.tick_due == arg[2]:
            node.tick_due = None
            self.feed(node, Tick(self.now))

    def _on_fsync(self, arg: tuple[str, int]) -> None:
        node = self.nodes[arg[0]]
        if node.up and node.incarnation == arg[1] and node.fsync_due is not None:
            for ev in self._fsync(node):
                self.feed(node, ev)

    # -- faults --

    def _on_crash(self, _: Any) -> None:
        if self.ops_left <= 0:
            return
        node = self.nodes[self.rng.choice(self.ids)]
        if node.up and node.crash_after is None:
            if self.rng.random() < 0.5:
                self.crash_restart(node)
            else:  # in the middle of executing some later step's effects
                node.crash_after = self.rng.randint(0, 3)
        self._at(self.now + self.rng.expovariate(1 / self.faults.crash_every), "crash", None)

    def crash_restart(self, node: Node) -> None:
        self.crash(node)
        self._at(self.now + self.rng.uniform(0.02, 0.8), "restart", node.id)

    def crash(self, node: Node) -> None:
        """Unsynced writes: a random prefix reaches the disk, possibly mid-batch."""
        ops = node.unsynced
        keep = self.rng.randint(0, len(ops))
        for k, op in enumerate(ops[:keep]):
            if k == keep - 1 and isinstance(op, AppendToLog) and len(op.entries) > 1:
                op = AppendToLog(op.entries[: self.rng.randint(1, len(op.entries))])
            node.disk.apply(op)
        node.unsynced, node.fsync_due, node.tick_due, node.crash_after = [], None, None, None
        node.disk.staged = {}  # never activated: recovery ignores it
        node.core = None
        node.incarnation += 1
        self.log(f"{node.id} CRASH (kept {keep}/{len(ops)} unsynced writes)")
        self.check.quorum_durable()

    def _on_restart(self, node_id: str) -> None:
        node = self.nodes[node_id]
        if not node.up:
            self._start(node)

    def _start(self, node: Node) -> None:
        d = node.disk
        meta = SnapshotMeta(d.snap.index, d.snap.term) if d.snap else None
        node.core = init(self.cfg, node.id, d.hard, d.tail(), meta, self.rng.randrange(1 << 30))
        node.machine = kv.restore(d.snap.data) if d.snap else kv.initial()
        node.applied = d.snap_index
        node.applied_term = d.snap.term if d.snap else 0
        self.log(f"{node.id} START at snapshot {d.snap_index}, log to {d.last}")
        self.check.restored(node)
        self.feed(node, Tick(self.now))

    def _on_partition(self, _: Any) -> None:
        if self.ops_left <= 0:
            return
        if self.group_of:
            self.group_of = {}
            self.log("HEAL")
        else:
            side = self.rng.sample(self.ids, self.rng.randint(1, max(1, len(self.ids) // 2)))
            self.group_of = {i: 1 for i in side}
            self.log(f"PARTITION {sorted(side)}")
        mean = self.faults.partition_every
        self._at(self.now + self.rng.expovariate(1 / mean), "partition", None)

    # -- the client: ra_kv_harness's mix of puts and gets --

    def _on_client(self, _: Any) -> None:
        if self.ops_left <= 0:
            return
        self.ops_left -= 1
        self.ops_done += 1
        r = self.rng.random()
        key = self.rng.choice(KEYS)
        if r < 0.12:  # linearizable reads by ReadIndex, sometimes several in one batch
            # any member that believes it leads: a deposed leader behind a partition too
            leaders = sorted(n.id for n in self.nodes.values()
                             if n.core is not None and n.core.role == "leader")
            node = self.nodes[self.rng.choice(leaders or self.ids)]
            if node.up:
                known = max(self.check.committed, default=0)
                refs = tuple(("read", self.ops_done, k, known)
                             for k in range(self.rng.choice([1, 1, 3])))
                self.feed(node, ReadIndex(refs, self.now))
            self._at(self.now + self.rng.uniform(0.002, 0.04), "client", None)
            return
        if r < 0.70:
            cmd: tuple[Any, ...] = ("put", key, f"v{self.ops_done}")
        elif r < 0.92:
            cmd = ("get", key)
        elif r < 0.96:
            cmd = ("delete", key)
        else:
            node = self.nodes[self.rng.choice(self.ids)]
            if node.up and node.applied > node.disk.snap_index:
                self.feed(node, self._take_snapshot(node))
            cmd = ("get", key)
        target = self.leader_hint
        if target is None or not self.nodes[target].up or self.rng.random() < 0.1:
            target = self.rng.choice(self.ids)
        node = self.nodes[target]
        if node.up and self.rng.random() < 0.2:  # a batch: this and a put behind it
            more = ("put", self.rng.choice(KEYS), f"v{self.ops_done}b")
            self.feed(node, ProposeBatch(((cmd, (self.ops_done, cmd)),
                                          (more, (-self.ops_done, more))), self.now))
        elif node.up:
            self.feed(node, Propose(cmd, (self.ops_done, cmd), self.now))
        if self.ops_done % 10 == 0:
            self.check.full()
        self._at(self.now + self.rng.uniform(0.002, 0.04), "client", None)

    # -- the whole run --

    def heal(self) -> None:
        self.group_of = {}
        self.faults = Faults(0.0, 0.0, 0.0, 0.0, 0.0)
        for node in self.nodes.values():
            if not node.up:
                self._start(node)

    def converged(self) -> bool:
        nodes = list(self.nodes.values())
        if not all(n.up for n in nodes):
            return False
        leaders = [n for n in nodes if n.core is not None and n.core.role == "leader"]
        if len(leaders) != 1 or leaders[0].core is None:
            return False
        lead = leaders[0].core
        if term_at(lead, lead.commit) != lead.term or lead.commit != last_index(lead):
            return False
        return all(n.applied == lead.commit for n in nodes)

    def execute(self) -> None:
        while self.ops_left > 0:
            self.run(self.now + 0.5)
        self.run(self.now + 0.3)
        self.heal()
        deadline = self.now + 20.0
        while not self.converged():
            if self.now > deadline or not self.queue:
                raise SafetyViolation(f"seed {self.seed}: no convergence after healing")
            self.run(self.now + 0.05)
        self.check.final()


# ---- invariants -------------------------------------------------------------------------


class Checker:
    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.leaders: dict[int, str] = {}
        self.seen: dict[tuple[int, int], tuple[Entry, int | None]] = {}
        self.committed: dict[int, Entry] = {}
        self.canon: list[kv.KvState] = [kv.initial()]

    def require(self, ok: bool, what: str) -> None:
        if not ok:
            raise SafetyViolation(f"seed {self.sim.seed} t={self.sim.now:.4f}: {what}")

    def canon_at(self, index: int) -> kv.KvState:
        while len(self.canon) <= index:
            i = len(self.canon)
            self.require(i in self.committed, f"committed log has a gap at {i}")
            self.canon.append(kv.apply(self.canon[-1], self.committed[i])[0])
        return self.canon[index]

    def commit(self, entry: Entry, who: str) -> None:
        known = self.committed.setdefault(entry.index, entry)
        self.require(known == entry, f"{who}: committed {entry} but {known} was committed")

    def after_step(self, node: Node, before: RaftState, after: RaftState, fx: list[Any]) -> None:
        """The effect order of the contract; commit knowledge (a fact of the core's state,
        whether the effects get executed or not)."""
        hard = [k for k, e in enumerate(fx) if isinstance(e, PersistHardState)]
        self.require(hard in ([], [0]), f"{node.id}: PersistHardState must come first: {fx}")
        for i in range(max(before.commit, after.snap_index) + 1, after.commit + 1):
            entry = after.entries[i - after.snap_index - 1]
            self.commit(entry, node.id)

    def leads(self, term: int, leader: str) -> None:
        """Election safety, as the world sees it: one leader speaks per term."""
        holder = self.leaders.setdefault(term, leader)
        self.require(holder == leader, f"two leaders in term {term}: {holder}, {leader}")

    def executed(self, node: Node, before: RaftState, after: RaftState, e: Any) -> None:
        """Checks of an effect the shell actually executed (a crash may cut a step short)."""
        if isinstance(e, Send) and isinstance(e.msg, AppendEntries | InstallSnapshot):
            self.leads(e.msg.term, e.msg.leader)
        elif isinstance(e, TruncateLog):  # a committed entry is never removed
            for entry in before.entries:
                lost = entry.index >= e.from_index and self.committed.get(entry.index)
                self.require(lost != entry, f"{node.id} truncated committed {entry}")
        elif isinstance(e, AppendToLog):  # log matching
            for entry in e.entries:
                prev = term_at(after, entry.index - 1)
                known = self.seen.setdefault((entry.index, entry.term), (entry, prev))
                self.require(known == (entry, prev), f"log matching: {entry} vs {known}")
        elif isinstance(e, LeaderChanged) and e.leader == node.id:
            self.leads(e.term, node.id)
            self.leader_complete(node, after)

    def leader_complete(self, node: Node, s: RaftState) -> None:
        for i in range(s.snap_index + 1, len(self.committed) + 1):
            entry = self.committed.get(i)
            if entry is not None:
                ok = term_at(s, i) == entry.term
                self.require(ok, f"leader {node.id} (term {s.term}) lacks committed {entry}")

    def applied(self, node: Node, entry: Entry) -> None:
        """State machine safety: every node applies the same entry at each index."""
        self.require(entry.index == node.applied + 1, f"{node.id} applied {entry.index} "
                     f"after {node.applied}")
        self.commit(entry, node.id)

    def restored(self, node: Node) -> None:
        self.require(node.machine == self.canon_at(node.applied),
                     f"{node.id} restored a wrong machine at {node.applied}")
        self.live_readable(node)

    def live_readable(self, node: Node) -> None:
        """Ra: every live index of the snapshot is still in this node's storage."""
        for i in node.disk.snap.live if node.disk.snap else ():
            self.require(node.disk.log.get(i) == self.committed.get(i),
                         f"{node.id}: live entry {i} lost or wrong")

    def quorum_durable(self) -> None:
        """Every committed entry is on the disks (or snapshots) of a quorum."""
        disks = [n.disk for n in self.sim.nodes.values()]
        for i, entry in self.committed.items():
            have = sum(d.snap_index >= i or (i <= d.last and d.log.get(i) == entry) for d in disks)
            self.require(have >= self.sim.cfg.quorum, f"committed {entry} on {have} disks")

    def full(self) -> None:
        for node in self.sim.nodes.values():
            if node.up:
                self.require(node.machine == self.canon_at(node.applied),
                             f"{node.id}: machine diverged at {node.applied}")
                self.live_readable(node)
        self.quorum_durable()

    def read_served(self, node: Node, ref: Any, index: int) -> None:
        """ReadIndex is linearizable: the read sees every entry committed anywhere before
        it was invoked, and the machine it reads from has applied through its index."""
        _, op_id, _, known = ref
        self.require(index >= known, f"{node.id}: read {op_id} served at {index}, below "
                     f"{known}, committed before it was invoked")
        self.require(node.applied >= index, f"{node.id}: read {op_id} at {index} served "
                     f"before applying it ({node.applied})")
        self.sim.reads_served += 1

    def final(self) -> None:
        self.full()
        for op_id, (command, index) in self.sim.acked.items():
            entry = self.committed.get(index)
            self.require(entry is not None and entry.command == command,
                         f"acknowledged op {op_id} {command} at {index} is not there: {entry}")


# ---- entry points -----------------------------------------------------------------------


OPS = 100  # client operations per seed


def run_seed(seed: int, ops: int = OPS, trace: bool = False) -> Sim:
    sim = Sim(seed, ops=ops, trace=trace)
    sim.execute()
    return sim


def replay(seed: int, ops: int = OPS, tail: int = 80) -> Sim:
    """Re-run one seed with a trace; on failure print the trace's last `tail` lines."""
    sim = Sim(seed, ops=ops, trace=True)
    try:
        sim.execute()
    except BaseException:
        print("\n".join((sim.trace or [])[-tail:]))
        raise
    return sim


SEED_BLOCKS = [range(start, start + 25) for start in range(0, 300, 25)]


@pytest.mark.parametrize("seeds", SEED_BLOCKS, ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_safety_under_faults(seeds: range) -> None:
    for seed in seeds:
        try:
            run_seed(seed)
        except Exception as exc:
            raise AssertionError(f"seed {seed} failed; replay with "
                                 f"`python tests/test_raft_safety.py {seed}`: {exc}") from exc


def test_long_runs() -> None:
    """Fewer seeds, more operations each: more snapshots, installs and compactions."""
    for seed in (1000, 1001, 1002, 1003):
        sim = run_seed(seed, ops=400)
        assert len(sim.check.committed) > 100


def test_replay_is_deterministic() -> None:
    a, b = run_seed(7, trace=True), run_seed(7, trace=True)
    assert a.trace == b.trace and a.steps == b.steps


if __name__ == "__main__":
    replay(int(sys.argv[1]), ops=int(sys.argv[2]) if len(sys.argv) > 2 else OPS)
