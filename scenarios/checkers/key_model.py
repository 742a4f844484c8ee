"""The projection of etcd's KV onto one key, for the P-compositional (per-key) pass.

etcd's revision is global: the revision a put returns counts the writes to every key,
a read's header is the global head, Compact and ErrFutureRev depend on it. So the exact
model (`kv_model.py`) cannot be split by key. What can be split is the part of the
semantics that does not mention revisions: the value and version of one key. Projecting
a linearization of the whole history onto key k gives a linearization of k's projected
operations under this model, so a key whose projection cannot be linearized proves the
whole history is not linearizable (a sound, smaller check), with evidence about one key.
The whole-history pass then decides what this projection cannot see (revisions, headers,
compaction, ErrFutureRev, compares on revisions).

How an operation projects onto key k (`project`):
- put k, a delete whose range covers k: a write of k (checked: prev_kv of k when asked;
  a single-key delete's `deleted` count);
- a read covering k at head (revision 0), complete for k (no limit cut before k, not
  count-only): what it says about k (present, version, value unless keys_only);
- a txn: each branch's effects on k in order (reads inside see earlier writes), guarded
  by what its compares say about k: a compare that is false on k rules the success
  branch out, one that is certainly true on k (and every compare being so) rules the
  failure branch out; compares on other keys or on revisions of a live key are unknown;
- reads at a past revision, compacts, failed operations: nothing (they change no value).
A weak (indeterminate) operation keeps its effects, drops every check, and may take
either branch its compares allow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from sediment.actors.kv.types import (
    Compare,
    DeleteRange,
    DeleteResult,
    KeyValue,
    Put,
    PutResult,
    Range,
    RangeResult,
    Txn,
    TxnOp,
    TxnResponse,
    TxnResult,
    key_in_range,
)
from sediment.scenarios.history import Op

# (exists, value, version): everything one key shows without revisions
KeyState = tuple[bool, bytes, int]
ABSENT: KeyState = (False, b"", 0)

# What an op said it saw of the key: None (not checked), or (exists, value or None when
# the value was not returned, version).
Seen = tuple[bool, bytes | None, int] | None


@dataclass(frozen=True, slots=True)
class Action:
    kind: Literal["put", "delete", "read"]
    value: bytes = b""  # put: the new value
    seen: Seen = None  # put/delete: prev_kv of the key; read: the key as read
    deleted: int | None = None  # single-key delete: the count it reported


@dataclass(frozen=True, slots=True)
class Branch:
    """One way the op can affect the key. `when` is "success"/"failure" for a txn
    branch (guarded by its compares), "always" otherwise."""

    when: Literal["always", "success", "failure"]
    actions: tuple[Action, ...]


@dataclass(frozen=True)
class KeyOp:
    """An op's projection onto one key: its branches as it ran (`strong`, checked),
    and as it may have run when its outcome is unknown (`weak`, unchecked)."""

    key: bytes
    compares: tuple[Compare, ...]  # the txn's compares that involve the key
    complete: bool  # every compare of the txn involves the key (none: success only)
    strong: tuple[Branch, ...]
    weak: tuple[Branch, ...]
    writes: bool  # can it change the key (else a weak copy is a no-op and is dropped)


def covers(key: bytes, range_end: bytes | None, name: bytes) -> bool:
    return key_in_range(name, key, range_end)


def _seen_kv(kv: KeyValue | None, with_value: bool = True) -> Seen:
    if kv is None:
        return (False, None, 0)
    return (True, kv.value if with_value else None, kv.version)


def _read_seen(name: bytes, r: Range, res: RangeResult) -> Seen:
    """What a read result tells about `name` (None when it does not tell: a past
    revision, count-only, a filter that may have dropped it, or a limit that cut the
    answer before it)."""
    if r.revision != 0 or r.count_only:
        return None
    if (r.min_mod_revision or r.max_mod_revision or r.min_create_revision
            or r.max_create_revision):
        return None
    by_key = r.sort_target == "key" and r.sort_order != "descend"
    if res.more and not (by_key and res.kvs and name <= res.kvs[-1].key):
        return None
    for kv in res.kvs:
        if kv.key == name:
            return _seen_kv(kv, not r.keys_only)
    return _seen_kv(None)


def _project_ops(
    name: bytes, ops: Sequence[TxnOp], responses: Sequence[TxnResponse] | None
) -> tuple[Action, ...]:
    out: list[Action] = []
    for i, op in enumerate(ops):
        res = responses[i] if responses is not None and i < len(responses) else None
        if isinstance(op, Put) and op.key == name:
            seen = None
            if op.prev_kv and isinstance(res, PutResult):
                seen = _seen_kv(res.prev_kv)
            out.append(Action("put", op.value, seen))
        elif isinstance(op, DeleteRange) and covers(op.key, op.range_end, name):
            seen, count = None, None
            if isinstance(res, DeleteResult):
                if op.prev_kv:
                    seen = _seen_kv(next((kv for kv in res.prev_kvs if kv.key == name), None))
                if op.range_end is None:
                    count = res.deleted
            out.append(Action("delete", seen=seen, deleted=count))
        elif (isinstance(op, Range) and covers(op.key, op.range_end, name)
              and isinstance(res, RangeResult)):
            seen = _read_seen(name, op, res)
            if seen is not None:
                out.append(Action("read", seen=seen))
    return tuple(out)


def _unchecked(actions: tuple[Action, ...]) -> tuple[Action, ...]:
    return tuple(Action(a.kind, a.value) for a in actions if a.kind != "read")


def project(op: Op, name: bytes) -> KeyOp | None:
    """`op` as seen by key `name` (None: it neither reads nor writes it). `op` must be
    ok or indeterminate: failed operations changed nothing."""
    req, res = op.args, op.result if op.outcome == "ok" else None
    compares: tuple[Compare, ...] = ()
    if isinstance(req, Txn):
        compares = tuple(c for c in req.compare if covers(c.key, c.range_end, name))
        succ = _project_ops(name, req.success, None)
        fail = _project_ops(name, req.failure, None)
        weak = (Branch("success", _unchecked(succ)), Branch("failure", _unchecked(fail)))
        strong: tuple[Branch, ...] = ()
        if isinstance(res, TxnResult):
            ops = req.success if res.succeeded else req.failure
            when: Literal["success", "failure"] = "success" if res.succeeded else "failure"
            strong = (Branch(when, _project_ops(name, ops, res.responses)),)
        writes = any(a.kind != "read" for b in weak for a in b.actions)
        if not compares and not any(b.actions for b in (*weak, *strong)):
            return None
        return KeyOp(name, compares, len(compares) == len(req.compare), strong, weak, writes)
    if isinstance(req, Put | DeleteRange | Range):
        responses = [res] if isinstance(res, PutResult | DeleteResult | RangeResult) else None
        actions = _project_ops(name, [req], responses)
        if not actions:
            return None
        always = Branch("always", actions)
        writes = not isinstance(req, Range)
        weak_always = Branch("always", _unchecked(actions))
        return KeyOp(name, (), True, (always,), (weak_always,), writes)
    return None


# ---- the step ----------------------------------------------------------------------------


def _compare(c: Compare, s: KeyState) -> bool | None:
    """The compare's truth as far as this key decides it (None: unknown)."""
    exists, value, version = s
    single = c.range_end is None
    if not exists:
        if not single:
            return None  # depends on the other keys of the range
        if c.target == "value":
            return False
        return _cmp(0, c.op, c.value)
    actual: bytes | int
    if c.target == "value":
        actual = value
    elif c.target == "version":
        actual = version
    else:
        return None  # a revision: not in the projection
    truth = _cmp(actual, c.op, c.value)
    return truth if single or not truth else None


def _cmp(actual: bytes | int, op: str, expected: bytes | int) -> bool:
    if op == "=":
        return actual == expected
    if op == "!=":
        return actual != expected
    if type(actual) is not type(expected):
        return False
    if op == "<":
        return actual < expected  # type: ignore[operator]
    return actual > expected  # type: ignore[operator]


def _allowed(b: Branch, k: KeyOp, s: KeyState) -> bool:
    """May the branch run, as far as the key decides the txn's compares?"""
    if b.when == "always":
        return True
    truths = [_compare(c, s) for c in k.compares]
    if b.when == "success":
        return False not in truths
    return not k.complete or not all(t is True for t in truths)


def _matches(seen: Seen, s: KeyState) -> bool:
    if seen is None:
        return True
    exists, value, version = seen
    if exists != s[0]:
        return False
    return not exists or (version == s[2] and (value is None or value == s[1]))


def _run(actions: Sequence[Action], s: KeyState) -> KeyState | None:
    for a in actions:
        if not _matches(a.seen, s):
            return None
        if a.kind == "put":
            s = (True, a.value, s[2] + 1 if s[0] else 1)
        elif a.kind == "delete":
            if a.deleted is not None and a.deleted != int(s[0]):
                return None
            s = ABSENT
    return s


def step(k: KeyOp, s: KeyState, weak: bool) -> tuple[KeyState, ...]:
    """Every state the op can leave the key in (empty: impossible here)."""
    out: list[KeyState] = []
    for b in k.weak if weak else k.strong:
        if _allowed(b, k, s):
            nxt = _run(b.actions, s)
            if nxt is not None and nxt not in out:
                out.append(nxt)
    return tuple(out)


def seen_values(k: KeyOp) -> set[bytes]:
    """Values of the key the op (as it ran) says it saw."""
    return {a.seen[1] for b in k.strong for a in b.actions
            if a.seen is not None and a.seen[0] and a.seen[1] is not None}


def written_values(k: KeyOp) -> set[bytes]:
    """Values the op may have written to the key (any branch)."""
    return {a.value for b in (*k.strong, *k.weak) for a in b.actions if a.kind == "put"}


def keys_of(op: Op) -> set[bytes]:
    """Every key the op names or saw (ranges cover more; their keys come from results
    and from the other ops)."""
    req, res = op.args, op.result
    out: set[bytes] = set()
    if isinstance(req, Put | DeleteRange | Range):
        out.add(req.key)
    if isinstance(req, Txn):
        out |= {c.key for c in req.compare}
        for o in (*req.success, *req.failure):
            out |= {o.key} if not isinstance(o, Txn) else _txn_keys(o)
    results: list[object] = [res]
    pending: list[object] = [res]
    while pending:
        got = pending.pop()
        if isinstance(got, TxnResult):
            results += list(got.responses)
            pending += list(got.responses)
    for one in results:
        if isinstance(one, RangeResult):
            out |= {kv.key for kv in one.kvs}
        elif isinstance(one, DeleteResult):
            out |= {kv.key for kv in one.prev_kvs}
    return out


def _txn_keys(t: Txn) -> set[bytes]:
    out = {c.key for c in t.compare}
    for o in (*t.success, *t.failure):
        out |= {o.key} if not isinstance(o, Txn) else _txn_keys(o)
    return out


def nested(op: Op) -> bool:
    """A txn with a txn among its ops: not projected per key (its compares are judged
    before its branches run, on state the projection does not follow); the whole pass
    checks it."""
    req = op.args
    return isinstance(req, Txn) and any(isinstance(o, Txn) for o in (*req.success,
                                                                       *req.failure))


def initial(name: bytes, kvs: Sequence[KeyValue]) -> KeyState:
    for kv in kvs:
        if kv.key == name:
            return (True, kv.value, kv.version)
    return ABSENT


__all__ = [
    "ABSENT", "KeyOp", "KeyState", "covers", "initial", "keys_of", "nested", "project",
    "seen_values",
    "step", "written_values",
]
