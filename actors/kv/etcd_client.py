"""A small synchronous etcd v3 KV client speaking the KV's own request and result types.

It talks gRPC to any etcd v3 endpoint (a real etcd 3.4 in the tests; Sediment's own
server once it has one) through etcd 3.4's compiled stubs (`sediment.actors.etcd.pb`), and answers
exactly what the store answers for the same request: the result types of `types.py`,
or the typed error etcd's description names (`rpctypes.py`), raised. So one random
request sequence can be sent to etcd and to the store and the answers compared as they
are (`tests/test_etcd_differential.py`). Every call has a deadline (`timeout`).
"""

from __future__ import annotations

from typing import Any

import grpc

from sediment.actors.etcd.pb import rpc_pb2_grpc
from sediment.actors.kv import errors, rpctypes, wire
from sediment.actors.kv.errors import KvError

DEFAULT_TIMEOUT = 10.0

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
        self.last_header: Any = None

    def request(self, request: wire.Request) -> wire.Result:
        """Send one KV request; its result, or its error raised as a typed KvError."""
        method, message = wire.request_pb(request)
        try:
            response = getattr(self._kv, method)(message, timeout=self.timeout)
        except grpc.RpcError as err:
            raise error_of(err) from None
        self.last_header = response.header
        return wire.result_from_pb(response)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> EtcdClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["EtcdClient", "EtcdError", "error_of"]
