"""Pausing a process (SIGSTOP/SIGCONT) and skewing a node's clock, on both backends.

A paused process runs none of its code past its next wait: calls to it time out, what
is sent to it queues, its timers hold their messages until it goes on; a kill still
kills it. A clock skew shifts what `now()` reads on one node only, also for processes
started after the skew was set.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from runtime_helpers import eventually

from sediment.runtime.errors import BadArgument, CallTimeout
from sediment.runtime.messages import Call
from sediment.runtime.process import Process

RT_BACKENDS = ("sim", "ray", "ray-hosted")  # "-hosted": every process of a node in one host

async def _counter(ctx: Process, tick: float) -> None:
    """Counts casts ("add") and its own timer ticks; a call answers both counts."""
    added = ticks = 0
    ctx.send_after(tick, ctx.self(), "tick")
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call):
            ctx.reply(msg.from_, (added, ticks))
        elif msg == "add":
            added += 1
        elif msg == "tick":
            ticks += 1
            ctx.send_after(tick, ctx.self(), "tick")


async def _clock(ctx: Process) -> None:
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call):
            ctx.reply(msg.from_, ctx.now())


def test_a_paused_process_answers_nothing_and_goes_on_after_resume(rt: Any) -> None:
    pid = rt.spawn(_counter, 0.05, node="n2")
    assert eventually(rt, lambda: rt.call(pid, "count")[1] >= 2)
    rt.suspend(pid)
    rt.sleep(0.3)  # the stop lands
    for _ in range(5):
        rt.send(pid, "add")
    with pytest.raises(CallTimeout):
        rt.call(pid, "count", timeout=1.0)
    rt.resume(pid)
    added, ticks = rt.call(pid, "count", timeout=30)
    assert added == 5  # what was sent while it was stopped waited in its mailbox
    rt.sleep(0.5)
    assert rt.call(pid, "count", timeout=30)[1] > ticks  # its timer goes on ticking


def test_a_paused_process_makes_no_progress_of_its_own(rt: Any) -> None:
    pid = rt.spawn(_counter, 0.05, node="n1")
    assert eventually(rt, lambda: rt.call(pid, "count")[1] >= 1)
    rt.suspend(pid)
    rt.sleep(0.3)
    rt.resume(pid)
    before = rt.call(pid, "count", timeout=30)[1]
    rt.suspend(pid)
    rt.sleep(1.0)  # twenty tick periods while stopped
    rt.resume(pid)
    after = rt.call(pid, "count", timeout=30)[1]
    assert after - before <= 2  # at most the tick that was due when it stopped


def test_a_paused_process_can_still_be_killed(rt: Any) -> None:
    pid = rt.spawn(_counter, 0.05, node="n3")
    assert eventually(rt, lambda: rt.call(pid, "count")[1] >= 1)
    rt.suspend(pid)
    rt.kill(pid)
    assert eventually(rt, lambda: not rt.is_alive(pid), timeout=30)


def test_clock_skew_shifts_one_node_only(rt: Any) -> None:
    on_n1 = rt.spawn(_clock, node="n1")
    on_n2 = rt.spawn(_clock, node="n2")
    rt.set_clock_skew("n2", 100.0)
    late = rt.spawn(_clock, node="n2")  # started after the skew: it has it too
    now = rt.now()
    assert abs(rt.call(on_n1, "now", timeout=30) - now) < 50
    for pid in (on_n2, late):
        assert 50 < rt.call(pid, "now", timeout=30) - now < 150
    rt.set_clock_skew("n2", 0.0)
    assert abs(rt.call(on_n2, "now", timeout=30) - rt.now()) < 50


async def _wait_for_deadline(ctx: Process, ulps: int) -> bool:
    """The raft server's pattern: re-arm a timer for `deadline` until the clock reads it
    (bounded here; it once looped forever at one simulated instant)."""
    deadline = ctx.now()
    for _ in range(ulps):
        deadline = math.nextafter(deadline, math.inf)
    for _ in range(100):
        if ctx.now() >= deadline:
            return True
        ctx.send_at(deadline, ctx.self(), "due")
        await ctx.receive(timeout=30)
    return False


def test_send_at_fires_once_the_clock_reads_the_deadline(rt: Any) -> None:
    """Also when the node's clock is skewed near 0 while the runtime's clock is not: a
    deadline one ulp ahead is then far below the runtime clock's resolution."""
    if rt.backend == "sim":
        rt.sleep(1e5)  # a runtime clock far from 0, as Ray's (the host's uptime) is
    rt.set_clock_skew("n2", 1e-3 - rt.now())
    for ulps in (0, 1, 2, 1000):
        assert rt.run(_wait_for_deadline, ulps, node="n2"), ulps


def test_bad_clock_skews_are_refused(rt: Any) -> None:
    with pytest.raises(BadArgument):
        rt.set_clock_skew("n9", 1.0)
    with pytest.raises(BadArgument):
        rt.set_clock_skew("n1", float("nan"))
    with pytest.raises(BadArgument):
        rt.set_clock_skew("n1", 1e10)
