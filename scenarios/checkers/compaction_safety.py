"""No compaction the cluster ran by itself passed a live watch (Netsy's promise).

Sediment has two kinds of compaction. A client's Compact follows etcd: it may go below
a live watch, which is then canceled as compacted — allowed, and left to the watch
checks. The compaction coordinator (Netsy's protocol: ask every node for its lowest
watch revision, raise the admission floor, compact at the minimum - 1) promises more:
it never compacts history a live watch still needs. This check holds it to that, from
two kinds of records:

- positions: a compaction the runner recorded with the next revision each live watch
  needed at that moment (`CompactionEvent.positions`, read from the servers): a watch
  needing a revision at or below the compaction revision was passed (the rule of
  `watch_oracle`'s `CompactionRecord`, reused);
- cancels: a watch that ended "compacted" at revision C, where C is not the target of any
  client Compact (the coordinator's own Compacts, recorded as ops of CLUSTER_CLIENT, are
  not client ones), and no compaction to at least the watch's start could have taken effect
  before the watch was created (its `t_start` <= the watch's creation; 0 = unknown, which
  always could). Such a watch was admitted, live, and later passed. The runner should
  record a cluster compaction's `t_start` as the start of its cycle (the admission floor
  is raised before the Compact commits).

A watch refused at admission (never created) was never live, so no compaction passed
it: a node refuses a start at or below its admission floor, and the floor of a notice
that is then refused and rolled back refused it just the same (slow-watcher, sim seed
34: the cycle to 352 was refused by another node, a watch from 336 was refused while its
floor stood, and a later cycle compacted past 352).
"""

from __future__ import annotations

from collections.abc import Iterator

from sediment.actors.kv.types import Compact
from sediment.scenarios.checkers.result import CheckResult, Evidence, passed, violated
from sediment.scenarios.checkers.watch_oracle import CompactionRecord
from sediment.scenarios.checkers.watch_oracle import check as check_watches
from sediment.scenarios.history import CLUSTER_CLIENT, History, WatchLog

NAME = "compaction_safe"
MAX_DETAILS = 10


def _by_positions(history: History) -> Iterator[tuple[str, tuple[Evidence, ...]]]:
    by_handle = {w.handle: w for w in history.watches}
    for c in history.compactions:
        if c.positions is None or c.source == "client":
            continue
        for v in check_watches([], 0, [], [CompactionRecord(c.revision, c.positions)]):
            w = by_handle.get(v.watch_id) if v.watch_id is not None else None
            yield (f"watch {v.watch_id}: {v.message}", (c, *([w] if w else [])))


def _client_targets(history: History) -> set[int]:
    return {op.args.revision for op in history.ops
            if isinstance(op.args, Compact) and op.outcome != "fail"
            and op.client != CLUSTER_CLIENT}


def _by_cancels(history: History) -> Iterator[tuple[str, tuple[Evidence, ...]]]:
    client = _client_targets(history)
    events = history.compaction_events()
    for w in history.watches:
        if w.end_reason != "compacted" or w.compact_revision in client:
            continue
        start, created = w.start, w.created_t
        if start is None or created is None:  # refused at admission: never live
            continue
        if any(c.revision >= start and c.t_start <= created for c in events):
            continue  # it may have been created below the floor: etcd cancels it at once
        culprits = [c for c in events if c.revision == w.compact_revision]
        yield (_cancel_text(w, start, created), (w, *culprits))


def _cancel_text(w: WatchLog, start: int, created: float) -> str:
    return (f"watch {w.handle} from revision {start}, live since {created:.3f}, was canceled "
            f"as compacted at {w.compact_revision} by no client Compact")


def check(history: History) -> CheckResult:
    found = [*_by_positions(history), *_by_cancels(history)]
    if not found:
        cluster = sum(1 for c in history.compaction_events() if c.source != "client")
        return passed(NAME, f"{cluster} cluster compactions, {len(history.watches)} watches")
    message, evidence = found[0]
    details = [m for m, _ in found[1:MAX_DETAILS]]
    if len(found) > MAX_DETAILS:
        details.append(f"... {len(found) - MAX_DETAILS} more")
    return violated(NAME, f"a compaction passed a live watch: {message}", evidence, details)


__all__ = ["NAME", "check"]
