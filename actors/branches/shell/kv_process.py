"""The KV as a port inside a Sediment process: Range and Txn proposed through the
"kv" raft group's leader, as the KV cluster's `Client` does from the driver.

This is the one place the branch tier's processes touch the KV's process protocol
(`Propose(request)` to a `raft:kv@<node>` member, answered `Done(index, result)` or
`NotLeader(hint)`, `actors/log/shell/protocol.py`), the same convention the scenario traffic and the
block tier use; requests are checked with the KV's own `validation` first, so a bad
one never reaches the log. A member that is down (no such process) is skipped; a call
that timed out may have been appended, so it ends the request with an indeterminate
KvUnavailable instead of proposing it twice.
"""

from __future__ import annotations

from typing import Any

from sediment.actors.branches.errors import KvUnavailable
from sediment.actors.kv import validation
from sediment.actors.kv.names import KV_GROUP
from sediment.actors.kv.types import Range, RangeResult, Txn, TxnResult
from sediment.actors.kv.validation import DEFAULT_LIMITS, Limits
from sediment.actors.log.shell.names import raft_name
from sediment.actors.log.shell.protocol import Done, Failed, NotLeader, Propose
from sediment.runtime.errors import CallError, NoProc
from sediment.runtime.process import Process

PAUSE = 0.05  # seconds between rounds over the members when none leads


class ProcessKv:
    def __init__(self, ctx: Process, nodes: tuple[str, ...], timeout: float = 10.0,
                 rounds: int = 20, limits: Limits = DEFAULT_LIMITS) -> None:
        if not nodes:
            raise ValueError("a KV port needs the KV's member nodes")
        self.ctx = ctx
        self.nodes = nodes
        self.timeout = timeout
        self.rounds = rounds
        self.limits = limits
        self.leader: str | None = None
        self._cursor = 0

    async def range(self, request: Range) -> RangeResult:
        result: RangeResult = await self._propose(request)
        return result

    async def txn(self, request: Txn) -> TxnResult:
        result: TxnResult = await self._propose(request)
        return result

    async def _propose(self, request: Any) -> Any:
        validation.check_request(request, self.limits)
        ctx = self.ctx
        for attempt in range(self.rounds * len(self.nodes)):
            if attempt and self.leader is None and attempt % len(self.nodes) == 0:
                await ctx.sleep(PAUSE)
            node = self.leader or self.nodes[self._cursor % len(self.nodes)]
            self._cursor += 1
            pid = await ctx.whereis(raft_name(KV_GROUP, node))
            if pid is None:
                self.leader = None
                continue
            try:
                reply = await ctx.call(pid, Propose(request), timeout=self.timeout)
            except NoProc:
                self.leader = None
                continue
            except CallError as err:
                self.leader = None
                raise KvUnavailable(f"the KV did not answer: {err}", indeterminate=True) from err
            if isinstance(reply, Done):
                self.leader = node
                if isinstance(reply.result, BaseException):
                    raise reply.result
                return reply.result
            if isinstance(reply, NotLeader):
                hint = reply.hint
                self.leader = hint if hint in self.nodes and hint != node else None
                continue
            if isinstance(reply, Failed) and reply.reason == "Dropped":
                self.leader = None
                continue
            raise KvUnavailable(f"unexpected reply from the KV: {reply!r:.200}",
                                indeterminate=True)
        raise KvUnavailable("no KV member accepted the request", indeterminate=False)


__all__ = ["ProcessKv"]
