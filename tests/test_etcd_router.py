"""The etcd server's router on the simulator: a proposal is never sent twice.

Stand-in raft members (processes registered under the members' names) answer the way a
member does: one receives the proposal and exits before answering (a leader killed with
the proposal in its log), one says "not leader" with a hint, one applies. The headline
scenario over gRPC once saw one Put applied twice: the router had tried the next leader
after the first one died holding the proposal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from sediment.actors.etcd.shell.router import Router
from sediment.actors.etcd.status import EtcdStatus
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Done, NotLeader, Propose
from sediment.runtime import api
from sediment.runtime.messages import Call
from sediment.runtime.process import Process

GROUP = "kv"


@pytest.fixture
def rt() -> Iterator[Any]:
    runtime = api.start("sim", seed=3, nodes=("n1", "n2", "n3"))
    yield runtime
    runtime.shutdown()


async def member(ctx: Process, node: str, behaviour: str, log: Any) -> None:
    """A stand-in raft member: `dies` exits on its first call without answering;
    `redirects` answers NotLeader("n2"); `applies` answers Done(7, the command)."""
    await ctx.register(raft_name(GROUP, node))
    while True:
        msg = await ctx.receive(lambda m: isinstance(m, Call))
        ctx.send(log, (node, msg.request))
        if behaviour == "dies":
            return
        if behaviour == "redirects":
            ctx.reply(msg.from_, NotLeader("n2"))
        else:
            ctx.reply(msg.from_, Done(7, msg.request.command))


async def collector(ctx: Process) -> None:
    seen: list[Any] = []
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call):
            ctx.reply(msg.from_, list(seen))
        else:
            seen.append(msg)


async def propose(ctx: Process, leader: str) -> Any:
    """One proposal through a router that believes `leader` leads; 0.2 s in, the
    local member's leadership notice names n2 (as after an election)."""
    local = await ctx.whereis(raft_name(GROUP, "n3"))
    assert local is not None
    router = Router(ctx, GROUP, ("n1", "n2", "n3"), local)
    router.leadership(leader, 1)

    async def elected() -> None:
        await ctx.sleep(0.2)
        router.leadership("n2", 2)

    notice = asyncio.ensure_future(elected())
    try:
        return await router.propose(("put", b"k"), 3.0)
    except EtcdStatus as err:
        return err.name
    finally:
        notice.cancel()


def _start(rt: Any, behaviours: dict[str, str]) -> Any:
    log = rt.spawn(collector, node="n3")
    for node, behaviour in behaviours.items():
        rt.spawn(member, node, behaviour, log, node=node)
    return log


def test_a_leader_that_dies_holding_the_proposal_gives_request_timed_out(rt: Any) -> None:
    log = _start(rt, {"n1": "dies", "n2": "applies", "n3": "applies"})
    assert rt.run(propose, "n1", node="n3") == "ErrTimeout"
    assert rt.call(log, "seen") == [("n1", Propose(("put", b"k")))]  # sent once only


def test_a_not_leader_answer_moves_the_proposal_to_the_hinted_member(rt: Any) -> None:
    log = _start(rt, {"n1": "redirects", "n2": "applies", "n3": "applies"})
    assert rt.run(propose, "n1", node="n3") == (7, ("put", b"k"))
    assert rt.call(log, "seen") == [("n1", Propose(("put", b"k"))),
                                    ("n2", Propose(("put", b"k")))]
