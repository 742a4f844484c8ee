"""`sediment.connect(...)`: an etcd-style Python client over etcd's v3 gRPC API.

It talks to any etcd v3 endpoint (a Sediment cluster started with the etcd API, or a
real etcd): keys and values are bytes or str (str is UTF-8), results are the KV's own
types (`actors/kv/types.py`), errors the typed ones etcd's description names
(`ErrCompacted`, `ErrFutureRev`, ... or `EtcdError` with etcd's name). Several
endpoints: a call that finds its endpoint unavailable tries the next. Every call has a
deadline (`timeout`).

    from sediment import connect

    with connect("127.0.0.1:2379") as etcd:
        etcd.put("/app/a", "1")
        print(etcd.get("/app/", prefix=True).kvs)
        with etcd.watch("/app/", prefix=True) as watch:
            for event in watch:              # blocks; watch.cancel() from elsewhere ends it
                print(event.kind, event.kv.key, event.kv.value)
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from sediment.actors.etcd.pb import rpc_pb2 as _rpc_pb2
from sediment.actors.etcd.pb import rpc_pb2_grpc as _rpc_pb2_grpc
from sediment.actors.kv import wire
from sediment.actors.kv.errors import ErrCompacted, KvError
from sediment.actors.kv.etcd_client import EtcdError, error_of
from sediment.actors.kv.store import prefix_end
from sediment.actors.kv.types import (
    Compact,
    Compare,
    DeleteRange,
    DeleteResult,
    Event,
    KeyValue,
    Put,
    PutResult,
    Range,
    RangeResult,
    Txn,
    TxnOp,
    TxnResult,
)

pb: Any = _rpc_pb2
pbg: Any = _rpc_pb2_grpc
DEFAULT_TIMEOUT = 10.0
Bytes = bytes | str
WATCH_BUFFER = 1024  # responses a watch holds for a reader that is behind
# calls that change nothing, so any UNAVAILABLE may be retried at another endpoint
READ_ONLY = frozenset({"Range", "LeaseTimeToLive", "LeaseLeases", "Status", "MemberList"})
# what an UNAVAILABLE says when the request never reached a server's handler
NEVER_SENT = ("failed to connect", "connection refused", "dns resolution failed",
              "name resolution", "etcdserver: no leader")


def never_sent(details: str) -> bool:
    """True when an UNAVAILABLE status means nothing was done: the connection never
    opened, or the server had no leader to propose to. "request timed out" and a
    connection lost mid-call are not (the write may still commit): etcd's Go client
    retries a write only when it was never sent."""
    lowered = details.lower()
    return any(mark in lowered for mark in NEVER_SENT)


def _b(value: Bytes) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _end(key: bytes, prefix: bool, range_end: Bytes | None) -> bytes | None:
    if prefix:
        return prefix_end(key)
    return None if range_end is None else _b(range_end)


@dataclass(frozen=True)
class Lease:
    id: int
    ttl: int


@dataclass(frozen=True)
class LeaseStatus:
    id: int
    ttl: int  # seconds left (-1: expired or never existed)
    granted_ttl: int
    keys: tuple[bytes, ...]


class Client:
    """A connection to one etcd cluster through its endpoints ("host:port" or URLs)."""

    def __init__(self, endpoints: Sequence[str], timeout: float = DEFAULT_TIMEOUT,
                 ca_cert: str | None = None, cert: str | None = None,
                 key: str | None = None) -> None:
        if not endpoints:
            raise ValueError("connect needs at least one endpoint")
        self.endpoints = [e.removeprefix("http://").removeprefix("https://") for e in endpoints]
        self.timeout = timeout
        self._credentials = None
        if ca_cert is not None or any(e.startswith("https://") for e in endpoints):
            self._credentials = grpc.ssl_channel_credentials(
                _read(ca_cert), _read(key), _read(cert))
        self._current = 0
        self._channel: Any = None
        self._open(0)

    def _open(self, index: int) -> None:
        if self._channel is not None:
            self._channel.close()
        target = self.endpoints[index]
        self._current = index
        self._channel = (grpc.insecure_channel(target) if self._credentials is None
                         else grpc.secure_channel(target, self._credentials))
        self._kv = pbg.KVStub(self._channel)
        self._watch = pbg.WatchStub(self._channel)
        self._lease = pbg.LeaseStub(self._channel)
        self._maintenance = pbg.MaintenanceStub(self._channel)
        self._cluster = pbg.ClusterStub(self._channel)

    def _call(self, service: str, method: str, request: Any) -> Any:
        """One unary call; an unavailable endpoint makes it try the others once each
        (a write only when it was never sent: `never_sent`)."""
        for attempt in range(len(self.endpoints)):
            try:
                return getattr(getattr(self, service), method)(request, timeout=self.timeout)
            except grpc.RpcError as err:
                unavailable = err.code() == grpc.StatusCode.UNAVAILABLE and (
                    method in READ_ONLY or never_sent(err.details() or ""))
                if not unavailable or attempt == len(self.endpoints) - 1:
                    raise error_of(err) from None
                self._open((self._current + 1) % len(self.endpoints))
        raise KvError("unreachable")  # pragma: no cover - the loop returns or raises

    def _kv_request(self, request: wire.Request) -> Any:
        method, message = wire.request_pb(request)
        return wire.result_from_pb(self._call("_kv", method, message))

    # -- KV ------------------------------------------------------------------------------

    def get(self, key: Bytes, range_end: Bytes | None = None, *, prefix: bool = False,
            revision: int = 0, limit: int = 0, keys_only: bool = False,
            count_only: bool = False, serializable: bool = False) -> RangeResult:
        k = _b(key)
        result: RangeResult = self._kv_request(Range(
            k, _end(k, prefix, range_end), revision, limit, count_only, keys_only,
            serializable=serializable))
        return result

    def get_prefix(self, prefix: Bytes, **options: Any) -> RangeResult:
        return self.get(prefix, prefix=True, **options)

    def value(self, key: Bytes, revision: int = 0) -> bytes | None:
        """The key's value, None if it does not exist."""
        kvs = self.get(key, revision=revision).kvs
        return kvs[0].value if kvs else None

    def put(self, key: Bytes, value: Bytes, *, lease: int | Lease = 0,
            prev_kv: bool = False, ignore_lease: bool = False) -> PutResult:
        lease_id = lease.id if isinstance(lease, Lease) else lease
        result: PutResult = self._kv_request(
            Put(_b(key), _b(value), prev_kv, lease_id, False, ignore_lease))
        return result

    def delete(self, key: Bytes, range_end: Bytes | None = None, *, prefix: bool = False,
               prev_kv: bool = False) -> DeleteResult:
        k = _b(key)
        result: DeleteResult = self._kv_request(DeleteRange(k, _end(k, prefix, range_end),
                                                            prev_kv))
        return result

    def delete_prefix(self, prefix: Bytes, prev_kv: bool = False) -> DeleteResult:
        return self.delete(prefix, prefix=True, prev_kv=prev_kv)

    def txn(self, compare: Sequence[Compare], success: Sequence[TxnOp] = (),
            failure: Sequence[TxnOp] = ()) -> TxnResult:
        result: TxnResult = self._kv_request(Txn(tuple(compare), tuple(success),
                                                 tuple(failure)))
        return result

    def compact(self, revision: int, physical: bool = False) -> int:
        """Compact at `revision`; the header revision."""
        return int(self._kv_request(Compact(revision, physical)).revision)

    # -- watches -----------------------------------------------------------------------------

    def watch(self, key: Bytes, range_end: Bytes | None = None, *, prefix: bool = False,
              start_revision: int = 0, prev_kv: bool = False, no_put: bool = False,
              no_delete: bool = False, progress_notify: bool = False) -> Watch:
        k = _b(key)
        end = _end(k, prefix, range_end)
        filters = [f for f, on in ((0, no_put), (1, no_delete)) if on]
        create = pb.WatchCreateRequest(key=k, range_end=end or b"",
                                       start_revision=start_revision, prev_kv=prev_kv,
                                       progress_notify=progress_notify, filters=filters)
        return Watch(self._watch, create)

    # -- leases ------------------------------------------------------------------------------

    def lease_grant(self, ttl: int, lease_id: int = 0) -> Lease:
        r = self._call("_lease", "LeaseGrant", pb.LeaseGrantRequest(TTL=ttl, ID=lease_id))
        return Lease(int(r.ID), int(r.TTL))

    def lease_revoke(self, lease: int | Lease) -> int:
        lease_id = lease.id if isinstance(lease, Lease) else lease
        r = self._call("_lease", "LeaseRevoke", pb.LeaseRevokeRequest(ID=lease_id))
        return int(r.header.revision)

    def lease_keep_alive_once(self, lease: int | Lease) -> int:
        """Renew once; the TTL (0: the lease does not exist)."""
        lease_id = lease.id if isinstance(lease, Lease) else lease
        try:
            responses = self._lease.LeaseKeepAlive(iter([pb.LeaseKeepAliveRequest(ID=lease_id)]),
                                                   timeout=self.timeout)
            for response in responses:
                return int(response.TTL)
        except grpc.RpcError as err:
            raise error_of(err) from None
        return 0

    def lease_time_to_live(self, lease: int | Lease, keys: bool = False) -> LeaseStatus:
        lease_id = lease.id if isinstance(lease, Lease) else lease
        r = self._call("_lease", "LeaseTimeToLive",
                       pb.LeaseTimeToLiveRequest(ID=lease_id, keys=keys))
        return LeaseStatus(int(r.ID), int(r.TTL), int(r.grantedTTL), tuple(r.keys))

    def leases(self) -> list[int]:
        return [int(s.ID) for s in self._call("_lease", "LeaseLeases",
                                              pb.LeaseLeasesRequest()).leases]

    # -- cluster ---------------------------------------------------------------------------

    def status(self) -> Any:
        """The endpoint's StatusResponse (version, leader, raft term and index, ...)."""
        return self._call("_maintenance", "Status", pb.StatusRequest())

    def members(self) -> list[tuple[str, list[str]]]:
        """(name, client URLs) of every member."""
        response = self._call("_cluster", "MemberList", pb.MemberListRequest())
        return [(m.name, list(m.clientURLs)) for m in response.members]

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class WatchCanceled(KvError):
    """The server canceled the watch (`compact_revision` > 0: its start is compacted)."""

    def __init__(self, reason: str, compact_revision: int = 0) -> None:
        super().__init__(reason)
        self.compact_revision = compact_revision


class Watch:
    """One watch on its own stream; iterate it for events (blocking), `cancel()` to end.
    A compacted start revision raises ErrCompacted from the iteration."""

    def __init__(self, stub: Any, create: Any) -> None:
        self._requests: queue.Queue[Any] = queue.Queue()
        self._requests.put(pb.WatchRequest(create_request=create))
        self._stream = stub.Watch(iter(self._requests.get, None))
        self._events: queue.Queue[Any] = queue.Queue(WATCH_BUFFER)
        self.watch_id: int | None = None
        self.revision = 0  # the header revision of the last response
        self._created = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._created.wait(DEFAULT_TIMEOUT)

    def _read(self) -> None:
        try:
            for response in self._stream:
                self.revision = response.header.revision
                if response.created:
                    self.watch_id = response.watch_id
                    self._created.set()
                if response.canceled:
                    self._events.put(WatchCanceled(response.cancel_reason or "canceled",
                                                   response.compact_revision))
                    return
                for e in response.events:
                    self._events.put(wire.event_from_pb(e))
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.CANCELLED:
                self._events.put(error_of(err))
        finally:
            self._created.set()
            self._events.put(None)

    def __iter__(self) -> Iterator[Event]:
        while True:
            item = self._events.get()
            if item is None:
                return
            if isinstance(item, WatchCanceled) and item.compact_revision:
                raise ErrCompacted(item.compact_revision)
            if isinstance(item, Exception):
                raise item
            yield item

    def events(self, n: int, timeout: float = DEFAULT_TIMEOUT) -> list[Event]:
        """The next `n` events (fewer if none comes for `timeout` seconds)."""
        out: list[Event] = []
        while len(out) < n:
            try:
                item = self._events.get(timeout=timeout)
            except queue.Empty:
                break
            if item is None:
                break
            if isinstance(item, WatchCanceled) and item.compact_revision:
                raise ErrCompacted(item.compact_revision)
            if isinstance(item, Exception):
                raise item
            out.append(item)
        return out

    def cancel(self) -> None:
        self._requests.put(None)
        self._stream.cancel()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


def connect(endpoints: str | Sequence[str], timeout: float = DEFAULT_TIMEOUT,
            ca_cert: str | None = None, cert: str | None = None,
            key: str | None = None) -> Client:
    """A client of the etcd cluster at `endpoints` ("host:port", a URL, a
    comma-separated list or a list). TLS: `ca_cert` (the server's CA), and `cert` / `key`
    for client-certificate authentication."""
    if isinstance(endpoints, str):
        endpoints = [e.strip() for e in endpoints.split(",") if e.strip()]
    return Client(list(endpoints), timeout, ca_cert, cert, key)


__all__ = ["Client", "EtcdError", "KeyValue", "Lease", "LeaseStatus", "Watch", "WatchCanceled",
           "connect"]
