"""No acknowledged write is lost: the final state, read after recovery, still shows it.

For each `ok` write (a put, a delete that removed something, the chosen branch of a txn)
at revision r, in the final read of the keyspace:
- a put of k: k shows that write (mod_revision r, same value), or a later one
  (mod_revision > r), or is absent and some delete covering k could have removed it later
  (an acknowledged one above r, or an indeterminate one);
- a delete of a range: no key of the range shows a version from at or before r;
- and the final header is at least r (etcd #14370: a single node lost a write on crash).

A tier's own writes (`TIER_CLIENT`, taken from the committed log: the branch tier's
services go on after the clients stop) that came after the final read are not judged.

The final read is the last successful full-keyspace Range (range_end "\\0" at head) of
the history unless one is passed. Writes to keys it does not cover are not judged.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sediment.actors.kv.types import (
    ALL_KEYS,
    DeleteRange,
    DeleteResult,
    KeyValue,
    Put,
    PutResult,
    Range,
    RangeResult,
    Txn,
    TxnOp,
    TxnResult,
)
from sediment.scenarios.checkers.key_model import covers
from sediment.scenarios.checkers.result import CheckResult, passed, unknown, violated
from sediment.scenarios.history import TIER_CLIENT, History, Op, show

NAME = "no_lost_writes"
MAX_DETAILS = 10


@dataclass(frozen=True)
class Write:
    """One acknowledged write: `op` wrote `what` at `revision`."""

    op: Op
    what: Put | DeleteRange
    revision: int


def acknowledged(history: History) -> Iterator[Write]:
    for op in history.ops:
        if op.outcome != "ok":
            continue
        res = op.result
        if isinstance(op.args, Put) and isinstance(res, PutResult):
            yield Write(op, op.args, res.revision)
        elif isinstance(op.args, DeleteRange) and isinstance(res, DeleteResult):
            if res.deleted:
                yield Write(op, op.args, res.revision)
        elif isinstance(op.args, Txn) and isinstance(res, TxnResult):
            ops = op.args.success if res.succeeded else op.args.failure
            for i, sub in enumerate(ops):
                part = res.responses[i] if i < len(res.responses) else None
                if isinstance(sub, Put) or (
                    isinstance(sub, DeleteRange)
                    and isinstance(part, DeleteResult)
                    and part.deleted
                ):
                    yield Write(op, sub, res.revision)


def final_read(history: History) -> Op | None:
    """The last successful read of every key from some key on, at head."""
    best = None
    for op in history.ops:
        r = op.args
        if (
            op.outcome == "ok"
            and isinstance(r, Range)
            and r.range_end == ALL_KEYS
            and r.revision == 0
            and not (r.limit or r.count_only or r.keys_only)
            and (best is None or op.end >= best.end)
        ):
            best = op
    return best


def _may_delete(op: Op, key: bytes, after: int) -> bool:
    """Could `op` have deleted `key` after revision `after`?"""
    if op.outcome == "fail":
        return False
    writes: tuple[TxnOp, ...]
    if isinstance(op.args, DeleteRange):
        writes = (op.args,)
    elif isinstance(op.args, Txn):
        if isinstance(op.result, TxnResult):
            writes = op.args.success if op.result.succeeded else op.args.failure
        else:
            writes = (*op.args.success, *op.args.failure)
    else:
        return False
    if not any(isinstance(w, DeleteRange) and covers(w.key, w.range_end, key) for w in writes):
        return False
    rev = getattr(op.result, "revision", None)
    return op.outcome == "info" or rev is None or rev > after


def check(history: History, final: RangeResult | None = None) -> CheckResult:
    """See the module doc. `final`: the state after recovery (every key)."""
    from_key = b""
    final_op = None
    if final is None:
        final_op = final_read(history)
        if final_op is None or not isinstance(final_op.result, RangeResult):
            return unknown(NAME, "no final read of the keyspace in the history")
        final, from_key = final_op.result, final_op.args.key  # type: ignore[union-attr]
    state = {kv.key: kv for kv in final.kvs}
    problems: list[Problem] = []
    for w in acknowledged(history):
        if w.revision > final.revision and w.op.client == TIER_CLIENT:
            continue  # a tier's own write (from the log) that came after the final read
        if w.revision > final.revision:
            problems.append((f"the final read's header {final.revision} is below it", w, None))
            continue
        if isinstance(w.what, Put):
            if w.what.key >= from_key:
                problems += _check_put(history, w, state.get(w.what.key))
        else:
            for kv in final.kvs:
                if covers(w.what.key, w.what.range_end, kv.key) and kv.mod_revision <= w.revision:
                    problems.append(("the final state still has a version from before it", w, kv))
    if not problems:
        return passed(NAME, f"{sum(1 for _ in acknowledged(history))} acknowledged writes")
    why, lost, seen = problems[0]
    evidence = [lost.op, *([final_op] if final_op is not None else [])]
    explanation = f"acknowledged {_describe(lost)} at revision {lost.revision} is lost: {why}"
    if seen is not None:
        explanation += f" ({show(seen.key)}={show(seen.value)}@{seen.mod_revision})"
    details = [f"also: {_describe(x)}@{x.revision}: {y}" for y, x, _ in problems[1:MAX_DETAILS]]
    if len(problems) > MAX_DETAILS:
        details.append(f"... {len(problems) - MAX_DETAILS} more")
    return violated(NAME, explanation, evidence, details)


Problem = tuple[str, Write, KeyValue | None]


def _check_put(history: History, w: Write, kv: KeyValue | None) -> list[Problem]:
    assert isinstance(w.what, Put)
    if kv is None:
        if any(_may_delete(op, w.what.key, w.revision) for op in history.ops):
            return []
        return [("the key is absent and no later delete covers it", w, None)]
    if kv.mod_revision < w.revision:
        return [("the final state has an older version", w, kv)]
    if kv.mod_revision == w.revision and kv.value != w.what.value:
        return [("the final state has another value at its revision", w, kv)]
    return []


def _describe(w: Write) -> str:
    if isinstance(w.what, Put):
        return f"put {show(w.what.key)}={show(w.what.value)}"
    end = w.what.range_end
    return f"delete {show(w.what.key)}" + (f"..{show(end)}" if end else "")


__all__ = ["NAME", "Write", "acknowledged", "check", "final_read"]
