"""The checkers accept histories recorded from a real etcd 3.4 (tests/fixtures/, made by
`tests/etcd_history.py`: three concurrent clients of seeded random requests and a watch
stream), and still catch what they must.

The checkers before issue 16 flagged these valid histories: `revisions_monotonic`
counted the reads of a txn branch that did not run (and negative revisions, which read
at head), and judged an ErrFutureRev by any revision the request asked for instead of
the highest; `linearizable` stamped every sub-response of a txn with the txn's revision
(etcd stamps each op with the revision at its point of the txn) and started the store at
revision 0; the watch checker took one event per (revision, key) and prev_kv from the
change just before (etcd changes a key twice in one revision when a txn's delete of
[a, "\\0") does not count as overlapping its put, and its prev_kv is the key at the
revision before). Each test below names the case in the fixtures that tripped them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sediment.actors.kv.types import Range, Txn, TxnResult
from sediment.scenarios import checkers
from sediment.scenarios.checkers import linearizability, revisions
from sediment.scenarios.history import ERR_FUTURE_REV, History, Op, WatchLog, WatchResponse

FIXTURES = Path(__file__).resolve().parent / "fixtures"
NAMES = sorted(p.name for p in FIXTURES.glob("etcd_history_*.json"))


def load(name: str) -> History:
    return History.from_json((FIXTURES / name).read_text())


def test_the_fixtures_are_there() -> None:
    assert len(NAMES) >= 3, NAMES


@pytest.mark.parametrize("name", NAMES)
def test_every_check_accepts_a_real_etcd_history(name: str) -> None:
    h = load(name)
    assert len(h.ops) > 50 and h.watches
    results = checkers.run(h)
    assert [r.status for r in results] == ["ok"] * len(results), "\n".join(
        r.report() for r in results if not r.ok)


def _ranges(ops: tuple[object, ...]) -> list[Range]:
    out: list[Range] = []
    for o in ops:
        if isinstance(o, Range):
            out.append(o)
        elif isinstance(o, Txn):
            out += _ranges((*o.success, *o.failure))
    return out


def test_txn_sub_responses_carry_the_revision_at_their_point() -> None:
    """A txn that read before it wrote: its Range answered the old head, its writes the
    new revision (the old model gave every sub-response the txn's revision)."""
    stamped = [op for name in NAMES for op in load(name).ops
               if isinstance(op.result, TxnResult)
               and len({r.revision for r in op.result.responses
                        if not isinstance(r, TxnResult)}) > 1]
    assert stamped, "no txn in the fixtures stamps its ops differently"
    assert linearizability.check(load(NAMES[0])).ok


def test_an_error_future_rev_is_judged_by_the_highest_revision_asked() -> None:
    """A txn (or read) with one revision the client had seen and one above head fails
    with ErrFutureRev: right, whatever the other revision."""
    found = False
    for name in NAMES:
        h = load(name)
        best: dict[int, int] = {}
        for op in sorted(h.ops, key=lambda o: o.invoke_t):
            asked = [r.revision for r in _ranges((op.args,)) if r.revision > 0]
            seen = best.get(op.client, 0)
            if op.error == ERR_FUTURE_REV and asked and min(asked) <= seen < max(asked):
                found = True
            rev = getattr(op.result, "revision", None)
            if op.outcome == "ok" and isinstance(rev, int):
                best[op.client] = max(seen, rev)
        assert revisions.check(h).ok
    assert found, "no ErrFutureRev with an older revision beside the future one"


def test_reads_that_did_not_run_prove_nothing_about_the_compaction() -> None:
    """A successful txn whose other branch read below the compact revision, and reads at
    a negative revision (head) after a compaction: neither read below it."""
    untaken = negative = False
    for name in NAMES:
        for op in load(name).ops:
            if op.outcome != "ok":
                continue
            reads = _ranges((op.args,))
            negative |= any(r.revision < 0 for r in reads)
            if isinstance(op.args, Txn) and isinstance(op.result, TxnResult):
                other = op.args.failure if op.result.succeeded else op.args.success
                untaken |= any(r.revision > 0 for r in _ranges(other))
    assert untaken and negative


def _served_below(h: History) -> tuple[History, WatchLog]:
    """The history with its first compacted watch served the events below the compact
    revision instead of being canceled (what a store that forgot its compaction does)."""
    w = next(w for w in h.watches if w.end_reason == "compacted" and w.start_revision)
    truth, _ = checkers.watch_guarantees.committed_events(h) or ([], 0)
    below = tuple(e for e in truth
                  if w.start_revision <= e.kv.mod_revision < w.compact_revision
                  and e.kv.key >= w.key)
    assert below
    t = (w.end_t or w.open_t) + 0.001
    served = dataclasses.replace(w, end_t=None, end_reason=None, compact_revision=0,
                                 responses=(WatchResponse(t, below[-1].kv.mod_revision,
                                                          below),))
    return dataclasses.replace(h, watches=tuple(served if x is w else x
                                                for x in h.watches)), served


@pytest.mark.parametrize("name", NAMES)
def test_a_watch_served_events_below_an_established_compaction_is_caught(name: str) -> None:
    h = load(name)
    planted, served = _served_below(h)
    result = revisions.check(planted)
    assert result.status == "violation", result.report()
    assert "instead of being canceled" in result.report()
    assert served in result.evidence
    # Sediment's node-local watches are not judged by it (a lagging node may serve
    # them from its own older compaction): see revisions.check(local_watches=True)
    assert revisions.check(planted, local_watches=True).ok


def test_a_changed_sub_response_revision_is_a_violation() -> None:
    h = load(NAMES[0])
    i, op = next((i, op) for i, op in enumerate(h.ops) if isinstance(op.result, TxnResult)
                 and op.result.responses
                 and not isinstance(op.result.responses[0], TxnResult))
    assert isinstance(op.result, TxnResult)
    first = op.result.responses[0]
    wrong = dataclasses.replace(first, revision=first.revision + 1)  # type: ignore[call-arg]
    bad = Op(op.client, op.kind, op.args, op.invoke_t, op.complete_t, op.outcome,
             dataclasses.replace(op.result, responses=[wrong, *op.result.responses[1:]]))
    tampered = dataclasses.replace(h, ops=(*h.ops[:i], bad, *h.ops[i + 1:]))
    result = linearizability.check(tampered)
    assert result.status == "violation", result.report()
