"""A small synchronous etcd v3 KV client speaking the KV's own request and result types.

It talks gRPC to any etcd v3 endpoint (a real etcd 3.4 in the tests; Sediment's own
server once it has one) through etcd 3.4's compiled stubs (`sediment.actors.etcd.pb`), and answers
exactly what the store answers for the same request: the result types of `types.py`,
or the typed error etcd's description names (`rpctypes.py`), raised. So one random
request sequence can be sent to etcd and to the store and the answers compared as they
are (`tests/test_etcd_differential.py`). Every call has a deadline (`timeout`).

Leases too, as the machine's own commands and queries: `LeaseGrant` (id 0: the server
chooses), `LeaseRevoke`, `LeaseLookup` (etcd's LeaseTimeToLive: a `LeaseInfo` whose
`remaining` is the TTL left, ErrLeaseNotFound where etcd answers TTL -1 and nothing
else) and `AllLeases` (LeaseLeases: ids only, TTLs 0).
"""

from __future__ import annotations

from typing import Any

import grpc

from sediment.actors.etcd.pb import rpc_pb2 as _rpc_pb2
from sediment.actors.etcd.pb import rpc_pb2_grpc
from sediment.actors.kv import errors, rpctypes, wire
from sediment.actors.kv.errors import ErrLeaseNotFound, KvError
from sediment.actors.kv.queries import AllLeases, LeaseLookup
from sediment.actors.kv.types import (
    LeaseGrant,
    LeaseGrantResult,
    LeaseInfo,
    LeaseRevoke,
    LeaseRevokeResult,
)

pb: Any = _rpc_pb2
DEFAULT_TIMEOUT = 10.0
LeaseRequest = LeaseGrant | LeaseRevoke | LeaseLookup | AllLeases
LeaseAnswer = LeaseGrantResult | LeaseRevokeResult | LeaseInfo | list[LeaseInfo]

# etcd error names with a typed KV error of their own (the others raise EtcdError)
_TYPED: dict[str, type[KvError]] = {
    "ErrCompacted": errors.ErrCompacted,
    "ErrFutureRev": errors.ErrFutureRev,
    "ErrEmptyKey": errors.ErrEmptyKey,
    "ErrRequestTooLarge": errors.ErrRequestTooLarge,
    "ErrTooManyOps": errors.ErrTooManyOps,
    "ErrDuplicateKey": errors.ErrDuplicateKey,
    "ErrKeyNotFound": errors.ErrKeyNotFound,
}


class EtcdError(KvError):
    """An etcd error without a typed KV error (a lease, auth or cluster error), or a
    gRPC failure that is no etcd error at all (`name` None: e.g. unavailable)."""

    def __init__(self, name: str | None, code: str, message: str) -> None:
        super().__init__(message)
        self.name, self.code = name, code


def error_of(err: grpc.RpcError) -> KvError:
    """The typed error for an etcd gRPC error (matched by exact description, as etcd's
    Go client does)."""
    code = err.code().name if err.code() is not None else "UNKNOWN"
    message = err.details() or ""
    name = rpctypes.name_of(message)
    cls = _TYPED.get(name or "")
    if cls is None:
        return EtcdError(name, code, message)
    out = cls.__new__(cls)
    Exception.__init__(out, message)
    if isinstance(out, errors.ErrCompacted):
        out.compact_revision = 0  # etcd's error does not say which
    return out


class EtcdClient:
    """KV requests to one endpoint ("host:port"). Close it (or use `with`)."""

    def __init__(self, endpoint: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self._channel = grpc.insecure_channel(endpoint)
        self._kv = rpc_pb2_grpc.KVStub(self._channel)
        self._lease = rpc_pb2_grpc.LeaseStub(self._channel)
        self.last_header: Any = None

    def request(self, request: wire.Request | LeaseRequest) -> wire.Result | LeaseAnswer:
        """Send one KV or lease request; its result, or its error raised as a typed KvError."""
        if isinstance(request, LeaseRequest):
            return self._lease_request(request)
        method, message = wire.request_pb(request)
        return wire.result_from_pb(self._call(self._kv, method, message))

    def _call(self, stub: Any, method: str, message: Any) -> Any:
        try:
            response = getattr(stub, method)(message, timeout=self.timeout)
        except grpc.RpcError as err:
            raise error_of(err) from None
        self.last_header = response.header
        return response

    def _lease_request(self, request: LeaseRequest) -> LeaseAnswer:
        if isinstance(request, LeaseGrant):
            r = self._call(self._lease, "LeaseGrant",
                           pb.LeaseGrantRequest(ID=request.id, TTL=request.ttl))
            return LeaseGrantResult(int(r.header.revision), int(r.ID), int(r.TTL))
        if isinstance(request, LeaseRevoke):
            r = self._call(self._lease, "LeaseRevoke", pb.LeaseRevokeRequest(ID=request.id))
            return LeaseRevokeResult(int(r.header.revision))
        if isinstance(request, LeaseLookup):
            r = self._call(self._lease, "LeaseTimeToLive",
                           pb.LeaseTimeToLiveRequest(ID=request.lease, keys=request.keys))
            if r.TTL == -1 and r.grantedTTL == 0 and not r.keys:
                raise ErrLeaseNotFound()
            return LeaseInfo(int(r.ID), int(r.grantedTTL), int(r.TTL), tuple(r.keys))
        r = self._call(self._lease, "LeaseLeases", pb.LeaseLeasesRequest())
        return [LeaseInfo(int(s.ID), 0, 0) for s in r.leases]

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> EtcdClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["EtcdClient", "EtcdError", "error_of"]
