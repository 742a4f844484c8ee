"""How `sediment branches` talks to a running cluster's etcd endpoints: TLS and auth.

- TLS: `--cacert` (the server's CA), `--cert`/`--key` (a client certificate) go to the
  etcd client (`actors/etcd/client.connect`) and to the delete reporter's channel; an
  `https://` endpoint with no `--cacert` uses the system's roots.
- auth: `--user name[:password]` (as etcdctl) calls etcd's `Auth/Authenticate` on the
  first endpoint that answers and sends the token it returns as the `token` metadata of
  every request, through a gRPC client interceptor over the client's channel (etcd's
  clientv3 does the same; the server checks it on each call).

Nothing here changes the etcd client: `AuthClient` only wraps the channel it opens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from sediment.actors.etcd.client import Client

TOKEN_KEY = "token"  # the metadata key etcd reads the auth token from


class AuthFailed(Exception):
    """etcd refused the user's name and password (or the endpoints did not answer)."""


@dataclass(frozen=True)
class Security:
    """The connection options of the command line (all optional)."""

    ca_cert: str | None = None
    cert: str | None = None
    key: str | None = None
    user: str | None = None
    password: str | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ValueError("--cert and --key go together")
        if self.user is not None and not self.user:
            raise ValueError("--user needs a name")

    def credentials(self, endpoints: Sequence[str]) -> grpc.ChannelCredentials | None:
        """Channel credentials when any TLS option is given or an endpoint is https."""
        if self.ca_cert is None and self.cert is None and not any(
                e.startswith("https://") for e in endpoints):
            return None
        return grpc.ssl_channel_credentials(_read(self.ca_cert), _read(self.key),
                                            _read(self.cert))


def parse_user(text: str) -> tuple[str, str]:
    """`name:password` (etcdctl's --user); a name alone has an empty password."""
    name, _, password = text.partition(":")
    if not name:
        raise ValueError(f"--user is name[:password], got {text!r:.80}")
    return name, password


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


def _channel(endpoint: str, credentials: grpc.ChannelCredentials | None) -> grpc.Channel:
    target = endpoint.removeprefix("http://").removeprefix("https://")
    return (grpc.insecure_channel(target) if credentials is None
            else grpc.secure_channel(target, credentials))


def authenticate(endpoints: Sequence[str], security: Security, timeout: float = 10.0) -> str:
    """The token etcd's `Authenticate` gives the user (the first endpoint that answers)."""
    from sediment.actors.etcd.pb import rpc_pb2, rpc_pb2_grpc

    assert security.user is not None
    credentials = security.credentials(endpoints)
    why = "no endpoint"
    for endpoint in endpoints:
        with _channel(endpoint, credentials) as channel:
            try:
                answer = rpc_pb2_grpc.AuthStub(channel).Authenticate(
                    rpc_pb2.AuthenticateRequest(name=security.user,
                                                password=security.password or ""),
                    timeout=timeout)
            except grpc.RpcError as err:
                why = f"{endpoint}: {err.code().name}: {err.details()}"
                if err.code() == grpc.StatusCode.UNAVAILABLE:
                    continue
                break
            return str(answer.token)
    raise AuthFailed(f"authenticating {security.user!r} failed: {why}")


class _CallDetails(grpc.ClientCallDetails):  # type: ignore[misc]
    def __init__(self, base: Any, metadata: list[tuple[str, str]]) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


class TokenInterceptor(grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
                       grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
                       grpc.StreamUnaryClientInterceptor,  # type: ignore[misc]
                       grpc.StreamStreamClientInterceptor):  # type: ignore[misc]
    """Adds `token: <token>` to the metadata of every call (unary and streaming)."""

    def __init__(self, token: str) -> None:
        self.token = token

    def _details(self, details: Any) -> _CallDetails:
        metadata = [m for m in (details.metadata or ()) if m[0] != TOKEN_KEY]
        return _CallDetails(details, [*metadata, (TOKEN_KEY, self.token)])

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any,
                              request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: Any,
                               request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Callable[..., Any], details: Any,
                               requests: Iterator[Any]) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation: Callable[..., Any], details: Any,
                                requests: Iterator[Any]) -> Any:
        return continuation(self._details(details), requests)


class AuthClient(Client):
    """The etcd client with its channel wrapped in a `TokenInterceptor`: every call it
    makes, on every endpoint it moves to, carries the token."""

    def __init__(self, endpoints: Sequence[str], token: str, timeout: float,
                 ca_cert: str | None, cert: str | None, key: str | None) -> None:
        self._interceptor = TokenInterceptor(token)
        super().__init__(endpoints, timeout, ca_cert, cert, key)

    def _open(self, index: int) -> None:
        from sediment.actors.etcd.pb import rpc_pb2_grpc as pbg

        super()._open(index)
        channel = grpc.intercept_channel(self._channel, self._interceptor)
        self._kv = pbg.KVStub(channel)
        self._watch = pbg.WatchStub(channel)
        self._lease = pbg.LeaseStub(channel)
        self._maintenance = pbg.MaintenanceStub(channel)
        self._cluster = pbg.ClusterStub(channel)


def connect(endpoints: Sequence[str], security: Security, token: str | None = None,
            timeout: float = 10.0) -> Client:
    """An etcd client over `endpoints` with the command line's TLS and, with a user, the
    token (`authenticate`'s, asked here when not given) on every request."""
    if security.user is None:
        from sediment.actors.etcd.client import connect as plain

        return plain(list(endpoints), timeout, security.ca_cert, security.cert, security.key)
    if token is None:
        token = authenticate(endpoints, security, timeout)
    return AuthClient(list(endpoints), token, timeout, security.ca_cert, security.cert,
                      security.key)


__all__ = ["AuthClient", "AuthFailed", "Security", "TokenInterceptor", "authenticate",
           "connect", "parse_user"]
