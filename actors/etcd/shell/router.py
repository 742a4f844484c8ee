"""Where the etcd server sends a request: to the raft member that leads, as etcd does.

A write is a proposal to the leader's raft member (on the leader's own node that is the
member beside the server in the raft host: an in-memory step; on a follower it is the
forwarding etcd does with a MsgProp); a linearizable read is a ReadIndex at the leader;
a serializable read is a query of the local member. The server's process tells the
router who leads (the local member's leadership notices); a "not leader" answer with a
hint moves it on at once. Every request is bounded by its deadline: without a leader
the client gets etcd's "no leader", a proposal whose outcome is unknown etcd's "request
timed out" (it may still commit, as in etcd).

A proposal is never sent twice: once a call carrying it may have reached a member (it
timed out, or the member exited while it was pending) the answer is "request timed
out" at once. Trying the next leader instead applied one Put twice when the leader died
with the proposal in its log and the new leader committed it (found by the headline
scenario with its traffic over gRPC). Only a member that did not exist (NoProc) or a
"not leader" answer lets the proposal go elsewhere; reads are retried freely.
"""

from __future__ import annotations

from typing import Any

from sediment.actors.etcd.status import EtcdStatus
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Done, Failed, NotLeader, Propose, Query, ReadIndex
from sediment.runtime.common_calls import Status
from sediment.runtime.errors import CallError, NoProc
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

HOP_TIMEOUT = 5.0  # seconds for one call to one member
RETRY_PAUSE = 0.05  # seconds between two tries while no member leads
MAX_HINTS = 8  # "not leader" hints followed in a row before pausing
APPLIED_POLL = 0.002  # seconds between two looks at the local member's applied index


class Router:
    def __init__(self, ctx: Process, group: str, nodes: tuple[str, ...], local: Pid) -> None:
        self.ctx = ctx
        self.group = group
        self.nodes = nodes
        self.me = ctx.self().node
        self.local = local
        self.leader: str | None = None
        self.term = 0
        self._pids: dict[str, Pid] = {self.me: local}

    def leadership(self, leader: str | None, term: int) -> None:
        if term >= self.term:
            self.leader, self.term = leader, term

    async def _pid(self, node: str) -> Pid | None:
        pid = self._pids.get(node)
        if pid is None:
            pid = await self.ctx.whereis(raft_name(self.group, node))
            if pid is not None:
                self._pids[node] = pid
        return pid

    async def propose(self, command: Any, timeout: float) -> tuple[int, Any]:
        """(raft index, the machine's result) once applied at the leader."""
        return await self._at_leader(Propose(command), timeout, "ErrTimeout")

    async def read(self, query: Any, timeout: float) -> tuple[int, Any]:
        """(read index, the answer) of a linearizable read by ReadIndex at the leader."""
        return await self._at_leader(ReadIndex(query), timeout, "ErrTimeout")

    async def local_query(self, query: Any, timeout: float = HOP_TIMEOUT) -> Any:
        """A serializable read (or any query) of this node's member."""
        return await self.ctx.call(self.local, Query(query), timeout=timeout)

    async def local_applied(self, index: int, timeout: float) -> None:
        """Wait (bounded) until this node's member has applied `index`: what a request
        answered at the leader wrote is then visible to the next request served here
        (a token Authenticate proposed, checked by the local member)."""
        ctx = self.ctx
        deadline = ctx.now() + timeout
        while True:
            status = await self.local_status()
            if int(status.get("applied", 0)) >= index or ctx.now() >= deadline:
                return
            await ctx.sleep(APPLIED_POLL)

    async def local_status(self) -> dict[str, Any]:
        status: dict[str, Any] = await self.ctx.call(self.local, Status(), timeout=HOP_TIMEOUT)
        return status

    async def _at_leader(self, request: Propose | ReadIndex, timeout: float,
                         lost: str) -> tuple[int, Any]:
        ctx = self.ctx
        deadline = ctx.now() + timeout
        hint: str | None = None
        hints = 0
        while True:
            target = hint or self.leader
            hint = None
            left = deadline - ctx.now()
            if left <= 0:
                break
            pid = await self._pid(target) if target is not None else None
            if pid is not None:
                try:
                    reply = await ctx.call(pid, request, timeout=min(HOP_TIMEOUT, left))
                except CallError as err:
                    self._pids.pop(target or "", None)
                    if isinstance(request, Propose) and not isinstance(err, NoProc):
                        raise EtcdStatus(lost, f"{err}"[:200]) from None  # may be in the log
                    reply = None  # down
                if isinstance(reply, Done):
                    if target != self.leader:
                        self.leader = target
                    return int(reply.index), reply.result
                if isinstance(reply, NotLeader) and reply.hint is not None and hints < MAX_HINTS:
                    hint, hints = reply.hint, hints + 1
                    continue
                if isinstance(reply, Failed):
                    raise EtcdStatus("ErrTimeout", f"{reply!r}"[:200])
            hints = 0
            await ctx.sleep(min(RETRY_PAUSE, max(deadline - ctx.now(), 0)))
        raise EtcdStatus("ErrNoLeader" if self.leader is None else lost)


__all__ = ["Router"]
