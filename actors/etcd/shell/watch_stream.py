"""etcd's Watch service: one bidirectional gRPC stream = one watcher session.

The stream opens a watcher session on this node's KV node (`watcher.py`, owned by the
server process and closed when the stream ends) and runs two loops: the reader turns
each WatchRequest into a call of the session (create, cancel, progress) in the order the
client sent them; the pump pulls the session's responses (`Next`) and queues them for
the writer. Everything a client sees is etcd's (3.4 `v3rpc/watch.go`):

- create: `created` with the watch id; a bad request `created` + `canceled` with watch
  id -1 and the error as cancel_reason; a start revision that is compacted `created`
  and then `canceled` with `compact_revision`.
- events of one revision together, in order; with `fragment` a response above the
  request limit is split into several, every one but the last marked `fragment`.
- a progress request answers one response with watch id -1 once every watch is synced;
  `progress_notify` watches get one after a quiet interval.
- cancel: `canceled` with the id (nothing for an id the stream does not have).

Bounds: at most `MAX_WATCHES` watches per stream (more are refused as a bad create), at
most `MAX_QUEUED` responses waiting for the client, WRITE_TIMEOUT for one write. A
client that stops reading fills the queue; the pump stops pulling, the session closes
itself as slow (it never skips an event), and the stream ends with UNAVAILABLE, which
etcd's clients answer by watching again from the next revision they need.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import TYPE_CHECKING, Any

import grpc

from sediment import log
from sediment.actors.etcd.pb import kv_pb2 as _kv_pb2
from sediment.actors.etcd.pb import rpc_pb2 as _rpc_pb2
from sediment.actors.kv import watch_protocol as wp
from sediment.actors.kv import wire
from sediment.actors.kv.names import kv_node_name
from sediment.actors.kv.shell import session_protocol as sp
from sediment.actors.kv.shell.node_protocol import OpenWatcher
from sediment.actors.kv.types import Event
from sediment.runtime.errors import CallError

kv_pb2: Any = _kv_pb2
pb: Any = _rpc_pb2  # generated code: untyped

if TYPE_CHECKING:
    from sediment.actors.etcd.shell.server import EtcdServer

_logger = log.get_logger("sediment.etcd.watch")
MAX_WATCHES = 10_000  # watches on one stream
MAX_QUEUED = 256  # responses waiting for the client
WRITE_TIMEOUT = 60.0  # seconds a response may wait for a client that does not read
PULL_WAIT = 1.0  # seconds one pull of the session waits for a response
CALL_TIMEOUT = 30.0
FILTER_NOPUT, FILTER_NODELETE = 0, 1
_tokens = itertools.count(1)


def event_pb(e: Event) -> Any:
    out = kv_pb2.Event(type=kv_pb2.Event.PUT if e.kind == "put" else kv_pb2.Event.DELETE,
                       kv=wire.kv_pb(e.kv))
    if e.prev_kv is not None:
        out.prev_kv.CopyFrom(wire.kv_pb(e.prev_kv))
    return out


GRPC_OVERHEAD = 512 * 1024  # etcd's grpcOverheadBytes: its watch server fragments above
# --max-request-bytes plus this (v3rpc's maxRequestBytes; seen against etcd 3.4.23: a
# 1.9 MB response under the 1.5 MiB default limit came whole)


def fragments(response: Any, limit: int) -> list[Any]:
    """etcd 3.4's sendFragments: a response of two or more events whose size is at or
    above `limit` is split into several, each with events while it stays below the limit
    (measured as sent, marked fragment; at least one event); all but the last marked
    `fragment`."""
    if response.ByteSize() < limit or len(response.events) < 2:
        return [response]
    events = list(response.events)
    parts: list[Any] = []
    i = 0
    while i < len(events):
        current = pb.WatchResponse()
        current.CopyFrom(response)
        del current.events[:]
        current.fragment = True
        while i < len(events):
            current.events.append(events[i])
            if len(current.events) > 1 and current.ByteSize() >= limit:
                del current.events[-1]
                break
            i += 1
        current.fragment = i < len(events)
        parts.append(current)
    return parts


class WatchService:
    def __init__(self, server: EtcdServer) -> None:
        self.s = server

    async def Watch(self, request_iterator: Any, context: Any) -> None:  # noqa: N802
        stream = _Stream(self.s, context)
        try:
            await stream.run(request_iterator)
        finally:
            stream.close()


class _Stream:
    def __init__(self, server: EtcdServer, context: Any) -> None:
        self.s = server
        self.context = context
        self.session: Any = None
        self.queue: asyncio.Queue[Any] = asyncio.Queue(MAX_QUEUED)
        self.creating = 0  # create calls in flight: their watches' responses wait
        self.held: list[Any] = []
        self.watches: set[int] = set()
        self.canceled: set[int] = set()
        self.fragment: set[int] = set()
        self.failed: str | None = None

    async def run(self, requests: Any) -> None:
        ctx = self.s.ctx
        try:
            self.session = await ctx.call(
                kv_node_name(self.s.me), OpenWatcher(ctx.self(), next(_tokens)),
                timeout=CALL_TIMEOUT)
        except CallError as err:
            await self.context.abort(grpc.StatusCode.UNAVAILABLE,
                                     f"etcdserver: watch unavailable ({err})")
        if not hasattr(self.session, "node"):
            await self.context.abort(grpc.StatusCode.UNAVAILABLE,
                                     f"etcdserver: watch unavailable ({self.session!r})"[:200])
        tasks = [asyncio.ensure_future(self._read(requests)),
                 asyncio.ensure_future(self._pump())]
        try:
            while self.failed is None:
                response = await self.queue.get()
                if response is None:
                    break
                try:
                    await asyncio.wait_for(self.context.write(response), WRITE_TIMEOUT)
                except TimeoutError:
                    self._fail("etcdserver: watch stream closed: the client did not read "
                               f"for {WRITE_TIMEOUT:.0f} s")
        finally:
            for task in tasks:
                task.cancel()
        if self.failed is not None:
            await self.context.abort(grpc.StatusCode.UNAVAILABLE, self.failed)

    def close(self) -> None:
        if self.session is not None and hasattr(self.session, "node"):
            self.s.ctx.send(self.session, sp.Close())
            self.session = None

    # -- client -> session --------------------------------------------------------

    async def _read(self, requests: Any) -> None:
        try:
            async for request in requests:
                which = request.WhichOneof("request_union")
                if which == "create_request":
                    await self._create(request.create_request)
                elif which == "cancel_request":
                    await self._call(wp.CancelWatch(request.cancel_request.watch_id))
                elif which == "progress_request":
                    await self._call(wp.RequestProgress())
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except Exception as err:  # noqa: BLE001 - a broken stream ends this stream only
            self._fail(f"etcdserver: watch stream failed ({type(err).__name__})")
            return
        await self._put(None)  # the client closed its side: end the stream

    async def _call(self, request: Any) -> Any:
        try:
            return await self.s.ctx.call(self.session, request, timeout=CALL_TIMEOUT)
        except CallError as err:
            self._fail(f"etcdserver: watch session lost ({err})"[:200])
            return None

    async def _create(self, c: Any) -> None:
        header = self.s.header
        if len(self.watches) >= MAX_WATCHES:
            await self._put(pb.WatchResponse(
                header=header(0), watch_id=-1, created=True, canceled=True,
                cancel_reason=f"etcdserver: too many watches on one stream ({MAX_WATCHES})"))
            return
        if not await self._permitted(c):
            await self._put(pb.WatchResponse(header=header(0), watch_id=-1, created=True,
                                             canceled=True,
                                             cancel_reason="etcdserver: permission denied"))
            return
        filters = set(c.filters)
        request = wp.CreateWatch(c.key, c.range_end or None, c.start_revision,
                                 c.watch_id if c.watch_id != 0 else None, c.prev_kv,
                                 FILTER_NOPUT in filters, FILTER_NODELETE in filters,
                                 c.progress_notify)
        self.creating += 1
        try:
            answer = await self._call(request)
        finally:
            self.creating -= 1
        if isinstance(answer, wp.Created):
            self.watches.add(answer.watch_id)
            if c.fragment:
                self.fragment.add(answer.watch_id)
            await self._put(pb.WatchResponse(header=header(answer.revision),
                                             watch_id=answer.watch_id, created=True))
        elif isinstance(answer, wp.Canceled):  # a compacted start: created, then canceled
            await self._put(pb.WatchResponse(header=header(0), watch_id=answer.watch_id,
                                             created=True))
            await self._put(self._canceled(answer))
        elif answer is not None:
            error = answer.error if isinstance(answer, wp.Rejected | sp.SessionError) else answer
            reason = str(error)
            await self._put(pb.WatchResponse(header=header(0), watch_id=-1, created=True,
                                             canceled=True, cancel_reason=reason))
        if not self.creating and self.held:
            held, self.held = self.held, []
            for response in held:
                await self._put(response)

    async def _permitted(self, c: Any) -> bool:
        """etcd checks a watch's range against the user's read permission at creation."""
        from sediment.actors.kv.types import Range

        try:
            query = await self.s.auth.wrap(Range(c.key, c.range_end or None, count_only=True),
                                           self.context)
            found = await self.s.router.local_query(query)
        except Exception:  # noqa: BLE001 - an unknown token is no permission
            return False
        return not isinstance(found, Exception)

    # -- session -> client ------------------------------------------------------------

    async def _pump(self) -> None:
        while self.failed is None:
            reply = await self._call(sp.Next(PULL_WAIT))
            if reply is None:
                return
            for response in reply.responses:
                for out in self._responses(response):
                    if self.creating and out.watch_id not in self.watches:
                        self.held.append(out)  # its Created is not written yet
                    else:
                        await self._put(out)
            if isinstance(reply, sp.Closed):
                self._fail(f"etcdserver: watch stream closed ({reply.reason}): the client "
                           "fell too far behind; watch again from the next revision")
                return

    def _responses(self, r: Any) -> list[Any]:
        header = self.s.header
        if isinstance(r, wp.Deliver):
            response = pb.WatchResponse(header=header(r.revision), watch_id=r.watch_id,
                                        events=[event_pb(e) for e in r.events])
            if r.watch_id in self.fragment:
                return fragments(response, self.s.limits.max_request_bytes + GRPC_OVERHEAD)
            return [response]
        if isinstance(r, wp.Progress):
            return [pb.WatchResponse(header=header(r.revision), watch_id=r.watch_id)]
        if isinstance(r, wp.Canceled):
            if r.watch_id in self.canceled:
                return []
            return [self._canceled(r)]
        return []

    def _canceled(self, c: wp.Canceled) -> Any:
        self.canceled.add(c.watch_id)
        self.watches.discard(c.watch_id)
        self.fragment.discard(c.watch_id)
        out = pb.WatchResponse(header=self.s.header(0), watch_id=c.watch_id, canceled=True,
                               compact_revision=c.compact_revision)
        if c.reason == "error":
            out.cancel_reason = c.detail
        return out

    async def _put(self, response: Any) -> None:
        await self.queue.put(response)

    def _fail(self, reason: str) -> None:
        if self.failed is None:
            self.failed = reason
            with contextlib.suppress(asyncio.QueueFull):
                self.queue.put_nowait(None)


__all__ = ["GRPC_OVERHEAD", "MAX_QUEUED", "MAX_WATCHES", "WatchService", "event_pb", "fragments"]
