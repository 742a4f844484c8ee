"""The supervisor process on both backends: strategies, restart types, intensity,
shutdown order and timeouts, escalation, significant children, the API, node loss."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from runtime_helpers import collector, eventually
from supervision_helpers import (
    counter,
    dynamic_child,
    exits_after,
    flaky_start,
    stubborn,
    worker_spec,
)

from sediment.runtime.errors import CallExit
from sediment.runtime.pid import Pid
from sediment.runtime.reasons import KILLED, NORMAL, SHUTDOWN
from sediment.supervision import Backoff, ChildSpec, Spawn, SupFlags, requests, start_top
from sediment.supervision.errors import InvalidChildSpec, InvalidSupFlags

RT_BACKENDS = ("sim", "ray", "ray-hosted")  # "-hosted": every process of a node in one host

def pids(rt: Any, sup: Pid) -> dict[Any, Any]:
    # a supervisor answers once a restart is done: on a loaded machine on Ray, starting
    # three actors again takes longer than a call's default 5 s (a CI failure)
    return {cid: pid for cid, pid, _ in rt.call(sup, requests.WhichChildren(), timeout=60)}


def events(rt: Any, sink: Pid, kind: str) -> list[tuple[Any, ...]]:
    """The collector's `kind` events; "terminated" ones in the order the workers ended
    (their own clock readings: reports from several Ray hosts arrive in any order)."""
    found = [m for m in rt.call(sink, "get") if isinstance(m, tuple) and m[0] == kind]
    if kind == "terminated":
        found.sort(key=lambda m: m[3])
    return found


def three(rt: Any, strategy: str, **flags: Any) -> tuple[Pid, Pid, dict[Any, Any]]:
    sink = rt.spawn(collector)
    specs = [worker_spec(n, sink) for n in ("a", "b", "c")]
    sup = start_top(rt, SupFlags(strategy=strategy, intensity=10, period=5, **flags), specs,
                    name=f"sup-{strategy}")
    return sup, sink, pids(rt, sup)


def changed_after_kill(rt: Any, sup: Pid, before: dict[Any, Any], victim: str) -> set[str]:
    rt.kill(before[victim])
    assert eventually(rt, lambda: all(isinstance(p, Pid) for p in pids(rt, sup).values())
                      and pids(rt, sup)[victim] != before[victim])
    rt.sleep(0.5)
    after = pids(rt, sup)
    return {cid for cid in before if after[cid] != before[cid]}


@pytest.mark.parametrize(("strategy", "expected"), [
    ("one_for_one", {"b"}),
    ("one_for_all", {"a", "b", "c"}),
    ("rest_for_one", {"b", "c"}),
])
def test_strategies_restart_the_right_children(rt: Any, strategy: str, expected: set[str]) -> None:
    sup, _, before = three(rt, strategy)
    assert changed_after_kill(rt, sup, before, "b") == expected


def test_one_for_all_stops_in_reverse_then_starts_in_order(rt: Any) -> None:
    sup, sink, before = three(rt, "one_for_all")
    rt.kill(before["b"])
    assert eventually(rt, lambda: len(events(rt, sink, "started")) == 6)
    assert [e[1] for e in events(rt, sink, "terminated")] == ["c", "a"]
    assert [e[1] for e in events(rt, sink, "started")] == ["a", "b", "c", "a", "b", "c"]


def test_shutdown_stops_children_in_reverse_start_order(rt: Any) -> None:
    sup, sink, _ = three(rt, "one_for_one")
    assert rt.call(sup, requests.StopSupervisor(), timeout=30) == "ok"
    assert eventually(rt, lambda: len(events(rt, sink, "terminated")) == 3)
    assert [(e[1], e[2]) for e in events(rt, sink, "terminated")] == [
        ("c", SHUTDOWN), ("b", SHUTDOWN), ("a", SHUTDOWN)]
    assert eventually(rt, lambda: not rt.is_alive(sup))


@pytest.mark.parametrize(("restart", "reason", "restarted"), [
    ("permanent", NORMAL, True),
    ("permanent", "boom", True),
    ("transient", NORMAL, False),
    ("transient", SHUTDOWN, False),
    ("transient", "boom", True),
    ("temporary", "boom", False),
])
def test_restart_types(rt: Any, restart: str, reason: Any, restarted: bool) -> None:
    sink = rt.spawn(collector)
    sup = start_top(rt, SupFlags(intensity=5), [worker_spec("w", sink, restart=restart)])
    first = pids(rt, sup)["w"]
    rt.call(first, ("exit", reason))
    rt.sleep(1.0)
    now = {cid: pid for cid, pid, _ in rt.call(sup, requests.WhichChildren())}
    if restarted:
        assert eventually(rt, lambda: isinstance(pids(rt, sup).get("w"), Pid)
                          and pids(rt, sup)["w"] != first)
    elif restart == "temporary":
        assert "w" not in now
    else:
        assert now["w"] is None


def test_intensity_exceeded_escalates(rt: Any) -> None:
    sink = rt.spawn(collector)
    sup = rt.run(_supervised_by_trapper, sink, timeout=120)
    exits = lambda: [m for m in rt.call(sink, "get") if m[0] == "sup_exit"]  # noqa: E731
    assert eventually(rt, lambda: len(exits()) == 1, timeout=60)
    assert exits()[0][1] == sup and exits()[0][2] == SHUTDOWN
    assert [e[1] for e in events(rt, sink, "terminated")][-1:] == ["w"]


async def _supervised_by_trapper(ctx: Any, sink: Pid) -> Pid:
    """Start a supervisor (intensity 2 / 30 s) under a trapping parent; crash its child 3x."""

    parent = await ctx.spawn(_trap_parent, sink, ctx.self())
    return await ctx.receive(Pid, timeout=120) if parent else None


async def _trap_parent(ctx: Any, sink: Pid, report: Pid) -> None:
    from sediment.runtime.messages import Exit
    from sediment.supervision import start_link

    ctx.trap_exit(True)
    sup = await start_link(ctx, SupFlags(intensity=2, period=30),
                           [worker_spec("w", sink)])
    ctx.send(report, sup)
    for _ in range(3):
        which = await ctx.call(sup, requests.WhichChildren())
        child = requests.child_pid(which, "w")
        if child is None:
            break
        with contextlib.suppress(CallExit):
            await ctx.call(child, "crash")
        await ctx.sleep(0.3)
    msg = await ctx.receive(lambda m: isinstance(m, Exit) and m.pid == sup, timeout=60)
    ctx.send(sink, ("sup_exit", sup, msg.reason))


def test_shutdown_timeout_then_kill_and_brutal_kill(rt: Any) -> None:
    sink = rt.spawn(collector)
    specs = [
        ChildSpec("patient", (Spawn(stubborn), (sink,)), shutdown=0.5),
        ChildSpec("brutal", (Spawn(stubborn), (sink,)), shutdown="brutal_kill"),
    ]
    sup = start_top(rt, SupFlags(), specs)
    before = pids(rt, sup)
    assert rt.call(sup, requests.TerminateChild("brutal")) == "ok"
    assert rt.call(sup, requests.TerminateChild("patient"), timeout=30) == "ok"
    assert pids(rt, sup) == {"patient": None, "brutal": None}
    assert eventually(rt, lambda: not rt.is_alive(before["patient"])
                      and not rt.is_alive(before["brutal"]))


def test_nested_supervisor_escalation_restarts_the_subtree(rt: Any) -> None:
    sink = rt.spawn(collector)
    inner = ChildSpec("inner", (Spawn(_inner_sup, node="n2"), (sink,)), type="supervisor")
    top = start_top(rt, SupFlags(intensity=5), [inner])
    inner_pid = pids(rt, top)["inner"]
    worker = requests.child_pid(rt.call(inner_pid, requests.WhichChildren()), "w")
    rt.kill(worker)  # inner has intensity 0: it gives up, and top restarts it
    assert eventually(rt, lambda: isinstance(pids(rt, top)["inner"], Pid)
                      and pids(rt, top)["inner"] != inner_pid, timeout=60)
    # a loaded machine may take a while to start the new worker actor on Ray
    assert eventually(rt, lambda: len(events(rt, sink, "started")) == 2, timeout=60)


async def _inner_sup(ctx: Any, sink: Pid) -> None:
    from sediment.supervision import supervisor

    await supervisor(ctx, SupFlags(intensity=0), [worker_spec("w", sink, node="n2")])


def test_significant_child_shuts_the_supervisor_down(rt: Any) -> None:
    sink = rt.spawn(collector)
    specs = [worker_spec("keep", sink),
             ChildSpec("job", (exits_after, (0.3, NORMAL)), restart="transient",
                       significant=True)]
    sup = start_top(rt, SupFlags(auto_shutdown="any_significant"), specs)
    assert eventually(rt, lambda: not rt.is_alive(sup))
    assert ("terminated", "keep", SHUTDOWN) in [e[:3] for e in events(rt, sink, "terminated")]


def test_api_calls(rt: Any) -> None:
    sink = rt.spawn(collector)
    sup = start_top(rt, SupFlags(intensity=5), [worker_spec("a", sink)])
    started = rt.call(sup, requests.StartChild(worker_spec("b", sink)))
    assert isinstance(started, requests.ChildStarted) and isinstance(started.pid, Pid)
    again = rt.call(sup, requests.StartChild(worker_spec("b", sink)))
    assert again == requests.SupervisorError(("already_started", started.pid))
    assert rt.call(sup, requests.CountChildren()) == {
        "specs": 2, "active": 2, "supervisors": 0, "workers": 2}
    assert rt.call(sup, requests.DeleteChild("b")) == requests.SupervisorError("running")
    assert rt.call(sup, requests.TerminateChild("b")) == "ok"
    assert isinstance(rt.call(sup, requests.RestartChild("b")), requests.ChildStarted)
    assert rt.call(sup, requests.TerminateChild("b")) == "ok"
    assert rt.call(sup, requests.DeleteChild("b")) == "ok"
    assert rt.call(sup, requests.DeleteChild("nope")) == requests.SupervisorError("not_found")
    assert [cid for cid, _, _ in rt.call(sup, requests.WhichChildren())] == ["a"]


def test_simple_one_for_one(rt: Any) -> None:
    template = ChildSpec("dyn", (dynamic_child, ("kind",)))
    sup = start_top(rt, SupFlags(strategy="simple_one_for_one", intensity=5), [template])
    started = [rt.call(sup, requests.StartChild((n,))).pid for n in range(3)]
    assert [rt.call(p, "who") for p in started] == [("kind", 0), ("kind", 1), ("kind", 2)]
    with pytest.raises(CallExit):
        rt.call(started[1], "crash")
    assert eventually(rt, lambda: rt.call(sup, requests.CountChildren())["active"] == 3)
    assert rt.call(sup, requests.TerminateChild(started[0])) == "ok"
    assert rt.call(sup, requests.CountChildren())["active"] == 2
    refused = rt.call(sup, requests.DeleteChild("dyn"))
    assert refused == requests.SupervisorError("simple_one_for_one")
    assert rt.call(sup, requests.StopSupervisor(), timeout=30) == "ok"


def test_failed_start_is_retried_through_the_mailbox(rt: Any) -> None:
    rt.spawn(counter, name="starts")
    spec = ChildSpec("flaky", (flaky_start, ("starts", (2,))))
    sup = start_top(rt, SupFlags(intensity=5, period=30), [spec])
    first = pids(rt, sup)["flaky"]
    rt.kill(first)  # the restart's first start attempt fails, the retry succeeds
    assert eventually(rt, lambda: isinstance(pids(rt, sup)["flaky"], Pid)
                      and pids(rt, sup)["flaky"] != first)
    # init (1), the failing restart (2), its retry through the mailbox (3)
    assert eventually(rt, lambda: rt.call("starts", "get") >= 3), rt.call("starts", "get")


def test_node_loss_restarts_its_children(rt: Any) -> None:
    sink = rt.spawn(collector, node="n1")
    specs = [worker_spec("on2", sink, node="n2"), worker_spec("on3", sink, node="n3")]
    sup = start_top(rt, SupFlags(intensity=5), specs, node="n1")
    before = pids(rt, sup)
    killed = rt.kill_node("n2")
    assert before["on2"] in killed
    assert eventually(rt, lambda: isinstance(pids(rt, sup)["on2"], Pid)
                      and pids(rt, sup)["on2"] != before["on2"])
    assert pids(rt, sup)["on3"] == before["on3"]
    assert events(rt, sink, "started")[-1][1] == "on2"


def test_invalid_specs_are_refused_before_anything_starts(rt: Any) -> None:
    n = len(rt.processes())
    with pytest.raises(InvalidChildSpec):
        start_top(rt, SupFlags(), [ChildSpec("x", (42, ()))])  # type: ignore[arg-type]
    with pytest.raises(InvalidChildSpec):
        start_top(rt, SupFlags(), [worker_spec("a"), worker_spec("a")])
    with pytest.raises(InvalidSupFlags):
        start_top(rt, SupFlags(intensity=-1), [])
    assert len(rt.processes()) == n


def test_backoff_delays_the_restart() -> None:
    from sediment.runtime import api

    rt = api.start("sim", seed=3)
    try:
        sink = rt.spawn(collector)
        sup = start_top(rt, SupFlags(intensity=10, backoff=Backoff(0.5, 4.0, 0.0)),
                        [worker_spec("w", sink)])
        first = pids(rt, sup)["w"]
        t0 = rt.now()
        rt.kill(first)
        assert eventually(rt, lambda: isinstance(pids(rt, sup)["w"], Pid)
                          and pids(rt, sup)["w"] != first, step=0.01)
        assert rt.now() - t0 >= 0.5
    finally:
        rt.shutdown()


def test_killed_child_reason_is_reported(rt: Any) -> None:
    sink = rt.spawn(collector)
    sup = start_top(rt, SupFlags(intensity=5), [worker_spec("w", sink)], report_to=sink)
    first = pids(rt, sup)["w"]
    rt.kill(first)
    assert eventually(rt, lambda: any(isinstance(m, requests.SupervisorReport)
                                      and m.kind == "child_terminated"
                                      for m in rt.call(sink, "get")))
    report = next(m for m in rt.call(sink, "get") if isinstance(m, requests.SupervisorReport))
    assert report.supervisor == sup and KILLED in repr(report.data)
