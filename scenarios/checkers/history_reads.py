"""Reads at old revisions answer what the committed log says (the KV's history through
its block tier).

The runner reads, after recovery, a sample of ranges at old revisions and key histories
from old revisions through the KV client (`Client.range(..., revision=R)`,
`Client.history(...)`), including revisions the hot store compacted: those are answered
from the hot store's row skeleton with the values taken from the blocks. Each answer
must equal the one the committed log gives (`truth`, replayed here): the same keys,
values, create/mod revisions and versions for a range; the same events (kind, key,
value, revisions, version) for a history. ErrCompacted is right only below the oldest
revision the blocks answer for (`TierState.floor`, read after the reads: it only rises).
Any other KV error (ErrHistoryUnavailable: a value in no block) is a violation. A read
that failed outside the KV (a timeout, no leader) proves nothing: it is noted, and if
no read answered, the check is unknown.
"""

from __future__ import annotations

from collections.abc import Sequence

from sediment.actors.kv.types import Event, KeyValue, key_in_range
from sediment.scenarios.checkers.result import CheckResult, passed, unknown, violated
from sediment.scenarios.checkers.tier_state import HistoryRead, TierState

NAME = "history_reads"
MAX_DETAILS = 10


def expected_range(truth: Sequence[Event], read: HistoryRead) -> list[KeyValue]:
    """The keys of [key, range_end) that exist at the read's revision, by key."""
    latest: dict[bytes, Event] = {}
    for e in truth:
        if e.kv.mod_revision <= read.revision and key_in_range(e.kv.key, read.key,
                                                               read.range_end):
            latest[e.kv.key] = e
    return [latest[k].kv for k in sorted(latest) if latest[k].kind == "put"]


def expected_history(truth: Sequence[Event], read: HistoryRead) -> list[Event]:
    """The events of [key, range_end) with revision <= end (default every one), from the
    read's revision, by revision then key, without prev_kv."""
    end = read.end if read.end is not None else max((e.kv.mod_revision for e in truth),
                                                     default=0)
    out = [Event(e.kind, e.kv) for e in truth
           if read.revision <= e.kv.mod_revision <= end
           and key_in_range(e.kv.key, read.key, read.range_end)]
    return sorted(out, key=lambda e: (e.kv.mod_revision, e.kv.key))


def _judge(truth: Sequence[Event], read: HistoryRead, floor: int) -> str | None:
    """Why the read's answer is wrong, or None."""
    if read.error == "ErrCompacted":
        if read.revision < floor:
            return None
        return (f"{read.what()}: refused as compacted (at {read.compact_revision}), but the "
                f"blocks answer from revision {floor}")
    if read.error is not None:
        return read.describe()[:300]
    if read.kind == "range":
        want = expected_range(truth, read)
        got = list(read.kvs)
        if got == want:
            return None
        diff = _first_difference([(k.key, k) for k in got], [(k.key, k) for k in want])
        return f"{read.what()}: {diff}"
    want_events = expected_history(truth, read)
    got_events = [Event(e.kind, e.kv) for e in read.events]
    if got_events == want_events:
        return None
    diff = _first_difference([((e.kv.mod_revision, e.kv.key), e) for e in got_events],
                             [((e.kv.mod_revision, e.kv.key), e) for e in want_events])
    return f"{read.what()}: {diff}"


def _first_difference(got: list[tuple[object, object]],
                      want: list[tuple[object, object]]) -> str:
    g, w = dict(got), dict(want)
    for k in sorted(g.keys() | w.keys(), key=repr):
        if k not in g:
            return f"missing {w[k]!r:.160}"
        if k not in w:
            return f"never committed: {g[k]!r:.160}"
        if g[k] != w[k]:
            return f"got {g[k]!r:.160}, the log says {w[k]!r:.160}"
    return f"order differs: got {[k for k, _ in got]!r:.160}"


def check(truth: Sequence[Event], tier: TierState | None) -> CheckResult:
    if tier is None:
        return unknown(NAME, "the run collected no block tier state")
    answered = [r for r in tier.reads if r.answered]
    failed = [r for r in tier.reads if not r.answered]
    notes = [f"{r.describe()} failed: not judged" for r in failed[:MAX_DETAILS]]
    if not answered:
        return unknown(NAME, "no history read was answered", *notes)
    found = [why for r in answered if (why := _judge(truth, r, tier.floor)) is not None]
    cold = sum(1 for r in answered if r.error is None and r.revision <= tier.hot_from)
    refused = sum(1 for r in answered if r.error == "ErrCompacted")
    summary = (f"{len(answered)} reads answered ({cold} below the KV's compaction "
               f"{tier.hot_from}, from the blocks; {refused} refused as compacted, the "
               f"blocks' floor being {tier.floor})")
    if not found:
        return passed(NAME, summary, *notes)
    return violated(NAME, found[0], details=[*found[1:MAX_DETAILS], summary, *notes])


__all__ = ["NAME", "check", "expected_history", "expected_range"]
