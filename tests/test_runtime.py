"""The runtime's Erlang semantics, one suite run on both backends (sim and ray)."""

from __future__ import annotations

from typing import Any

import pytest
from runtime_helpers import (
    collector,
    crash_after,
    echo,
    eventually,
    idle,
    linking_trapper,
    sleeper_with_mailbox,
    trapper,
    with_failpoint,
)

from sediment.runtime.api import ProcessFailed
from sediment.runtime.errors import (
    BadArgument,
    CallError,
    CallExit,
    CallTimeout,
    FailpointError,
    NameTaken,
    ReceiveTimeout,
    UnpicklableMessage,
)
from sediment.runtime.failpoints import FailpointHit
from sediment.runtime.messages import Call, Down, Exit
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process
from sediment.runtime.reasons import KILL, KILLED, NOPROC, NORMAL, SHUTDOWN, Error

RT_BACKENDS = ("sim", "ray", "ray-hosted")  # "-hosted": every process of a node in one host

# --- messages ---


async def _fifo(ctx: Process, n: int) -> list[int]:
    sink = await ctx.spawn(collector, node="n2")
    for i in range(n):
        ctx.send(sink, i)
    return list(await ctx.call(sink, "get"))


def test_per_sender_fifo(rt: Any) -> None:
    assert rt.run(_fifo, 300) == list(range(300))


async def _selective(ctx: Process) -> list[Any]:
    me = ctx.self()
    for m in ["a", 1, "b", 2, "c"]:
        ctx.send(me, m)
    first_int = await ctx.receive(int)
    second_int = await ctx.receive(lambda m: isinstance(m, int))
    rest = [await ctx.receive(timeout=0) for _ in range(3)]
    return [first_int, second_int, *rest]


def test_selective_receive_keeps_the_others_in_order(rt: Any) -> None:
    assert rt.run(_selective) == [1, 2, "a", "b", "c"]


async def _save_queue(ctx: Process) -> list[Any]:
    me = ctx.self()
    for i in range(5):
        ctx.send(me, ("skip", i))
    ctx.send_after(0.2, me, ("want", 1))
    wanted = await ctx.receive(lambda m: m[0] == "want", timeout=5)
    skipped = [await ctx.receive(timeout=0) for _ in range(5)]
    return [wanted, *skipped]


def test_selective_receive_waits_past_unmatched_messages(rt: Any) -> None:
    assert rt.run(_save_queue) == [("want", 1)] + [("skip", i) for i in range(5)]


async def _receive_timeout(ctx: Process) -> tuple[str, str, float]:
    t0 = ctx.now()
    try:
        await ctx.receive(timeout=0.3)
        waited = "no"
    except ReceiveTimeout:
        waited = "timeout"
    try:
        await ctx.receive(timeout=0)
        polled = "no"
    except ReceiveTimeout:
        polled = "timeout"
    return waited, polled, ctx.now() - t0


def test_receive_timeout_and_poll(rt: Any) -> None:
    waited, polled, elapsed = rt.run(_receive_timeout)
    assert (waited, polled) == ("timeout", "timeout")
    assert elapsed >= 0.29


async def _ping_pong(ctx: Process) -> Any:
    peer = await ctx.spawn(echo, node="n3")
    ctx.send(peer, ("ping", ctx.self(), 7))
    return await ctx.receive(timeout=10)


def test_cross_node_ping_pong(rt: Any) -> None:
    assert rt.run(_ping_pong) == ("pong", 7)


# --- call / cast ---


async def _calls(ctx: Process) -> list[Any]:
    server = await ctx.spawn(echo, node="n2")
    out: list[Any] = [await ctx.call(server, 1)]
    try:
        await ctx.call(server, ("sleep", 1.0), timeout=0.2)
    except CallTimeout:
        out.append("timeout")
    out.append(await ctx.call(server, 2, timeout=5))  # the late reply to the first is dropped
    ctx.cast(server, (ctx.self(), "hello"))
    out.append(await ctx.receive(timeout=5))
    return out


def test_call_timeout_drops_late_reply_and_cast(rt: Any) -> None:
    assert rt.run(_calls) == [("echo", 1), "timeout", ("echo", 2), ("cast", "hello")]


async def _call_exit(ctx: Process) -> tuple[str, Any]:
    server = await ctx.spawn(echo, node="n2")
    try:
        await ctx.call(server, "crash")
    except CallExit as exc:
        return "exit", exc.reason
    return "no", None


def test_call_target_exits_during_call(rt: Any) -> None:
    kind, reason = rt.run(_call_exit)
    assert kind == "exit" and isinstance(reason, Error) and reason.kind == "RuntimeError"


def test_call_to_dead_process_is_a_typed_error(rt: Any) -> None:
    pid = rt.spawn(echo)
    rt.send(pid, "stop")
    assert eventually(rt, lambda: not rt.is_alive(pid))
    with pytest.raises(CallError):
        rt.call(pid, 1, timeout=5)
    with pytest.raises(CallError):
        rt.call("nobody-has-this-name", 1, timeout=5)


def test_driver_call_and_send(rt: Any) -> None:
    pid = rt.spawn(echo, node="n2")
    assert rt.call(pid, "hi") == ("echo", "hi")
    sink = rt.spawn(collector)
    for i in range(20):
        rt.send(sink, i)
    assert eventually(rt, lambda: rt.call(sink, "get") == list(range(20)))


# --- timers ---


async def _timers(ctx: Process) -> list[Any]:
    me = ctx.self()
    keep = ctx.send_after(0.2, me, "kept")
    drop = ctx.send_after(0.2, me, "dropped")
    left = ctx.cancel_timer(drop)
    got = await ctx.receive(timeout=5)
    fired_cancel = ctx.cancel_timer(keep)
    try:
        await ctx.receive(timeout=0.4)
        extra = "leak"
    except ReceiveTimeout:
        extra = "none"
    return [got, isinstance(left, float) and 0 < left <= 0.2, fired_cancel, extra]


def test_send_after_and_cancel_timer(rt: Any) -> None:
    assert rt.run(_timers) == ["kept", True, False, "none"]


# --- links and exit signals ---


async def _link_chain(ctx: Process) -> list[Any]:
    """A non-trapping process linked to a crasher dies with the crasher's reason."""
    ctx.trap_exit(True)
    victim = await ctx.spawn(_linked_victim, node="n2", link=True)
    msg = await ctx.receive(Exit, timeout=10)
    return [msg.pid == victim, msg.reason]


async def _linked_victim(ctx: Process) -> None:
    await ctx.spawn(crash_after, 0.2, ("custom", 1), node="n3", link=True)
    await ctx.receive(lambda m: m == "never")


def test_link_propagates_abnormal_exit(rt: Any) -> None:
    same, reason = rt.run(_link_chain)
    assert same and reason == ("custom", 1)


async def _normal_exit_does_not_propagate(ctx: Process) -> Any:
    ctx.trap_exit(True)
    victim = await ctx.spawn(_linked_to_normal, node="n2", link=True)
    ctx.send(victim, "check")
    return await ctx.receive(timeout=10)


async def _linked_to_normal(ctx: Process) -> None:
    child = await ctx.spawn(crash_after, 0.1, NORMAL, node="n3", link=True)
    await ctx.sleep(0.5)
    await ctx.receive(lambda m: m == "check")
    raise _Report(child)


class _Report(Exception):
    pass


def test_normal_exit_of_a_link_is_ignored(rt: Any) -> None:
    msg = rt.run(_normal_exit_does_not_propagate)
    assert isinstance(msg, Exit) and isinstance(msg.reason, Error)
    assert msg.reason.kind == "_Report"  # it survived the normal exit and reported


async def _trap_gets_messages(ctx: Process) -> list[Any]:
    ctx.trap_exit(True)
    a = await ctx.spawn(crash_after, 0.1, "raise", node="n2", link=True)
    b = await ctx.spawn(crash_after, 0.1, NORMAL, node="n3", link=True)
    got = {}
    for _ in range(2):
        msg = await ctx.receive(Exit, timeout=10)
        got[msg.pid] = msg.reason
    return [type(got[a]).__name__, got[a].kind, got[b]]


def test_trapping_process_receives_exit_messages(rt: Any) -> None:
    assert rt.run(_trap_gets_messages) == ["Error", "ValueError", NORMAL]


async def _unlink(ctx: Process) -> str:
    child = await ctx.spawn(crash_after, 0.3, ("bad", 1), node="n2", link=True)
    ctx.unlink(child)
    await ctx.sleep(0.8)
    return "survived"


def test_unlink_stops_propagation(rt: Any) -> None:
    assert rt.run(_unlink) == "survived"


async def _link_to_dead(ctx: Process) -> Any:
    ctx.trap_exit(True)
    child = await ctx.spawn(crash_after, 0.0, NORMAL, node="n2")
    ref = ctx.monitor(child)
    await ctx.receive(lambda m: isinstance(m, Down) and m.ref == ref, timeout=10)
    await ctx.sleep(1.5)  # long enough for the Ray actor to be reaped too
    ctx.link(child)
    msg = await ctx.receive(Exit, timeout=10)
    return msg.reason


def test_link_to_a_dead_process_gives_noproc(rt: Any) -> None:
    assert rt.run(_link_to_dead) == NOPROC


async def _exit_signals(ctx: Process) -> list[Any]:
    me = ctx.self()
    out = []
    plain = await ctx.spawn(idle, node="n2")
    trapping = await ctx.spawn(trapper, me, node="n3")
    refs = {ctx.monitor(plain): "plain", ctx.monitor(trapping): "trapping"}
    ctx.exit(plain, NORMAL)  # ignored by a non-trapping process
    ctx.exit(trapping, "please")  # a message for a trapping one
    got = await ctx.receive(lambda m: isinstance(m, tuple) and m[0] == "got", timeout=10)
    out.append((got[1].pid == me, got[1].reason))
    ctx.exit(plain, SHUTDOWN)
    ctx.exit(trapping, KILL)  # kill cannot be trapped
    for _ in range(2):
        down = await ctx.receive(Down, timeout=10)
        out.append((refs[down.ref], down.reason))
    return out


def test_exit_signal_rules(rt: Any) -> None:
    got = rt.run(_exit_signals)
    assert got[0] == (True, "please")
    assert sorted(got[1:]) == [("plain", SHUTDOWN), ("trapping", KILLED)]


async def _exit_self(ctx: Process) -> None:
    ctx.exit(ctx.self(), ("done", 1))


def test_exit_self_ends_with_reason(rt: Any) -> None:
    with pytest.raises(ProcessFailed) as info:
        rt.run(_exit_self)
    assert info.value.reason == ("done", 1)


# --- monitors ---


async def _monitors(ctx: Process) -> list[Any]:
    a = await ctx.spawn(crash_after, 0.2, ("why", 2), node="n2")
    r1, r2 = ctx.monitor(a), ctx.monitor(a)
    downs = [await ctx.receive(Down, timeout=10) for _ in range(2)]
    b = await ctx.spawn(crash_after, 0.2, ("why", 3), node="n3")
    r3 = ctx.monitor(b)
    ctx.demonitor(r3)
    try:
        await ctx.receive(Down, timeout=0.6)
        after_demonitor = "got down"
    except ReceiveTimeout:
        after_demonitor = "nothing"
    r4 = ctx.monitor(b)  # b is gone by now
    late = await ctx.receive(Down, timeout=10)
    return [sorted([d.ref == r1 or d.ref == r2 for d in downs]), [d.reason for d in downs],
            after_demonitor, late.ref == r4, late.reason]


def test_monitor_demonitor_and_noproc(rt: Any) -> None:
    assert rt.run(_monitors) == [[True, True], [("why", 2), ("why", 2)], "nothing", True,
                                 NOPROC]


async def _monitor_sees_kill(ctx: Process, pid: Pid) -> Any:
    ctx.monitor(pid)
    ctx.send(pid, "noise")
    down = await ctx.receive(Down, timeout=20)
    return down.reason


def test_uncaught_exception_ends_the_process(rt: Any) -> None:
    with pytest.raises(ValueError, match="crashed on purpose"):
        rt.run(crash_after, 0.0, "raise")


# --- registry ---


async def _registry(ctx: Process) -> list[Any]:
    await ctx.register("me")
    out: list[Any] = [await ctx.whereis("me") == ctx.self()]
    other = await ctx.spawn(_try_register, "me", ctx.self(), node="n2")
    out.append(await ctx.receive(timeout=10))
    await ctx.unregister("me")
    out.append(await ctx.whereis("me"))
    ctx.send(other, "again")
    out.append(await ctx.receive(timeout=10))
    return out


async def _try_register(ctx: Process, name: str, report_to: Pid) -> None:
    try:
        await ctx.register(name)
        ctx.send(report_to, "registered")
    except NameTaken as exc:
        ctx.send(report_to, ("taken", exc.holder == report_to))
    await ctx.receive(lambda m: m == "again")
    await ctx.register(name)
    ctx.send(report_to, "registered")
    await ctx.receive(lambda m: m == "never")


def test_register_whereis_unregister(rt: Any) -> None:
    assert rt.run(_registry) == [True, ("taken", True), None, "registered"]


def test_name_is_freed_when_the_process_dies(rt: Any) -> None:
    pid = rt.spawn(echo, name="server")
    assert rt.whereis("server") == pid
    with pytest.raises(NameTaken):
        rt.spawn(echo, name="server")
    assert rt.call("server", 1) == ("echo", 1)
    rt.kill(pid)
    assert eventually(rt, lambda: rt.whereis("server") is None)
    again = rt.spawn(echo, name="server")
    assert rt.whereis("server") == again != pid


async def _lookups(ctx: Process, name: str) -> None:
    """Answers each "where" with its own lookup of `name`."""
    while True:
        msg = await ctx.receive()
        ctx.send(msg[1], ("at", await ctx.whereis(name)))


async def _ask(ctx: Process, looker: Pid) -> Any:
    ctx.send(looker, ("where", ctx.self()))
    return (await ctx.receive(timeout=10))[1]


def test_a_process_that_looked_a_name_up_finds_its_next_holder(rt: Any) -> None:
    first = rt.spawn(echo, name="server", node="n2")
    looker = rt.spawn(_lookups, "server", node="n1")
    assert rt.run(_ask, looker) == first
    assert rt.run(_ask, looker) == first  # asked again: the same answer
    rt.kill(first)
    assert eventually(rt, lambda: rt.run(_ask, looker) is None)
    second = rt.spawn(echo, name="server", node="n3")
    assert eventually(rt, lambda: rt.run(_ask, looker) == second)
    assert rt.call("server", 1) == ("echo", 1)


# --- killing ---


def test_kill_from_outside(rt: Any) -> None:
    victim = rt.spawn(echo, node="n2")  # answers: the relay knows its monitor is in place
    watcher = rt.spawn(collector, node="n1")
    rt.run(_monitor_for, victim, watcher, True)
    rt.kill(victim)
    assert eventually(rt, lambda: any(isinstance(m, Down) for m in rt.call(watcher, "get")))
    down = next(m for m in rt.call(watcher, "get") if isinstance(m, Down))
    assert down.reason == KILLED and down.pid == victim


async def _monitor_for(ctx: Process, victim: Pid, watcher: Pid, confirm: bool = False) -> None:
    """Start a relay that monitors `victim` and forwards its Down to `watcher`."""
    await ctx.spawn(_relay_monitor, victim, watcher, ctx.self(), confirm, node="n1")
    await ctx.receive(lambda m: m == "armed", timeout=20)


async def _relay_monitor(ctx: Process, victim: Pid, watcher: Pid, armed: Pid,
                         confirm: bool) -> None:
    """Monitors `victim`; with `confirm` (an echo victim) says so only once the monitor
    is in place: a kill racing the monitor request rightly gives `noproc`, and signals
    between two processes keep their order, so an answered call means it arrived."""
    ctx.monitor(victim)
    if confirm:
        await ctx.call(victim, "monitored?", timeout=20)
    ctx.send(armed, "armed")
    down = await ctx.receive(Down)
    ctx.send(watcher, down)


def test_kill_node_kills_only_that_node(rt: Any) -> None:
    on_n2 = [rt.spawn(idle, node="n2") for _ in range(2)]
    on_n1 = rt.spawn(echo, node="n1")
    killed = rt.kill_node("n2")
    assert set(killed) >= set(on_n2)
    assert eventually(rt, lambda: not any(rt.is_alive(p) for p in on_n2))
    assert rt.call(on_n1, "alive?") == ("echo", "alive?")


# --- hosts: processes sharing one host ---


async def _spawn_beside(ctx: Process) -> tuple[str, str]:
    """Spawn a process into the host this one runs in: (my host, its host)."""
    child = await ctx.spawn(echo, host="h")
    assert await ctx.call(child, "hi") == ("echo", "hi")
    return ctx.self().host, child.host


def test_a_spawn_into_the_spawners_own_host_lands_beside_it(rt: Any) -> None:
    pid = rt.spawn(_spawn_beside_loop, node="n2", host="h")
    mine, theirs = rt.call(pid, "go", timeout=30)
    assert mine == theirs == pid.host


async def _spawn_beside_loop(ctx: Process) -> None:
    msg = await ctx.receive(Call)
    ctx.reply(msg.from_, await _spawn_beside(ctx))
    await ctx.receive(lambda m: m == "never")


def test_a_run_joins_the_named_host_it_is_given(rt: Any) -> None:
    """`sediment start` polls its members once a second with `run`: in a named host,
    not in a new Ray actor each time."""
    a = rt.spawn(echo, node="n2", host="h")
    ran = [rt.run(_own_pid, node="n2", host="h") for _ in range(2)]
    assert [p.host for p in ran] == [a.host, a.host] and ran[0] != ran[1]
    assert rt.call(a, "still here?") == ("echo", "still here?")


async def _own_pid(ctx: Process) -> Pid:
    return ctx.self()


def test_a_crash_in_a_shared_host_ends_only_that_process(rt: Any) -> None:
    a = rt.spawn(echo, node="n2", host="h")
    b = rt.spawn(echo, node="n2", host="h")
    watcher = rt.spawn(collector, node="n1")
    rt.run(_monitor_for, a, watcher)
    with pytest.raises(CallError):
        rt.call(a, "crash")  # an uncaught exception ends a, not the host
    assert eventually(rt, lambda: any(isinstance(m, Down) for m in rt.call(watcher, "get")))
    down = next(m for m in rt.call(watcher, "get") if isinstance(m, Down))
    assert down.pid == a and isinstance(down.reason, Error)
    assert rt.call(b, "still here?") == ("echo", "still here?")
    rt.kill(b)  # killed alone: its host goes on
    c = rt.spawn(echo, node="n2", host="h")
    assert c.host == a.host and rt.call(c, 1) == ("echo", 1)


def test_killing_a_host_ends_everything_in_it_and_tells_links_and_monitors(rt: Any) -> None:
    inside = [rt.spawn(idle, node="n2", host="h") for _ in range(2)]
    beside = rt.spawn(echo, node="n2", host="other")
    watcher = rt.spawn(collector, node="n1")
    rt.run(_monitor_for, inside[0], watcher)
    linked = rt.spawn(linking_trapper, watcher, node="n1")
    assert rt.call(linked, ("link", inside[1])) == "linked"
    killed = rt.kill_host("n2", "h")
    assert set(killed) == set(inside)

    def seen() -> list[Any]:
        return list(rt.call(watcher, "get"))

    assert eventually(rt, lambda: any(isinstance(m, Down) for m in seen())
                      and any(isinstance(m, tuple) and isinstance(m[1], Exit) for m in seen()),
                      timeout=30)
    down = next(m for m in seen() if isinstance(m, Down))
    exit_ = next(m[1] for m in seen() if isinstance(m, tuple) and isinstance(m[1], Exit))
    assert (down.pid, down.reason) == (inside[0], KILLED)
    assert (exit_.pid, exit_.reason) == (inside[1], KILLED)
    assert eventually(rt, lambda: not any(rt.is_alive(p) for p in inside))
    assert rt.call(beside, "alive?") == ("echo", "alive?")
    again = rt.spawn(echo, node="n2", host="h")  # a new host takes the name
    assert again.host != inside[0].host or rt.backend == "sim"
    assert rt.call(again, 2) == ("echo", 2)


# --- mailbox bounds, failpoints ---


def test_mailbox_overflow_fails_the_receiver(rt: Any) -> None:
    victim = rt.spawn(sleeper_with_mailbox, node="n2", mailbox_capacity=10)
    watcher = rt.spawn(collector, node="n1")
    rt.run(_monitor_for, victim, watcher)
    for i in range(25):
        rt.send(victim, i)
    assert eventually(rt, lambda: any(isinstance(m, Down) for m in rt.call(watcher, "get")))
    down = next(m for m in rt.call(watcher, "get") if isinstance(m, Down))
    assert isinstance(down.reason, Error) and down.reason.kind == "MailboxOverflow"


@pytest.mark.parametrize("action", ["raise", "crash", "pause"])
def test_failpoints(rt: Any, action: str) -> None:
    sink = rt.spawn(collector, node="n1")
    proc = rt.spawn(with_failpoint, sink, node="n2", label="fp")
    watcher = rt.spawn(collector, node="n1")
    rt.run(_monitor_for, proc, watcher)
    rt.arm_failpoint(proc, "test.point", action)
    rt.send(proc, "go")  # harmless; the process is waiting at or before the failpoint
    if action == "pause":
        assert eventually(rt, lambda: rt.call(sink, "get") == ["before"])
        rt.sleep(0.3)
        assert rt.call(sink, "get") == ["before"]
        rt.release_failpoint(proc, "test.point")
        assert eventually(rt, lambda: rt.call(sink, "get") == ["before", "after"])
        rt.send(proc, "finish")
        assert eventually(rt, lambda: any(isinstance(m, Down) for m in rt.call(watcher, "get")))
        return
    assert eventually(rt, lambda: any(isinstance(m, Down) for m in rt.call(watcher, "get")))
    down = next(m for m in rt.call(watcher, "get") if isinstance(m, Down))
    assert rt.call(sink, "get") == ["before"]
    if action == "crash":
        assert down.reason == KILLED
    else:
        assert isinstance(down.reason, Error) and down.reason.kind == FailpointError.__name__


def test_a_crash_failpoint_armed_with_notify_tells_before_the_process_dies(rt: Any) -> None:
    """A scenario knows a crash failpoint fired from the hit the process sent before it
    died (on Ray, a process alone in its actor exits the OS process right after)."""
    sink = rt.spawn(collector, node="n1")
    proc = rt.spawn(with_failpoint, sink, node="n2", label="fp")
    rt.arm_failpoint(proc, "test.point", "crash", notify=sink, tag="faults[3]")
    rt.send(proc, "go")

    def hits() -> list[FailpointHit]:
        return [m for m in rt.call(sink, "get") if isinstance(m, FailpointHit)]

    assert eventually(rt, lambda: len(hits()) == 1 and not rt.is_alive(proc))
    [hit] = hits()
    assert (hit.tag, hit.point, hit.pid) == ("faults[3]", "test.point", proc)
    assert rt.call(sink, "get") == ["before", hit]


def test_a_failpoint_armed_everywhere_is_a_breakpoint_until_released(rt: Any) -> None:
    """Armed everywhere with `notify`, a pause holds every process that reaches the
    point, those spawned after the arming too, and tells who reached it; the release
    lets them all go on and arms nothing any more. A pause with `seconds` ends itself."""
    sink = rt.spawn(collector, node="n1")
    early = rt.spawn(with_failpoint, sink, node="n2", label="early")
    rt.arm_failpoint_everywhere("test.point", "pause", notify=sink, tag="hold-1")
    late = rt.spawn(with_failpoint, sink, node="n3", label="late")
    for proc in (early, late):
        rt.send(proc, "go")

    def hits() -> list[FailpointHit]:
        return [m for m in rt.call(sink, "get") if isinstance(m, FailpointHit)]

    assert eventually(rt, lambda: len(hits()) == 2), (early, late, rt.call(sink, "get"))
    assert {(h.tag, h.point, h.pid) for h in hits()} == {("hold-1", "test.point", early),
                                                         ("hold-1", "test.point", late)}
    rt.sleep(0.3)
    assert rt.call(sink, "get").count("after") == 0  # both held
    rt.release_failpoint_everywhere("test.point")
    assert eventually(rt, lambda: rt.call(sink, "get").count("after") == 2)
    after = rt.spawn(with_failpoint, sink, node="n2", label="after-release")
    rt.send(after, "go")
    assert eventually(rt, lambda: rt.call(sink, "get").count("after") == 3)
    assert len(hits()) == 2
    rt.arm_failpoint_everywhere("test.point", "pause", seconds=0.2)
    bounded = rt.spawn(with_failpoint, sink, node="n3", label="bounded")
    rt.send(bounded, "go")
    assert eventually(rt, lambda: rt.call(sink, "get").count("after") == 4)
    rt.release_failpoint_everywhere("test.point")
    for proc in (early, late, after, bounded):
        rt.send(proc, "finish")
    with pytest.raises(BadArgument, match="failpoint name"):
        rt.arm_failpoint_everywhere("", "pause")
    with pytest.raises(BadArgument, match="action"):
        rt.arm_failpoint_everywhere("test.point", "explode")


def test_a_failpoint_armed_here_and_everywhere_acts_twice_breakpoint_first(rt: Any) -> None:
    """A process armed with its own failpoint still stops at a breakpoint armed
    everywhere on the same point (a scenario's own pause must not hide its trigger):
    first the breakpoint, then its own."""
    sink = rt.spawn(collector, node="n1")
    proc = rt.spawn(with_failpoint, sink, node="n2", label="both")
    rt.arm_failpoint(proc, "test.point", "raise")
    rt.arm_failpoint_everywhere("test.point", "pause", notify=sink, tag="both")
    watcher = rt.spawn(collector, node="n1")
    rt.run(_monitor_for, proc, watcher)
    rt.send(proc, "go")
    assert eventually(rt, lambda: any(isinstance(m, FailpointHit)
                                      for m in rt.call(sink, "get")))
    rt.sleep(0.2)
    assert not any(isinstance(m, Down) for m in rt.call(watcher, "get"))  # held, not raised
    rt.release_failpoint_everywhere("test.point")
    assert eventually(rt, lambda: any(isinstance(m, Down) for m in rt.call(watcher, "get")))
    down = next(m for m in rt.call(watcher, "get") if isinstance(m, Down))
    assert isinstance(down.reason, Error) and down.reason.kind == FailpointError.__name__


# --- bad input ---


async def _unpicklable_send(ctx: Process) -> str:
    other = await ctx.spawn(echo, node="n2")
    try:
        ctx.send(other, lambda: None if False else _Lock())
        ctx.send(other, _Lock())
    except UnpicklableMessage:
        pass
    else:
        return "sent"
    return str(await ctx.call(other, "still fine"))


class _Lock:
    """Unpicklable on purpose."""

    def __reduce__(self) -> Any:
        raise TypeError("cannot pickle _Lock")


def test_unpicklable_message_is_refused(rt: Any) -> None:
    assert rt.run(_unpicklable_send) == str(("echo", "still fine"))
    pid = rt.spawn(echo)
    with pytest.raises(UnpicklableMessage):
        rt.send(pid, _Lock())
    assert rt.call(pid, 1) == ("echo", 1)


async def _bad_args(ctx: Process) -> list[str]:
    out = []
    for attempt in (
        lambda: ctx.send("not a pid", 1),
        lambda: ctx.link("nope"),
        lambda: ctx.send_after(-1, ctx.self(), 1),
    ):
        try:
            attempt()
            out.append("accepted")
        except BadArgument:
            out.append("refused")
    for coro in (ctx.receive(timeout=-1), ctx.register(""), ctx.spawn(echo, node="nowhere")):
        try:
            await coro
            out.append("accepted")
        except BadArgument:
            out.append("refused")
    return out


def test_bad_arguments_are_refused(rt: Any) -> None:
    assert rt.run(_bad_args) == ["refused"] * 6
    with pytest.raises(BadArgument):
        rt.spawn(echo, node="nowhere")
    with pytest.raises(BadArgument):
        rt.spawn(echo, mailbox_capacity=0)


# --- placement and teardown (Ray) ---


async def _where_am_i(ctx: Process) -> str:
    import ray

    return str(ray.get_runtime_context().get_node_id())


@pytest.mark.usefixtures("ray_cluster")
def test_logical_nodes_land_on_distinct_ray_nodes() -> None:
    from sediment.runtime import api

    rt = api.start("ray", nodes=("n1", "n2", "n3"))
    try:
        where = [rt.run(_where_am_i, node=n) for n in ("n1", "n2", "n3")]
        assert len(set(where)) == 3
    finally:
        rt.shutdown()


@pytest.mark.usefixtures("ray_cluster")
def test_teardown_leaves_no_actor_behind() -> None:
    import ray

    from sediment.runtime import api

    rt = api.start("ray", nodes=("n1", "n2"))
    rt.spawn(echo, node="n1", name="a")
    rt.spawn(idle, node="n2")
    rt.run(crash_after, 0.0, NORMAL)  # a zombie awaiting reaping counts too
    rt.shutdown()

    def ours() -> list[str]:
        return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                if a["name"].startswith(rt.cluster)]

    assert eventually(rt, lambda: not ours(), timeout=30), ours()


@pytest.mark.usefixtures("ray_cluster")
def test_warm_pool_serves_spawns_and_refills() -> None:
    import ray

    from sediment.runtime import api

    rt = api.start("ray", nodes=("n1", "n2"), warm_pool=2)
    try:
        pools = lambda: ray.get(rt.registry.warm.remote())  # noqa: E731 - idempotent refill
        assert eventually(rt, lambda: pools() == {"n1": 2, "n2": 2}, timeout=60)
        warm = ray.get(rt.registry.pooled.remote())
        pid = rt.spawn(echo, node="n2")
        assert rt.call(pid, 1) == ("echo", 1)
        assert pid.host == warm["n2"][0]  # the spawn took the oldest warm host
        assert eventually(rt, lambda: pools() == {"n1": 2, "n2": 2}, timeout=60)
        for _ in range(3):  # a burst: the pool refills behind it
            rt.spawn(echo, node="n1")
        assert rt.wait_warm(120)  # returns once no replacement is still booting
        assert {n: len(p) for n, p in ray.get(rt.registry.pooled.remote()).items()} == {
            "n1": 2, "n2": 2}
    finally:
        rt.shutdown()


def test_wait_warm_on_the_simulator_has_nothing_to_wait_for() -> None:
    from sediment.runtime import api

    with api.start("sim", seed=1, nodes=("n1",)) as rt:
        rt.spawn(echo)
        assert rt.wait_warm(0.0)


def test_prepared_hosts_are_the_ones_processes_join(rt: Any) -> None:
    """`prepare_hosts` starts named hosts ahead of their processes (on Ray, all at
    once: a supervisor's children would start them one after the other); a process
    spawned into one joins it, and the other names stay usable."""
    rt.prepare_hosts([("n2", "early"), ("n3", "early"), ("n2", "early")])
    prepared = {"n2": "early", "n3": "early"}  # the host a pid names (on Ray: its id)
    if rt.backend == "ray":
        import ray

        prepared = {node: host_id for node in ("n2", "n3")
                    for host_id, name, _h in ray.get(rt.registry.hosts_of.remote(node))
                    if name == "early"}
        assert set(prepared) == {"n2", "n3"}
    a = rt.spawn(echo, node="n2", host="early")
    b = rt.spawn(echo, node="n2", host="early")
    c = rt.spawn(echo, node="n3", host="early")
    assert (a.host, b.host, c.host) == (prepared["n2"], prepared["n2"], prepared["n3"])
    assert [rt.call(p, i) for i, p in enumerate((a, b, c))] == [("echo", 0), ("echo", 1),
                                                                ("echo", 2)]
    with pytest.raises(BadArgument, match="unknown node"):
        rt.prepare_hosts([("n9", "early")])
