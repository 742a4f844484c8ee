"""Network faults on both backends: partition, heal, delay and loss between nodes.

The sim backend has always had them; on Ray they are applied by each process's transport
(`runtime/ray/transport.py`), pushed to every process by the driver. The same process
code must see the same behaviour: messages and call requests across a cut are lost,
within a node they pass, healing restores traffic, and order per pair is kept under delay.
"""

from __future__ import annotations

from typing import Any

from sediment.runtime.errors import CallTimeout, ReceiveTimeout
from sediment.runtime.messages import Call
from sediment.runtime.process import Process

RT_BACKENDS = ("sim", "ray", "ray-hosted")  # "-hosted": every process of a node in one host

async def _echo(ctx: Process) -> None:
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call):
            ctx.reply(msg.from_, ("echo", msg.request))
        elif isinstance(msg, tuple) and msg[0] == "ping":
            ctx.send(msg[1], ("pong", msg[2]))


async def _spawn_echo(ctx: Process, node: str) -> Any:
    return await ctx.spawn(_echo, node=node, name=f"echo-{node}")


async def _probe(ctx: Process, node: str, tag: int) -> Any:
    """Ping the echo on `node` and call it; what came back."""
    peer = await ctx.whereis(f"echo-{node}")
    ctx.send(peer, ("ping", ctx.self(), tag))
    try:
        pong = await ctx.receive(timeout=1.0)
    except ReceiveTimeout:
        pong = "lost"
    try:
        answer = await ctx.call(peer, tag, timeout=1.0)
    except CallTimeout:
        answer = "timeout"
    return pong, answer


async def _ordered(ctx: Process, node: str, n: int) -> list[int]:
    peer = await ctx.whereis(f"echo-{node}")
    for i in range(n):
        ctx.send(peer, ("ping", ctx.self(), i))
    return [(await ctx.receive(timeout=30))[1] for _ in range(n)]


def _echoes(rt: Any) -> None:
    for node in ("n1", "n2", "n3"):
        rt.run(_spawn_echo, node)


def test_partition_loses_cross_node_traffic_until_healed(rt: Any) -> None:
    _echoes(rt)
    assert rt.run(_probe, "n2", 1, node="n1") == (("pong", 1), ("echo", 1))
    rt.partition(["n1"], ["n2", "n3"])
    assert rt.run(_probe, "n2", 2, node="n1") == ("lost", "timeout")
    assert rt.run(_probe, "n3", 3, node="n2") == (("pong", 3), ("echo", 3))  # same side
    assert rt.run(_probe, "n1", 4, node="n1") == (("pong", 4), ("echo", 4))  # same node
    rt.heal()
    assert rt.run(_probe, "n2", 5, node="n1") == (("pong", 5), ("echo", 5))


def test_a_process_started_during_a_partition_obeys_it(rt: Any) -> None:
    _echoes(rt)
    rt.partition(["n1"], ["n3"])
    assert rt.run(_probe, "n3", 1, node="n1") == ("lost", "timeout")  # a new process on n1
    rt.heal()
    assert rt.run(_probe, "n3", 2, node="n1") == (("pong", 2), ("echo", 2))


def test_total_loss_then_cleared(rt: Any) -> None:
    _echoes(rt)
    rt.set_faults("n1", "n2", drop=1.0)
    pong, _ = rt.run(_probe, "n2", 1, node="n1")
    assert pong == "lost"
    rt.clear_faults()
    assert rt.run(_probe, "n2", 2, node="n1") == (("pong", 2), ("echo", 2))


def test_delayed_messages_keep_their_order(rt: Any) -> None:
    _echoes(rt)
    rt.set_faults("n1", "n2", delay=(0.0, 0.05))
    assert rt.run(_ordered, "n2", 40, node="n1") == list(range(40))
    rt.clear_faults()


async def _watch_and_wait(ctx: Process, node: str) -> Any:
    """Monitor and link a process on `node`, end it, and report what arrived."""
    ctx.trap_exit(True)
    victim = await ctx.spawn(_echo, node=node)
    ref = ctx.monitor(victim)
    ctx.link(victim)
    ctx.exit(victim, "stop")
    got = []
    for _ in range(2):
        try:
            got.append(type(await ctx.receive(timeout=10)).__name__)
        except ReceiveTimeout:
            got.append("nothing")
    return sorted(got), ref is not None


def test_message_loss_spares_exit_and_down_signals(rt: Any) -> None:
    """A lossy link loses messages, never the signals that a peer ended (as on Ray,
    where they do not travel the transport): a monitor must not wait forever on a
    process that died behind a lossy link."""
    rt.set_faults("n2", "n1", drop=1.0)
    assert rt.run(_watch_and_wait, "n2", node="n1") == (["Down", "Exit"], True)


def test_changes_made_in_one_network_change_take_effect_together(rt: Any) -> None:
    """The nemesis rebuilds its link faults as a clear then the links it keeps: made in
    one block, the processes get the end result (on Ray in one push) and never a
    cleared network in between."""
    _echoes(rt)
    rt.partition(["n1"], ["n3"])
    with rt.network_change():
        rt.heal()
        rt.clear_faults()
        rt.set_faults("n1", "n2", drop=1.0)
        rt.set_faults("n2", "n1", drop=1.0)
    assert rt.run(_probe, "n2", 1, node="n1") == ("lost", "timeout")
    assert rt.run(_probe, "n3", 2, node="n1") == (("pong", 2), ("echo", 2))  # healed
    with rt.network_change():
        with rt.network_change():  # nested: one push, when the outer block ends
            rt.clear_faults()
        rt.partition(["n1"], ["n3"])
    assert rt.run(_probe, "n2", 3, node="n1") == (("pong", 3), ("echo", 3))
    assert rt.run(_probe, "n3", 4, node="n1") == ("lost", "timeout")
