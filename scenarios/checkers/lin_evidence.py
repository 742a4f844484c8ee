"""The evidence of a linearizability violation, shrunk to the operations that show it.

`linearizability.py` decides; when it finds a violation, `evidence` asks
`wgl.minimal_failure` for the smallest failing set of operations (within a step budget,
`Spend`), and words it: the culprit (the first operation whose result cannot be
explained), the operations whose results conflict with it, the ones that count only by
when they ran, and the last writes of the culprit's keys outside the evidence.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sediment.actors.kv.types import Range, RangeResult
from sediment.scenarios.checkers import key_model
from sediment.scenarios.checkers.result import CheckResult, violated
from sediment.scenarios.checkers.wgl import Call, Search, minimal_failure
from sediment.scenarios.history import Failure, History, Op, show

NAME = "linearizable"  # the check these results belong to
SHRINK_BUDGET = 20_000  # steps per search while shrinking evidence
SHRINK_TOTAL = 500_000  # steps for all of them
MAX_EVIDENCE = 12  # operations shown when the evidence could not be shrunk further


class Spend:
    """The step budget of the searches that shrink one piece of evidence."""

    def __init__(self, each: int, total: int) -> None:
        self.each, self.left = each, total

    def verdict(self, run: Callable[[int], Search[Any]]) -> bool | None:
        """True: violation; False: linearizable; None: not decided (out of steps)."""
        if self.left <= 0:
            return None
        found = run(min(self.each, self.left))
        self.left -= found.steps
        return None if found.verdict == "unknown" else found.verdict == "violation"


def evidence(
    history: History,
    calls: list[Call],
    fails: Callable[[Sequence[Call]], bool | None],
    max_tests: int,
    hint: Callable[[list[Op], Op], str],
    scope: str,
    notes: list[str],
) -> CheckResult:
    found = minimal_failure(calls, fails, max_tests)
    if found is None:
        return violated(NAME, f"{scope}not linearizable (no smaller failing history found)",
                        details=notes)
    # a read whose result is not checked constrains nothing: never needed
    needed_ids = {i for i in found.needed if not isinstance(history.ops[i].args, Range)}
    needed = [history.ops[i] for i in sorted(needed_ids)]
    culprit = history.ops[found.culprit]
    evidence = [history.ops[i] for i in sorted({*found.core, *needed_ids},
                                               key=lambda i: (history.ops[i].invoke_t, i))]
    others = len(evidence) - 1
    shown = evidence
    if len(evidence) > MAX_EVIDENCE:  # not shrunk: the culprit and what ran just before
        shown = [op for op in evidence if op is not culprit][-(MAX_EVIDENCE - 1):] + [culprit]
    with_what = f" with {others} other operation{'s' if others != 1 else ''}" if others else ""
    explanation = f"{scope}{culprit.describe()} cannot be linearized{with_what}"
    before = [history.ops[i] for i in found.prefix]
    extra = hint(before, culprit)
    if extra:
        explanation += f"; {extra}"
    details = [*notes, *_context(before, evidence, culprit)]
    needed = [op for op in needed if any(op is o for o in shown)]
    if needed:
        details.append("counted only by when they ran (results not needed): "
                       + "; ".join(op.describe() for op in needed))
    if not found.minimal:
        details.append("evidence may not be minimal: the shrink ran out of tests or steps")
    if len(shown) < len(evidence):
        details.append(f"showing the last {len(shown)} of {len(evidence)} operations")
    return violated(NAME, explanation, shown, details)


def _context(before: list[Op], evidence: list[Op], culprit: Op, most: int = 3) -> list[str]:
    """The last writes of the culprit's keys outside the evidence: the violation holds
    whatever they did, but a reader wants to see them."""
    keys = key_model.keys_of(culprit)
    shown = {id(op) for op in evidence}
    writes = [
        op for op in before
        if id(op) not in shown and not isinstance(op.args, Range)
        and op.invoke_t <= culprit.invoke_t and key_model.keys_of(op) & keys
    ]
    return [f"context: {op.describe()}" for op in writes[-most:]]


def result_text(out: object) -> str:
    match out:
        case Failure(error=e, compact_revision=c):
            return f" {e}" + (f"({c})" if c else "")
        case RangeResult(kvs=kvs, revision=rev):
            shown = ", ".join(f"{show(kv.key)}={show(kv.value)}@{kv.mod_revision}" for kv in kvs)
            return f" {{{shown}}} rev {rev}"
    header = getattr(out, "revision", None)
    ok = getattr(out, "succeeded", None)
    return (f" {'succeeded' if ok else 'failed'}" if ok is not None else "") + f" rev {header}"


def key_text(s: key_model.KeyState) -> str:
    exists, value, version = s
    return f"{show(value)} (version {version})" if exists else "absent"


__all__ = ["MAX_EVIDENCE", "SHRINK_BUDGET", "SHRINK_TOTAL", "Spend", "evidence", "key_text",
           "result_text"]
