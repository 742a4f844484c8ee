"""A follower's etcd server forwards lease calls to the leader's as typed messages
(`actors/etcd/shell/protocol.py`); a leader that no longer leads answers `NotLeader`, which the
follower turns into etcd's ErrNotLeader. On sim: a stand-in plays the leader's server."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from sediment.actors.etcd.names import etcd_name
from sediment.actors.etcd.shell.leases import at_leader
from sediment.actors.etcd.shell.protocol import LeaseTimeToLive, NotLeader, RenewLease
from sediment.actors.etcd.status import EtcdStatus
from sediment.runtime import Call, Process, start


async def _leader_server(ctx: Process, leading: bool) -> None:
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call):
            request = msg.request
            if not leading:
                ctx.reply(msg.from_, NotLeader("n3"))
            elif isinstance(request, RenewLease):
                ctx.reply(msg.from_, 30 + request.lease)
            elif isinstance(request, LeaseTimeToLive):
                ctx.reply(msg.from_, None)


async def _forward(ctx: Process, request: Any) -> Any:
    follower = SimpleNamespace(ctx=ctx, router=SimpleNamespace(leader="n2"))
    try:
        return await at_leader(follower, request)  # type: ignore[arg-type]
    except EtcdStatus as status:
        return status.name


@pytest.mark.parametrize(("leading", "request_", "answer"), [
    (True, RenewLease(5), 35),
    (True, LeaseTimeToLive(5), None),
    (False, RenewLease(5), "ErrNotLeader"),
    (False, LeaseTimeToLive(5), "ErrNotLeader"),
])
def test_a_forwarded_lease_call_is_answered_or_refused_typed(leading: bool, request_: Any,
                                                            answer: Any) -> None:
    with start("sim", nodes=("n1", "n2"), seed=1) as rt:
        rt.spawn(_leader_server, leading, node="n2", name=etcd_name("n2"))
        assert rt.run(_forward, request_, node="n1") == answer
