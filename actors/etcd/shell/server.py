"""The etcd v3 gRPC server of one node: a Sediment process in the node's raft host.

It serves etcd's KV, Watch, Lease, Maintenance, Cluster and Auth services on its own
port with grpc.aio, on the event loop of the host actor it runs in. It runs in the raft
host (`RAFT_HOST`) so that on the leader's node a request reaches the raft member as an
in-memory step: the gRPC handlers are tasks of this process and call the member with
`ctx.call` like any process code. The process follows the local member's leadership
notices (the router's leader and the headers' raft term) and answers `Endpoint()`
with the URL it serves, which MemberList and `Cluster.endpoints()` read. Beside etcd's
services it serves one of the branch tier's: deletes staged by writers outside the
runtime, reported to the delete sensor (`actors/branches/shell/sensor_wire.py`).

Ray only: the simulator's loop has no sockets (`Cluster.start(..., etcd=...)` refuses
it there). When the process ends (killed, or its supervisor stops it) the gRPC server is
stopped with it; the port is bound without SO_REUSEPORT, so a restarted server never
shares it with one still closing.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import grpc

from sediment import log
from sediment.actors.branches import names as branch_names
from sediment.actors.branches.shell import sensor_wire
from sediment.actors.branches.shell.names import SENSOR_NAME
from sediment.actors.etcd import status as st
from sediment.actors.etcd.lessor_core import Lessor
from sediment.actors.etcd.names import etcd_name
from sediment.actors.etcd.pb import rpc_pb2 as _rpc_pb2
from sediment.actors.etcd.shell.auth import Auth, AuthService
from sediment.actors.etcd.shell.leases import Leases, LeaseService, at_leader
from sediment.actors.etcd.shell.protocol import Endpoint, LeaseTimeToLive, NotLeader, RenewLease
from sediment.actors.etcd.shell.router import Router
from sediment.actors.etcd.shell.services import ClusterService, KVService, MaintenanceService
from sediment.actors.etcd.shell.watch_stream import WatchService
from sediment.actors.kv.errors import ErrLeaseNotFound
from sediment.actors.kv.names import KV_GROUP
from sediment.actors.kv.queries import AllLeases, Head, WriteCheck
from sediment.actors.kv.types import LeaseCheckpoint, LeaseRevoke
from sediment.actors.kv.validation import DEFAULT_LIMITS, Limits
from sediment.actors.log.shell.group_spec import GroupSpec
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import LeaderChanged, Subscribe
from sediment.runtime.common_calls import UnknownRequest
from sediment.runtime.errors import CallError, ReceiveTimeout
from sediment.runtime.messages import Call, Down
from sediment.runtime.process import Process

pb: Any = _rpc_pb2  # generated code: untyped

_logger = log.get_logger("sediment.etcd.server")
GRPC_OVERHEAD = 512 * 1024  # etcd's grpcOverheadBytes above --max-request-bytes
MAX_STREAMS = 1000  # concurrent streams on one client connection
LEASE_TICK = 0.5  # seconds between two looks at the leases' deadlines (leader only)
CHECKPOINT_EVERY = 5.0  # seconds between two lease checkpoints (etcd: 5 min)
RECONCILE_EVERY = 2.0  # seconds between two looks at the machine's leases
ELECTION_EXTEND = 1.0  # seconds a new leader adds to every lease (an election timeout)
MAX_REVOKES = 64  # expired leases being revoked at once


@dataclass(frozen=True)
class TlsFiles:
    """Server TLS: certificate and key (PEM files); `client_ca` turns on client
    certificate authentication (etcd's --client-cert-auth with --trusted-ca-file)."""

    cert: str
    key: str
    client_ca: str | None = None


@dataclass(frozen=True)
class EtcdWire:
    """The etcd API as `Cluster.start(..., etcd=EtcdWire(...))` asks for it: the
    address to bind and each node's port (in node order; 0 or none given: any free
    port), request timeout, TLS."""

    ports: tuple[int, ...] = ()
    host: str = "127.0.0.1"
    request_timeout: float = 10.0
    tls: TlsFiles | None = None

    def config(self, spec: GroupSpec, limits: Limits) -> EtcdConfig:
        if self.ports and len(self.ports) != len(spec.nodes):
            raise ValueError(f"EtcdWire.ports names {len(self.ports)} ports for "
                             f"{len(spec.nodes)} nodes")
        return EtcdConfig(spec, tuple(self.ports), self.host, limits, self.request_timeout,
                          self.tls)


@dataclass(frozen=True)
class EtcdConfig:
    """What every node's server needs: the KV group, the address to bind ("127.0.0.1"),
    each node's port (0: any free port; `ports` lines up with the group's nodes)."""

    spec: GroupSpec
    ports: tuple[int, ...]
    host: str = "127.0.0.1"
    limits: Limits = DEFAULT_LIMITS
    request_timeout: float = 10.0
    tls: TlsFiles | None = None

    def port_of(self, node: str) -> int:
        return self.ports[self.spec.nodes.index(node)] if self.ports else 0


@dataclass
class EtcdServer:
    """The state the services share (one per process)."""

    ctx: Process
    config: EtcdConfig
    router: Router
    url: str = ""
    endpoints: dict[str, str] = field(default_factory=dict)
    auth: Any = None
    leases: Any = None
    lessor: Lessor = field(default_factory=Lessor)
    revoking: set[asyncio.Task[None]] = field(default_factory=set)
    checkpointed_at: float = 0.0
    reconciled_at: float = 0.0

    def __post_init__(self) -> None:
        self.me = self.ctx.self().node
        self.nodes = self.config.spec.nodes
        self.spec = self.config.spec
        self.limits = self.config.limits
        self.request_timeout = self.config.request_timeout
        self.cluster_id = st.cluster_id(self.nodes)
        self.member_id = st.member_id(self.me)
        if self.leases is None:
            self.leases = Leases(self.limits)
        if self.auth is None:
            self.auth = Auth(self)

    def header(self, revision: int) -> Any:
        return pb.ResponseHeader(cluster_id=self.cluster_id, member_id=self.member_id,
                                 revision=revision, raft_term=self.router.term)

    def reply(self, response: Any) -> Any:
        """A KV response with the server's ids and term in the header."""
        response.header.cluster_id = self.cluster_id
        response.header.member_id = self.member_id
        response.header.raft_term = self.router.term
        return response

    async def head_header(self) -> Any:
        head = await self.router.local_query(Head())
        return self.header(head if isinstance(head, int) else 0)

    # -- leases (the lessor runs where the local member leads) ---------------------------

    @property
    def leading(self) -> bool:
        return self.router.leader == self.me and self.lessor.leading

    def lease_granted(self, lease: int, ttl: int) -> None:
        if self.leading:
            self.lessor.granted(self.ctx.now(), lease, ttl)

    async def _machine_leases(self) -> list[Any]:
        infos = await self.router.local_query(AllLeases())
        return list(infos) if isinstance(infos, list) else []

    async def renew(self, lease: int) -> int:
        """A keep-alive: the TTL, 0 for a lease that does not exist (etcd's answer)."""
        if not self.leading:
            return int(await at_leader(self, RenewLease(lease)))
        ttl = self.lessor.renew(self.ctx.now(), lease)
        if ttl is None and lease not in self.lessor.deadline:  # granted through another node
            self.lessor.reconcile(self.ctx.now(), await self._machine_leases())
            ttl = self.lessor.renew(self.ctx.now(), lease)
        return 0 if ttl is None else ttl

    async def time_to_live(self, lease: int) -> int | None:
        if not self.leading:
            left = await at_leader(self, LeaseTimeToLive(lease))
            return None if left is None else int(left)
        return self.lessor.remaining(self.ctx.now(), lease)

    async def leadership(self, leader: str | None, term: int) -> None:
        self.router.leadership(leader, term)
        if self.router.leader == self.me and not self.lessor.leading:
            self.lessor.promote(self.ctx.now(), await self._machine_leases(), ELECTION_EXTEND)
            self.checkpointed_at = self.reconciled_at = self.ctx.now()
            _logger.info("lessor promoted", leases=len(self.lessor.deadline))
        elif self.router.leader != self.me and self.lessor.leading:
            self.lessor.demote()

    async def lease_tick(self) -> None:
        """Revoke what expired, checkpoint remaining TTLs, follow the machine's leases."""
        if not self.leading:
            return
        now = self.ctx.now()
        if now - self.reconciled_at >= RECONCILE_EVERY:
            self.reconciled_at = now
            self.lessor.reconcile(now, await self._machine_leases())
        for lease in self.lessor.expired(self.ctx.now()):
            if len(self.revoking) >= MAX_REVOKES:
                self.lessor.revoking.pop(lease, None)  # next tick
                continue
            task = asyncio.ensure_future(self._revoke(lease))
            self.revoking.add(task)
            task.add_done_callback(self.revoking.discard)
        if now - self.checkpointed_at >= CHECKPOINT_EVERY:
            self.checkpointed_at = now
            items = self.lessor.checkpoints(now)
            if items:
                task = asyncio.ensure_future(self._checkpoint(items))
                self.revoking.add(task)
                task.add_done_callback(self.revoking.discard)

    async def _revoke(self, lease: int) -> None:
        try:
            _, result = await self.router.propose(LeaseRevoke(lease), self.request_timeout)
        except Exception as err:  # noqa: BLE001 - retried at a later tick
            _logger.info("lease revoke not done", lease=lease, error=str(err)[:200])
            return
        if result is None or not isinstance(result, Exception) or isinstance(
                result, ErrLeaseNotFound):
            self.lessor.revoked(lease)

    async def _checkpoint(self, items: tuple[tuple[int, int], ...]) -> None:
        try:
            await self.router.propose(LeaseCheckpoint(items), self.request_timeout)
        except Exception as err:  # noqa: BLE001 - the next checkpoint carries them again
            for lease, _ in items:
                self.lessor.checkpointed.pop(lease, None)
            _logger.info("lease checkpoint not done", error=str(err)[:200])

    async def endpoint_of(self, node: str) -> str:
        if node == self.me:
            return self.url
        if node not in self.endpoints:
            try:
                url = await self.ctx.call(etcd_name(node), Endpoint(), timeout=2)
            except CallError:
                return ""
            if url:
                self.endpoints[node] = url
        return self.endpoints.get(node, "")


def _credentials(tls: TlsFiles) -> Any:
    def read(path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    ca = read(tls.client_ca) if tls.client_ca else None
    return grpc.ssl_server_credentials([(read(tls.key), read(tls.cert))], root_certificates=ca,
                                       require_client_auth=ca is not None)


async def _on_call(server: EtcdServer, call: Call) -> None:
    """`Endpoint()`; from the other nodes' servers: `RenewLease`, `LeaseTimeToLive`
    (`protocol.py`)."""
    ctx, request = server.ctx, call.request
    if isinstance(request, Endpoint):
        ctx.reply(call.from_, server.url)
    elif isinstance(request, RenewLease | LeaseTimeToLive):
        if not server.leading:
            ctx.reply(call.from_, NotLeader(server.router.leader))
            return
        now, lease = ctx.now(), int(request.lease)
        if isinstance(request, RenewLease):
            ctx.reply(call.from_, await server.renew(lease))
        else:
            ctx.reply(call.from_, server.lessor.remaining(now, lease))
    else:
        ctx.reply(call.from_, UnknownRequest.of(call.request))


class _Malformed:
    """A request whose bytes are no message of its type (handed to the handler, which
    answers etcd's INTERNAL "error unmarshalling request" as Go's gRPC does)."""

    def __init__(self, error: Exception) -> None:
        self.error = error


def _decoder(cls: Any) -> Any:
    def decode(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except Exception as err:  # noqa: BLE001 - any decoding failure is the client's
            return _Malformed(err)
    return decode


def _guarded(method: Any) -> Any:
    async def unary(request: Any, context: Any) -> Any:
        if isinstance(request, _Malformed):
            await context.abort(grpc.StatusCode.INTERNAL,
                                f"grpc: error unmarshalling request: {request.error}")
        return await method(request, context)
    return unary


def _handlers(service: str, servicer: Any) -> Any:
    """The service's methods with decoders that never raise (generated code would answer
    a malformed request with UNKNOWN, etcd answers INTERNAL). A method the servicer does
    not define answers UNIMPLEMENTED, as etcd's do for what it does not serve."""
    descriptor = pb.DESCRIPTOR.services_by_name[service]
    handlers = {}
    for m in descriptor.methods:
        decode = _decoder(getattr(pb, m.input_type.name))
        encode = getattr(pb, m.output_type.name).SerializeToString
        method = getattr(servicer, m.name, None)
        if method is None:
            method = _unimplemented(f"etcdserverpb.{service}/{m.name}")
        if m.client_streaming and m.server_streaming:
            handlers[m.name] = grpc.stream_stream_rpc_method_handler(
                method, request_deserializer=decode, response_serializer=encode)
        elif m.server_streaming:
            handlers[m.name] = grpc.unary_stream_rpc_method_handler(
                method, request_deserializer=decode, response_serializer=encode)
        else:
            handlers[m.name] = grpc.unary_unary_rpc_method_handler(
                _guarded(method), request_deserializer=decode, response_serializer=encode)
    return grpc.method_handlers_generic_handler(f"etcdserverpb.{service}", handlers)


def _unimplemented(name: str) -> Any:
    async def method(request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"sediment does not serve {name}")
    return method


def _to_sensor(ctx: Process) -> sensor_wire.Forward:
    """Deletes reported by writers outside the runtime, sent on to the branch tier's
    delete sensor wherever it runs (`actors/branches/shell/sensor_wire.py`)."""

    async def forward(deletes: list[Any]) -> bool:
        sensor = await ctx.whereis(SENSOR_NAME)
        if sensor is None:
            return False
        for d in deletes:
            ctx.send(sensor, d)
        return True
    return forward


def _refuse_reporter(server: EtcdServer) -> sensor_wire.Refuse:
    """With auth on, a delete report is judged as writes to the staging tokens it
    counts: the caller's user must be allowed to write each token's keys (the local
    member's auth state decides, as for a serializable read)."""

    async def refuse(deletes: list[Any], context: Any) -> tuple[str, str] | None:
        try:
            for repo, token in sorted({(d.repo, d.token) for d in deletes}):
                prefix = branch_names.staging_prefix(repo, token)
                query = await server.auth.wrap(
                    WriteCheck(prefix, branch_names.prefix_end(prefix)), context)
                found = await server.router.local_query(query)
                if isinstance(found, Exception):
                    raise found
        except Exception as err:  # noqa: BLE001 - every refusal leaves as etcd's status
            return st.status_of(err)
        return None
    return refuse


async def etcd_server(ctx: Process, config: EtcdConfig) -> None:
    """Process entry: bind the port, serve until the process ends."""
    me = ctx.self().node
    raft = await ctx.whereis(raft_name(KV_GROUP, me))
    if raft is None:
        raise RuntimeError(f"the kv raft member on {me} is not running")
    ctx.monitor(raft)
    router = Router(ctx, KV_GROUP, config.spec.nodes, raft)
    server = EtcdServer(ctx, config, router)
    now = await ctx.call(raft, Subscribe(ctx.self()), timeout=30)
    await server.leadership(now.leader, now.term)
    options = [("grpc.max_receive_message_length", config.limits.max_request_bytes
                + GRPC_OVERHEAD),
               ("grpc.max_send_message_length", 2**31 - 1),
               ("grpc.max_concurrent_streams", MAX_STREAMS),
               ("grpc.so_reuseport", 0)]
    grpc_server = grpc.aio.server(options=options)
    for name, servicer in (("KV", KVService(server)), ("Watch", WatchService(server)),
                           ("Maintenance", MaintenanceService(server)),
                           ("Lease", LeaseService(server)), ("Auth", AuthService(server)),
                           ("Cluster", ClusterService(server))):
        grpc_server.add_generic_rpc_handlers((_handlers(name, servicer),))
    grpc_server.add_generic_rpc_handlers((sensor_wire.handler(_to_sensor(ctx),
                                                              _refuse_reporter(server)),))
    address = f"{config.host}:{config.port_of(me)}"
    if config.tls is None:
        port = grpc_server.add_insecure_port(address)
    else:
        port = grpc_server.add_secure_port(address, _credentials(config.tls))
    scheme = "http" if config.tls is None else "https"
    server.url = f"{scheme}://{config.host}:{port}"
    await grpc_server.start()
    _logger.info("etcd server up", url=server.url)
    try:
        ticked = ctx.now()
        while True:
            try:
                msg = await ctx.receive(timeout=LEASE_TICK if server.leading else None)
            except ReceiveTimeout:
                msg = None
            if server.leading and ctx.now() - ticked >= LEASE_TICK:
                ticked = ctx.now()
                await server.lease_tick()
            if isinstance(msg, LeaderChanged):
                await server.leadership(msg.leader, msg.term)
            elif isinstance(msg, Call):
                await _on_call(server, msg)
            elif isinstance(msg, Down) and msg.pid == raft:
                raise RuntimeError(f"the kv raft member went down: {msg.reason}")
    finally:
        await grpc_server.stop(0)


__all__ = ["EtcdConfig", "EtcdServer", "EtcdWire", "TlsFiles", "etcd_server"]
