"""The pure supervisor core against OTP's supervisor.erl semantics (plus Akka backoff).

`Driver` plays the process shell: it feeds StartResult / TerminateResult back right after
the effect that asked for them, keeps timers, and stamps events with a fake clock.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Hashable, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from sediment.runtime.pid import Pid
from sediment.runtime.reasons import KILLED, NORMAL, SHUTDOWN, Error, Shutdown
from sediment.supervision.backoff import BackoffState, next_delay, next_uniform
from sediment.supervision.core import SupervisorState, count_children, init, step, which_children
from sediment.supervision.errors import SupervisorProtocolError
from sediment.supervision.protocol import (
    IGNORE,
    ChildExit,
    CountChildrenCall,
    DeleteChildCall,
    DynId,
    Effect,
    Event,
    Exit,
    Reply,
    Report,
    RestartChildCall,
    RetryRestart,
    Schedule,
    SpawnChild,
    Start,
    StartChildCall,
    StartError,
    StartOk,
    StartOutcome,
    StartResult,
    StopChild,
    StopChildren,
    StopRequest,
    TerminateChildCall,
    TerminateResult,
    WhichChildrenCall,
)
from sediment.supervision.requests import ChildStarted, SupervisorError
from sediment.supervision.spec import Backoff, ChildSpec, SupFlags

# ---- helpers ---------------------------------------------------------------------------


async def entry(*args: Any) -> None:
    """A process entry function; the core never calls it."""


def spec(id: Hashable, restart: str = "permanent", **kw: Any) -> ChildSpec:
    kw.setdefault("start", (entry, ()))
    return ChildSpec(id, restart=restart, **kw)  # type: ignore[arg-type]


def specs(*ids: str, restart: str = "permanent") -> list[ChildSpec]:
    return [spec(i, restart) for i in ids]


BOOM = Error("RuntimeError", "boom")


class Driver:
    """A shell in miniature: results are fed back before any other event, as required."""

    def __init__(
        self, flags: SupFlags, children: Sequence[ChildSpec], seed: int = 0, start: bool = True
    ) -> None:
        self.state: SupervisorState = init(flags, children, seed)
        self.flags, self.specs, self.seed = flags, list(children), seed
        self.now = 0.0
        self.events: list[Event] = []  # every event stepped, results included, for replay
        self.effects: list[Effect] = []
        self.timers: list[Schedule] = []
        self.outcomes: dict[Hashable, deque[StartOutcome]] = {}  # scripted start outcomes
        self.next_outcomes: deque[StartOutcome] = deque()  # for whichever child starts next
        self.stop_reasons: dict[Hashable, Any] = {}  # scripted DOWN reasons
        self.spawned: list[Hashable] = []
        self.n = 0
        if start:
            self.feed(Start())

    # -- the shell's side of the contract --

    def feed(self, event: Event) -> list[Effect]:
        out: list[Effect] = []
        pending: deque[Event] = deque([event])
        while pending:
            ev = pending.popleft()
            self.events.append(ev)
            self.state, fx = step(self.state, ev)
            out.extend(fx)
            for i, effect in enumerate(fx):
                results = self._results(effect)
                assert not results or i == len(fx) - 1, "an awaited effect must come last"
                pending.extend(results)
            assert pending or self.state.idle
        self.effects.extend(out)
        self.timers.extend(e for e in out if isinstance(e, Schedule))
        return out

    def _results(self, effect: Effect) -> list[Event]:
        if isinstance(effect, SpawnChild):
            self.spawned.append(effect.id)
            scripted = self.outcomes.get(effect.id) or self.next_outcomes
            if scripted:
                return [StartResult(effect.id, scripted.popleft())]
            self.n += 1
            return [StartResult(effect.id, StartOk(Pid("n1", f"p{self.n}")))]
        if isinstance(effect, StopChild):
            return [TerminateResult(effect.id, effect.pid, self._down(effect.id, effect.shutdown))]
        if isinstance(effect, StopChildren):
            return [
                TerminateResult(k, p, self._down(k, effect.shutdown)) for k, p in effect.children
            ]
        return []

    def _down(self, key: Hashable, shutdown: Any) -> Any:
        if key in self.stop_reasons:
            return self.stop_reasons[key]
        return KILLED if shutdown == "brutal_kill" else SHUTDOWN

    # -- conveniences for tests --

    def script(self, key: Hashable, *outcomes: StartOutcome) -> None:
        self.outcomes.setdefault(key, deque()).extend(outcomes)

    def pid(self, key: Hashable) -> Pid:
        pid = self.state.children[key].pid
        assert pid is not None, f"{key!r} is not running"
        return pid

    def crash(self, key: Hashable, reason: Any = BOOM, at: float | None = None) -> list[Effect]:
        if at is not None:
            self.now = at
        return self.feed(ChildExit(self.pid(key), reason, self.now))

    def call(self, event: Event) -> Any:
        replies = [e for e in self.feed(event) if isinstance(e, Reply)]
        assert len(replies) == 1, replies
        return replies[0].value

    def fire(self, at: float | None = None) -> list[Effect]:
        """Deliver the oldest timer, restamped with the clock as the shell does."""
        timer = self.timers.pop(0)
        self.now = max(self.now, timer.event.now) if at is None else at
        return self.feed(dataclasses.replace(timer.event, now=self.now))

    def which(self) -> list[tuple[Any, Any, str]]:
        return which_children(self.state)

    def running(self) -> list[Hashable]:
        return [k for k, c in self.state.children.items() if c.pid is not None]


def trace(effects: Sequence[Effect]) -> list[tuple[Any, ...]]:
    """A compact, comparable view of effects."""
    out: list[tuple[Any, ...]] = []
    for e in effects:
        match e:
            case SpawnChild(id=key):
                out.append(("spawn", key))
            case StopChild(id=key):
                out.append(("stop", key))
            case StopChildren(children=kids):
                out.append(("stop_all", tuple(k for k, _ in kids)))
            case Reply(value=value):
                out.append(("reply", value))
            case Schedule(delay=delay, event=ev):
                out.append(("schedule", delay, ev.id))
            case Report(kind=kind, data=data):
                out.append(("report", kind, data.get("id")))
            case Exit(reason=reason):
                out.append(("exit", reason))
    return out


def io(effects: Sequence[Effect]) -> list[tuple[Any, ...]]:
    """Only spawns, stops and the exit."""
    return [t for t in trace(effects) if t[0] in ("spawn", "stop", "stop_all", "exit")]


def sofo(template: ChildSpec | None = None, **flags: Any) -> Driver:
    return Driver(SupFlags(strategy="simple_one_for_one", **flags), [template or spec("t")])


# ---- start -----------------------------------------------------------------------------


def test_start_spawns_static_children_left_to_right() -> None:
    d = Driver(SupFlags(), specs("a", "b", "c"))
    assert trace(d.effects) == [("spawn", "a"), ("spawn", "b"), ("spawn", "c")]
    assert [(k, type(p).__name__, t) for k, p, t in d.which()] == [
        ("a", "Pid", "worker"),
        ("b", "Pid", "worker"),
        ("c", "Pid", "worker"),
    ]


def test_spawn_carries_fn_and_args() -> None:
    d = Driver(SupFlags(), [spec("a", start=(entry, (1, "x")))])
    assert d.effects == [SpawnChild("a", entry, (1, "x"))]


def test_init_start_failure_stops_started_children_in_reverse_then_exits() -> None:
    d = Driver(SupFlags(), specs("a", "b", "c", "d"), start=False)
    d.script("c", StartError("no_db"))
    fx = d.feed(Start())
    assert trace(fx) == [
        ("spawn", "a"),
        ("spawn", "b"),
        ("spawn", "c"),
        ("report", "start_error", "c"),
        ("stop", "b"),
        ("stop", "a"),
        ("exit", Shutdown(("failed_to_start_child", "c", "no_db"))),
    ]


def test_init_failure_of_the_first_child_stops_nothing() -> None:
    d = Driver(SupFlags(), specs("a", "b"), start=False)
    d.script("a", StartError("x"))
    assert io(d.feed(Start())) == [
        ("spawn", "a"),
        ("exit", Shutdown(("failed_to_start_child", "a", "x"))),
    ]


def test_init_ignore_keeps_the_spec_unless_temporary() -> None:
    d = Driver(SupFlags(), [spec("a"), spec("b", "temporary"), spec("c", "transient")], start=False)
    for key in ("a", "b", "c"):
        d.script(key, IGNORE)
    d.feed(Start())
    assert d.which() == [("a", None, "worker"), ("c", None, "worker")]


def test_simple_one_for_one_starts_no_child() -> None:
    d = sofo()
    assert d.effects == [] and d.which() == []


# ---- restart type x exit reason ----------------------------------------------------------

REASONS = [NORMAL, SHUTDOWN, Shutdown("bye"), KILLED, BOOM, "weird"]
CLEAN = {NORMAL, SHUTDOWN, Shutdown("bye")}


@pytest.mark.parametrize("reason", REASONS, ids=str)
@pytest.mark.parametrize("restart", ["permanent", "transient", "temporary"])
def test_restart_type_by_exit_reason(restart: str, reason: Any) -> None:
    d = Driver(SupFlags(intensity=10), [spec("a", restart)])
    fx = d.crash("a", reason)
    clean = reason in CLEAN
    restarted = restart == "permanent" or (restart == "transient" and not clean)
    reported = restart == "permanent" or not clean
    assert (("spawn", "a") in trace(fx)) == restarted
    assert (("report", "child_terminated", "a") in trace(fx)) == reported
    if restarted:
        assert d.which()[0][1] == d.pid("a")
    elif restart == "temporary":
        assert d.which() == []
    else:
        assert d.which() == [("a", None, "worker")]


def test_unknown_pid_exit_is_ignored() -> None:
    d = Driver(SupFlags(), specs("a"))
    assert d.feed(ChildExit(Pid("n9", "stranger"), BOOM, 0.0)) == []


def test_report_carries_id_pid_and_reason() -> None:
    d = Driver(SupFlags(), specs("a"))
    pid = d.pid("a")
    report = d.crash("a", BOOM)[0]
    assert report == Report("child_terminated", {"id": "a", "pid": pid, "reason": BOOM})


# ---- strategies ------------------------------------------------------------------------

STRATEGY_TABLE = [
    ("one_for_one", [("spawn", "b")]),
    (
        "one_for_all",
        [
            ("stop", "d"),
            ("stop", "c"),
            ("stop", "a"),
            ("spawn", "a"),
            ("spawn", "b"),
            ("spawn", "c"),
            ("spawn", "d"),
        ],
    ),
    (
        "rest_for_one",
        [("stop", "d"), ("stop", "c"), ("spawn", "b"), ("spawn", "c"), ("spawn", "d")],
    ),
]


@pytest.mark.parametrize(
    ("strategy", "expected"), STRATEGY_TABLE, ids=[s for s, _ in STRATEGY_TABLE]
)
def test_strategy_restarts_the_right_set_in_the_right_order(
    strategy: str, expected: list[tuple[str, str]]
) -> None:
    d = Driver(SupFlags(strategy=strategy), specs("a", "b", "c", "d"))  # type: ignore[arg-type]
    before = {k: d.pid(k) for k in "abcd"}
    assert io(d.crash("b")) == expected
    touched = {key for _, key in expected}
    assert all(d.pid(k) != before[k] for k in touched)
    assert all(d.pid(k) == before[k] for k in "abcd" if k not in touched)
    assert [k for k, _, _ in d.which()] == ["a", "b", "c", "d"]


def test_rest_for_one_crash_of_the_last_child_restarts_only_it() -> None:
    d = Driver(SupFlags(strategy="rest_for_one"), specs("a", "b", "c"))
    assert io(d.crash("c")) == [("spawn", "c")]


def test_simple_one_for_one_restarts_the_crashed_child_with_its_args() -> None:
    d = sofo(spec("t", start=(entry, ("base",))))
    d.call(StartChildCall((1,), "r1"))
    d.call(StartChildCall((2,), "r2"))
    fx = d.crash(DynId(1))
    assert [e for e in fx if isinstance(e, SpawnChild)] == [
        SpawnChild(DynId(1), entry, ("base", 2))
    ]
    assert [k for k in d.state.children] == [DynId(0), DynId(1)]


@pytest.mark.parametrize("strategy", ["one_for_all", "rest_for_one"])
def test_temporary_sibling_is_stopped_and_dropped_not_restarted(strategy: str) -> None:
    d = Driver(SupFlags(strategy=strategy), [spec("a"), spec("b", "temporary"), spec("c")])  # type: ignore[arg-type]
    assert io(d.crash("a")) == [
        ("stop", "c"),
        ("stop", "b"),
        ("spawn", "a"),
        ("spawn", "c"),
    ]
    assert [k for k, _, _ in d.which()] == ["a", "c"]


def test_one_for_all_also_restarts_a_manually_terminated_sibling_as_otp() -> None:
    d = Driver(SupFlags(strategy="one_for_all"), specs("a", "b", "c"))
    assert d.call(TerminateChildCall("b", "r")) == "ok"
    assert io(d.crash("a")) == [("stop", "c"), ("spawn", "a"), ("spawn", "b"), ("spawn", "c")]


def test_restart_stop_uses_the_childs_shutdown_and_reports_bad_exits() -> None:
    d = Driver(
        SupFlags(strategy="one_for_all"),
        [spec("a"), spec("b", shutdown="brutal_kill"), spec("c", shutdown=0.25)],
    )
    d.stop_reasons["c"] = KILLED  # did not stop within 0.25 s
    fx = d.crash("a")
    stops = [e for e in fx if isinstance(e, StopChild)]
    assert [(e.id, e.shutdown) for e in stops] == [("c", 0.25), ("b", "brutal_kill")]
    assert ("report", "shutdown_error", "c") in trace(fx)
    assert ("report", "shutdown_error", "b") not in trace(fx)


# ---- restart intensity ------------------------------------------------------------------


def test_exactly_intensity_restarts_within_period_are_fine_one_more_escalates() -> None:
    d = Driver(SupFlags(intensity=3, period=5.0), specs("a", "b", "c"))
    for t in (0.0, 1.0, 2.0):
        assert io(d.crash("b", at=t)) == [("spawn", "b")]
    fx = d.crash("b", at=3.0)
    assert trace(fx) == [
        ("report", "child_terminated", "b"),
        ("report", "reached_max_restart_intensity", "b"),
        ("stop", "c"),
        ("stop", "a"),
        ("exit", SHUTDOWN),
    ]
    assert d.state.exited and d.running() == []


@pytest.mark.parametrize(("at", "escalates"), [(4.999, True), (5.0, True), (5.001, False)])
def test_window_edge_is_inclusive(at: float, escalates: bool) -> None:
    d = Driver(SupFlags(intensity=1, period=5.0), specs("a"))
    d.crash("a", at=0.0)
    fx = d.crash("a", at=at)
    assert (("exit", SHUTDOWN) in trace(fx)) == escalates


def test_intensity_zero_escalates_on_the_first_crash() -> None:
    d = Driver(SupFlags(intensity=0), specs("a", "b"))
    assert io(d.crash("a")) == [("stop", "b"), ("exit", SHUTDOWN)]


def test_restarts_spaced_beyond_the_period_never_escalate() -> None:
    d = Driver(SupFlags(intensity=1, period=1.0), specs("a"))
    for i in range(50):
        assert io(d.crash("a", at=i * 1.5)) == [("spawn", "a")]
    assert len(d.state.restarts) == 1


def test_clean_exits_of_transient_children_do_not_count() -> None:
    d = Driver(SupFlags(intensity=0), [spec("a", "transient"), spec("b")])
    d.crash("a", NORMAL)
    assert d.state.restarts == () and not d.state.exited


def test_window_is_shared_by_all_children() -> None:
    d = Driver(SupFlags(intensity=2, period=10.0), specs("a", "b", "c"))
    d.crash("a", at=1.0)
    d.crash("b", at=2.0)
    assert ("exit", SHUTDOWN) in trace(d.crash("c", at=3.0))


def test_escalation_stops_simple_one_for_one_children_in_parallel() -> None:
    d = sofo(intensity=0)
    for i in range(3):
        d.call(StartChildCall((i,), i))
    fx = d.crash(DynId(1))
    assert io(fx) == [("stop_all", (DynId(0), DynId(2))), ("exit", SHUTDOWN)]


# ---- failed restarts ------------------------------------------------------------------


def test_failed_restart_is_retried_through_the_mailbox_and_counted() -> None:
    d = Driver(SupFlags(intensity=5), specs("a", "b"))
    d.script("a", StartError("busy"))
    fx = d.crash("a", at=1.0)
    assert trace(fx) == [
        ("report", "child_terminated", "a"),
        ("spawn", "a"),
        ("report", "start_error", "a"),
        ("schedule", 0.0, "a"),
    ]
    assert d.which()[0] == ("a", "restarting", "worker")
    assert d.state.restarts == (1.0,)
    fx = d.fire(at=1.5)
    assert io(fx) == [("spawn", "a")]
    assert d.state.restarts == (1.5, 1.0)
    assert d.which()[0][1] == d.pid("a")


def test_failed_restart_retries_count_toward_intensity() -> None:
    d = Driver(SupFlags(intensity=1), specs("a", "b"))
    d.script("a", StartError("busy"))
    d.crash("a", at=0.0)
    fx = d.fire(at=0.0)
    assert trace(fx) == [
        ("report", "reached_max_restart_intensity", "a"),
        ("stop", "b"),
        ("exit", SHUTDOWN),
    ]


def test_one_for_all_failed_restart_mid_set_retries_the_whole_set() -> None:
    d = Driver(SupFlags(strategy="one_for_all", intensity=5), specs("a", "b", "c"))
    d.script("b", StartError("busy"))
    fx = d.crash("a")
    assert trace(fx)[-6:] == [
        ("stop", "c"),
        ("stop", "b"),
        ("spawn", "a"),
        ("spawn", "b"),
        ("report", "start_error", "b"),
        ("schedule", 0.0, "b"),
    ]
    assert [(k, p if isinstance(p, str) or p is None else "pid") for k, p, _ in d.which()] == [
        ("a", "pid"),
        ("b", "restarting"),
        ("c", None),
    ]
    assert io(d.fire()) == [("stop", "a"), ("spawn", "a"), ("spawn", "b"), ("spawn", "c")]
    assert d.running() == ["a", "b", "c"]


def test_rest_for_one_failed_restart_retries_from_the_failed_child() -> None:
    d = Driver(SupFlags(strategy="rest_for_one", intensity=5), specs("a", "b", "c", "d"))
    d.script("c", StartError("busy"))
    d.crash("b")
    assert d.running() == ["a", "b"]
    assert io(d.fire()) == [("spawn", "c"), ("spawn", "d")]


def test_stale_retry_is_ignored() -> None:
    d = Driver(SupFlags(intensity=5), specs("a"))
    d.script("a", StartError("busy"))
    d.crash("a")
    assert d.call(TerminateChildCall("a", "r")) == "ok"  # cancels the pending restart
    assert d.which() == [("a", None, "worker")]
    assert d.fire() == []
    assert d.feed(RetryRestart("nope", 0.0)) == []


def test_ignore_on_restart_leaves_the_child_stopped() -> None:
    d = Driver(SupFlags(), specs("a"))
    d.script("a", IGNORE)
    d.crash("a")
    assert d.which() == [("a", None, "worker")]


# ---- shutdown -------------------------------------------------------------------------------


def test_stop_request_stops_in_reverse_start_order_then_exits() -> None:
    d = Driver(SupFlags(), specs("a", "b", "c"))
    assert io(d.feed(StopRequest("parent_died"))) == [
        ("stop", "c"),
        ("stop", "b"),
        ("stop", "a"),
        ("exit", "parent_died"),
    ]


def test_stop_request_skips_children_that_are_not_running() -> None:
    d = Driver(SupFlags(intensity=9), specs("a", "b", "c"))
    d.call(TerminateChildCall("a", "r"))
    d.script("c", StartError("busy"))
    d.crash("c")
    assert io(d.feed(StopRequest(SHUTDOWN))) == [("stop", "b"), ("exit", SHUTDOWN)]


def test_nothing_happens_after_exit() -> None:
    d = Driver(SupFlags(), specs("a"))
    d.feed(StopRequest(SHUTDOWN))
    for event in (
        Start(),
        StopRequest(SHUTDOWN),
        WhichChildrenCall("r"),
        RetryRestart("a", 1.0),
        ChildExit(Pid("n1", "p1"), BOOM, 1.0),
    ):
        assert d.feed(event) == []


SHUTDOWN_REASONS = [
    # (shutdown, restart, DOWN reason, clean?)
    ("brutal_kill", "permanent", KILLED, True),
    ("brutal_kill", "permanent", SHUTDOWN, False),
    ("brutal_kill", "transient", SHUTDOWN, True),
    ("brutal_kill", "transient", NORMAL, True),
    ("brutal_kill", "temporary", Shutdown(1), True),
    (1.0, "permanent", SHUTDOWN, True),
    (1.0, "permanent", KILLED, False),  # killed after the timeout
    (1.0, "permanent", NORMAL, False),
    (1.0, "permanent", Shutdown(1), False),
    (1.0, "transient", NORMAL, True),
    (1.0, "transient", Shutdown(1), True),
    (1.0, "transient", KILLED, False),
    ("infinity", "temporary", BOOM, False),
]


@pytest.mark.parametrize(("shutdown", "restart", "reason", "clean"), SHUTDOWN_REASONS)
def test_shutdown_error_reports_follow_otp(
    shutdown: Any, restart: str, reason: Any, clean: bool
) -> None:
    d = Driver(SupFlags(), [spec("a", restart, shutdown=shutdown)])
    d.stop_reasons["a"] = reason
    fx = d.feed(StopRequest(SHUTDOWN))
    assert (("report", "shutdown_error", "a") not in trace(fx)) == clean
    assert fx[-1] == Exit(SHUTDOWN)


def test_simple_one_for_one_stops_all_children_at_once() -> None:
    d = sofo(spec("t", shutdown="brutal_kill"))
    for i in range(3):
        d.call(StartChildCall((i,), i))
    fx = d.feed(StopRequest(SHUTDOWN))
    stop_all = [e for e in fx if isinstance(e, StopChildren)]
    assert len(stop_all) == 1 and stop_all[0].shutdown == "brutal_kill"
    assert [k for k, _ in stop_all[0].children] == [DynId(0), DynId(1), DynId(2)]
    assert fx[-1] == Exit(SHUTDOWN)


def test_simple_one_for_one_results_may_come_in_any_order() -> None:
    d = sofo()
    for i in range(3):
        d.call(StartChildCall((i,), i))
    state, fx = step(d.state, StopRequest(SHUTDOWN))
    (stop_all,) = fx
    assert isinstance(stop_all, StopChildren)
    for key, pid in reversed(stop_all.children):
        state, fx = step(state, TerminateResult(key, pid, SHUTDOWN))
    assert fx == [Exit(SHUTDOWN)]


def test_simple_one_for_one_with_no_children_exits_at_once() -> None:
    assert sofo().feed(StopRequest("bye")) == [Exit("bye")]


# ---- significant children ------------------------------------------------------------------


def auto(mode: str, strategy: str = "one_for_one") -> Driver:
    return Driver(
        SupFlags(strategy=strategy, auto_shutdown=mode, intensity=9),  # type: ignore[arg-type]
        [
            spec("s1", "transient", significant=True),
            spec("w"),
            spec("s2", "temporary", significant=True),
        ],
    )


def test_any_significant_shuts_down_when_one_significant_child_ends() -> None:
    d = auto("any_significant")
    assert io(d.crash("s1", NORMAL)) == [("stop", "s2"), ("stop", "w"), ("exit", SHUTDOWN)]


def test_abnormal_exit_of_a_transient_significant_child_restarts_it() -> None:
    d = auto("any_significant")
    assert io(d.crash("s1", BOOM)) == [("spawn", "s1")]


def test_temporary_significant_child_ends_the_supervisor_even_when_abnormal() -> None:
    d = auto("any_significant")
    assert io(d.crash("s2", BOOM))[-1] == ("exit", SHUTDOWN)


def test_all_significant_waits_for_the_last_significant_child() -> None:
    d = auto("all_significant")
    assert io(d.crash("s1", NORMAL)) == []
    assert io(d.crash("s2", Shutdown("done"))) == [("stop", "w"), ("exit", SHUTDOWN)]


def test_all_significant_counts_a_restarting_significant_child_as_alive() -> None:
    d = auto("all_significant")
    d.script("s1", StartError("busy"))
    d.crash("s1", BOOM)  # restart fails: s1 is restarting
    assert io(d.crash("s2", NORMAL)) == []


def test_never_ignores_significance() -> None:
    d = Driver(SupFlags(), [spec("a", "transient")])
    assert io(d.crash("a", NORMAL)) == []


def test_supervisor_caused_termination_does_not_trigger_auto_shutdown() -> None:
    d = auto("any_significant")
    assert d.call(TerminateChildCall("s2", "r")) == "ok"
    assert d.call(TerminateChildCall("s1", "r")) == "ok"
    assert not d.state.exited


def test_sibling_restart_stopping_a_significant_child_does_not_trigger_auto_shutdown() -> None:
    d = auto("any_significant", "one_for_all")
    assert io(d.crash("w")) == [
        ("stop", "s2"),
        ("stop", "s1"),
        ("spawn", "s1"),
        ("spawn", "w"),
    ]
    assert not d.state.exited


def test_simple_one_for_one_all_significant_ends_with_the_last_child() -> None:
    d = sofo(spec("t", "transient", significant=True), auto_shutdown="all_significant")
    d.call(StartChildCall((), 1))
    d.call(StartChildCall((), 2))
    assert io(d.crash(DynId(0), NORMAL)) == []
    assert io(d.crash(DynId(1), NORMAL)) == [("exit", SHUTDOWN)]


# ---- API: start_child ----------------------------------------------------------------------


def test_start_child_appends_and_starts() -> None:
    d = Driver(SupFlags(), specs("a"))
    value = d.call(StartChildCall(spec("b"), "r"))
    assert value == ChildStarted(d.pid("b"))
    assert [k for k, _, _ in d.which()] == ["a", "b"]
    assert io(d.feed(StopRequest(SHUTDOWN)))[:2] == [("stop", "b"), ("stop", "a")]


def test_start_child_errors() -> None:
    d = Driver(SupFlags(), specs("a", "b"))
    d.call(TerminateChildCall("b", "r"))
    already = SupervisorError(("already_started", d.pid("a")))
    assert d.call(StartChildCall(spec("a"), "r")) == already and already.already_started
    assert d.call(StartChildCall(spec("b"), "r")) == SupervisorError("already_present")
    bad = d.call(StartChildCall(spec("c", "nope"), "r"))
    assert isinstance(bad, SupervisorError) and bad.reason[0] == "invalid_child_spec"
    assert "'restart'" in bad.reason[1]
    assert d.call(StartChildCall("not a spec", "r")).reason[0] == "invalid_child_spec"
    significant = spec("s", "transient", significant=True)
    assert d.call(StartChildCall(significant, "r")).reason[0] == "invalid_child_spec"


def test_start_child_start_failure_is_a_value_and_saves_nothing() -> None:
    d = Driver(SupFlags(), specs("a"))
    c = spec("c")
    d.script("c", StartError("enoent"), StartError(("already_started", Pid("n2", "x"))))
    assert d.call(StartChildCall(c, "r")) == SupervisorError(("enoent", c))
    assert d.call(StartChildCall(c, "r")) == SupervisorError(("already_started", Pid("n2", "x")))
    assert [k for k, _, _ in d.which()] == ["a"]


def test_start_child_ignore() -> None:
    d = Driver(SupFlags(), [])
    d.script("p", IGNORE)
    d.script("t", IGNORE)
    assert d.call(StartChildCall(spec("p"), "r")) == ChildStarted(None)
    assert d.call(StartChildCall(spec("t", "temporary"), "r")) == ChildStarted(None)
    assert d.which() == [("p", None, "worker")]


def test_start_child_simple_one_for_one_appends_args_to_the_template() -> None:
    d = sofo(spec("t", start=(entry, ("cfg",)), type="supervisor"))
    fx = d.feed(StartChildCall(("x", 1), "r"))
    assert fx[0] == SpawnChild(DynId(0), entry, ("cfg", "x", 1))
    assert fx[1] == Reply("r", ChildStarted(d.pid(DynId(0))))
    assert isinstance(d.call(StartChildCall(["y"], "r")), ChildStarted)  # a list is accepted too
    assert d.call(StartChildCall("y", "r")) == SupervisorError(("invalid_args", "y"))
    assert d.which() == [
        (None, d.pid(DynId(0)), "supervisor"),
        (None, d.pid(DynId(1)), "supervisor"),
    ]


def test_start_child_simple_one_for_one_ignore_and_error() -> None:
    d = sofo()
    d.script(DynId(0), IGNORE)
    d.script(DynId(1), StartError("no"))
    assert d.call(StartChildCall((), "r")) == ChildStarted(None)
    assert d.call(StartChildCall((), "r")) == SupervisorError("no")
    assert d.which() == []


# ---- API: terminate / restart / delete -------------------------------------------------------


def test_terminate_child_keeps_the_spec_but_drops_a_temporary_one() -> None:
    d = Driver(SupFlags(), [spec("a"), spec("t", "temporary")])
    fx = d.feed(TerminateChildCall("a", "r"))
    assert trace(fx) == [("stop", "a"), ("reply", "ok")]
    assert d.call(TerminateChildCall("a", "r")) == "ok"  # already stopped: still ok
    assert d.call(TerminateChildCall("t", "r")) == "ok"
    assert d.which() == [("a", None, "worker")]
    assert d.call(TerminateChildCall("zz", "r")) == SupervisorError("not_found")
    assert d.call(TerminateChildCall(["unhashable"], "r")) == SupervisorError("not_found")


def test_terminate_child_simple_one_for_one_by_pid() -> None:
    d = sofo(intensity=9)
    d.call(StartChildCall((), 1))
    d.call(StartChildCall((), 2))
    pid = d.pid(DynId(0))
    assert trace(d.feed(TerminateChildCall(pid, "r"))) == [("stop", DynId(0)), ("reply", "ok")]
    assert d.call(TerminateChildCall(pid, "r")) == SupervisorError("not_found")
    assert d.call(TerminateChildCall("t", "r")) == SupervisorError("simple_one_for_one")
    old = d.pid(DynId(1))
    d.script(DynId(1), StartError("busy"))
    d.crash(DynId(1))
    assert d.which() == [(None, "restarting", "worker")]
    assert d.call(TerminateChildCall(old, "r")) == "ok"  # OTP finds {restarting, OldPid}
    assert d.which() == [] and d.fire() == []


def test_restart_child() -> None:
    d = Driver(SupFlags(intensity=9), specs("a", "b"))
    assert d.call(RestartChildCall("a", "r")) == SupervisorError("running")
    assert d.call(RestartChildCall("zz", "r")) == SupervisorError("not_found")
    d.call(TerminateChildCall("a", "r"))
    assert d.call(RestartChildCall("a", "r")) == ChildStarted(d.pid("a"))
    assert d.state.restarts == ()  # a manual restart does not count
    d.call(TerminateChildCall("a", "r"))
    d.script("a", StartError("nope"), IGNORE)
    assert d.call(RestartChildCall("a", "r")) == SupervisorError("nope")
    assert d.call(RestartChildCall("a", "r")) == ChildStarted(None)
    d.script("b", StartError("busy"))
    d.crash("b")
    assert d.call(RestartChildCall("b", "r")) == SupervisorError("restarting")


def test_delete_child() -> None:
    d = Driver(SupFlags(intensity=9), specs("a", "b", "c"))
    assert d.call(DeleteChildCall("a", "r")) == SupervisorError("running")
    assert d.call(DeleteChildCall("zz", "r")) == SupervisorError("not_found")
    d.call(TerminateChildCall("a", "r"))
    assert d.call(DeleteChildCall("a", "r")) == "ok"
    assert [k for k, _, _ in d.which()] == ["b", "c"]
    d.script("b", StartError("busy"))
    d.crash("b")
    assert d.call(DeleteChildCall("b", "r")) == SupervisorError("restarting")
    assert isinstance(d.call(StartChildCall(spec("a"), "r")), ChildStarted)
    assert [k for k, _, _ in d.which()] == ["b", "c", "a"]  # re-added at the end


@pytest.mark.parametrize("call", [RestartChildCall, DeleteChildCall])
def test_restart_and_delete_are_refused_by_simple_one_for_one(call: Any) -> None:
    assert sofo().call(call("t", "r")) == SupervisorError("simple_one_for_one")


def test_which_and_count_children() -> None:
    d = Driver(
        SupFlags(intensity=9),
        [spec("a"), spec("s", type="supervisor"), spec("b"), spec("c")],
    )
    d.call(TerminateChildCall("b", "r"))
    d.script("c", StartError("busy"))
    d.crash("c")
    assert d.call(WhichChildrenCall("r")) == [
        ("a", d.pid("a"), "worker"),
        ("s", d.pid("s"), "supervisor"),
        ("b", None, "worker"),
        ("c", "restarting", "worker"),
    ]
    assert d.call(CountChildrenCall("r")) == {
        "specs": 4,
        "active": 2,
        "supervisors": 1,
        "workers": 3,
    }


def test_count_children_simple_one_for_one() -> None:
    d = sofo(spec("t", type="supervisor"), intensity=9)
    for i in range(3):
        d.call(StartChildCall((), i))
    d.script(DynId(2), StartError("busy"))
    d.crash(DynId(2))
    assert count_children(d.state) == {"specs": 1, "active": 2, "supervisors": 3, "workers": 0}


# ---- the driving contract ---------------------------------------------------------------


def test_contract_violations_raise() -> None:
    state = init(SupFlags(), specs("a", "b"))
    with pytest.raises(SupervisorProtocolError, match="first event must be Start"):
        step(state, WhichChildrenCall("r"))
    waiting, fx = step(state, Start())
    assert fx == [SpawnChild("a", entry, ())]
    with pytest.raises(SupervisorProtocolError, match="awaiting"):
        step(waiting, WhichChildrenCall("r"))
    with pytest.raises(SupervisorProtocolError, match="awaiting"):
        step(waiting, StartResult("b", StartOk(Pid("n", "1"))))
    with pytest.raises(SupervisorProtocolError, match="not a start outcome"):
        step(waiting, StartResult("a", ("ok", Pid("n", "1"))))  # type: ignore[arg-type]
    with pytest.raises(SupervisorProtocolError, match="not a start outcome"):
        step(waiting, StartResult("a", StartOk("p1")))  # type: ignore[arg-type]
    s1, _ = step(waiting, StartResult("a", StartOk(Pid("n", "1"))))
    with pytest.raises(SupervisorProtocolError, match="already belongs"):
        step(s1, StartResult("b", StartOk(Pid("n", "1"))))
    s2, _ = step(s1, StartResult("b", StartOk(Pid("n", "2"))))
    with pytest.raises(SupervisorProtocolError, match="already delivered"):
        step(s2, Start())
    with pytest.raises(SupervisorProtocolError, match="no result is awaited"):
        step(s2, TerminateResult("a", Pid("n", "1"), SHUTDOWN))
    s3, _ = step(s2, TerminateChildCall("a", "r"))
    with pytest.raises(SupervisorProtocolError, match="TerminateResult for"):
        step(s3, TerminateResult("a", Pid("n", "2"), SHUTDOWN))


def test_step_does_not_mutate_its_input() -> None:
    d = Driver(SupFlags(strategy="one_for_all"), specs("a", "b"))
    before = d.state
    snapshot = (dict(before.children), dict(before.pids), before.restarts, list(before.plan))
    step(before, ChildExit(d.pid("a"), BOOM, 1.0))
    assert snapshot == (
        dict(before.children),
        dict(before.pids),
        before.restarts,
        list(before.plan),
    )


def test_awaited_effect_is_always_last_and_single() -> None:
    d = Driver(SupFlags(strategy="one_for_all", intensity=3), specs("a", "b", "c"))
    state, fx = step(d.state, ChildExit(d.pid("b"), BOOM, 0.0))
    assert trace(fx) == [("report", "child_terminated", "b"), ("stop", "c")]
    assert not state.idle


# ---- backoff ------------------------------------------------------------------------------


def test_backoff_doubles_from_min_and_caps_at_max() -> None:
    policy = Backoff(3.0, 30.0, random_factor=0.0, reset_after=1000.0)
    state, delays = BackoffState(), []
    for t in range(7):
        delay, state = next_delay(policy, state, float(t), 0.0)
        delays.append(delay)
    assert delays == [3.0, 6.0, 12.0, 24.0, 30.0, 30.0, 30.0]  # Akka's documented sequence
    assert state == BackoffState(7, 6.0)


def test_backoff_jitter_adds_up_to_random_factor() -> None:
    policy = Backoff(1.0, 10.0, random_factor=0.2)
    assert next_delay(policy, BackoffState(), 0.0, 0.5)[0] == pytest.approx(1.1)
    assert next_delay(policy, BackoffState(4, 0.0), 1.0, 0.999)[0] == pytest.approx(11.998)
    with pytest.raises(AssertionError):
        next_delay(policy, BackoffState(), 0.0, 1.0)


def test_backoff_resets_after_a_quiet_period() -> None:
    policy = Backoff(1.0, 9.0, random_factor=0.0)  # reset_after defaults to 5.0
    state = BackoffState(3, 10.0)
    assert next_delay(policy, state, 14.9, 0.0) == (8.0, BackoffState(4, 14.9))
    assert next_delay(policy, state, 15.0, 0.0) == (1.0, BackoffState(1, 15.0))


def test_backoff_huge_failure_counts_stay_at_max() -> None:
    policy = Backoff(1.0, 2.0, random_factor=0.0, reset_after=1e9)
    assert next_delay(policy, BackoffState(10**6, 0.0), 1.0, 0.0)[0] == 2.0


def test_next_uniform_is_deterministic_and_in_range() -> None:
    seed, seen = 42, []
    for _ in range(1000):
        u, seed = next_uniform(seed)
        assert 0.0 <= u < 1.0
        seen.append(u)
    again, seed2 = [], 42
    for _ in range(1000):
        u, seed2 = next_uniform(seed2)
        again.append(u)
    assert seen == again and len(set(seen)) == 1000
    assert 0.4 < sum(seen) / len(seen) < 0.6


BACKOFF = Backoff(1.0, 8.0, random_factor=0.0, reset_after=20.0)


def test_crash_with_backoff_schedules_the_restart_instead_of_starting() -> None:
    d = Driver(SupFlags(intensity=10, backoff=BACKOFF), specs("a"))
    fx = d.crash("a", at=2.0)
    assert trace(fx) == [
        ("report", "child_terminated", "a"),
        ("report", "restart_backoff", "a"),
        ("schedule", 1.0, "a"),
    ]
    assert fx[-1] == Schedule(1.0, RetryRestart("a", 3.0))
    assert d.which() == [("a", "restarting", "worker")]
    assert d.state.restarts == ()  # counted when the restart is tried
    assert io(d.fire()) == [("spawn", "a")]
    assert d.state.restarts == (3.0,)


def test_backoff_grows_on_consecutive_failures_and_resets_after_quiet() -> None:
    d = Driver(SupFlags(intensity=100, period=1.0, backoff=BACKOFF), specs("a"))
    delays = []
    for _ in range(5):
        delays.append(next(e.delay for e in d.crash("a") if isinstance(e, Schedule)))
        d.fire()
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0]
    d.now += 20.0
    assert next(e.delay for e in d.crash("a") if isinstance(e, Schedule)) == 1.0


def test_backoff_failed_start_grows_the_delay() -> None:
    d = Driver(SupFlags(intensity=100, backoff=BACKOFF), specs("a"))
    d.script("a", StartError("busy"), StartError("busy"))
    d.crash("a")
    delays = []
    for _ in range(3):
        fx = d.fire()
        delays += [e.delay for e in fx if isinstance(e, Schedule)]
    assert delays == [2.0, 4.0]
    assert d.which()[0][1] == d.pid("a")


def test_backoff_is_per_child() -> None:
    d = Driver(SupFlags(intensity=100, backoff=BACKOFF), specs("a", "b"))
    for _ in range(3):
        d.crash("a")
        d.fire()
    assert next(e.delay for e in d.crash("b") if isinstance(e, Schedule)) == 1.0


def test_backoff_one_for_all_stops_siblings_while_waiting() -> None:
    d = Driver(SupFlags(strategy="one_for_all", backoff=BACKOFF), specs("a", "b", "c"))
    assert io(d.crash("b")) == [("stop", "c"), ("stop", "a")]
    assert d.running() == []
    assert io(d.fire()) == [("spawn", "a"), ("spawn", "b"), ("spawn", "c")]


def test_backoff_intensity_still_escalates() -> None:
    d = Driver(SupFlags(intensity=1, period=100.0, backoff=BACKOFF), specs("a"))
    d.crash("a")
    d.fire()
    d.crash("a")
    assert trace(d.fire()) == [("report", "reached_max_restart_intensity", "a"), ("exit", SHUTDOWN)]


def test_backoff_jitter_comes_from_the_seed() -> None:
    jittery = Backoff(1.0, 8.0, random_factor=0.5)

    def first_delay(seed: int) -> float:
        d = Driver(SupFlags(backoff=jittery), specs("a"), seed=seed)
        return next(e.delay for e in d.crash("a") if isinstance(e, Schedule))

    assert first_delay(7) == first_delay(7)
    assert first_delay(7) != first_delay(8)
    assert all(1.0 <= first_delay(s) < 1.5 for s in range(20))


# ---- determinism ---------------------------------------------------------------------------


def replay(
    flags: SupFlags, children: Sequence[ChildSpec], seed: int, events: list[Event]
) -> list[Effect]:
    state, out = init(flags, children, seed), []
    for event in events:
        state, fx = step(state, event)
        out.extend(fx)
    return out


def test_replaying_the_events_gives_the_same_effects() -> None:
    flags = SupFlags(strategy="rest_for_one", intensity=4, backoff=Backoff(0.5, 4.0, 0.3))
    d = Driver(flags, specs("a", "b", "c"), seed=99)
    d.script("b", StartError("busy"))
    d.crash("a", at=1.0)
    d.fire()  # a starts, b fails: b waits for its own backoff
    d.fire()
    d.now += 1.0
    d.crash("c")
    d.fire()
    d.call(TerminateChildCall("b", "r"))
    assert d.running() == ["a", "c"]
    d.feed(StopRequest(SHUTDOWN))
    assert replay(flags, d.specs, 99, d.events) == d.effects


# ---- random event storms ---------------------------------------------------------------------

REASON_POOL = [NORMAL, SHUTDOWN, Shutdown("x"), KILLED, BOOM, "other"]
STRATEGIES = ["one_for_one", "one_for_all", "rest_for_one", "simple_one_for_one"]

IDS = ["a", "b", "c", "d", "e"]


class SupervisorMachine(RuleBasedStateMachine):
    """Random exits, API calls, failing starts and time at a supervisor, checked each step."""

    @initialize(
        strategy=st.sampled_from(STRATEGIES),
        intensity=st.sampled_from([0, 2, 3, 5, 10]),
        period=st.sampled_from([1.0, 5.0, 30.0]),
        auto_shutdown=st.sampled_from(["never", "never", "any_significant", "all_significant"]),
        use_backoff=st.booleans(),
        restarts=st.lists(
            st.sampled_from(["permanent", "transient", "temporary"]), min_size=1, max_size=4
        ),
        seed=st.integers(0, 2**32),
        init_outcome=st.sampled_from(["ok", "ok", "ok", "error", "ignore"]),
        init_failing=st.sampled_from(IDS),
        dynamic=st.integers(0, 3),
    )
    def boot(
        self,
        strategy: str,
        intensity: int,
        period: float,
        auto_shutdown: str,
        use_backoff: bool,
        restarts: list[str],
        seed: int,
        init_outcome: str,
        init_failing: str,
        dynamic: int,
    ) -> None:
        backoff = Backoff(0.5, 4.0, 0.5) if use_backoff else None
        self.flags = SupFlags(strategy, intensity, period, auto_shutdown, backoff)  # type: ignore[arg-type]
        significant = auto_shutdown != "never"
        kids = [
            spec(IDS[i], r, significant=significant and r != "permanent")
            for i, r in enumerate(restarts)
        ]
        if strategy == "simple_one_for_one":
            kids = kids[:1]
        self.d = Driver(self.flags, kids, seed=seed, start=False)
        self.exits = 0
        self.after_exit: list[Effect] = []
        self.spawned_temporaries: set[Hashable] = set()
        self.before = self.d.state
        if init_outcome != "ok":
            self.d.script(init_failing, StartError("no") if init_outcome == "error" else IGNORE)
        self.feed(Start())
        if strategy == "simple_one_for_one":
            for i in range(dynamic):
                self.feed(StartChildCall((i,), "r"))

    # -- plumbing --

    def feed(self, event: Event) -> None:
        was_exited = self.d.state.exited
        self.before = self.d.state
        fx = self.d.feed(event)
        if was_exited:
            self.after_exit.extend(fx)
        self.exits += sum(isinstance(e, Exit) for e in fx)
        self.check_effects(fx)

    def check_effects(self, fx: list[Effect]) -> None:
        """Start order and reverse stop order within one cascade; temporaries never restart."""
        order = list(self.before.children) + [
            k for k in self.d.state.children if k not in self.before.children
        ]
        spawns = [order.index(e.id) for e in fx if isinstance(e, SpawnChild) and e.id in order]
        assert spawns == sorted(spawns), fx
        stops = [order.index(e.id) for e in fx if isinstance(e, StopChild)]
        assert stops == sorted(stops, reverse=True), fx
        kept = [k for k in self.before.children if k in self.d.state.children]
        assert list(self.d.state.children)[: len(kept)] == kept, "start order changed"
        for e in fx:
            if isinstance(e, SpawnChild):
                child = self.before.children.get(e.id) or self.d.state.children.get(e.id)
                if child is not None and child.spec.restart == "temporary":
                    assert e.id not in self.spawned_temporaries, f"temporary {e.id!r} restarted"
                    self.spawned_temporaries.add(e.id)
        for key in list(self.spawned_temporaries):
            if key not in self.d.state.children:
                self.spawned_temporaries.discard(key)

    def live(self) -> list[Hashable]:
        return self.d.running()

    # -- rules (all but `poke_after_exit` only while the supervisor lives) --

    def running(self) -> bool:
        return not self.d.state.exited

    @precondition(lambda self: self.running() and bool(self.live()))
    @rule(data=st.data(), reason=st.sampled_from(REASON_POOL))
    def crash(self, data: st.DataObject, reason: Any) -> None:
        key = data.draw(st.sampled_from(self.live()))
        self.feed(ChildExit(self.d.pid(key), reason, self.d.now))

    @precondition(lambda self: self.running() and bool(self.live()))
    @rule(data=st.data())
    def crash_abnormally(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(self.live()))
        self.feed(ChildExit(self.d.pid(key), BOOM, self.d.now))

    @precondition(lambda self: self.running())
    @rule(dt=st.sampled_from([0.0, 0.25, 1.0, 2.5, 5.0, 31.0]))
    def advance(self, dt: float) -> None:
        self.d.now += dt

    @precondition(lambda self: self.running() and bool(self.d.timers))
    @rule()
    def fire_timer(self) -> None:
        timer = self.d.timers.pop(0)
        self.d.now = max(self.d.now, timer.event.now)
        self.feed(dataclasses.replace(timer.event, now=self.d.now))

    @precondition(lambda self: self.running())
    @rule(data=st.data(), outcome=st.sampled_from(["error", "error", "ignore"]))
    def next_start_fails(self, data: st.DataObject, outcome: str) -> None:
        result = StartError("busy") if outcome == "error" else IGNORE
        if data.draw(st.booleans()):
            self.d.next_outcomes.append(result)
        else:
            keys = list(self.d.state.children) + IDS + [DynId(self.d.state.next_dyn)]
            self.d.script(data.draw(st.sampled_from(keys)), result)

    @precondition(lambda self: self.running() and bool(self.live()))
    @rule(data=st.data(), reason=st.sampled_from([KILLED, NORMAL, "stuck"]))
    def child_will_stop_badly(self, data: st.DataObject, reason: Any) -> None:
        self.d.stop_reasons[data.draw(st.sampled_from(self.live()))] = reason

    @precondition(lambda self: self.running())
    @rule(
        data=st.data(), call=st.sampled_from(["start", "terminate", "restart", "delete", "query"])
    )
    def api(self, data: st.DataObject, call: str) -> None:
        key = data.draw(st.sampled_from(IDS))
        dynamic = self.flags.strategy == "simple_one_for_one"
        if call == "start":
            restart = data.draw(st.sampled_from(["permanent", "transient", "temporary"]))
            self.feed(StartChildCall((key,) if dynamic else spec(key, restart), "r"))
        elif call == "terminate":
            target: Any = key
            if dynamic and self.live():
                target = self.d.pid(data.draw(st.sampled_from(self.live())))
            self.feed(TerminateChildCall(target, "r"))
        elif call == "restart":
            self.feed(RestartChildCall(key, "r"))
        elif call == "delete":
            self.feed(DeleteChildCall(key, "r"))
        else:
            self.feed(WhichChildrenCall("w"))
            self.feed(CountChildrenCall("c"))

    @precondition(lambda self: self.running() and len(self.d.events) > 15)
    @rule(reason=st.sampled_from([SHUTDOWN, "parent_died"]))
    def stop(self, reason: Any) -> None:
        self.feed(StopRequest(reason))

    @precondition(lambda self: not self.running())
    @rule()
    def poke_after_exit(self) -> None:
        self.feed(StopRequest(SHUTDOWN))
        self.feed(RetryRestart(IDS[0], self.d.now))

    # -- invariants --

    @invariant()
    def idle_between_events(self) -> None:
        assert self.d.state.idle and not self.d.state.plan

    @invariant()
    def live_children_are_unique(self) -> None:
        s = self.d.state
        running = [c.pid for c in s.children.values() if c.pid is not None]
        assert len(running) == len(set(running))
        assert s.pids == {c.pid: k for k, c in s.children.items() if c.pid is not None}
        ids = [k for k, _, _ in which_children(s)]
        if s.template is None:
            assert len(ids) == len(set(ids))

    @invariant()
    def restart_window_is_bounded(self) -> None:
        s = self.d.state
        assert len(s.restarts) <= self.flags.intensity + 1
        if not s.exited:
            assert len(s.restarts) <= self.flags.intensity

    @invariant()
    def exit_is_final(self) -> None:
        assert self.exits <= 1 and self.after_exit == []
        assert self.exits == int(self.d.state.exited)
        if self.d.state.exited:
            assert self.live() == [], "a supervisor exits only after stopping its children"

    @invariant()
    def no_temporary_child_is_kept_stopped(self) -> None:
        if self.d.state.exited:
            return  # a failed init leaves the unstarted specs behind
        for c in self.d.state.children.values():
            if c.spec.restart == "temporary":
                assert c.pid is not None and not c.restarting

    def teardown(self) -> None:
        if hasattr(self, "d"):
            assert replay(self.flags, self.d.specs, self.d.seed, self.d.events) == self.d.effects


SupervisorMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
TestSupervisorMachine = SupervisorMachine.TestCase
