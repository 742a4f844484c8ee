"""etcd's Lease service and Put's lease fields, over the lessor of the leader.

Grant and Revoke are proposals (the machine grants, or revokes and deletes the lease's
keys in one revision); the lease id is chosen here when the client leaves it 0, so every
member applies the same one. KeepAlive and TimeToLive are answered by the leader's
lessor (a follower's server forwards them to the leader's, as etcd forwards them to
the leader over HTTP); Leases is the local member's list. Put's `lease` must name a
lease the machine has when it applies (etcd's ErrLeaseNotFound otherwise, nothing
written); `ignore_lease` keeps the key's lease. `ignore_value` is refused: the raft
machine's snapshots refill values from the entries that wrote them, and an
ignore_value entry holds none.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

import grpc

from sediment.actors.etcd import status as st
from sediment.actors.etcd.names import etcd_name
from sediment.actors.etcd.pb import rpc_pb2 as _rpc_pb2
from sediment.actors.etcd.shell.protocol import LeaseTimeToLive, NotLeader, RenewLease
from sediment.actors.etcd.shell.services import answer
from sediment.actors.etcd.status import EtcdStatus
from sediment.actors.kv import validation, wire
from sediment.actors.kv.errors import ErrLeaseNotFound, ErrLeaseTTLTooLarge, InvalidRequest
from sediment.actors.kv.queries import AllLeases, LeaseLookup
from sediment.actors.kv.types import LeaseGrant, LeaseInfo, LeaseRevoke, Put
from sediment.actors.kv.validation import Limits
from sediment.runtime.errors import CallError

if TYPE_CHECKING:
    from sediment.actors.etcd.shell.server import EtcdServer

pb: Any = _rpc_pb2
MIN_TTL = 2  # etcd: ceil(3/2 x election timeout), 1 s here
MAX_TTL = 9_000_000_000  # etcd's MaxLeaseTTL


def check_ttl(ttl: int) -> int:
    if ttl > MAX_TTL:
        raise ErrLeaseTTLTooLarge()
    return max(ttl, MIN_TTL)


def new_id() -> int:
    return secrets.randbelow(2**62) + 1


def grant_command(lease: int, ttl: int) -> LeaseGrant:
    """A client's LeaseGrant as the command every member applies: its TTL checked and
    raised to the minimum, its id chosen here when the client left it 0 (one id for
    all members). The server proposes it; the differential test applies it the same way."""
    ttl = check_ttl(int(ttl))
    lease = int(lease) or new_id()
    if lease < 0:
        raise InvalidRequest("a lease id must not be negative")
    return LeaseGrant(lease, ttl)


class Leases:
    """Put's lease fields (checked at the boundary)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits

    async def put_command(self, request: Any) -> Put:
        put: Put = wire.put_from_pb(request)
        validation.check_request(put, self.limits)
        if put.ignore_value:
            raise InvalidRequest("sediment: ignore_value is not supported")
        return put


class LeaseService:
    def __init__(self, server: EtcdServer) -> None:
        self.s = server

    async def LeaseGrant(self, request: Any, context: Any) -> Any:  # noqa: N802 - etcd's
        return await answer(context, self._grant, request)

    async def LeaseRevoke(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await answer(context, self._revoke, request)

    async def LeaseTimeToLive(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await answer(context, self._time_to_live, request)

    async def LeaseLeases(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await answer(context, self._leases, request)

    async def LeaseKeepAlive(self, requests: Any, context: Any) -> Any:  # noqa: N802
        async for request in requests:
            if not hasattr(request, "ID"):
                return
            try:
                ttl = await self.s.renew(request.ID)
            except Exception as err:  # noqa: BLE001 - the stream ends with etcd's status
                code, message = st.status_of(err)
                await context.abort(getattr(grpc.StatusCode, code), message)
            await context.write(pb.LeaseKeepAliveResponse(
                header=self.s.header(0), ID=request.ID, TTL=max(ttl, 0)))

    async def _grant(self, request: Any, context: Any) -> Any:
        grant = grant_command(int(request.ID), int(request.TTL))
        lease, ttl = grant.id, grant.ttl
        command = await self.s.auth.wrap(grant, context)
        _, result = await self.s.router.propose(command, self.s.request_timeout)
        if isinstance(result, Exception):
            raise result
        self.s.lease_granted(lease, ttl)
        return pb.LeaseGrantResponse(header=self.s.header(result.revision), ID=lease, TTL=ttl)

    async def _revoke(self, request: Any, context: Any) -> Any:
        command = await self.s.auth.wrap(LeaseRevoke(int(request.ID)), context)
        _, result = await self.s.router.propose(command, self.s.request_timeout)
        if isinstance(result, Exception):
            raise result
        self.s.lessor.revoked(int(request.ID))
        return pb.LeaseRevokeResponse(header=self.s.header(result.revision))

    async def _time_to_live(self, request: Any, context: Any) -> Any:
        lease = int(request.ID)
        info = await self.s.router.local_query(LeaseLookup(lease, bool(request.keys)))
        if isinstance(info, ErrLeaseNotFound):
            return pb.LeaseTimeToLiveResponse(header=self.s.header(0), ID=lease, TTL=-1)
        if not isinstance(info, LeaseInfo):
            raise info if isinstance(info, Exception) else EtcdStatus("ErrTimeout")
        left = await self.s.time_to_live(lease)
        return pb.LeaseTimeToLiveResponse(header=await self.s.head_header(), ID=lease,
                                          TTL=-1 if left is None else left,
                                          grantedTTL=info.ttl, keys=list(info.keys))

    async def _leases(self, request: Any, context: Any) -> Any:
        infos = await self.s.router.local_query(AllLeases())
        if isinstance(infos, Exception):
            raise infos
        return pb.LeaseLeasesResponse(header=await self.s.head_header(),
                                      leases=[pb.LeaseStatus(ID=i.id) for i in infos])


async def at_leader(server: EtcdServer, request: RenewLease | LeaseTimeToLive) -> Any:
    """Ask the leader's etcd server (a follower forwarding a keep-alive or a TTL)."""
    leader = server.router.leader
    if leader is None:
        raise EtcdStatus("ErrNoLeader")
    try:
        reply = await server.ctx.call(etcd_name(leader), request, timeout=5)
    except CallError:
        raise EtcdStatus("ErrNoLeader") from None
    if isinstance(reply, NotLeader):
        raise EtcdStatus("ErrNotLeader")
    return reply


__all__ = ["MAX_TTL", "MIN_TTL", "LeaseService", "Leases", "at_leader", "check_ttl",
           "grant_command"]
