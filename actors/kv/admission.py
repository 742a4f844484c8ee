"""Watch admission on one node: the node side of watch-aware compaction (Netsy's peer API).

Pure: every function takes a state and returns a new one with a result or effects; no
clock, no disk. The node's KV process owns the state and makes every call one at a time:
that serialisation is the "single lock" of Netsy's SetWatchAdmissionFloor.

Revisions. A watch *needs* revision r while it still has to deliver the events of r; its
minimum revision is the first one it needs (its start, raised by `progress_watch`).
Compaction at C destroys what revisions <= C held (value-only: superseded puts and
tombstones), so a watch needing r is safe iff r > C. Hence:

- admission refuses start <= floor with ErrCompacted(floor), as Netsy does;
- a notice for C is refused while any watch needs some r <= C. Netsy's check is `< C`,
  which lets a watch at exactly C survive the check and then lose events to the compaction.
- a watch "from now" (start 0) is registered at its real start, max(committed, floor) + 1,
  so it never stalls compaction (Netsy registers it at 0 and compaction stops).

The floor is max(persisted compaction revision, base, pins). `base` comes from a restart
(seeding) and from the leader's Initial message; a *pin* is one confirmed notice, keyed by
the coordinator's cycle, kept until that cycle rolls it back or a Compact at or above it is
persisted. Netsy keeps one floor that a rollback overwrites with the previous revision; one
pin per cycle means a rollback only undoes its own cycle, so a late rollback (or an old
leader's cycle interleaved with a new leader's) can never lower the floor under a notice
that another cycle confirmed and may already have proposed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from sediment.actors.kv.errors import ErrCompacted

MAX_PINS = 16  # beyond this the oldest pin is folded into `base` (never lowers the floor)
MAX_ROLLED_BACK = 16  # rolled-back cycles remembered to refuse their late notices

WatchKey = tuple[str, int]  # (watcher, watch id)


@dataclass(frozen=True, slots=True, order=True)
class CycleId:
    """One compaction cycle of one leader: unique across leaders because terms are."""

    term: int
    seq: int


@dataclass(frozen=True, slots=True)
class AdmissionState:
    committed: int = 0  # the node's committed revision (what its watches may see)
    persisted: int = 0  # highest Compact revision in the local `compactions` table
    base: int = 0  # floor learned from seeding and the leader's Initial message
    pins: tuple[tuple[CycleId, int], ...] = ()  # confirmed notices, oldest first
    rolled_back: tuple[CycleId, ...] = ()  # recent rolled-back cycles, oldest first
    watches: Mapping[WatchKey, int] = field(default_factory=dict)  # key -> min revision


# ---- results and effects ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Admitted:
    start_revision: int  # the effective start (resolved for a "from now" watch)


@dataclass(frozen=True, slots=True)
class Confirmed:
    revision: int


@dataclass(frozen=True, slots=True)
class NoticeRefused:
    """`watch` needs `watch_revision` <= revision; None for a cycle already rolled back."""

    revision: int
    watch: WatchKey | None
    watch_revision: int | None


NoticeResult = Confirmed | NoticeRefused


@dataclass(frozen=True, slots=True)
class PersistCompaction:
    """Write the revision to `compactions` (seeded: derived from compacted rows on restart)
    and start the value-only pass; the store's schedule_compaction does both."""

    revision: int
    seeded: bool = False


@dataclass(frozen=True, slots=True)
class CancelWatch:
    """Cancel this watch with ErrCompacted(compact_revision), as etcd does for a watch whose
    history was compacted. Only a node that lost its floor (a restart) can reach this."""

    watch: WatchKey
    compact_revision: int


AdmissionEffect = PersistCompaction | CancelWatch


# ---- queries ----------------------------------------------------------------------------


def floor(state: AdmissionState) -> int:
    """The admission floor: no watch may start at or below it."""
    pinned = max((rev for _, rev in state.pins), default=0)
    return max(state.persisted, state.base, pinned)


def min_revision(state: AdmissionState) -> int:
    """What this node reports to the coordinator: the lowest revision an active watch
    needs, capped at the committed revision (also the answer when there are none), so a
    future or "from now" watch never pushes the compaction up to an unwritten revision."""
    return min([state.committed, *state.watches.values()])


def admit(state: AdmissionState, start_revision: int) -> Admitted | ErrCompacted:
    """May a watch start at start_revision (0: from now)? Refused at or below the floor."""
    if start_revision < 0:
        raise ValueError(f"negative start revision {start_revision}")
    low = floor(state)
    if start_revision == 0:
        return Admitted(max(state.committed, low) + 1)
    if start_revision <= low:
        return ErrCompacted(low)
    return Admitted(start_revision)


# ---- restart ----------------------------------------------------------------------------


def restore(
    persisted: int, committed: int, derived: int = 0
) -> tuple[AdmissionState, tuple[AdmissionEffect, ...]]:
    """The state after a restart, before any watch is accepted. `persisted` is the highest
    revision in `compactions` (0: empty); `derived` the highest revision up to which the
    records rows are contiguously compacted (computed by the shell). An empty table is
    seeded from `derived` (Netsy's preflight); the floor covers both either way."""
    state = AdmissionState(committed=committed, persisted=persisted, base=derived)
    if persisted == 0 and derived > 0:
        return replace(state, persisted=derived), (PersistCompaction(derived, seeded=True),)
    return state, ()


def leader_initial(
    state: AdmissionState, compaction_revision: int
) -> tuple[AdmissionState, tuple[AdmissionEffect, ...]]:
    """The leader's Initial message on a (re)connected follow stream: raise the floor to
    its compaction revision without waiting for the next cycle (never lowers it)."""
    state = replace(state, base=max(state.base, compaction_revision))
    return _cancel_compacted(state, compaction_revision)


def advance(state: AdmissionState, committed: int) -> AdmissionState:
    """The committed revision moved (never backwards)."""
    if committed <= state.committed:
        return state
    return replace(state, committed=committed)


# ---- watches ----------------------------------------------------------------------------


def create_watch(
    state: AdmissionState, key: WatchKey, start_revision: int
) -> tuple[AdmissionState, Admitted | ErrCompacted]:
    """Admit and register a watch at its effective start, in one step (no TOCTOU)."""
    if key in state.watches:
        raise ValueError(f"watch {key!r} is already active")
    verdict = admit(state, start_revision)
    if isinstance(verdict, ErrCompacted):
        return state, verdict
    return _with_watches(state, {**state.watches, key: verdict.start_revision}), verdict


def progress_watch(state: AdmissionState, key: WatchKey, next_revision: int) -> AdmissionState:
    """The watch delivered everything below next_revision: it no longer needs those."""
    current = state.watches.get(key)
    if current is None or next_revision <= current:
        return state
    return _with_watches(state, {**state.watches, key: next_revision})


def cancel_watch(state: AdmissionState, key: WatchKey) -> AdmissionState:
    """The watch ended (cancelled, its stream closed); unknown keys are ignored."""
    if key not in state.watches:
        return state
    return _with_watches(state, {k: v for k, v in state.watches.items() if k != key})


# ---- the compaction protocol ------------------------------------------------------------


def notice(
    state: AdmissionState, cycle: CycleId, revision: int
) -> tuple[AdmissionState, NoticeResult]:
    """The coordinator will compact at `revision`. Raising the floor and checking the
    watches happen in this one step, so no watch can be admitted between the two; a
    refusal leaves the state as it was (the raise is rolled back). A notice at or below
    the floor is confirmed as is: every active watch already needs more than the floor."""
    if cycle in state.rolled_back:
        return state, NoticeRefused(revision, None, None)
    if revision > floor(state):
        blocking = _lowest_watch(state, revision)
        if blocking is not None:
            return state, NoticeRefused(revision, blocking[0], blocking[1])
    return _pin(state, cycle, revision), Confirmed(revision)


def rollback(state: AdmissionState, cycle: CycleId, revision: int) -> AdmissionState:
    """Another node refused `cycle`'s notice: drop its pin. The floor falls back only as
    far as the other pins, the persisted revision and the base allow, so a revision whose
    Compact was persisted or confirmed by another cycle stays protected."""
    pins = tuple(p for p in state.pins if p != (cycle, revision))
    rolled = (*state.rolled_back, cycle)[-MAX_ROLLED_BACK:]
    return replace(state, pins=pins, rolled_back=rolled)


def compact_committed(
    state: AdmissionState, revision: int
) -> tuple[AdmissionState, tuple[AdmissionEffect, ...]]:
    """The Compact raft entry was applied here: persist it (once; never backwards). The
    floor stays at least there for good; pins it covers are no longer needed."""
    if revision <= state.persisted:
        return state, ()
    pins = tuple(p for p in state.pins if p[1] > revision)
    state = replace(state, persisted=revision, pins=pins)
    state, cancels = _cancel_compacted(state, revision)
    return state, (PersistCompaction(revision), *cancels)


# ---- helpers ----------------------------------------------------------------------------


def _with_watches(state: AdmissionState, watches: dict[WatchKey, int]) -> AdmissionState:
    return replace(state, watches=watches)


def _lowest_watch(state: AdmissionState, revision: int) -> tuple[WatchKey, int] | None:
    """The watch needing the lowest revision at or below `revision`, if any."""
    low = [(rev, key) for key, rev in state.watches.items() if rev <= revision]
    if not low:
        return None
    rev, key = min(low)
    return key, rev


def _pin(state: AdmissionState, cycle: CycleId, revision: int) -> AdmissionState:
    """Hold the floor at `revision` for `cycle` (nothing to hold once it is persisted)."""
    if revision <= state.persisted or (cycle, revision) in state.pins:
        return state
    pins = (*state.pins, (cycle, revision))
    base = state.base
    while len(pins) > MAX_PINS:
        base = max(base, pins[0][1])
        pins = pins[1:]
    return replace(state, pins=pins, base=base)


def _cancel_compacted(
    state: AdmissionState, revision: int
) -> tuple[AdmissionState, tuple[CancelWatch, ...]]:
    """Watches that need a revision at or below a compaction that happened anyway."""
    gone = sorted(key for key, rev in state.watches.items() if rev <= revision)
    if not gone:
        return state, ()
    keep = {k: v for k, v in state.watches.items() if v > revision}
    return _with_watches(state, keep), tuple(CancelWatch(key, revision) for key in gone)


__all__ = [
    "MAX_PINS",
    "MAX_ROLLED_BACK",
    "AdmissionEffect",
    "AdmissionState",
    "Admitted",
    "CancelWatch",
    "Confirmed",
    "CycleId",
    "NoticeRefused",
    "NoticeResult",
    "PersistCompaction",
    "WatchKey",
    "admit",
    "advance",
    "cancel_watch",
    "compact_committed",
    "create_watch",
    "floor",
    "leader_initial",
    "min_revision",
    "notice",
    "progress_watch",
    "restore",
    "rollback",
]
