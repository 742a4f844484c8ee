"""Linearizability of the KV history against etcd's model (Wing–Gong–Lowe, porcupine).

Which operations take part:
- `ok` operations, with their results;
- `fail` operations that failed with ErrCompacted or ErrFutureRev: the model must agree
  that the error was right at some point inside the call (any other definite error means
  the request did not take effect and is left out);
- `info` operations: writes (put, delete, txn, compact) may take effect at any point after
  their invocation, or never, with any result (completion at +inf, as porcupine and
  etcd's robustness suite do); reads are left out (they change nothing).

Two passes (see `key_model.py` for why a revision makes etcd's history not
P-compositional as a whole):
1. per key: each key's projection (its value and version, without revisions) is checked
   on its own. Cheap, sound (a failing key is a real violation), and its evidence is
   about one key. Multi-key operations (ranges, txns) take part in the projection of
   every key they touch; compacts and past-revision reads do not (they change no value).
2. the whole history, against the exact model: revisions, headers, compaction,
   ErrCompacted / ErrFutureRev, txn compares on revisions, multi-key atomicity.
Both searches are bounded (`budget` steps; at most PER_KEY_BUDGET for a key, which
then only leaves the decision to the whole pass); past it the result is "unknown".

Revisions are etcd's (the model numbers them: one per request that changes something).
An operation of a Sediment run may also carry the raft `index` of its entry (`Op.index`):
the model then takes indexed operations in log order only (see `kv_model.py`); a
history recorded from a real etcd has no index.

Indeterminate operations stay candidates forever, so the whole pass uses what revisions
prove to keep them in check, without losing any linearization that exists (each rule is
argued where it is defined): an indeterminate write may only raise the head up to the
next revision an acknowledged write claimed (`head_cap`); runs of indeterminate ops are
no longer than the longest run of unclaimed revisions plus one Compact
(`max_weak_run`); an indeterminate Compact is placed only right before an ErrCompacted
answer, and left out when there is none. Indeterminate writes whose value some read
returned are tried first.

A violation comes with evidence (`wgl.minimal_failure`): the first operation whose
result cannot be explained, the operations whose results conflict with it, and the ones
that count only because they took effect when they ran; whatever every other operation
did, these cannot be linearized together (`lin_evidence.py`). A read of a value no
operation ever wrote is reported directly. When the shrink runs out of steps the evidence
is marked so and cut to the operations just before the culprit.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from sediment.actors.kv.types import (
    ALL_KEYS,
    Compact,
    DeleteRange,
    DeleteResult,
    KeyValue,
    Put,
    PutResult,
    Range,
    RangeResult,
    Txn,
    TxnResult,
)
from sediment.scenarios.checkers import key_model
from sediment.scenarios.checkers.kv_model import (
    FIRST_REVISION,
    OUT_OF_ORDER,
    KvModel,
    KvState,
    matches,
)
from sediment.scenarios.checkers.lin_evidence import (
    NAME,
    SHRINK_BUDGET,
    SHRINK_TOTAL,
    Spend,
    evidence,
    key_text,
    result_text,
)
from sediment.scenarios.checkers.result import CheckResult, passed, unknown, violated
from sediment.scenarios.checkers.wgl import (
    DEFAULT_BUDGET,
    DEFAULT_MAX_TESTS,
    Call,
    search,
)
from sediment.scenarios.history import (
    ERR_COMPACTED,
    ERR_FUTURE_REV,
    Failure,
    History,
    Op,
    show,
)

CHECKED_ERRORS = (ERR_COMPACTED, ERR_FUTURE_REV)
PER_KEY_BUDGET = 200_000  # steps per key: the per-key pass is a shortcut, not the verdict


@dataclass(frozen=True)
class Start:
    """The store when the run began (default: empty, at etcd's first revision 1)."""

    head: int = FIRST_REVISION
    kvs: tuple[KeyValue, ...] = ()

    @classmethod
    def of(cls, read: RangeResult) -> Start:
        return cls(read.revision, tuple(read.kvs))


def participating(history: History) -> list[tuple[int, Op, bool]]:
    """(index, op, weak) for every operation the check uses (see the module doc)."""
    out = []
    for i, op in enumerate(history.ops):
        if op.outcome == "ok":
            out.append((i, op, False))
        elif op.outcome == "fail":
            if op.error in CHECKED_ERRORS:
                out.append((i, op, False))
        elif not isinstance(op.args, Range):
            out.append((i, op, True))
    return out


def check(
    history: History,
    *,
    start: Start | None = None,
    budget: int = DEFAULT_BUDGET,
    max_tests: int = DEFAULT_MAX_TESTS,
    per_key: bool = True,
) -> CheckResult:
    """Is the KV history linearizable? (See the module doc.)"""
    start = start or Start()
    ops = participating(history)
    if not ops:
        return passed(NAME, "no operations")
    notes: list[str] = []
    if per_key:
        result = _per_key(history, ops, start, budget, max_tests, notes)
        if result is not None:
            return result
    return _whole(history, ops, start, budget, max_tests, notes)


# ---- the whole history -----------------------------------------------------------------


def _whole(
    history: History,
    ops: list[tuple[int, Op, bool]],
    start: Start,
    budget: int,
    max_tests: int,
    notes: list[str],
) -> CheckResult:
    model = KvModel.for_requests(op.args for _, op, _ in ops)
    init = model.initial(start.head, start.kvs)
    by_index = {i: op for i, op, _ in ops}

    cap = head_cap(ops, start)

    def step(s: KvState, c: Call, cap: Callable[[int], int] = cap) -> tuple[KvState, ...]:
        op = by_index[c.id]
        nxt, out = model.apply(s, op.args, op.index)
        if out is OUT_OF_ORDER:
            return ()  # the log already holds a later entry: not here
        if c.weak:
            return (nxt,) if nxt.head <= cap(s.head) else ()
        if not c.checked:
            return (nxt,)
        assert op.result is not None
        return (nxt,) if matches(out, op.result) else ()

    if not any(op.error == ERR_COMPACTED for _, op, _ in ops):
        # no answer needs a compaction nobody saw happen: leave them out
        ops = [(i, op, weak) for i, op, weak in ops
               if not (weak and isinstance(op.args, Compact))]
    observed = _observed_values(ops)
    calls = [_call(i, op, weak, observed) for i, op, weak in ops]
    run = max_weak_run(ops, start)
    found = search(calls, init, _memoised(step), budget, run)
    if found.verdict == "linearizable":
        return passed(NAME, *notes, f"{len(calls)} operations, {found.steps} search steps")
    if found.verdict == "unknown":
        return unknown(NAME, f"the search gave up after {budget} steps ({len(calls)} ops)",
                       *notes)

    spend = Spend(min(budget, SHRINK_BUDGET), SHRINK_TOTAL)

    def fails(sub: Sequence[Call]) -> bool | None:
        # an unchecked read constrains nothing; an unchecked write proves no revision
        marked = [replace(c, defer=c.weak and _floating_compact(by_index[c.id]),
                          after_defer=c.checked and by_index[c.id].error == ERR_COMPACTED)
                  for c in sub if c.checked or not isinstance(by_index[c.id].args, Range)]
        known = [(c.id, by_index[c.id], c.weak or not c.checked) for c in marked]
        run, sub_cap = max_weak_run(known, start), head_cap(known, start)

        def sub_step(s: KvState, c: Call) -> tuple[KvState, ...]:
            return step(s, c, sub_cap)

        return spend.verdict(lambda steps: search(marked, init, sub_step, steps, run))

    def hint(before: list[Op], culprit: Op) -> str:
        s = init
        for op in before:
            nxt, out = model.apply(s, op.args, op.index)
            if op is culprit:
                return f"run in invocation order the model answers{result_text(out)}"
            if op.outcome == "ok":
                s = nxt
        return ""

    return evidence(history, calls, fails, max_tests, hint, "", notes)


MEMO_LIMIT = 1_000_000  # (call, state) answers kept per search (then new ones are not)


def _memoised(
    step: Callable[[KvState, Call], tuple[KvState, ...]],
) -> Callable[[KvState, Call], tuple[KvState, ...]]:
    """`step` answering a (call, state) pair it has seen from memory. The search asks
    for the same pair under many linearized sets (in a branch-tier history about 60% of
    its asks are repeats, and the model's txn step is most of the check's time); `step`
    is a pure function of the pair (call ids are distinct within one search), so the
    answers and the search are the same. Bounded: past MEMO_LIMIT pairs it only looks
    up."""
    memo: dict[tuple[int, KvState], tuple[KvState, ...]] = {}

    def memo_step(s: KvState, c: Call) -> tuple[KvState, ...]:
        key = (c.id, s)
        got = memo.get(key)
        if got is None:
            got = step(s, c)
            if len(memo) < MEMO_LIMIT:
                memo[key] = got
        return got

    return memo_step


def _claimed(op: Op) -> int | None:
    """The revision an acknowledged write took (None: it took none)."""
    res = op.result
    if op.outcome != "ok":
        return None
    if isinstance(res, PutResult):
        return res.revision
    if isinstance(res, DeleteResult):
        return res.revision if res.deleted else None
    if isinstance(res, TxnResult):
        return res.revision if _txn_wrote(res) else None
    return None


def _txn_wrote(res: TxnResult) -> bool:
    return any(isinstance(r, PutResult) or (isinstance(r, DeleteResult) and r.deleted)
               or (isinstance(r, TxnResult) and _txn_wrote(r)) for r in res.responses)


def _flat(results: Sequence[object]) -> list[object]:
    """Results with every nested txn's responses in place."""
    out: list[object] = []
    for r in results:
        out.append(r)
        if isinstance(r, TxnResult):
            out += _flat(r.responses)
    return out


def _observed(op: Op) -> int:
    """The lowest head the op proves (0: none)."""
    res = op.result
    if op.outcome == "ok":
        rev = getattr(res, "revision", 0)
        return rev if isinstance(rev, int) else 0
    if isinstance(res, Failure) and res.error == ERR_COMPACTED:
        reads = [r.revision for r in _reads(op.args)]
        return max([res.compact_revision, *(r + 1 for r in reads)])
    return 0


def _reads(req: object) -> list[Range]:
    if isinstance(req, Range):
        return [req]
    if isinstance(req, Txn):
        return [r for o in (*req.success, *req.failure) for r in _reads(o)]
    return []


def _call(i: int, op: Op, weak: bool, observed: frozenset[tuple[bytes, bytes]]) -> Call:
    """A call of the whole pass; an indeterminate write whose value someone saw is
    tried first (it almost certainly took effect: traffic values are unique)."""
    compact = weak and _floating_compact(op)
    rank = int(weak and bool(_written(op) & observed))
    return Call(i, op.invoke_t, op.end, weak, compact, op.error == ERR_COMPACTED, rank=rank)


def _floating_compact(op: Op) -> bool:
    """A Compact whose log index is unknown: as an indeterminate op it may be moved to
    right before the ErrCompacted that needs it (`max_weak_run`). One with an index has
    its place in the log and stays there."""
    return isinstance(op.args, Compact) and op.index is None


def _written(op: Op) -> set[tuple[bytes, bytes]]:
    return {(p.key, p.value) for p in _puts(op.args)}


def _puts(req: object) -> list[Put]:
    if isinstance(req, Put):
        return [req]
    if isinstance(req, Txn):
        return [p for o in (*req.success, *req.failure) for p in _puts(o)]
    return []


def _observed_values(ops: Sequence[tuple[int, Op, bool]]) -> frozenset[tuple[bytes, bytes]]:
    """(key, value) pairs strong operations returned."""
    out: set[tuple[bytes, bytes]] = set()
    for _, op, weak in ops:
        if weak or op.outcome != "ok":
            continue
        res = op.result
        for r in _flat([res]):
            kvs = (r.kvs if isinstance(r, RangeResult) else r.prev_kvs
                   if isinstance(r, DeleteResult) else [r.prev_kv]
                   if isinstance(r, PutResult) and r.prev_kv else [])
            out |= {(kv.key, kv.value) for kv in kvs}
    return frozenset(out)


def head_cap(ops: Sequence[tuple[int, Op, bool]], start: Start) -> Callable[[int], int]:
    """The highest head an indeterminate write may leave, from a given head.

    The next revision above the head that an acknowledged write claimed must be taken by
    that write, so the writes before it may raise the head to one below it; and past
    the highest head any strong op proves, nothing observes a write."""
    claimed = sorted({r for _, op, weak in ops if not weak and (r := _claimed(op)) is not None})
    top = max([start.head, *(_observed(op) for _, op, weak in ops if not weak)])

    def cap(head: int) -> int:
        i = bisect.bisect_right(claimed, head)
        return min(claimed[i] if i < len(claimed) else top + 1, top + 1) - 1

    return cap


def max_weak_run(ops: Sequence[tuple[int, Op, bool]], start: Start) -> int:
    """How many indeterminate ops a linearization may ever need in a row.

    Take a linearization with no needless indeterminate op (one whose removal keeps it
    valid). An op that changes nothing is needless. One that writes takes the next
    revision, which no acknowledged write claimed, at or below the highest head any
    strong op proves (past it, nothing observes it). A Compact only raises the compact
    revision, which only an ErrCompacted answer needs; every other answer stays right
    with a lower one. So it can move later, past writes (one that took effect after it
    did not read below it) and strong ops, to right before the first ErrCompacted that
    needs it; of several in one run only the last that takes effect matters. So some
    linearization has runs of at most the longest run of unclaimed revisions plus one
    Compact, that Compact last and followed by an ErrCompacted: the search may keep to
    that (`Call.defer` on indeterminate Compacts, `after_defer` on ErrCompacted ops)."""
    claimed = {r for _, op, weak in ops if not weak and (r := _claimed(op)) is not None}
    top = max([start.head, *(_observed(op) for _, op, weak in ops if not weak)])
    longest = current = 0
    for rev in range(start.head + 1, top + 1):
        current = 0 if rev in claimed else current + 1
        longest = max(longest, current)
    compacts = any(weak and isinstance(op.args, Compact) for _, op, weak in ops)
    return longest + int(compacts)


# ---- per key ---------------------------------------------------------------------------


def _per_key(
    history: History,
    ops: list[tuple[int, Op, bool]],
    start: Start,
    budget: int,
    max_tests: int,
    notes: list[str],
) -> CheckResult | None:
    """The first key whose projection is not linearizable, as a violation; None if
    none is found (unknown keys are noted, the whole pass still decides)."""
    if any(key_model.nested(op) for _, op, _ in ops):
        notes.append("nested txns: the per-key pass is skipped")
        return None
    keys: set[bytes] = {kv.key for kv in start.kvs}
    for _, op, _ in ops:
        keys |= key_model.keys_of(op)
    undecided = []
    names = sorted(keys)
    touching = _touching(ops, names)
    for name in names:
        projected: dict[int, key_model.KeyOp] = {}
        calls = []
        for n in touching.get(name, ()):
            i, op, weak = ops[n]
            if op.outcome == "fail":
                continue
            k = key_model.project(op, name)
            if k is None or (weak and not k.writes):
                continue
            projected[i] = k
            calls.append(Call(i, op.invoke_t, op.end, weak))
        if not any(not c.weak for c in calls):
            continue
        init = key_model.initial(name, start.kvs)
        phantom = _phantom(history, name, projected, init)
        if phantom is not None:
            return phantom

        def step(s: key_model.KeyState, c: Call,
                 projected: dict[int, key_model.KeyOp] = projected) -> tuple[
                     key_model.KeyState, ...]:
            return key_model.step(projected[c.id], s, c.weak or not c.checked)

        found = search(calls, init, step, min(budget, PER_KEY_BUDGET))
        if found.verdict == "unknown":
            undecided.append(show(name))
            continue
        if found.verdict == "linearizable":
            continue

        spend = Spend(min(budget, SHRINK_BUDGET), SHRINK_TOTAL)

        def fails(sub: Sequence[Call], step: Callable[..., tuple[key_model.KeyState, ...]] = step,
                  init: key_model.KeyState = init, spend: Spend = spend,
                  projected: dict[int, key_model.KeyOp] = projected) -> bool | None:
            kept = [c for c in sub if c.checked or projected[c.id].writes]
            return spend.verdict(lambda steps: search(kept, init, step, steps))

        def hint(before: list[Op], culprit: Op, name: bytes = name,
                 init: key_model.KeyState = init) -> str:
            s = init
            for op in before:
                if op is culprit:
                    return f"run in invocation order {show(name)} is {key_text(s)} before it"
                k = key_model.project(op, name)
                if k is not None and op.outcome == "ok":
                    nexts = key_model.step(k, s, False) or key_model.step(k, s, True)
                    s = nexts[0] if nexts else s
            return ""

        return evidence(history, calls, fails, max_tests, hint, f"key {show(name)}: ", notes)
    if undecided:
        notes.append(f"per-key search gave up on keys {', '.join(undecided)}")
    return None


def _touching(ops: Sequence[tuple[int, Op, bool]], names: list[bytes]) -> dict[bytes, list[int]]:
    """For each key, the positions in `ops` (in order) of the ops whose request names a
    range covering it: `key_model.project` is None for every other op, so the per-key
    pass projects only these (a pass over every op for every key is quadratic)."""
    out: dict[bytes, list[int]] = {}
    for n, (_, op, _) in enumerate(ops):
        hit: set[bytes] = set()
        for key, range_end in _ranges(op.args):
            if range_end is None:
                hit.add(key)
                continue
            lo = bisect.bisect_left(names, key)
            hi = len(names) if range_end == ALL_KEYS else bisect.bisect_left(names, range_end)
            hit.update(names[lo:hi])
        for name in hit:
            out.setdefault(name, []).append(n)
    return out


def _ranges(req: object) -> list[tuple[bytes, bytes | None]]:
    """Every (key, range_end) a request's compares and ops name, nested txns' too."""
    if isinstance(req, Txn):
        out = [(c.key, c.range_end) for c in req.compare]
        for o in (*req.success, *req.failure):
            out += _ranges(o)
        return out
    if isinstance(req, Put | DeleteRange | Range):
        return [(req.key, req.range_end if not isinstance(req, Put) else None)]
    return []


def _phantom(
    history: History, name: bytes, projected: dict[int, key_model.KeyOp],
    init: key_model.KeyState,
) -> CheckResult | None:
    """An op that saw a value of the key no operation ever wrote: a violation on its own
    (found directly: a search would have to rule out every order first)."""
    written = {init[1]} if init[0] else set()
    for k in projected.values():
        written |= key_model.written_values(k)
    for i, k in sorted(projected.items()):
        ghosts = key_model.seen_values(k) - written
        if ghosts and history.ops[i].outcome == "ok":
            op = history.ops[i]
            return violated(NAME, f"key {show(name)}: {op.describe()} saw "
                            f"{show(min(ghosts))}, a value no operation wrote", [op])
    return None


__all__ = ["CHECKED_ERRORS", "NAME", "Start", "check", "participating"]
