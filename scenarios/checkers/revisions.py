"""Revisions never go backwards (etcd #17780: the revision decreased after a crash during
compaction; #15271: a watch travelled back in time after a partition).

Rules, each with the operations that break it:
- client: the header revisions a client gets never decrease (a client runs one
  operation at a time), so a reader never sees a head below a revision it already had
  acknowledged — and an ErrFutureRev is wrong when no revision the request asked for
  (in either branch of a txn) is above one the client already saw;
- watch: a watch's response headers and event revisions never decrease;
- compact: the compact revision never decreases in real time. It is observed by a
  successful Compact (at least r after it), an ErrCompacted (exactly its revision,
  inside the call), a watch canceled as compacted (not a node-local one: see `check`),
  and a successful read at a past
  revision (the compact revision was at most that revision, inside the call). Once a
  compact revision c is established, a later call (invoked after) must not see a smaller
  one, a read below c must not succeed (the reads that ran: a txn's other branch did
  not), a Compact to c or below must not succeed, no header may be below c (head >=
  compact revision), and a watch opened later from below c is canceled, never served
  an event below c (etcd cancels it with the compact revision).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass

from sediment.actors.kv.types import Compact, Range, Txn, TxnResult
from sediment.scenarios.checkers.result import CheckResult, Evidence, passed, violated
from sediment.scenarios.history import (
    ERR_COMPACTED,
    ERR_FUTURE_REV,
    TIER_CLIENT,
    History,
    Op,
)

NAME = "revisions_monotonic"
MAX_DETAILS = 10


@dataclass(frozen=True)
class Problem:
    rule: str
    message: str
    evidence: tuple[Evidence, ...]


def _header(op: Op) -> int | None:
    if op.outcome != "ok":
        return None
    rev = getattr(op.result, "revision", None)
    return rev if isinstance(rev, int) else None


def _read_revisions(op: Op) -> list[int]:
    """The past revisions an op that succeeded read at: a Range's, or those of the
    Ranges on the txn's path (the branch each txn ran, from its result; the other
    branch's reads never ran). A revision <= 0 reads at head (etcd), so it is none."""
    r, res = op.args, op.result
    if isinstance(r, Range):
        return [r.revision] if r.revision > 0 else []
    if isinstance(r, Txn) and isinstance(res, TxnResult):
        return _path_reads(r, res)
    return []


def _path_reads(t: Txn, res: TxnResult) -> list[int]:
    out = []
    for o, got in zip(t.success if res.succeeded else t.failure, res.responses, strict=False):
        if isinstance(o, Range) and o.revision > 0:
            out.append(o.revision)
        elif isinstance(o, Txn) and isinstance(got, TxnResult):
            out += _path_reads(o, got)
    return out


def _asked_revisions(req: object) -> list[int]:
    """Every revision a request asked for (a Compact's; every Range of both branches of
    every txn: which of them ran is unknown when the request failed)."""
    if isinstance(req, Range | Compact):
        return [req.revision] if req.revision > 0 else []
    if isinstance(req, Txn):
        return [r for o in (*req.success, *req.failure) for r in _asked_revisions(o)]
    return []


def _client_order(op: Op) -> tuple[float, float, int]:
    """A client's operations in the order it ran them. The tier's lane (TIER_CLIENT: the
    branch tier's many processes, taken from the committed log) is in log order only:
    its completion times are when the log's reader saw each entry, and on Ray an entry
    can be seen before an older one (found on Ray: every branch scenario's tier lane
    "saw revision 8, then header 6", entries seen 2 ms apart out of order)."""
    if op.client == TIER_CLIENT:
        return (op.invoke_t, 0.0, op.index or 0)
    return (op.invoke_t, op.complete_t or 0.0, op.index or 0)


def _clients(history: History) -> Iterator[Problem]:
    best: dict[int, tuple[int, Op]] = {}  # client -> highest header seen, from which op
    # ties (the cluster's own operations all start with the run) in completion, then
    # log order: one client's operations never overlap, the cluster's are in log order
    for op in sorted(history.ops, key=_client_order):
        seen = best.get(op.client)
        if seen is not None:
            rev, where = seen
            h = _header(op)
            if h is not None and h < rev:
                yield Problem("client", f"c{op.client} saw revision {rev}, then header {h}",
                              (where, op))
            asked = _asked_revisions(op.args)
            # ErrFutureRev is wrong only if no revision the request could have read at is
            # above what the client had seen (a txn's other reads may be older: fine)
            if op.error == ERR_FUTURE_REV and (not asked or max(asked) <= rev):
                shown = f"revision {max(asked)}" if asked else "no past revision"
                yield Problem("client", f"c{op.client} saw revision {rev}, then ErrFutureRev "
                              f"for {shown}", (where, op))
        h = _header(op)
        if h is not None and (seen is None or h > seen[0]):
            best[op.client] = (h, op)


def _watches(history: History) -> Iterator[Problem]:
    for w in history.watches:
        header, event = 0, 0
        for i, r in enumerate(w.responses):
            if r.revision < header:
                yield Problem("watch", f"watch {w.handle} response {i}: header {r.revision} "
                              f"after {header}", (w,))
            header = max(header, r.revision)
            for e in r.events:
                rev = e.kv.mod_revision
                if rev < event:
                    yield Problem("watch", f"watch {w.handle} response {i}: event at {rev} "
                                  f"after {event}", (w,))
                event = max(event, rev)


@dataclass(frozen=True)
class _Fact:
    """The compact revision was >= `at_least` from time `known` on (source: why)."""

    known: float
    at_least: int
    source: Evidence


def _facts(history: History, local_watches: bool = False) -> list[_Fact]:
    """What proves the compact revision was at least some value, and from when. A cancel
    of a node-local watch proves nothing about the log: a node refuses watches at its
    admission floor, which a compaction notice raises before the Compact is proposed
    (Netsy), and which stays up when that proposal is lost in a leader change."""
    out = []
    for op in history.ops:
        if op.outcome == "ok" and isinstance(op.args, Compact):
            out.append(_Fact(op.end, op.args.revision, op))
        elif op.error == ERR_COMPACTED:
            rev = getattr(op.result, "compact_revision", 0)
            if rev:
                out.append(_Fact(op.end, rev, op))
    for w in history.watches if not local_watches else ():
        if w.end_reason == "compacted" and w.compact_revision and w.end_t is not None:
            out.append(_Fact(w.end_t, w.compact_revision, w))
    return sorted(out, key=lambda f: f.known)


def _compact(history: History, local_watches: bool = False) -> Iterator[Problem]:
    facts = _facts(history, local_watches)
    times = [f.known for f in facts]
    # best[i]: the fact with the highest revision among facts[: i + 1]
    best: list[_Fact] = []
    for f in facts:
        best.append(f if not best or f.at_least > best[-1].at_least else best[-1])

    def established(t: float) -> _Fact | None:
        i = bisect.bisect_left(times, t)  # facts known strictly before t
        return best[i - 1] if i else None

    for op in history.ops:
        fact = established(op.invoke_t)
        if fact is None:
            continue
        c = fact.at_least
        if op.error == ERR_COMPACTED:
            seen = getattr(op.result, "compact_revision", 0)
            if seen and seen < c:
                yield Problem("compact", f"compact revision {c} was established, then "
                              f"ErrCompacted reported {seen}", (fact.source, op))
        if op.outcome != "ok":
            continue
        below = [r for r in _read_revisions(op) if r < c]
        if below:
            yield Problem("compact", f"compact revision {c} was established, then a read at "
                          f"{min(below)} succeeded", (fact.source, op))
        if isinstance(op.args, Compact) and op.args.revision <= c:
            yield Problem("compact", f"compact revision {c} was established, then Compact "
                          f"{op.args.revision} succeeded", (fact.source, op))
        h = _header(op)
        if h is not None and h < c:
            yield Problem("compact", f"compact revision {c} was established, then header {h} "
                          "is below it", (fact.source, op))
    for w in history.watches if not local_watches else ():
        fact = established(w.open_t)
        if fact is not None and 0 < w.start_revision < fact.at_least:
            below = [e.kv.mod_revision for r in w.responses for e in r.events
                     if e.kv.mod_revision < fact.at_least]
            if below:
                yield Problem("compact", f"compact revision {fact.at_least} was established, "
                              f"then watch {w.handle} opened from {w.start_revision} was "
                              f"served an event at {min(below)} instead of being canceled",
                              (fact.source, w))
        if fact is not None and w.end_reason == "compacted" and 0 < w.compact_revision < (
            fact.at_least
        ):
            yield Problem("compact", f"compact revision {fact.at_least} was established, then "
                          f"watch {w.handle} was canceled at {w.compact_revision}",
                          (fact.source, w))


def problems(history: History, local_watches: bool = False) -> list[Problem]:
    return [*_clients(history), *_watches(history), *_compact(history, local_watches)]


def check(history: History, local_watches: bool = False) -> CheckResult:
    """`local_watches`: each watch is served by one node from its own state (Sediment's
    watchers, like a serializable read) and admitted against that node's admission
    floor. A cancel is then judged against nothing and establishes nothing: a lagging
    node cancels at its own older compact revision, and a node whose floor a notice
    raised cancels at a revision the log may not reach for seconds (the notice's
    proposal lost in a leader change, its floor kept up as Netsy requires), while
    clients may still read below it and Compact at it; and the start of the cluster's
    own Compact is only estimated from monitor samples, possibly after such a cancel.
    Conservative, not a violation: the watch loses no event, the reader is told to
    start later than it had to."""
    found = problems(history, local_watches)
    if not found:
        return passed(NAME)
    first = found[0]
    details = [f"{p.rule}: {p.message}" for p in found[1:MAX_DETAILS]]
    if len(found) > MAX_DETAILS:
        details.append(f"... {len(found) - MAX_DETAILS} more")
    return violated(NAME, f"{first.rule}: {first.message}", first.evidence, details)


__all__ = ["NAME", "Problem", "check", "problems"]
