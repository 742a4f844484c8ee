"""Branch reads equal the model built from acknowledged writes and commits (pure).

Over a recorded history of the branch tier (`actors/branches/history.py`), replayed in
KV revision order (writes and branch updates before reads at the same revision):

- **reads**: every `get`, list page and diff page of a branch, taken at snapshot
  revision H, equals what the model holds at H: the commit's content overlaid with the
  acknowledged writes of the tokens not yet committed or reset, in revision order.
  Compactions change nothing in the model, so a read before, during or after one that
  differs is a violation. A path with an indeterminate write may show either value.
- **no acknowledged write lost**: a write must land on the branch's staging token as
  of its revision (a write on a sealed or dropped token would vanish at the next
  commit); a commit takes every token but the current staging one, a compaction step 3
  folds exactly the sealed tokens, a reset drops all.
- **SetIf races, one winner each**: the branch's updates form one chain (each one's
  compared mod revision is the revision the previous one wrote), and every lost race
  (a branch update or a staged write that was retried) compared a revision some
  winner replaced.
- **update rules**: each update is its kind's rule applied to the branch the model
  has (seal, compaction start and finish, commit, reset).

With the committed log, a branch update or write whose call was indeterminate (no
record, or only `Uncertain`) is taken from the log when it committed (`branch_log.py`).

Revisions are only compared for order and equality, never assumed to be numbered in
any particular way.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sediment.actors.branches.branch import Branch
from sediment.actors.branches.diff import Diff, classify
from sediment.actors.branches.entry import Entry
from sediment.actors.branches.history import (
    DiffedPage,
    Event,
    GotEntry,
    ListedPage,
    Lost,
    Staged,
    Uncertain,
    Updated,
)
from sediment.actors.kv.types import Event as KvEvent
from sediment.scenarios.checkers.branch_log import complete_history
from sediment.scenarios.checkers.result import CheckResult, passed, violated

NAME = "branch_reads"
MAX_DETAILS = 20


@dataclass
class _Model:
    """One branch: its record, its commit's content, what it reads as, and the writes
    of every token it still reads through (staging, sealed, folded into its compacted
    metarange)."""

    branch: Branch
    revision: int  # of the last update
    committed: dict[str, Entry]
    view: dict[str, Entry]
    pending: list[str]
    writes: dict[str, list[tuple[int, str, Entry | None]]] = field(default_factory=dict)
    folded: set[str] = field(default_factory=set)
    seen: set[str] = field(default_factory=set)
    uncertain: dict[str, list[Entry | None]] = field(default_factory=dict)


@dataclass
class _Check:
    models: dict[tuple[str, str], _Model] = field(default_factory=dict)
    commits: dict[tuple[str, str], dict[str, Entry]] = field(default_factory=dict)
    winners: dict[tuple[str, str], set[int]] = field(default_factory=lambda: defaultdict(set))
    problems: list[str] = field(default_factory=list)
    reads: int = 0
    uncertain: dict[tuple[str, str], dict[str, list[Entry | None]]] = field(
        default_factory=lambda: defaultdict(dict))

    def fail(self, message: str) -> None:
        self.problems.append(message)


def _order(ev: Event) -> tuple[int, int]:
    if isinstance(ev, Updated | Staged):
        return (ev.revision, 0)
    if isinstance(ev, GotEntry | ListedPage | DiffedPage):
        return (ev.revision, 1)
    raise TypeError(f"no effect revision: {ev!r:.80}")


def check_branch_reads(events: Iterable[Event], log: Sequence[KvEvent] | None = None,
                       log_complete: bool = False) -> CheckResult:
    """Judge the recorded history; with the committed log's events (`log`), first add
    the updates and writes the log has and no record does (`branch_log.py`: an
    indeterminate call did not record what it did), and with a complete log report
    records the log does not have."""
    history = list(events)
    check = _Check()
    taken = ""
    if log is not None:
        recorded = len(history)
        history, unlogged = complete_history(history, log)
        if log_complete:
            check.problems += unlogged
        added = history[recorded:]
        ups = sum(1 for ev in added if isinstance(ev, Updated))
        taken = (f"; from the committed log {ups} update(s) and {len(added) - ups} write(s) "
                 f"no record had: {', '.join(_what(ev) for ev in added[:3])}"
                 if added else "; every logged update and write was recorded")
    for u in history:
        if isinstance(u, Uncertain):
            check.uncertain[(u.repo, u.branch)].setdefault(u.path, []).append(u.entry)
    for ev in sorted((e for e in history if not isinstance(e, Lost | Uncertain)), key=_order):
        if isinstance(ev, Updated):
            _updated(check, ev)
        elif isinstance(ev, Staged):
            _staged(check, ev)
        else:
            _read(check, ev)
    for lost in history:
        if isinstance(lost, Lost) and lost.base_revision not in check.winners[
                (lost.repo, lost.branch)]:
            check.fail(f"{lost.repo}/{lost.branch}: a {lost.kind} lost its race at mod "
                       f"revision {lost.base_revision}, which no update replaced")
    if check.problems:
        head = check.problems[0]
        rest = check.problems[1:MAX_DETAILS]
        return violated(NAME, f"{len(check.problems)} problem(s): {head}{taken}", (), rest)
    return passed(NAME, f"{check.reads} reads equal the model; "
                        f"{sum(len(w) for w in check.winners.values())} updates in chains"
                        f"{taken}")


def _what(ev: Event) -> str:
    if isinstance(ev, Updated):
        return f"{ev.kind} of {ev.repo}/{ev.branch} at revision {ev.revision}"
    if isinstance(ev, Staged):
        return f"write of {ev.path!r:.40} at revision {ev.revision}"
    return type(ev).__name__


# ---- updates ------------------------------------------------------------------------------


def _updated(check: _Check, ev: Updated) -> None:
    key = (ev.repo, ev.branch)
    check.winners[key].add(ev.base_revision)
    name = f"{ev.repo}/{ev.branch}"
    if ev.kind == "create":
        if key in check.models and ev.base_revision != 0:
            check.fail(f"{name}: created twice")
        content = dict(check.commits.setdefault((ev.repo, ev.after.commit_id), {}))
        check.models[key] = _Model(ev.after, ev.revision, content, dict(content),
                                   [ev.after.staging_token],
                                   uncertain=check.uncertain.get(key, {}))
        check.models[key].seen.add(ev.after.staging_token)
        return
    model = check.models.get(key)
    if model is None:
        check.fail(f"{name}: {ev.kind} at revision {ev.revision} of a branch never created")
        return
    if ev.base_revision != model.revision:
        check.fail(f"{name}: {ev.kind} at revision {ev.revision} compared mod revision "
                   f"{ev.base_revision}, but the branch was last written at {model.revision} "
                   f"(two winners, or an update the history missed)")
    if ev.before != model.branch:
        check.fail(f"{name}: {ev.kind} saw {ev.before}, the model has {model.branch}")
    before, after = model.branch, ev.after
    problem = _rule_problem(ev.kind, before, after, model)
    if problem:
        check.fail(f"{name}: {ev.kind} at revision {ev.revision}: {problem}")
    model.seen.add(after.staging_token)
    if ev.kind in ("seal", "compaction_start"):
        model.pending.append(after.staging_token)
    elif ev.kind == "compaction_finish":
        model.folded.update(before.sealed_tokens)
    elif ev.kind == "commit":
        committed = dict(model.committed)
        taken = [t for t in model.pending if t != after.staging_token]
        for _, path, entry in sorted(w for t in taken for w in model.writes.get(t, [])):
            _set(committed, path, entry)
        model.committed = committed
        check.commits[(ev.repo, after.commit_id)] = dict(committed)
        model.pending = [after.staging_token]
        model.folded.clear()
    elif ev.kind == "reset":
        model.view = dict(model.committed)
        model.pending = [after.staging_token]
        model.folded.clear()
    model.branch = after
    model.revision = ev.revision


def _rule_problem(kind: str, before: Branch, after: Branch, model: _Model) -> str | None:
    fresh = after.staging_token not in model.seen
    if kind in ("seal", "compaction_start"):
        if after.sealed_tokens != (before.staging_token, *before.sealed_tokens) or not fresh:
            return "not a seal: the staging token must join the sealed ones, a new one start"
        if (after.commit_id, after.compacted_metarange) != (before.commit_id,
                                                             before.compacted_metarange):
            return "a seal changed the commit or the compacted metarange"
        if kind == "compaction_start" and after.compaction_start_time is None:
            return "compaction step 1 did not set CompactionStartTime"
    elif kind == "compaction_finish":
        if after.sealed_tokens or after.compacted_metarange is None:
            return "step 3 must clear the sealed tokens and set a compacted metarange"
        if (after.staging_token, after.commit_id) != (before.staging_token, before.commit_id):
            return "step 3 changed the staging token or the commit"
    elif kind == "commit":
        if after.sealed_tokens or after.compacted_metarange is not None:
            return "a commit must clear the sealed tokens and the compacted metarange"
        if after.staging_token != before.staging_token or after.commit_id == before.commit_id:
            return "a commit must keep the staging token and move the commit"
    elif kind == "reset":
        if after.sealed_tokens or after.compacted_metarange is not None or not fresh:
            return "a reset must start a new token and clear every other layer"
    else:
        return f"unknown kind {kind!r}"
    return None


def _staged(check: _Check, ev: Staged) -> None:
    key = (ev.repo, ev.branch)
    model = check.models.get(key)
    name = f"{ev.repo}/{ev.branch}"
    if model is None:
        check.fail(f"{name}: a write to a branch never created")
        return
    if ev.token != model.branch.staging_token:
        check.fail(f"{name}: the write of {ev.path!r:.80} at revision {ev.revision} landed on "
                   f"token {ev.token}, not the staging token {model.branch.staging_token}: "
                   f"an acknowledged write that the branch will lose")
        return
    model.writes.setdefault(ev.token, []).append((ev.revision, ev.path, ev.entry))
    _set(model.view, ev.path, ev.entry)


def _set(content: dict[str, Entry], path: str, entry: Entry | None) -> None:
    if entry is None:
        content.pop(path, None)
    else:
        content[path] = entry


# ---- reads --------------------------------------------------------------------------------


def _read(check: _Check, ev: GotEntry | ListedPage | DiffedPage) -> None:
    model = check.models.get((ev.repo, ev.branch))
    name = f"{ev.repo}/{ev.branch}"
    check.reads += 1
    if model is None:
        check.fail(f"{name}: a read of a branch never created")
        return
    if isinstance(ev, GotEntry):
        want = model.view.get(ev.path)
        if ev.entry != want and not _tolerated(model, ev.path, ev.entry):
            check.fail(f"{name}: get {ev.path!r:.80} at revision {ev.revision} read "
                       f"{ev.entry}, the model has {want}")
    elif isinstance(ev, ListedPage):
        items = sorted(p for p in model.view if p.startswith(ev.prefix) and p > ev.after)
        want_items = [(p, model.view[p]) for p in items[:ev.amount]]
        more = len(items) > ev.amount
        if (list(ev.entries), ev.has_more) != (want_items, more) and not _page_tolerated(
                model, list(ev.entries), want_items):
            check.fail(f"{name}: list {ev.prefix!r:.40} after {ev.after!r:.40} at revision "
                       f"{ev.revision}: {_page_diff(list(ev.entries), want_items)}")
    else:
        diffs = _model_diff(model, ev.prefix, ev.after)
        want_diffs = diffs[:ev.amount]
        if (list(ev.diffs), ev.has_more) != (want_diffs, len(diffs) > ev.amount) and not all(
                d.path in model.uncertain for d in set(ev.diffs) ^ set(want_diffs)):
            got_kinds = [(d.path, d.kind) for d in ev.diffs]
            want_kinds = [(d.path, d.kind) for d in want_diffs]
            check.fail(f"{name}: diff at revision {ev.revision} returned {got_kinds[:5]}..., "
                       f"the model has {want_kinds[:5]}...")


def _model_diff(model: _Model, prefix: str, after: str) -> list[Diff]:
    paths = sorted(p for p in set(model.view) | set(model.committed)
                   if p.startswith(prefix) and p > after)
    out = []
    for p in paths:
        d = classify(p, model.committed.get(p), model.view.get(p))
        if d is not None:
            out.append(d)
    return out


def _tolerated(model: _Model, path: str, entry: Entry | None) -> bool:
    return path in model.uncertain and entry in model.uncertain[path]


def _page_tolerated(model: _Model, got: list[tuple[str, Entry]],
                    want: list[tuple[str, Entry]]) -> bool:
    return bool(model.uncertain) and all(p in model.uncertain for p, _ in set(got) ^ set(want))


def _page_diff(got: list[tuple[str, Entry]], want: list[tuple[str, Entry]]) -> str:
    g, w = dict(got), dict(want)
    missing = [p for p in w if p not in g]
    extra = [p for p in g if p not in w]
    changed = [p for p in g if p in w and g[p] != w[p]]
    return (f"missing {missing[:5]} (acknowledged writes not read), extra {extra[:5]}, "
            f"different {changed[:5]}")


__all__ = ["NAME", "check_branch_reads"]
