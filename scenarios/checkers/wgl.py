"""The Wing–Gong–Lowe linearizability search, after porcupine's `checkSingle`.

Model-agnostic: the caller gives the operations as `Call`s (invocation time, completion
time, whether the call is *weak*) and a `step(state, call) -> next states` function
(empty: the call cannot take effect in that state with the result it had; several:
the model is non-deterministic for it). A weak call is one whose effect and result are
unknown — an indeterminate (`info`) operation, or one a shrink has weakened: it may take
effect at any point after its invocation, or never, and its completion time is +inf.

The search walks the call/return entries in time order (a call entry and a return entry
with the same time count as concurrent), linearizes any call whose invocation precedes
the first pending return, and backtracks when it reaches a return whose call is not yet
linearized. Visited (linearized set, state) pairs are memoised, so each is expanded once.
A step budget bounds the work: past it the verdict is "unknown", never a guess.

`minimal_failure` turns a violation into evidence: the shortest failing prefix (the
first moment a completed result cannot be explained), then a greedy shrink that stops
checking the result of every other call it can while the history still fails (an
unchecked call still takes effect inside its call, with whatever result the model
gives), then one that lets every unchecked call it can not take effect at all. All
three only add possible behaviours, so what is left is a genuine proof: the checked
calls' results cannot all be right, given that the needed calls took effect when they
ran, whatever every other call did.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Generic, Literal, TypeVar

S = TypeVar("S", bound=Hashable)
Verdict = Literal["linearizable", "violation", "unknown"]

# search steps per run: a Ray run of `branch-two-sensors-one-branch` (815 ops, the branch
# tier's Txns overlapping the clients' writes) needed 10-20 million; with the memoised
# step that is ~17 s and ~60 MB, and only a history that hard pays it
DEFAULT_BUDGET = 20_000_000
DEFAULT_MAX_TESTS = 200  # search runs spent on shrinking evidence


@dataclass(frozen=True, slots=True)
class Call:
    """One operation as the search sees it. `id` is the caller's index for it."""

    id: int
    invoke: float
    end: float
    weak: bool = False
    defer: bool = False  # weak: may only be linearized right before an `after_defer` call
    after_defer: bool = False  # strong: may follow a `defer` call
    rank: int = 0  # weak: higher ranks are tried first (then the newest first)
    checked: bool = True  # False: took effect inside its call, whatever it returned
    optional: bool = False  # with checked False: or never took effect at all

    def weakened(self) -> Call:
        return replace(self, end=math.inf, weak=True)

    def unchecked(self, optional: bool = False) -> Call:
        return replace(self, checked=False, optional=optional)


@dataclass(frozen=True)
class Search(Generic[S]):
    verdict: Verdict
    steps: int
    order: tuple[int, ...] = ()  # call ids in linearization order (linearizable only)


Step = Callable[[S, Call], Sequence[S]]


def search(
    calls: Sequence[Call],
    init: S,
    step: Step[S],
    budget: int = DEFAULT_BUDGET,
    max_weak_run: int | None = None,
) -> Search[S]:
    """Is there a linearization of every strong call (weak ones optional)?

    At each point the strong candidates are tried first, oldest first; only when none
    can go next are the weak ones tried, by `rank` then newest first (the search stays
    complete: this only orders the alternatives). So an indeterminate call is placed only
    where the strong calls cannot go on without it, and a gap is first filled by the
    likeliest call. `max_weak_run` (None: no limit) caps how many weak calls may be
    linearized in a row, and a `defer` call may only be followed by an `after_defer` one:
    use them only when the model proves some linearization keeps to them whenever one
    exists (see linearizability.py)."""
    by_id = {c.id: c for c in calls}
    if len(by_id) != len(calls):
        raise ValueError("call ids must be distinct")
    entries = sorted(
        [(c.invoke, 0, c.id) for c in calls]
        + [(c.end, 1, c.id) for c in calls if not c.weak and c.end != math.inf]
    )
    n = len(entries)
    head, tail = 0, n + 1
    is_call = [False] * (n + 2)
    who = [0] * (n + 2)
    ret = [-1] * (n + 2)  # call entry -> its return entry (-1: none, weak)
    call_at: dict[int, int] = {}
    for pos, (_, kind, cid) in enumerate(entries, start=1):
        who[pos] = cid
        if kind == 0:
            is_call[pos] = True
            call_at[cid] = pos
        else:
            ret[call_at[cid]] = pos
    nxt = list(range(1, n + 3))
    prv = list(range(-1, n + 1))
    weak_limit = math.inf if max_weak_run is None else max_weak_run

    def lift(c: int) -> None:
        nxt[prv[c]], prv[nxt[c]] = nxt[c], prv[c]
        r = ret[c]
        if r >= 0:
            nxt[prv[r]], prv[nxt[r]] = nxt[r], prv[r]

    def unlift(c: int) -> None:
        r = ret[c]
        if r >= 0:
            nxt[prv[r]] = prv[nxt[r]] = r
        nxt[prv[c]] = prv[nxt[c]] = c

    def weak_candidates(stop: int) -> list[int]:
        """The weak call entries before `stop` (the first pending return), best first."""
        out = []
        e = nxt[head]
        while e != stop:
            if by_id[who[e]].weak:
                out.append(e)
            e = nxt[e]
        out.sort(key=lambda e: (-by_id[who[e]].rank, -e))
        return out

    remaining = sum(1 for c in calls if not c.weak and c.end != math.inf)
    state = init
    linearized = 0
    weak_run = 0  # weak calls linearized in a row at the top of the stack
    # phase 0 scans the list for strong candidates from `entry`; phase 1 walks `weak`
    # (this node's weak candidates) from index `wi`
    phase, weak, wi = 0, [], 0
    # one per linearized call: (call entry, state before, its possible next states, the
    # one taken, the phase it was found in, weak_run before, that phase's weak list)
    stack: list[tuple[int, S, Sequence[S], int, int, int, list[int]]] = []
    seen: set[tuple[int, S]] = set()
    steps = 0
    entry = nxt[head]

    def push(c: int, before: S, nexts: Sequence[S], start: int, found_in: int,
             weak_list: list[int]) -> bool:
        nonlocal state, linearized, remaining, entry, weak_run, phase
        bit = 1 << who[c]
        for j in range(start, len(nexts)):
            key = (linearized | bit, nexts[j])
            if key in seen:
                continue
            seen.add(key)
            stack.append((c, before, nexts, j, found_in, weak_run, weak_list))
            state, linearized = nexts[j], linearized | bit
            lift(c)
            if ret[c] >= 0:
                remaining -= 1
            weak_run = weak_run + 1 if found_in else 0
            entry, phase = nxt[head], 0
            return True
        return False

    while remaining:
        steps += 1
        if steps > budget:
            return Search("unknown", steps)
        deferred = bool(stack) and by_id[who[stack[-1][0]]].defer
        if phase == 0:
            if entry != tail and is_call[entry]:
                call = by_id[who[entry]]
                if not call.weak and (call.after_defer or not deferred):
                    nexts = step(state, call)
                    if call.optional and state not in nexts:
                        nexts = (*nexts, state)  # it may not have happened
                    if push(entry, state, nexts, 0, 0, []):
                        continue
                entry = nxt[entry]
                continue
            if not deferred and weak_run < weak_limit:  # no strong call can go next
                phase, weak, wi = 1, weak_candidates(entry), 0
                continue
        elif wi < len(weak):
            e = weak[wi]
            # an optional call that changes nothing here is not worth a branch
            moves = [s for s in step(state, by_id[who[e]]) if s != state]
            if not push(e, state, moves, 0, 1, weak):
                wi += 1
            continue
        # Nothing can go next: undo the last choice and try its next alternative, or the
        # candidates after it.
        if not stack:
            return Search("violation", steps)
        c, before, nexts, j, found_in, run, weak_list = stack.pop()
        linearized ^= 1 << who[c]
        unlift(c)
        if ret[c] >= 0:
            remaining += 1
        state, weak_run = before, run
        if not push(c, before, nexts, j + 1, found_in, weak_list):
            if found_in:
                phase, weak, wi = 1, weak_list, weak_list.index(c) + 1
            else:
                phase, entry = 0, nxt[c]
    return Search("linearizable", steps, tuple(who[c] for c, *_ in stack))


# ---- evidence --------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """A failing core: `culprit` is the call whose result first cannot be explained,
    `core` the strong calls (culprit included) that fail together, by invocation."""

    culprit: int
    core: tuple[int, ...]  # calls whose results are part of the proof (culprit too)
    minimal: bool  # False when the shrink ran out of tests or steps
    prefix: tuple[int, ...] = ()  # every call of the first failing prefix, by invocation
    needed: tuple[int, ...] = ()  # calls that count only because they took effect


def prefix(calls: Sequence[Call], j: int) -> list[Call]:
    """The history as known at the completion of the j-th strong call (by completion
    time): strong calls completed by then stay strong, calls still running become weak,
    calls not yet invoked are dropped. If a history is linearizable, so is every prefix."""
    strong = _by_completion(calls)
    t = strong[j].end
    keep = {c.id for c in strong[: j + 1]}
    return [c if c.id in keep else c.weakened() for c in calls if c.invoke <= t]


def _by_completion(calls: Sequence[Call]) -> list[Call]:
    return sorted((c for c in calls if not c.weak), key=lambda c: (c.end, c.invoke, c.id))


def minimal_failure(
    calls: Sequence[Call],
    fails: Callable[[Sequence[Call]], bool | None],
    max_tests: int = DEFAULT_MAX_TESTS,
) -> Failure | None:
    """Shrink a failing history (`fails(calls)` must be True) to a small failing core;
    None if the whole history is not found failing again. `fails` answers None when it
    could not decide (its budget ran out): that counts as not failing, and the evidence
    is then marked not minimal."""
    strong = _by_completion(calls)
    if not strong:
        return None
    tests = 0
    undecided = False

    def failing(sub: Sequence[Call]) -> bool:
        nonlocal undecided
        verdict = fails(sub)
        undecided = undecided or verdict is None
        return bool(verdict)

    lo, hi = 0, len(strong) - 1
    if not failing(prefix(calls, hi)):
        return None
    while lo < hi:  # the first failing prefix (prefixes are monotone)
        mid = (lo + hi) // 2
        tests += 1
        if failing(prefix(calls, mid)):
            hi = mid
        else:
            lo = mid + 1
    base = prefix(calls, hi)
    culprit = strong[hi].id
    others = [c.id for c in base if not c.weak and c.id != culprit]
    keep = list(others)

    def attempt(candidate: list[int]) -> bool:
        checked = {*candidate, culprit}
        return failing([c if c.id in checked or c.weak else c.unchecked() for c in base])

    minimal = True

    def shrink(items: list[int], test: Callable[[list[int]], bool]) -> list[int]:
        """The smallest sublist the greedy chunked search finds that still passes."""
        nonlocal tests, minimal
        chunk = max(1, len(items) // 2)
        while items and minimal:
            i = 0
            while i < len(items):
                if tests >= max_tests:
                    minimal = False
                    return items
                tests += 1
                trial = items[:i] + items[i + chunk :]
                if test(trial):
                    items = trial
                else:
                    i += chunk
            if chunk == 1:
                break
            chunk //= 2
        return items

    keep = shrink(others, attempt)
    checked = {*keep, culprit}
    unchecked = [c.id for c in base if not c.weak and c.id not in checked]

    def needs(candidate: list[int]) -> bool:
        must = set(candidate)
        return failing([
            c if c.id in checked or c.weak else c.unchecked(optional=c.id not in must)
            for c in base
        ])

    needed = shrink(unchecked, needs)
    order = {c.id: (c.invoke, c.id) for c in base}

    def by_invocation(ids: set[int]) -> tuple[int, ...]:
        return tuple(sorted(ids, key=order.__getitem__))

    return Failure(culprit, by_invocation(checked), minimal and not undecided,
                   by_invocation(set(order)), by_invocation(set(needed)))


__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_MAX_TESTS",
    "Call",
    "Failure",
    "Search",
    "Step",
    "Verdict",
    "minimal_failure",
    "prefix",
    "search",
]
