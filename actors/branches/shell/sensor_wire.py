"""Deletes reported to the cluster's delete sensor over the network.

A writer outside the runtime (the command line talking to a running `sediment start`
through its etcd endpoints) stages deletes with etcd Txns and then reports them here:
one unary gRPC method, `sediment.branches.v1.Sensor/CountDeletes`, served by every
node's etcd server beside etcd's own services (`actors/etcd/shell/server.py`). The server
forwards each report to the registered sensor as the `CountDelete` message a writer
inside the runtime sends; like that message, a report is fire and forget for the
sensor: dropped when no sensor runs (the answer says so), never waited on.

The body is JSON (no generated code for one method): `{"deletes": [[repo, branch,
token, sealed], ...]}` with at most `MAX_DELETES` items, each checked (names, a
staging token of 32 hex digits, sealed >= 0) before anything is sent: a bad body is
INVALID_ARGUMENT and nothing is counted. The answer: `{"counted": n, "sensor": bool}`.

With etcd auth on, a report is judged as the writes it stands for: the caller's token
(etcd's `token` metadata) must name a user who may write every reported staging token's
keys; otherwise the server answers etcd's status (user name is empty, invalid auth
token, permission denied) and nothing is counted.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc

from sediment.actors.branches import names as nm
from sediment.actors.branches.errors import BranchesError
from sediment.actors.branches.sensor import CountDelete

SERVICE = "sediment.branches.v1.Sensor"
METHOD = "CountDeletes"
PATH = f"/{SERVICE}/{METHOD}"
MAX_DELETES = 10_000  # reports in one request
MAX_BODY = 8 * 1024 * 1024  # bytes of one request
DEFAULT_TIMEOUT = 10.0


class BadReport(ValueError):
    """A report body that is not a list of well-formed deletes."""


def encode(deletes: Sequence[CountDelete]) -> bytes:
    return json.dumps({"deletes": [[d.repo, d.branch, d.token, d.sealed]
                                   for d in deletes]}).encode()


def decode(body: bytes) -> list[CountDelete]:
    """The deletes of a request body, every one checked (BadReport otherwise)."""
    if len(body) > MAX_BODY:
        raise BadReport(f"a report is at most {MAX_BODY} bytes, got {len(body)}")
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, ValueError) as err:
        raise BadReport(f"a report is JSON: {err}") from None
    items = value.get("deletes") if isinstance(value, dict) else None
    if not isinstance(items, list):
        raise BadReport('a report is {"deletes": [[repo, branch, token, sealed], ...]}')
    if len(items) > MAX_DELETES:
        raise BadReport(f"at most {MAX_DELETES} deletes in a report, got {len(items)}")
    out = []
    for item in items:
        if not isinstance(item, list) or len(item) != 4:
            raise BadReport(f"a delete is [repo, branch, token, sealed], got {item!r:.120}")
        repo, branch, token, sealed = item
        try:
            nm.check_repo(repo)
            nm.check_branch(branch)
            nm.check_token(token)
        except BranchesError as err:
            raise BadReport(str(err)) from None
        if isinstance(sealed, bool) or not isinstance(sealed, int) or sealed < 0:
            raise BadReport(f"sealed is a count >= 0, got {sealed!r:.40}")
        out.append(CountDelete(repo, branch, token, sealed))
    return out


Forward = Callable[[list[CountDelete]], Awaitable[bool]]
# -> None when the caller may report these deletes, else the gRPC status (code name,
# message) that refuses them
Refuse = Callable[[list[CountDelete], Any], Awaitable[tuple[str, str] | None]]


async def _never(deletes: list[CountDelete], context: Any) -> tuple[str, str] | None:
    return None


def handler(forward: Forward, refuse: Refuse = _never) -> Any:
    """The gRPC handler for an aio server: `forward` sends the checked deletes to the
    sensor and says whether one runs; `refuse` judges the caller first (auth)."""

    async def count_deletes(body: bytes, context: Any) -> bytes:
        try:
            deletes = decode(body)
        except BadReport as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        refused = await refuse(deletes, context)
        if refused is not None:
            await context.abort(getattr(grpc.StatusCode, refused[0]), refused[1])
        sensor = await forward(deletes) if deletes else False
        return json.dumps({"counted": len(deletes) if sensor else 0,
                           "sensor": sensor}).encode()

    method = grpc.unary_unary_rpc_method_handler(count_deletes)  # raw bytes both ways
    return grpc.method_handlers_generic_handler(SERVICE, {METHOD: method})


class DeleteReporter:
    """Collects a command's deletes (the tier's `DeleteHook`) and reports them in one
    request to the first endpoint that answers (over TLS with `credentials`, with
    `metadata` such as etcd's auth token). The deletes are already committed:
    a report that reaches no sensor loses only their count (`flush` says so)."""

    def __init__(self, endpoints: Sequence[str], timeout: float = DEFAULT_TIMEOUT,
                 credentials: grpc.ChannelCredentials | None = None,
                 metadata: Sequence[tuple[str, str]] = ()) -> None:
        if not endpoints:
            raise ValueError("a reporter needs at least one endpoint")
        self.endpoints = [e.removeprefix("http://").removeprefix("https://")
                          for e in endpoints]
        self.timeout = timeout
        self.credentials = credentials  # TLS, when the cluster serves it
        self.metadata = tuple(metadata)  # e.g. etcd's auth token
        self.pending: list[CountDelete] = []

    def __call__(self, repo: str, branch: str, token: str, sealed: int) -> None:
        self.pending.append(CountDelete(repo, branch, token, sealed))

    def flush(self) -> str | None:
        """Report what was collected; None when a sensor counted it, else why not."""
        if not self.pending:
            return None
        body, why = encode(self.pending[:MAX_DELETES]), "no endpoint answered"
        for endpoint in self.endpoints:
            try:
                with (grpc.insecure_channel(endpoint) if self.credentials is None
                      else grpc.secure_channel(endpoint, self.credentials)) as channel:
                    call = channel.unary_unary(PATH)
                    answer = json.loads(call(body, timeout=self.timeout,
                                             metadata=self.metadata or None))
            except grpc.RpcError as err:
                why = f"{endpoint}: {err.code().name}: {err.details()}"
                if err.code() != grpc.StatusCode.UNAVAILABLE:
                    break
                continue
            if not answer.get("sensor"):
                return "the cluster runs no delete sensor"
            del self.pending[:MAX_DELETES]
            return self.flush()
        return why


__all__ = ["MAX_DELETES", "PATH", "SERVICE", "BadReport", "DeleteReporter", "decode",
           "encode", "handler"]
