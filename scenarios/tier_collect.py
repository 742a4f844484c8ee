"""What the runner reads of the block tier after recovery, for the tier's checks (driver
side, through the cluster's own clients).

In this order, so that each value bounds the ones read before it (every one of them
only moves forward):
1. wait, bounded, until the committed flush cursor reaches the final head (the flusher
   catches up once traffic stops);
2. the history reads: a seeded sample of ranges at old revisions and key histories
   (`sample_reads`), through `Client.range(..., revision=R)` / `Client.history(...)`,
   including revisions below the KV's compaction (answered from the blocks) and below
   the blocks' floor (ErrCompacted);
3. every KV member's applied compact revision, and one member's rows above its own;
4. the committed flush cursor, through the metastore's log (read after 3: the hold);
5. the live block index and every row of its blocks (the floor read after 2); a file
   deleted between the index read and the file read (a merge replaced the block and
   its cleanup ran) makes the whole step start again, a bounded number of times; a
   live block still unreadable after that is reported (`TierState.unreadable`);
6. the workers' outcome counts (jobs completed, reports refused, attempts cancelled;
   a killed worker's die with it) and, from the metastore leader's log, how many
   assignments were reassignments (a job handed out again after its lease passed).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

from sediment.actors.blocks import block as blk
from sediment.actors.blocks import merge
from sediment.actors.blocks.errors import BlockError
from sediment.actors.blocks.metastore import (
    ApplyPlan,
    BlocksQuery,
    BlocksResult,
    FlushCursor,
    ReadFlushCursor,
)
from sediment.actors.blocks.shell.names import METASTORE_GROUP
from sediment.actors.kv.errors import ErrCompacted, KvError
from sediment.actors.kv.names import KV_GROUP
from sediment.actors.kv.queries import Events
from sediment.actors.kv.types import ALL_KEYS, Event
from sediment.actors.log.shell.cluster import propose
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Found, Query, ReadEntry
from sediment.runtime.errors import RuntimeErrorBase
from sediment.scenarios.checkers.tier_state import (
    BlockRow,
    HistoryRead,
    HoldSample,
    Row,
    TierState,
)
from sediment.scenarios.traffic import KEY_PREFIX, KEYSPACE_END, key_names
from sediment.wiring.client import Client
from sediment.wiring.cluster import Cluster

RANGE_READS = 8  # at most, per run
KEY_HISTORIES = 3
READ_ATTEMPTS = 3  # per read, while it fails outside the KV
CALL_TIMEOUT = 5.0  # seconds for one log read
SNAPSHOT_ATTEMPTS = 5  # index + files, while a file vanishes under the read
HOT_ATTEMPTS = 5  # while a compaction lands between the status and the query
POLL = 0.25  # seconds between cursor reads while waiting for the flusher
MAX_LOG_READS = 20_000  # metastore entries read for the reassignment count


@dataclass(frozen=True)
class Budget:
    settle: float  # seconds to wait for the flusher to catch up
    timeout: float  # per call or proposal


def collect(cluster: Cluster, seed: int, keys: int, head: int,
            samples: tuple[HoldSample, ...], budget: Budget) -> TierState:
    assert cluster.blocks is not None
    notes: list[str] = []
    cursor = _wait_flushed(cluster, head, budget, notes)
    compacted = max(_kv_compacts(cluster, budget).values(), default=0)
    plan = sample_reads(random.Random(f"sediment-history-{seed}"), _blocks(cluster, budget)[1],
                        compacted, head, key_names(keys))
    reads = tuple(_read(Client(cluster, timeout=budget.timeout), r) for r in plan)
    kv_compacts = _kv_compacts(cluster, budget)
    hot_from, hot = _hot_rows(cluster, head, budget)
    cursor = _cursor(cluster, budget) or cursor
    snapshot = None
    for _ in range(SNAPSHOT_ATTEMPTS):
        snapshot = _snapshot(cluster, budget)
        if snapshot is not None and not snapshot[2]:
            break
        cluster.rt.sleep(POLL)
    if snapshot is None:
        return TierState(reads=reads, samples=samples, head=head, complete=False,
                         notes=(*notes, "the live block index could not be read"))
    rows, result, unreadable = snapshot
    levels = Counter(b.level for b in result.blocks)
    return TierState(
        rows=rows, blocks=len(result.blocks), levels=dict(levels), cursor=cursor,
        compaction_revision=result.compaction_revision,
        floor=merge.history_floor(result.blocks, result.compaction_revision),
        kv_compacts=kv_compacts, hot=hot, hot_from=hot_from, head=head, reads=reads,
        samples=samples, outcomes={**_outcomes(cluster), "reassigned": _reassigned(cluster)},
        unreadable=unreadable, notes=tuple(notes))


def sample_reads(rng: random.Random, floor: int, compacted: int, head: int,
                 keys: tuple[bytes, ...]) -> list[HistoryRead]:
    """The reads to make (unanswered): ranges over the traffic keyspace at revisions
    below the blocks' floor (refused), at it, between it and the KV's compaction (from
    the blocks), at and above the compaction (from the hot store); key histories and one
    keyspace history from a revision the KV compacted (or any) to head."""
    if head < 1:
        return []
    lo = max(floor, 1)
    cold = (lo, compacted - 1) if compacted - 1 >= lo else (lo, head)
    revisions = [lo, *(rng.randint(*cold) for _ in range(3)), compacted - 1, compacted,
                 rng.randint(max(compacted, 1), head)]
    if floor > 1:
        revisions.insert(0, rng.randint(1, floor - 1))
    picked = sorted({r for r in revisions if 1 <= r <= head})[:RANGE_READS]
    out = [HistoryRead("range", r, KEY_PREFIX, KEYSPACE_END) for r in picked]
    for key in sorted(rng.sample(keys, min(KEY_HISTORIES, len(keys)))):
        out.append(HistoryRead("history", rng.randint(*cold), key, None, head))
    out.append(HistoryRead("history", rng.randint(*cold), KEY_PREFIX, KEYSPACE_END, head))
    return out


def _read(kv: Client, r: HistoryRead) -> HistoryRead:
    """`r` made through the KV client, with its answer or error."""
    failure: HistoryRead = r
    for _ in range(READ_ATTEMPTS):
        try:
            if r.kind == "range":
                got = kv.range(r.key, r.range_end, revision=r.revision)
                return HistoryRead(r.kind, r.revision, r.key, r.range_end, r.end,
                                   kvs=tuple(got.kvs))
            events: list[Event] = kv.history(r.key, r.range_end, start_revision=r.revision,
                                             end_revision=r.end)
            return HistoryRead(r.kind, r.revision, r.key, r.range_end, r.end,
                               events=tuple(events))
        except KvError as err:
            compact = err.compact_revision if isinstance(err, ErrCompacted) else 0
            return HistoryRead(r.kind, r.revision, r.key, r.range_end, r.end,
                               error=type(err).__name__, message=str(err)[:200],
                               compact_revision=compact)
        except (RuntimeErrorBase, TimeoutError, BlockError, OSError) as err:
            failure = HistoryRead(r.kind, r.revision, r.key, r.range_end, r.end,
                                  error=type(err).__name__, message=str(err)[:200],
                                  answered=False)
    return failure


def _wait_flushed(cluster: Cluster, head: int, budget: Budget, notes: list[str]) -> int:
    deadline = float(cluster.rt.now()) + budget.settle
    cursor = 0
    while True:
        cursor = _cursor(cluster, budget) or cursor
        if cursor >= head:
            return cursor
        if float(cluster.rt.now()) > deadline:
            notes.append(f"the flush cursor reached {cursor}, not the head {head}, within "
                         f"{budget.settle:g} s of recovery")
            return cursor
        cluster.rt.sleep(POLL)


def _cursor(cluster: Cluster, budget: Budget) -> int:
    """The committed flush cursor, read through the metastore's log (0: no answer)."""
    assert cluster.blocks is not None
    try:
        _, result = propose(cluster.rt, cluster.blocks.spec, ReadFlushCursor(),
                            timeout=budget.timeout)
    except (RuntimeErrorBase, TimeoutError):
        return 0
    return result.through if isinstance(result, FlushCursor) else 0


def _kv_compacts(cluster: Cluster, budget: Budget) -> dict[str, int]:
    out = {}
    for n in cluster.nodes:
        status = cluster.node(n).raft_status()
        if isinstance(status, dict):
            out[n] = int(status.get("compact_revision", 0))
    return out


def _hot_rows(cluster: Cluster, head: int, budget: Budget) -> tuple[int, tuple[Row, ...]]:
    """(the leader's compact revision K, its rows in (K, head]) (or another member's)."""
    leader = cluster.leader()
    order = sorted(cluster.nodes, key=lambda n: n != leader)
    for _ in range(HOT_ATTEMPTS):
        for node in order:
            status = cluster.node(node).raft_status()
            if not isinstance(status, dict):
                continue
            k = int(status.get("compact_revision", 0))
            if k >= head:
                return k, ()
            try:
                got = cluster.rt.call(raft_name(KV_GROUP, node),
                                      Query(Events(k + 1, head, b"\0", ALL_KEYS)),
                                      timeout=budget.timeout)
            except RuntimeErrorBase:
                continue
            if isinstance(got, list):
                return k, tuple((e.kv.mod_revision, e.kv.key,
                                 e.kv.value if e.kind == "put" else None) for e in got)
        cluster.rt.sleep(POLL)
    return head, ()


def _blocks(cluster: Cluster, budget: Budget) -> tuple[BlocksResult | None, int]:
    """The live index and the oldest revision it answers for (0: no answer)."""
    assert cluster.blocks is not None
    try:
        result = cluster.blocks.client(budget.timeout).query(BlocksQuery())
    except (RuntimeErrorBase, TimeoutError):
        return None, 0
    if not isinstance(result, BlocksResult):
        return None, 0
    return result, merge.history_floor(result.blocks, result.compaction_revision)


def _snapshot(cluster: Cluster, budget: Budget) -> tuple[
        tuple[BlockRow, ...], BlocksResult, tuple[str, ...]] | None:
    """The live index, the rows of its blocks, and the blocks that could not be read."""
    assert cluster.blocks is not None
    result, _ = _blocks(cluster, budget)
    if result is None:
        return None
    rows: list[BlockRow] = []
    unreadable: list[str] = []
    for meta in result.blocks:
        try:
            table = blk.read_block(cluster.blocks.root, meta)
        except (BlockError, OSError) as err:
            unreadable.append(f"{meta.id}: {type(err).__name__}: {err}"[:200])
            continue
        rows += [BlockRow(r.revision, r.key, r.value, meta.id) for r in blk.table_rows(table)]
    return tuple(rows), result, tuple(unreadable)


def _outcomes(cluster: Cluster) -> dict[str, int]:
    assert cluster.blocks is not None
    total: Counter[str] = Counter()
    for pid in cluster.blocks.workers():
        status = cluster.blocks.worker_status(pid)
        counts: Any = status.get("counts", {}) if isinstance(status, dict) else {}
        total.update({str(k): int(v) for k, v in counts.items()})
    return dict(total)


def _reassigned(cluster: Cluster) -> int:
    """Assignments of a job that failed before (its lease passed) in the plans of the
    metastore leader's log still in memory (evidence for the report, not a check: a
    plan refused at apply is counted too)."""
    assert cluster.blocks is not None
    leader = cluster.blocks.leader()
    if leader is None:
        return 0
    status = cluster.blocks.node(leader).raft_status()
    if not isinstance(status, dict):
        return 0
    last = int(status.get("last_index", 0))
    first = max(int(status.get("snapshot_index", 0)) + 1, last - MAX_LOG_READS + 1)
    count = 0
    for index in range(first, last + 1):
        try:
            got = cluster.rt.call(raft_name(METASTORE_GROUP, leader), ReadEntry(index),
                                  timeout=CALL_TIMEOUT)
        except RuntimeErrorBase:
            continue
        command = got.value if isinstance(got, Found) else None
        if isinstance(command, ApplyPlan):
            count += sum(1 for a in command.update.assigned_jobs if a.state.failures > 0)
    return count


__all__ = ["Budget", "collect", "sample_reads"]
