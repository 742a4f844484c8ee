"""The recorder of a tables cluster's history, for `checkers/catalog_compaction.py`.

The Python API feeds it as it runs: every DDL answer (a version and its activation),
every RW transaction (begin time, the real time it began and ended, the writes the
node acknowledged, its outcome and commit time), every read-only read (its timestamp,
cell and answer). Compactions come from the coordinators (`poll`): each compacted
iteration at the time it was *proposed* (no later than it applied, so the check never
misses a pin that ended between the two), and, for a compaction whose coordinator died
before it heard the answer, the snapshot version seen moving, at the time it was seen.

Index builds pin the version that registered them: from just before the
`create_index` call (the index cannot exist earlier) until the driver first proposed
`MakeIndexAvailable` (it cannot be AVAILABLE earlier) or `drop_index` was called.
Rebalances pin the version they were planned at (`poll_rebalances`). Partition members
pin the lowest catalog version among the entries they applied since their last flush
(`replay_events`, from the machines' replay-floor records).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sediment.actors.catalog.descriptors import ZonePartition
from sediment.actors.catalog.hlc import MIN, HybridTimestamp
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Query
from sediment.actors.tables.names import partition_group
from sediment.actors.tables.partition_machine import ReplayEventsQuery
from sediment.actors.tables.recorded_history import (
    CatalogCompacted,
    CatalogHistory,
    Pin,
    ReadRecord,
    TxRecord,
    VersionActivated,
    replay_pins,
)
from sediment.runtime.errors import CallError


@dataclass
class _Tx:
    begin_ts: HybridTimestamp
    start: float
    end: float | None = None
    outcome: str = "unknown"
    commit_ts: HybridTimestamp | None = None
    writes: dict[tuple[int, tuple[Any, ...]], Any] = field(default_factory=dict)


@dataclass
class Recorder:
    versions: dict[int, HybridTimestamp] = field(default_factory=lambda: {0: MIN})
    txs: dict[str, _Tx] = field(default_factory=dict)
    reads: list[ReadRecord] = field(default_factory=list)
    compactions: dict[int, float] = field(default_factory=dict)
    index_pins: dict[str, list[Any]] = field(default_factory=dict)  # [version, start, end]
    pins: list[Pin] = field(default_factory=list)  # pins from other sources
    # (group, planned at) -> [version, start, end]
    rebalance_pins: dict[tuple[str, float], list[Any]] = field(default_factory=dict)
    # partition member -> its replay-floor record: (at, member, "apply"/"flush", version)
    replay: dict[str, list[tuple[float, str, Any, int]]] = field(default_factory=dict)
    replay_seen: dict[str, tuple[float, int]] = field(default_factory=dict)  # incarnation, seq
    replay_alive: dict[str, float] = field(default_factory=dict)  # last time it answered
    replay_gone: dict[str, float] = field(default_factory=dict)

    def replay_events(self, member: str, incarnation: float,
                      events: list[tuple[int, float, str, int]], at: float) -> int:
        """A partition member's replay-floor record since the last poll; the seq to ask
        from next. Across a restart, the old incarnation's pin ends when it last
        answered: it may have flushed after that, unseen (a pin kept open to the restart
        made the checker report violations that were not, scenario
        tables-coordinator-killed-mid-compaction seed 0); an entry it had not flushed is
        replayed after the restart and pins again from then. So the record can miss a
        violation (while the member is down), never invent one."""
        seen_inc, seen_seq = self.replay_seen.get(member, (incarnation, 0))
        since = seen_seq if seen_inc == incarnation else 0
        if seen_inc != incarnation and member in self.replay_alive:
            # restarted: what the old incarnation did after its last answer is lost (a
            # flush then would end its pin); its pin ends at that answer, and what the
            # new one replays from its last flush is in its own record
            self.replay.setdefault(member, []).append(
                (self.replay_alive[member], member, "flush", 0))
        for seq, when, kind, version in events:
            if seq > since:
                self.replay.setdefault(member, []).append((when, member, kind, version))
                since = seq
        self.replay_seen[member] = (incarnation, since)
        # it answered after its newest event, whatever the poll's own clock said
        self.replay_alive[member] = max([at, *(when for _, when, _, _ in events)])
        self.replay_gone.pop(member, None)
        return since

    def replay_member_gone(self, member: str) -> None:
        """The member was stopped for good (its replica moved away, its zone dropped):
        its log is never replayed again. Its pin ends no later than when it last
        answered (an under-estimate: the check can miss, never invent, a violation)."""
        if member in self.replay_alive:
            self.replay_gone[member] = self.replay_alive[member]


    def poll_rebalances(self, driver: dict[str, Any] | None, at: float) -> None:
        """A rebalance pins the catalog version it was planned at, from when the driver
        planned it (before its pending record) until the driver first proposed its
        stable record, or, for one that failed, until the driver saw it end."""
        for r in [*(driver or {}).get("running", ()), *(driver or {}).get("finished", ())]:
            key = (r["group"], r["planned_at"])
            pin = self.rebalance_pins.setdefault(key, [r["catalog_version"], r["planned_at"],
                                                       None])
            end = r.get("recorded_at")
            if end is None and r.get("state") not in (None, "planning", "running"):
                end = r.get("ended_at", at)
            if end is not None:
                pin[2] = end if pin[2] is None else min(pin[2], end)

    def index_registered(self, name: str, version: int, at: float) -> None:
        self.index_pins[name] = [version, at, None]

    def index_dropped(self, name: str, at: float) -> None:
        pin = self.index_pins.get(name)
        if pin is not None and pin[2] is None:
            pin[2] = at

    def poll_indexes(self, driver: dict[str, Any] | None) -> None:
        """When the index driver first proposed each index's AVAILABLE status."""
        for b in [*(driver or {}).get("builds", ()), *(driver or {}).get("finished", ())]:
            pin = self.index_pins.get(b["name"])
            proposed = b.get("available_proposed_at")
            if pin is not None and proposed is not None:
                pin[2] = proposed if pin[2] is None else min(pin[2], proposed)

    def version(self, version: int, activation: HybridTimestamp) -> None:
        self.versions[version] = activation

    def begin(self, tx_id: str, begin_ts: HybridTimestamp, at: float) -> None:
        self.txs[tx_id] = _Tx(begin_ts, at)

    def write(self, tx_id: str, cell: tuple[int, tuple[Any, ...]] | None, row: Any) -> None:
        if cell is not None and tx_id in self.txs:
            self.txs[tx_id].writes[cell] = row

    def end(self, tx_id: str, outcome: str, commit_ts: HybridTimestamp | None,
            at: float) -> None:
        tx = self.txs.get(tx_id)
        if tx is not None:
            tx.outcome, tx.commit_ts, tx.end = outcome, commit_ts, at

    def abandon(self, node: str, at: float) -> None:
        """The node died: the transactions it coordinated and had not ended are
        abandoned (no one runs them any more; recovery decides their outcome), so
        their pins end now, as the pure simulation records a crash."""
        for tx_id, tx in self.txs.items():
            if tx_id.startswith(f"{node}:") and tx.end is None:
                tx.end = at

    def read(self, ts: HybridTimestamp, cell: tuple[int, tuple[Any, ...]], value: Any,
             at: float) -> None:
        self.reads.append(ReadRecord(ts, cell, value, at))

    def poll(self, coordinator: dict[str, Any] | None, earliest_version: int,
             at: float) -> None:
        """What the current coordinator reports, and the snapshot version now."""
        for o in (coordinator or {}).get("outcomes", ()):
            if o["outcome"] == "compacted" and o["version"] is not None:
                when = o["proposed_at"] if o["proposed_at"] is not None else o["at"]
                self.compactions[o["version"]] = min(when, self.compactions.get(
                    o["version"], when))
        if earliest_version > max(self.compactions, default=0):
            self.compactions[earliest_version] = at

    def history(self) -> CatalogHistory:
        versions = tuple(VersionActivated(v, a) for v, a in sorted(self.versions.items()))
        compactions = tuple(CatalogCompacted(v, at) for v, at in sorted(self.compactions.items()))
        txs = tuple(TxRecord(tx_id, t.begin_ts, t.start, t.end,
                             t.outcome,  # type: ignore[arg-type]
                             t.commit_ts, dict(t.writes))
                    for tx_id, t in self.txs.items())
        events = sorted((e for member, es in self.replay.items() for e in es
                         if member not in self.replay_gone or e[0] <= self.replay_gone[member]),
                        key=lambda e: e[0])
        events += [(at, member, "flush", 0) for member, at in sorted(self.replay_gone.items())]
        events.sort(key=lambda e: e[0])
        pins = (*self.pins, *replay_pins(events),
                *(Pin("index_build", f"index:{name}", v, start, end)
                  for name, (v, start, end) in sorted(self.index_pins.items())),
                *(Pin("rebalance", group, v, start, end)
                  for (group, _), (v, start, end) in sorted(self.rebalance_pins.items())))
        return CatalogHistory(versions, compactions, pins, txs, tuple(self.reads))


def poll_replay(rt: Any, recorder: Recorder, assignments: Mapping[ZonePartition, Any],
                nodes: tuple[str, ...], at: float) -> None:
    """Ask every partition member (of the groups assigned now, and every member seen
    before) for its replay-floor record since the last poll. A member that does not
    answer and that no assignment names any more is gone for good."""
    assigned = {f"{partition_group(g)}@{n}" for g, ns in assignments.items() for n in ns}
    members = {f"{partition_group(g)}@{n}" for g in assignments for n in nodes}
    for member in sorted(members | set(recorder.replay_seen)):
        group, node = member.split("@")
        seen = recorder.replay_seen.get(member)
        try:
            inc, events = rt.call(raft_name(group, node),
                                  Query(ReplayEventsQuery(seen[1] if seen else 0)),
                                  timeout=5)
            if seen is not None and inc != seen[0] and seen[1]:  # restarted: all of it
                inc, events = rt.call(raft_name(group, node), Query(ReplayEventsQuery(0)),
                                      timeout=5)
        except CallError:
            if member not in assigned:
                recorder.replay_member_gone(member)
            continue
        recorder.replay_events(member, inc, events, at)


__all__ = ["Recorder", "poll_replay"]
