"""The branch tier's updates and staged writes as the committed log has them (pure).

The tier records each branch update and staged write when its KV call answers
(`actors/branches/history.py`). A call that timed out or lost its answer to a leader
kill records nothing (an update) or only `Uncertain` (a write), yet its entry may be in
the committed log: a later update compares the revision it wrote and a later write lands
on the token it started. A checker that took the missing record as "did not happen"
would blame the store for the tier's lost answer. So the log is the truth and the
records are checked against it:

- a branch key's put in the log with no `Updated` at its revision becomes one, its
  before and compared mod revision from the key's previous value in the log, its kind
  read from what changed (`infer_kind`);
- a staging key's put with no `Staged` at its revision becomes one, on the branch whose
  token it is (a put on a token no branch ever had is left out: nothing reads it);
- with a complete log, a recorded update or write at a revision where the log has no
  such put is reported (`unlogged`): the tier claims a write the store does not have.

Deletes (the garbage collector's, a branch's) change nothing a branch reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sediment.actors.branches import names as nm
from sediment.actors.branches.branch import Branch, decode_branch
from sediment.actors.branches.entry import decode_value
from sediment.actors.branches.errors import CorruptRecord
from sediment.actors.branches.history import Event, Staged, Updated
from sediment.actors.kv.types import Event as KvEvent

_BRANCHES = nm.ROOT + b"b/"
_STAGING = nm.ROOT + b"s/"


def infer_kind(before: Branch | None, after: Branch) -> str:
    """Which update rule turned `before` into `after` (`branch.py`); "unknown" when none
    did, which the checker's rule check then reports."""
    if before is None:
        return "create"
    if after.sealed_tokens and after.sealed_tokens == (before.staging_token,
                                                         *before.sealed_tokens):
        started = (after.compaction_start_time is not None
                   and after.compaction_start_time != before.compaction_start_time)
        return "compaction_start" if started else "seal"
    if after.commit_id != before.commit_id:
        return "commit"
    if after.staging_token != before.staging_token:
        return "reset"
    if before.sealed_tokens and after.compacted_metarange is not None:
        return "compaction_finish"
    return "unknown"


def _branch_of(key: bytes) -> tuple[str, str] | None:
    if not key.startswith(_BRANCHES):
        return None
    repo, sep, branch = key[len(_BRANCHES):].partition(b"/")
    return (repo.decode(), branch.decode()) if sep and branch else None


def _staged_of(key: bytes) -> tuple[str, str, str] | None:
    if not key.startswith(_STAGING):
        return None
    repo, sep, _ = key[len(_STAGING):].partition(b"/")
    if not sep:
        return None
    token = nm.token_of(repo.decode(), key)
    if token is None:
        return None
    return repo.decode(), token, nm.path_of(repo.decode(), token, key)


def logged_updates(log: Iterable[KvEvent]) -> list[Updated]:
    """Every branch record put in the log, as an update (in log order)."""
    last: dict[bytes, tuple[int, Branch]] = {}
    out: list[Updated] = []
    for ev in log:
        where = _branch_of(ev.kv.key)
        if where is None:
            continue
        if ev.kind == "delete":
            last.pop(ev.kv.key, None)
            continue
        try:
            after = decode_branch(ev.kv.value)
        except CorruptRecord:
            continue  # not a record the tier wrote; the rule check has nothing to judge
        prev = last.get(ev.kv.key)
        if ev.prev_kv is not None:
            try:
                prev = (ev.prev_kv.mod_revision, decode_branch(ev.prev_kv.value))
            except CorruptRecord:
                prev = None
        before = prev[1] if prev else None
        out.append(Updated(where[0], where[1], infer_kind(before, after), before, after,
                           prev[0] if prev else 0, ev.kv.mod_revision))
        last[ev.kv.key] = (ev.kv.mod_revision, after)
    return out


def complete_history(recorded: Sequence[Event], log: Sequence[KvEvent]
                     ) -> tuple[list[Event], list[str]]:
    """The recorded events plus the log's updates and staged writes no record has, and
    the recorded ones the log does not have (reported only if the caller knows the log
    is complete). A record past the log's last revision is not one the log lacks: the
    log was read before it (a compactor still running after the run's final read)."""
    updates = logged_updates(log)
    end = max((ev.kv.mod_revision for ev in log), default=0)
    have_updates = {(u.repo, u.branch, u.revision) for u in recorded if isinstance(u, Updated)}
    have_staged = {(s.repo, s.token, s.path, s.revision) for s in recorded
                   if isinstance(s, Staged)}
    added: list[Event] = [u for u in updates if (u.repo, u.branch, u.revision) not in have_updates]
    owner: dict[tuple[str, str], str] = {}
    for u in (*updates, *(e for e in recorded if isinstance(e, Updated))):
        owner.setdefault((u.repo, u.after.staging_token), u.branch)
    logged_staged: set[tuple[str, str, str, int]] = set()
    for ev in log:
        where = _staged_of(ev.kv.key)
        if where is None or ev.kind != "put":
            continue
        repo, token, path = where
        logged_staged.add((repo, token, path, ev.kv.mod_revision))
        branch = owner.get((repo, token))
        if branch is None or (repo, token, path, ev.kv.mod_revision) in have_staged:
            continue
        try:
            entry = decode_value(ev.kv.value, ev.kv.key)
        except CorruptRecord:
            continue
        added.append(Staged(repo, branch, path, entry, token, ev.kv.mod_revision))
    logged = {(u.repo, u.branch, u.revision) for u in updates}
    unlogged = [f"{u.repo}/{u.branch}: the {u.kind} recorded at revision {u.revision} is not "
                f"in the committed log" for u in recorded
                if isinstance(u, Updated) and (u.repo, u.branch, u.revision) not in logged
                and u.revision <= end]
    unlogged += [f"{s.repo}/{s.branch}: the write of {s.path!r:.80} recorded at revision "
                 f"{s.revision} is not in the committed log" for s in recorded
                 if isinstance(s, Staged) and (s.repo, s.token, s.path, s.revision)
                 not in logged_staged and s.revision <= end]
    return [*recorded, *added], unlogged


__all__ = ["complete_history", "infer_kind", "logged_updates"]
