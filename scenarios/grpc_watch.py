"""A scenario watcher's stream over etcd's v3 gRPC API (`client: grpc`).

The watcher client (`watch_client.py`) speaks to a watch session through four calls:
create a watch, take the next responses, ask for progress, close. Natively those are
calls to the session process on a KV node; here they are one etcd Watch stream to the
node's endpoint, as an etcd client opens it: a create request, the responses read by a
task into a bounded queue, a progress request (answered with watch id -1 once every
watch of the stream is synced), and cancelling the stream. Responses come back as the
native session's (`watch_protocol`: Deliver, Progress, Canceled), so the watcher client
and the history are the same for both.

etcd's created response does not say where the watch starts: "from now" is the header
revision + 1, else the start asked for. A start below the compaction is created, then
canceled with the compact revision, as etcd does.

Ray only: grpc.aio needs the sockets of a real event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from sediment.actors.etcd.names import etcd_name
from sediment.actors.etcd.shell.protocol import Endpoint
from sediment.actors.kv import watch_protocol as wp
from sediment.actors.kv import wire
from sediment.actors.kv.shell import session_protocol as sp
from sediment.runtime.errors import CallError
from sediment.runtime.process import Process

RESOLVE_TIMEOUT = 2.0  # seconds for a node's etcd server to say where it listens
CREATE_TIMEOUT = 5.0  # seconds for the created response
MAX_QUEUED = 4096  # responses read ahead of the watcher client (the reader waits past it)
FILTER_NOPUT, FILTER_NODELETE = 0, 1  # etcd's WatchCreateRequest.FilterType


def response_of(m: Any) -> Any:
    """An etcd WatchResponse as the native session would have answered it."""
    if m.canceled:
        if m.compact_revision:
            return wp.Canceled(m.watch_id, "compacted", m.compact_revision)
        return wp.Canceled(m.watch_id, "error" if m.cancel_reason else "canceled", 0,
                           m.cancel_reason)
    if m.events:
        return wp.Deliver(m.watch_id, 0, m.header.revision,
                          tuple(wire.event_from_pb(e) for e in m.events))
    return wp.Progress(m.watch_id, m.header.revision)


class GrpcWatchStream:
    """One etcd Watch stream to `node`'s endpoint (see the module doc)."""

    def __init__(self, ctx: Process, node: str) -> None:
        self.ctx, self.node = ctx, node
        self._channel: Any = None
        self._call: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._queue: asyncio.Queue[Any] = asyncio.Queue(MAX_QUEUED)
        self.ended: str | None = None  # why the stream ended (None: open)

    async def open(self) -> bool:
        """Connect and start the stream; False if the node's server is not serving."""
        import grpc

        from sediment.actors.etcd.pb import rpc_pb2_grpc

        try:
            url = await self.ctx.call(etcd_name(self.node), Endpoint(),
                                      timeout=RESOLVE_TIMEOUT)
        except CallError:
            return False
        if not url:
            return False
        target = str(url).removeprefix("http://").removeprefix("https://")
        self._channel = grpc.aio.insecure_channel(target)
        stubs: Any = rpc_pb2_grpc  # generated code: untyped
        self._call = stubs.WatchStub(self._channel).Watch()
        self._reader = asyncio.get_running_loop().create_task(self._read())
        return True

    async def _read(self) -> None:
        import grpc

        try:
            while True:
                m = await self._call.read()
                if m is grpc.aio.EOF:
                    self.ended = "stream ended"
                    break
                await self._queue.put(m)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - a broken stream ends the session
            self.ended = f"stream failed: {type(err).__name__}"
        await self._queue.put(None)

    async def create(self, request: wp.CreateWatch) -> wp.Created | wp.Canceled | None:
        """Create the watch; None if the stream broke or no created response came."""
        from sediment.actors.etcd.pb import rpc_pb2

        filters = [*([FILTER_NOPUT] if request.no_put else []),
                   *([FILTER_NODELETE] if request.no_delete else [])]
        create = rpc_pb2.WatchCreateRequest(
            key=request.key, range_end=request.range_end or b"",
            start_revision=request.start_revision, prev_kv=request.prev_kv, filters=filters)
        try:
            await self._call.write(rpc_pb2.WatchRequest(create_request=create))
            m = await asyncio.wait_for(self._queue.get(), CREATE_TIMEOUT)
        except Exception:  # noqa: BLE001 - a write to a broken stream, or no answer
            return None
        if m is None or not m.created:
            return None
        if m.canceled:  # refused at creation (permission, too many watches)
            return wp.Canceled(m.watch_id, "error", 0, m.cancel_reason)
        start = request.start_revision or m.header.revision + 1
        return wp.Created(m.watch_id, start, m.header.revision)

    async def next(self, wait: float) -> sp.Responses | sp.Closed:
        """What came within `wait`, as a watcher session answers `Next`."""
        out: list[Any] = []
        try:
            first = await asyncio.wait_for(self._queue.get(), wait)
        except TimeoutError:
            return sp.Responses(out)
        items = [first]
        while not self._queue.empty():
            items.append(self._queue.get_nowait())
        for m in items:
            if m is None:
                return sp.Closed(self.ended or "stream ended", out)
            out.append(response_of(m))
        return sp.Responses(out)

    async def progress(self) -> bool:
        from sediment.actors.etcd.pb import rpc_pb2

        try:
            await self._call.write(rpc_pb2.WatchRequest(
                progress_request=rpc_pb2.WatchProgressRequest()))
        except Exception:  # noqa: BLE001 - a broken stream: the next read says so
            return False
        return True

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
        if self._call is not None:
            self._call.cancel()
        if self._channel is not None:
            await self._channel.close()
        self._reader = self._call = self._channel = None


__all__ = ["GrpcWatchStream", "response_of"]
