"""The generic core driver (`runtime/core_driver.py`) on the simulator.

A toy core records every event it steps; its effects exercise each way a handler can
answer (nothing, one event, a list, after awaiting the runtime) and the timers.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import pytest

from sediment.runtime import api
from sediment.runtime.core_driver import CoreDriver, UnhandledEffect
from sediment.runtime.process import Process


@dataclass(frozen=True)
class Ev:
    name: str


@dataclass(frozen=True)
class Note:  # handled synchronously, no follow-up
    text: str


@dataclass(frozen=True)
class Fetch:  # handled after a sleep; one follow-up event
    name: str


@dataclass(frozen=True)
class Fan:  # a list of follow-ups
    names: tuple[str, ...]


@dataclass(frozen=True)
class Wake:  # a timer through the process context
    delay: float
    name: str


@dataclass(frozen=True)
class Finish:
    pass


@dataclass(frozen=True)
class Unknown:
    pass


Effect = Note | Fetch | Fan | Wake | Finish | Unknown
Log = tuple[str, ...]

# what each event makes the core emit
SCRIPT: dict[str, tuple[Effect, ...]] = {
    "start": (Note("n1"), Fetch("a"), Fan(("b", "c")), Note("n2")),
    "a": (Fetch("d"),),
    "b": (),
    "c": (Wake(0.5, "timer"),),
    "d": (),
    "timer": (Finish(),),
    "bad": (Unknown(),),
}


def toy_step(log: Log, event: Ev) -> tuple[Log, list[Effect]]:
    return (*log, event.name), list(SCRIPT.get(event.name, ()))


class _Finished(Exception):
    pass


def _driver(ctx: Process, notes: list[str]) -> CoreDriver[Log, Ev, Effect]:
    driver: CoreDriver[Log, Ev, Effect] = CoreDriver(ctx, toy_step, ())

    async def fetch(effect: Fetch) -> Ev:
        await ctx.sleep(0.1)
        notes.append(f"fetched {effect.name}")
        return Ev(effect.name)

    def finish(effect: Finish) -> None:
        raise _Finished

    driver.on(Note, lambda effect: notes.append(effect.text))
    driver.on(Fetch, fetch)
    driver.on(Fan, lambda effect: [Ev(name) for name in effect.names])
    driver.on(Wake, lambda effect: driver.arm_after(effect.delay, ("wake", effect.name)))
    driver.on(Finish, finish)
    return driver


async def run_drain(ctx: Process) -> tuple[Log, list[str]]:
    notes: list[str] = []
    driver = _driver(ctx, notes)
    await driver.run(Ev("start"))
    return driver.state, notes


async def run_step_only(ctx: Process) -> tuple[Log, int, Log]:
    driver = _driver(ctx, [])
    effects = await driver.step(Ev("start"))
    stepped = driver.state
    queued = driver.pending
    await driver.drain(while_=lambda: len(driver.state) < 3)
    return stepped, queued, (*driver.state, f"effects={len(effects)}")


async def run_serve(ctx: Process) -> tuple[Log, float]:
    driver = _driver(ctx, [])

    async def to_events(msg: Any) -> list[Ev]:
        if isinstance(msg, tuple) and msg[0] == "wake":
            return [Ev(msg[1])]
        return []

    started = ctx.now()
    driver.post(Ev("start"))
    with contextlib.suppress(_Finished):
        await driver.serve(to_events)
    return driver.state, ctx.now() - started


async def run_after_step(ctx: Process) -> list[str]:
    notes: list[str] = []
    driver = _driver(ctx, notes)
    driver.after_step(lambda effects: notes.append(f"stepped {driver.state[-1]}: {len(effects)}"))
    await driver.run(Ev("start"))
    return notes


async def run_execute(ctx: Process) -> tuple[Log, int, list[str], Log]:
    notes: list[str] = []
    driver = _driver(ctx, notes)
    driver.after_step(lambda effects: notes.append(f"stepped {driver.state[-1]}"))
    await driver.execute([Note("first"), Fan(("b", "c"))])  # effects no step gave
    before, queued = driver.state, driver.pending
    await driver.drain()
    return before, queued, notes, driver.state


async def run_unknown(ctx: Process) -> str:
    driver = _driver(ctx, [])
    try:
        await driver.run(Ev("bad"))
    except UnhandledEffect as err:
        return str(err)
    return "no error"


async def run_duplicate(ctx: Process) -> str:
    driver = _driver(ctx, [])
    try:
        driver.on(Note, lambda effect: None)
    except ValueError as err:
        return str(err)
    return "no error"


@pytest.fixture
def rt() -> Any:
    runtime = api.start("sim", seed=7)
    yield runtime
    runtime.shutdown()


def test_effects_run_in_order_and_follow_ups_are_stepped_fifo(rt: Any) -> None:
    log, notes = rt.run(run_drain)
    # start's effects run in order (a's fetch before the fan), then the queue is FIFO:
    # a (queued first), b, c, then d (queued while a was stepped)
    assert log == ("start", "a", "b", "c", "d")
    assert notes == ["n1", "fetched a", "n2", "fetched d"]


def test_step_queues_follow_ups_and_drain_stops_when_told(rt: Any) -> None:
    stepped, queued, after = rt.run(run_step_only)
    assert stepped == ("start",)
    assert queued == 3  # a, b, c: not stepped by `step`
    assert after == ("start", "a", "b", "effects=4")


def test_serve_turns_timer_messages_into_events(rt: Any) -> None:
    log, elapsed = rt.run(run_serve)
    assert log == ("start", "a", "b", "c", "d", "timer")
    assert elapsed >= 0.5


def test_the_after_step_hook_runs_once_the_effects_ran(rt: Any) -> None:
    assert rt.run(run_after_step) == [
        "n1", "fetched a", "n2", "stepped start: 4", "fetched d", "stepped a: 1",
        "stepped b: 0", "stepped c: 1", "stepped d: 0"]


def test_execute_runs_effects_without_a_step_and_queues_their_follow_ups(rt: Any) -> None:
    before, queued, notes, after = rt.run(run_execute)
    assert before == () and queued == 2  # nothing stepped yet: b and c wait in the queue
    assert notes == ["first", "stepped b", "stepped c"]  # no hook for the executed effects
    assert after == ("b", "c")


def test_an_effect_without_handler_is_an_error(rt: Any) -> None:
    assert "no handler for effect Unknown" in rt.run(run_unknown)


def test_a_second_handler_for_one_type_is_refused(rt: Any) -> None:
    assert "already registered" in rt.run(run_duplicate)


def test_same_seed_same_run() -> None:
    def once() -> Any:
        runtime = api.start("sim", seed=11)
        try:
            return runtime.run(run_serve), runtime.run(run_drain)
        finally:
            runtime.shutdown()

    assert once() == once()
