"""etcd's KV, Maintenance and Cluster services over the router (etcdserverpb).

Each handler turns the protobuf request into the KV's own type (`wire.py`), checks it
(`validation.py`: a bad request is refused before it becomes a log entry, with etcd's
error), sends it where etcd would (a write and a linearizable read to the leader, a
serializable read to the local member) and answers with etcd's header: cluster id,
member id, the revision of the answer, the raft term. Errors leave as etcd's gRPC status
(`status.status_of`).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

from sediment.actors.etcd import status as st
from sediment.actors.etcd.pb import rpc_pb2 as _rpc_pb2
from sediment.actors.kv import metrics as kv_metrics
from sediment.actors.kv import validation, wire
from sediment.actors.kv.machine import DB_FILE
from sediment.actors.kv.queries import HashKv
from sediment.actors.kv.types import Compact, Put, Range

pb: Any = _rpc_pb2  # generated code: untyped

if TYPE_CHECKING:
    from sediment.actors.etcd.shell.server import EtcdServer

Handler = Callable[[Any, Any], Awaitable[Any]]


async def answer(context: Any, handler: Handler, request: Any) -> Any:
    """Run one unary handler; an error becomes etcd's status (nothing else leaks)."""
    kind = kv_metrics.type_name(request[1] if isinstance(request, tuple) else request)
    try:
        answered = await handler(request, context)
    except Exception as err:  # noqa: BLE001 - every error leaves as a gRPC status
        kv_metrics.request("etcd", kind, type(err).__name__)
        code, message = st.status_of(err)
        await context.abort(getattr(grpc.StatusCode, code), message)
        return None  # abort raises; a context that does not answers nothing
    kv_metrics.request("etcd", kind, "ok")
    return answered


class KVService:
    def __init__(self, server: EtcdServer) -> None:
        self.s = server

    async def Range(self, request: Any, context: Any) -> Any:  # noqa: N802 - etcd's names
        return await answer(context, self._range, request)

    async def Put(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await answer(context, self._put, request)

    async def DeleteRange(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await answer(context, self._write, (wire.delete_from_pb, request))

    async def Txn(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await answer(context, self._write, (wire.txn_from_pb, request))

    async def Compact(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await answer(context, self._write, (wire.compact_from_pb, request))

    async def _range(self, request: Any, context: Any) -> Any:
        r: Range = wire.range_from_pb(request)
        validation.check_request(r, self.s.limits)
        query = await self.s.auth.wrap(r, context)
        if r.serializable:
            result = await self.s.router.local_query(query)
        else:
            _, result = await self.s.router.read(query, self.s.request_timeout)
        return self.s.reply(wire.result_pb(_raise(result)))

    async def _put(self, request: Any, context: Any) -> Any:
        command = await self.s.leases.put_command(request)
        return await self._propose(command, context)

    async def _write(self, item: tuple[Callable[[Any], Any], Any], context: Any) -> Any:
        convert, request = item
        return await self._propose(convert(request), context)

    async def _propose(self, command: Any, context: Any) -> Any:
        if not isinstance(command, Put):  # a Put was checked when it was built
            validation.check_request(command, self.s.limits)
        command = await self.s.auth.wrap(command, context)
        _, result = await self.s.router.propose(command, self.s.request_timeout)
        response = wire.result_pb(_raise(result))
        if isinstance(command, Compact) and command.physical:
            pass  # the machine schedules the pass; the answer comes when it is applied
        return self.s.reply(response)


def _raise(result: Any) -> Any:
    if isinstance(result, Exception):
        raise result
    return result


class MaintenanceService:
    """Status, Alarm (none are ever raised), Defragment (SQLite needs none: answered
    ok), HashKV. Snapshot and MoveLeader are not served (UNIMPLEMENTED)."""

    def __init__(self, server: EtcdServer) -> None:
        self.s = server

    async def Status(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await answer(context, self._status, request)

    async def Alarm(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await answer(context, self._alarm, request)

    async def Defragment(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await answer(context, self._defragment, request)

    async def HashKV(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await answer(context, self._hash_kv, request)

    async def _status(self, request: Any, context: Any) -> Any:
        s = self.s
        raft = await s.router.local_status()
        path = os.path.join(s.spec.group_dir(s.me), DB_FILE)
        size = sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
        leader = raft.get("leader")
        return pb.StatusResponse(
            header=s.header(int(raft.get("head", 0))), version=st.ETCD_VERSION, dbSize=size,
            dbSizeInUse=size, leader=st.member_id(leader) if leader else 0,
            raftIndex=int(raft.get("commit", 0)), raftTerm=int(raft.get("term", 0)),
            raftAppliedIndex=int(raft.get("applied", 0)), isLearner=False)

    async def _alarm(self, request: Any, context: Any) -> Any:
        return pb.AlarmResponse(header=await self.s.head_header())

    async def _defragment(self, request: Any, context: Any) -> Any:
        return pb.DefragmentResponse(header=await self.s.head_header())

    async def _hash_kv(self, request: Any, context: Any) -> Any:
        found = await self.s.router.local_query(HashKv(request.revision))
        digest, compact_revision, head = _raise(found)
        return pb.HashKVResponse(header=self.s.header(head), hash=digest,
                                 compact_revision=compact_revision)


class ClusterService:
    """MemberList: every node of the KV group with the endpoint its server serves.
    Membership changes are not served (UNIMPLEMENTED): the group's nodes are fixed."""

    def __init__(self, server: EtcdServer) -> None:
        self.s = server

    async def MemberList(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await answer(context, self._member_list, request)

    async def _member_list(self, request: Any, context: Any) -> Any:
        s = self.s
        members = []
        for node in s.nodes:
            url = await s.endpoint_of(node)
            members.append(pb.Member(ID=st.member_id(node), name=node,
                                     peerURLs=[f"sediment://{node}"],
                                     clientURLs=[url] if url else []))
        return pb.MemberListResponse(header=await s.head_header(), members=members)


__all__ = ["ClusterService", "KVService", "MaintenanceService", "answer"]
