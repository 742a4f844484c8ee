"""The compaction coordinator of the raft leader (Netsy's Primary), as a pure step core.

`step(state, event) -> (state, effects)`: no clock (time comes in events), no I/O. One
cycle at a time, each phase bounded by a timer:

1. "min": ask every node for its minimum watch revision (SendMinRequest). A node that does
   not answer before the deadline aborts the cycle (Netsy: any failed query ends it).
   With a block tier (`config.hold`), the flushed-through revision of the metastore
   is one more participant (QueryHold / HoldReply): it must answer in the same phase,
   or the cycle aborts like a silent node (`HOLD` among the failed participants).
2. The compaction revision is the global minimum - 1, and never above the hold (the
   hot store may drop only values the blocks already hold); used only if above the
   last one (forward only; this also skips revision 0).
3. "notice": SendNotice(attempt 1) to every node. When all answered or the deadline
   passed, the nodes that did not confirm get one retry ("retry", attempt 2). A refusal
   of the retry, or its deadline, aborts: SendRollback to every node that was sent the
   notice (a confirmation whose reply was lost must be undone too; a rollback where
   nothing was pinned is a no-op), then the cycle ends.
4. "propose": all confirmed, so ProposeCompact through raft, awaiting ProposeResult.
   From here nothing is rolled back: the proposal may commit whatever we hear, and the
   nodes' floors must then already be in place.

Leadership lost (Stop) ends the cycle; before the proposal its notices are rolled back.
Replies are matched on (cycle, phase, revision): anything from another cycle is ignored.
The last compaction revision advances when a proposal is made, so the revisions proposed
are strictly increasing even when a result is lost.

The shell executes the effects of a step in order. It turns SetTimer(deadline, None,
"interval") into Tick(now) and SetTimer(deadline, cycle, phase) into Timeout(cycle,
phase, now) at the deadline; stale or early timer events are ignored, so timers need not
be cancelled. CycleEnded is for logs and metrics only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, assert_never

from sediment.actors.kv.admission import CycleId

NodeId = str
HOLD: NodeId = "<flushed-through>"  # the hold's name among a cycle's failed participants
Phase = Literal["min", "notice", "retry", "propose"]
TimerPhase = Literal["interval", "min", "notice", "retry", "propose"]
Outcome = Literal[
    "compacted",  # the Compact entry was committed
    "nothing_to_compact",  # global minimum - 1 is not above the last compaction revision
    "min_failed",  # a node (or the hold) did not answer in time (or there are no nodes)
    "refused",  # a node refused the notice twice
    "notice_timeout",  # a node did not confirm the retry in time
    "propose_failed",  # raft answered the proposal with an error
    "propose_timeout",  # no answer from raft in time
    "leadership_lost",  # Stop (or a newer term) in the middle of the cycle
]


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    interval: float  # between cycle starts (Netsy's compaction_interval)
    min_timeout: float = 5.0  # whole "min" phase
    notice_timeout: float = 5.0  # each notice attempt
    propose_timeout: float = 30.0  # waiting for raft's answer
    hold: bool = False  # a block tier: never compact above its flushed-through revision

    def __post_init__(self) -> None:
        times = (self.interval, self.min_timeout, self.notice_timeout, self.propose_timeout)
        if min(times) <= 0:
            raise ValueError(f"coordinator times must be positive: {self}")


@dataclass(frozen=True, slots=True)
class Cycle:
    id: CycleId
    phase: Phase
    nodes: tuple[NodeId, ...]
    started_at: float
    mins: Mapping[NodeId, int] = field(default_factory=dict)
    revision: int = 0  # the compaction revision, once computed
    confirmed: frozenset[NodeId] = frozenset()
    refused: frozenset[NodeId] = frozenset()  # refused attempt 1
    hold: int | None = None  # the flushed-through revision, once it answered


@dataclass(frozen=True, slots=True)
class CoordinatorState:
    config: CoordinatorConfig
    leader: bool = False
    term: int = 0
    nodes: tuple[NodeId, ...] = ()
    seq: int = 0  # last cycle number (never reused, across terms too)
    last_revision: int = 0  # highest compaction revision committed or proposed
    next_due: float = 0.0  # next cycle start, while leader
    cycle: Cycle | None = None


def init(config: CoordinatorConfig, last_revision: int = 0) -> CoordinatorState:
    """A coordinator that is not leader yet; last_revision is the applied compaction."""
    return CoordinatorState(config=config, last_revision=last_revision)


# ---- events -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Start:
    """This node became raft leader in `term`; compaction_revision is the latest applied."""

    now: float
    term: int
    nodes: tuple[NodeId, ...]
    compaction_revision: int


@dataclass(frozen=True, slots=True)
class Stop:
    """Leadership lost: end any cycle, propose nothing."""

    now: float


@dataclass(frozen=True, slots=True)
class Tick:
    """The interval timer fired: start a cycle if none is running."""

    now: float


@dataclass(frozen=True, slots=True)
class MinReply:
    node: NodeId
    cycle: CycleId
    revision: int
    now: float


@dataclass(frozen=True, slots=True)
class HoldReply:
    """The block tier's flushed-through revision, asked for by QueryHold(cycle)."""

    cycle: CycleId
    through: int
    now: float


@dataclass(frozen=True, slots=True)
class NoticeReply:
    node: NodeId
    cycle: CycleId
    revision: int
    attempt: int
    confirmed: bool
    now: float


@dataclass(frozen=True, slots=True)
class ProposeResult:
    cycle: CycleId
    revision: int
    ok: bool
    now: float


@dataclass(frozen=True, slots=True)
class Timeout:
    """A SetTimer of `cycle` for `phase` reached its deadline."""

    cycle: CycleId
    phase: Phase
    now: float


Event = Start | Stop | Tick | MinReply | HoldReply | NoticeReply | ProposeResult | Timeout

# ---- effects ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendMinRequest:
    node: NodeId
    cycle: CycleId


@dataclass(frozen=True, slots=True)
class QueryHold:
    """Read the block tier's flushed-through revision; feed HoldReply(cycle, ...)."""

    cycle: CycleId


@dataclass(frozen=True, slots=True)
class SendNotice:
    """Ask the node to run admission.notice(cycle, revision); echo attempt in the reply."""

    node: NodeId
    cycle: CycleId
    revision: int
    attempt: int


@dataclass(frozen=True, slots=True)
class SendRollback:
    """Ask the node to run admission.rollback(cycle, revision). Best effort: no reply."""

    node: NodeId
    cycle: CycleId
    revision: int


@dataclass(frozen=True, slots=True)
class ProposeCompact:
    """Propose the Compact entry through raft; feed ProposeResult(cycle, revision, ...)."""

    cycle: CycleId
    revision: int


@dataclass(frozen=True, slots=True)
class SetTimer:
    deadline: float
    cycle: CycleId | None  # None: the interval timer (feed Tick)
    phase: TimerPhase


@dataclass(frozen=True, slots=True)
class CycleEnded:
    """For logs and metrics. revision: the compaction revision (0 if never computed);
    nodes: the ones that failed the cycle (silent or refusing); mins: what each node
    reported in the "min" phase (logged, so a cycle held back by one node's minimum shows
    which node; not compared)."""

    cycle: CycleId
    outcome: Outcome
    revision: int
    nodes: tuple[NodeId, ...]
    duration: float
    mins: tuple[tuple[NodeId, int], ...] = field(default=(), compare=False)


Effect = (SendMinRequest | QueryHold | SendNotice | SendRollback | ProposeCompact | SetTimer
          | CycleEnded)
Step = tuple[CoordinatorState, tuple[Effect, ...]]

# ---- step -------------------------------------------------------------------------------


def step(state: CoordinatorState, event: Event) -> Step:
    """One event in, the new state and the effects to run in order out."""
    match event:
        case Start():
            return _on_start(state, event)
        case Stop():
            return _on_stop(state, event)
        case Tick():
            return _on_tick(state, event)
        case MinReply():
            return _on_min_reply(state, event)
        case HoldReply():
            return _on_hold_reply(state, event)
        case NoticeReply():
            return _on_notice_reply(state, event)
        case ProposeResult():
            return _on_propose_result(state, event)
        case Timeout():
            return _on_timeout(state, event)
        case _:
            assert_never(event)


def _on_start(state: CoordinatorState, ev: Start) -> Step:
    """Leadership gained: arm the interval. A Start from an older term is stale."""
    if ev.term < state.term or (state.leader and ev.term == state.term):
        return state, ()
    state, ended = _end_cycle(state, "leadership_lost", (), ev.now)
    due = ev.now + state.config.interval
    state = replace(
        state,
        leader=True,
        term=ev.term,
        nodes=ev.nodes,
        last_revision=max(state.last_revision, ev.compaction_revision),
        next_due=due,
    )
    return state, (*ended, SetTimer(due, None, "interval"))


def _on_stop(state: CoordinatorState, ev: Stop) -> Step:
    if not state.leader:
        return state, ()
    state, ended = _end_cycle(state, "leadership_lost", (), ev.now)
    return replace(state, leader=False), ended


def _on_tick(state: CoordinatorState, ev: Tick) -> Step:
    """Interval elapsed: re-arm it, and start a cycle unless one is still running."""
    if not state.leader or ev.now < state.next_due:
        return state, ()
    due = ev.now + state.config.interval
    state = replace(state, next_due=due)
    timer = SetTimer(due, None, "interval")
    if state.cycle is not None:
        return state, (timer,)
    state, effects = _start_cycle(state, ev.now)
    return state, (timer, *effects)


def _start_cycle(state: CoordinatorState, now: float) -> Step:
    cid = CycleId(state.term, state.seq + 1)
    cycle = Cycle(cid, "min", state.nodes, started_at=now)
    state = replace(state, seq=cid.seq, cycle=cycle)
    if not state.nodes:
        return _end_cycle(state, "min_failed", (), now)
    asks: tuple[Effect, ...] = tuple(SendMinRequest(node, cid) for node in state.nodes)
    if state.config.hold:
        asks = (*asks, QueryHold(cid))
    return state, (*asks, SetTimer(now + state.config.min_timeout, cid, "min"))


def _on_min_reply(state: CoordinatorState, ev: MinReply) -> Step:
    cycle = _current(state, ev.cycle, ("min",))
    if cycle is None or ev.node not in cycle.nodes or ev.node in cycle.mins:
        return state, ()
    cycle = replace(cycle, mins={**cycle.mins, ev.node: ev.revision})
    state = replace(state, cycle=cycle)
    if not _mins_complete(state, cycle):
        return state, ()
    return _after_mins(state, cycle, ev.now)


def _on_hold_reply(state: CoordinatorState, ev: HoldReply) -> Step:
    cycle = _current(state, ev.cycle, ("min",))
    if cycle is None or not state.config.hold or cycle.hold is not None:
        return state, ()
    cycle = replace(cycle, hold=ev.through)
    state = replace(state, cycle=cycle)
    if not _mins_complete(state, cycle):
        return state, ()
    return _after_mins(state, cycle, ev.now)


def _mins_complete(state: CoordinatorState, cycle: Cycle) -> bool:
    """Every node reported its minimum, and the hold its revision when there is one."""
    held = not state.config.hold or cycle.hold is not None
    return held and len(cycle.mins) == len(cycle.nodes)


def _after_mins(state: CoordinatorState, cycle: Cycle, now: float) -> Step:
    """Every participant answered: compute the revision and send the first notices."""
    revision = min(cycle.mins.values()) - 1
    if cycle.hold is not None:
        revision = min(revision, cycle.hold)
    cycle = replace(cycle, revision=revision)
    state = replace(state, cycle=cycle)
    if revision <= state.last_revision:
        return _end_cycle(state, "nothing_to_compact", (), now)
    state = replace(state, cycle=replace(cycle, phase="notice"))
    notices = tuple(SendNotice(node, cycle.id, revision, 1) for node in cycle.nodes)
    return state, (*notices, SetTimer(now + state.config.notice_timeout, cycle.id, "notice"))


def _on_notice_reply(state: CoordinatorState, ev: NoticeReply) -> Step:
    cycle = _current(state, ev.cycle, ("notice", "retry"))
    if cycle is None or ev.node not in cycle.nodes or ev.revision != cycle.revision:
        return state, ()
    if ev.confirmed:
        cycle = replace(cycle, confirmed=cycle.confirmed | {ev.node})
    elif cycle.phase == "notice":
        cycle = replace(cycle, refused=cycle.refused | {ev.node})
    elif ev.attempt >= 2 and ev.node not in cycle.confirmed:
        return _end_cycle(state, "refused", (ev.node,), ev.now)
    state = replace(state, cycle=cycle)
    if len(cycle.confirmed) == len(cycle.nodes):
        return _propose(state, cycle, ev.now)
    if cycle.phase == "notice" and cycle.confirmed | cycle.refused == set(cycle.nodes):
        return _retry(state, cycle, ev.now)
    return state, ()


def _retry(state: CoordinatorState, cycle: Cycle, now: float) -> Step:
    """The one retry, for every node that has not confirmed (refused or silent)."""
    state = replace(state, cycle=replace(cycle, phase="retry"))
    notices = tuple(
        SendNotice(node, cycle.id, cycle.revision, 2)
        for node in cycle.nodes
        if node not in cycle.confirmed
    )
    return state, (*notices, SetTimer(now + state.config.notice_timeout, cycle.id, "retry"))


def _propose(state: CoordinatorState, cycle: Cycle, now: float) -> Step:
    """Confirmed cluster-wide. The revision counts as used from now on: the proposal may
    commit even if its result never arrives."""
    state = replace(
        state,
        cycle=replace(cycle, phase="propose"),
        last_revision=max(state.last_revision, cycle.revision),
    )
    deadline = now + state.config.propose_timeout
    return state, (
        ProposeCompact(cycle.id, cycle.revision),
        SetTimer(deadline, cycle.id, "propose"),
    )


def _on_propose_result(state: CoordinatorState, ev: ProposeResult) -> Step:
    cycle = _current(state, ev.cycle, ("propose",))
    if cycle is None or ev.revision != cycle.revision:
        return state, ()
    return _end_cycle(state, "compacted" if ev.ok else "propose_failed", (), ev.now)


def _on_timeout(state: CoordinatorState, ev: Timeout) -> Step:
    cycle = _current(state, ev.cycle, (ev.phase,))
    if cycle is None:
        return state, ()
    if cycle.phase == "min":
        silent = tuple(n for n in cycle.nodes if n not in cycle.mins)
        if state.config.hold and cycle.hold is None:
            silent = (*silent, HOLD)
        return _end_cycle(state, "min_failed", silent, ev.now)
    if cycle.phase == "notice":
        return _retry(state, cycle, ev.now)
    if cycle.phase == "retry":
        silent = tuple(n for n in cycle.nodes if n not in cycle.confirmed)
        return _end_cycle(state, "notice_timeout", silent, ev.now)
    return _end_cycle(state, "propose_timeout", (), ev.now)


def _end_cycle(
    state: CoordinatorState, outcome: Outcome, nodes: tuple[NodeId, ...], now: float
) -> Step:
    """Close the running cycle (if any); one still in a notice phase is rolled back."""
    cycle = state.cycle
    if cycle is None:
        return state, ()
    rollbacks: tuple[Effect, ...] = ()
    if cycle.phase in ("notice", "retry"):
        rollbacks = tuple(SendRollback(n, cycle.id, cycle.revision) for n in cycle.nodes)
    ended = CycleEnded(cycle.id, outcome, cycle.revision, nodes, now - cycle.started_at,
                       tuple(sorted(cycle.mins.items())))
    return replace(state, cycle=None), (*rollbacks, ended)


def _current(state: CoordinatorState, cid: CycleId, phases: tuple[Phase, ...]) -> Cycle | None:
    """The running cycle if `cid` is it and it is in one of `phases`; else None (stale)."""
    cycle = state.cycle
    if cycle is None or cycle.id != cid or cycle.phase not in phases:
        return None
    return cycle


__all__ = [
    "CoordinatorConfig",
    "CoordinatorState",
    "Cycle",
    "CycleEnded",
    "CycleId",
    "HOLD",
    "Effect",
    "Event",
    "HoldReply",
    "MinReply",
    "NodeId",
    "NoticeReply",
    "Outcome",
    "Phase",
    "ProposeCompact",
    "ProposeResult",
    "QueryHold",
    "SendMinRequest",
    "SendNotice",
    "SendRollback",
    "SetTimer",
    "Start",
    "Step",
    "Stop",
    "Tick",
    "TimerPhase",
    "Timeout",
    "init",
    "step",
]
