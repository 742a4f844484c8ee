"""A scenario client that sends its requests through etcd's v3 gRPC API (`client: grpc`).

The same requests as the native session (`processes.KvSession`), sent as etcd clients
send them: each one a KV call (Range, Put, DeleteRange, Txn, Compact) to one node's etcd
endpoint, which forwards writes and linearizable reads to its leader. The client starts
at a node of its own (`first`) and stays there while it answers; it moves to the next
node only when nothing was sent (the endpoint refused the connection, or the server
said it has no leader), so an operation is never sent twice. Endpoints are looked up
from the node's etcd server process (`Endpoint()`): a restarted server may listen on
a new port.

Outcomes, as for the native client (Jepsen): etcd's typed errors (ErrCompacted,
ErrFutureRev, ErrKeyNotFound, a refused request...) are `fail`; a timeout, a connection
lost while the call was out or "request timed out" are `info`: it may have happened.
The answer carries no raft index (etcd's header has none): the run's assembly places a
write by its entry in the committed log (`assemble.place_ops`).

Ray only: grpc.aio needs the sockets of a real event loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sediment.actors.etcd.client import never_sent
from sediment.actors.etcd.names import etcd_name
from sediment.actors.etcd.shell.protocol import Endpoint
from sediment.actors.kv import errors, rpctypes, wire
from sediment.actors.kv.etcd_client import _TYPED
from sediment.runtime.errors import CallError
from sediment.runtime.process import Process
from sediment.scenarios.history import Failure, OpKind, Request
from sediment.scenarios.processes import MAX_ATTEMPTS, RETRY_PAUSE, OpRecord

RESOLVE_TIMEOUT = 2.0  # seconds for a node's etcd server to say where it listens
PREPARE_TIMEOUT = 10.0  # seconds to open the first channel before the run starts
RETRY_NAMES = ("ErrNoLeader", "ErrNotLeader")  # refused before the log: try elsewhere
INFO_NAMES = ("ErrTimeout", "ErrTimeoutDueToLeaderFail", "ErrTimeoutDueToConnectionLost",
              "ErrLeaderChanged")


@dataclass(frozen=True)
class Verdict:
    """What a gRPC error means for the operation: "retry" (nothing was sent or nothing
    was done: another node may take it), "fail" (etcd refused it: a definite no) or
    "info" (it may have happened)."""

    action: str
    failure: Failure


def outcome_of(code: str, details: str) -> Verdict:
    """The verdict for a gRPC status `code` (its name: "UNAVAILABLE") and `details`."""
    name = rpctypes.name_of(details)
    if name in RETRY_NAMES:
        return Verdict("retry", Failure(name, details))
    if name in INFO_NAMES or (name or "").startswith("ErrTimeout"):
        return Verdict("info", Failure(name or "ErrTimeout", details))
    if name is not None:  # etcd's own refusal: the typed error's name, as the store's
        typed = _TYPED.get(name)
        return Verdict("fail", Failure(typed.__name__ if typed else name, details))
    if code == "UNAVAILABLE" and never_sent(details):
        return Verdict("retry", Failure("Unavailable", details))
    if code == "INVALID_ARGUMENT":  # refused before it was proposed
        return Verdict("fail", Failure(errors.InvalidRequest.__name__, details))
    if code == "DEADLINE_EXCEEDED":
        return Verdict("info", Failure("Timeout", details))
    return Verdict("info", Failure(name or code.title(), details[:200]))


def _target(url: str) -> str:
    return url.removeprefix("http://").removeprefix("https://")


class GrpcSession:
    """KV requests over etcd's gRPC API, Jepsen-style outcomes (see the module doc)."""

    def __init__(self, ctx: Process, nodes: tuple[str, ...], timeout: float,
                 first: int = 0) -> None:
        self.ctx, self.nodes, self.timeout = ctx, nodes, timeout
        self.cursor = first % len(nodes)
        self._channels: dict[str, Any] = {}

    async def _stub(self, node: str) -> Any:
        """The KV stub of `node`'s endpoint (None: its server is down or not serving)."""
        import grpc

        from sediment.actors.etcd.pb import rpc_pb2_grpc

        stubs: Any = rpc_pb2_grpc  # generated code: untyped
        channel = self._channels.get(node)
        if channel is None:
            try:
                url = await self.ctx.call(etcd_name(node), Endpoint(),
                                          timeout=RESOLVE_TIMEOUT)
            except CallError:
                return None
            if not url:
                return None
            channel = grpc.aio.insecure_channel(_target(str(url)))
            self._channels[node] = channel
        return stubs.KVStub(channel)

    async def prepare(self) -> None:
        """Open the channel to the first node before the run's clock starts (a fresh
        process's first gRPC connection took 1-2 s on Ray, a third of a short run)."""
        import asyncio

        node = self.nodes[self.cursor]
        if await self._stub(node) is None:
            return
        try:
            await asyncio.wait_for(self._channels[node].channel_ready(), PREPARE_TIMEOUT)
        except (TimeoutError, OSError):
            await self._forget(node)  # the first request tries again

    async def _forget(self, node: str) -> None:
        channel = self._channels.pop(node, None)
        if channel is not None:
            await channel.close()

    async def close(self) -> None:
        for node in list(self._channels):
            await self._forget(node)

    async def request(self, client: int, kind: OpKind, req: Request) -> OpRecord:
        invoke = self.ctx.now()
        outcome, result = await self._send(req)
        return OpRecord(client, kind, req, invoke, self.ctx.now(), outcome, result, None,
                        "grpc")

    async def _send(self, req: Request) -> tuple[str, Any]:
        import grpc

        ctx = self.ctx
        method, message = wire.request_pb(req)
        deadline = ctx.now() + self.timeout
        for attempt in range(MAX_ATTEMPTS):
            remaining = deadline - ctx.now()
            if remaining <= 0:
                break
            if attempt and attempt % len(self.nodes) == 0:
                await ctx.sleep(min(RETRY_PAUSE, remaining))
            node = self.nodes[self.cursor]
            stub = await self._stub(node)
            if stub is None:  # its server is down: nothing was sent
                self.cursor = (self.cursor + 1) % len(self.nodes)
                continue
            try:
                response = await getattr(stub, method)(message, timeout=max(remaining, 0.001))
            except grpc.aio.AioRpcError as err:
                verdict = outcome_of(err.code().name, err.details() or "")
                if verdict.action == "retry":
                    await self._forget(node)
                    self.cursor = (self.cursor + 1) % len(self.nodes)
                    continue
                if verdict.action == "info":
                    await self._forget(node)
                return verdict.action, verdict.failure
            return "ok", wire.result_from_pb(response)
        return "fail", Failure("Unavailable", "no endpoint took the request in time")


__all__ = ["GrpcSession", "Verdict", "outcome_of"]
