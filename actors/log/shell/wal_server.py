"""The node's WAL process: one per node, shared by every raft group on it.

Raft servers send `WalWriteReq` messages and go on; the WAL process takes every write
waiting in its mailbox, appends them as one batch with one fsync (group commit: writes
that arrive during an fsync form the next batch), and answers each writer with
`WalWritten(group, index, term)` for its last durable entry. It also keeps, per group, the
entries it holds (Ra's memtable role), so a restarted raft server gets its log back with
`("recovered", group)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sediment import log
from sediment.actors.log.storage.records import Entry as Stored
from sediment.actors.log.storage.wal import GroupLog, Wal, WalWrite
from sediment.runtime.errors import ReceiveTimeout
from sediment.runtime.messages import Call
from sediment.runtime.pid import Pid
from sediment.runtime.process import Process

_logger = log.get_logger("sediment.log.wal")
MAX_BATCH = 8192  # Ra's WAL max batch


@dataclass(frozen=True)
class WalWriteReq:
    group: str
    entries: tuple[Stored, ...]
    writer: Pid
    prev_index: int | None = None  # set: a sparse write (snapshot install)


@dataclass(frozen=True)
class WalWritten:
    group: str
    index: int
    term: int


@dataclass(frozen=True)
class WalRejected:
    """The write left a gap: resend from `from_index`."""

    group: str
    from_index: int


async def wal_server(ctx: Process, directory: str, max_size: int) -> None:
    """Process entry: recover the WAL directory, then serve batched writes."""
    wal, recovery = Wal.open(directory, max_size, fp=_sync_failpoint(ctx))
    memtable: dict[str, GroupLog] = {}
    for group, entries in recovery.groups.items():
        glog = memtable.setdefault(group, GroupLog())
        for entry in entries:
            glog.add(entry)
    if recovery.truncated:
        _logger.warning("wal recovered with a torn tail cut", cut=recovery.truncated)
    while True:
        msg = await ctx.receive()
        if isinstance(msg, Call):
            ctx.reply(msg.from_, _answer(memtable, msg.request))
        elif isinstance(msg, WalWriteReq):
            batch = [msg, *await _drain(ctx)]
            _write(ctx, wal, memtable, batch)


def _answer(memtable: dict[str, GroupLog], request: Any) -> Any:
    if isinstance(request, tuple) and request[:1] == ("recovered",):
        glog = memtable.get(request[1])
        return list(glog.entries) if glog is not None else []
    return ("error", ("unknown_request", request))


async def _drain(ctx: Process) -> list[WalWriteReq]:
    """Every write already waiting: they share the batch's one fsync."""
    more: list[WalWriteReq] = []
    while len(more) < MAX_BATCH:
        try:
            more.append(await ctx.receive(WalWriteReq, timeout=0))
        except ReceiveTimeout:
            break
    return more


def _write(ctx: Process, wal: Wal, memtable: dict[str, GroupLog],
           batch: list[WalWriteReq]) -> None:
    writes = [WalWrite(req.group, entry, req.prev_index if i == 0 else
                       (req.entries[i - 1].index if req.prev_index is not None else None))
              for req in batch for i, entry in enumerate(req.entries)]
    result = wal.append(writes, fp=_sync_failpoint(ctx))
    for req in batch:
        glog = memtable.setdefault(req.group, GroupLog())
        if req.group in result.rejected:
            ctx.send(req.writer, WalRejected(req.group, result.rejected[req.group]))
            continue
        for i, entry in enumerate(req.entries):
            prev = req.prev_index if i == 0 else (
                req.entries[i - 1].index if req.prev_index is not None else None)
            glog.add(entry, prev)
        if req.entries:
            last = req.entries[-1]
            ctx.send(req.writer, WalWritten(req.group, last.index, last.term))


def _sync_failpoint(ctx: Process) -> Any:
    """Storage failpoints are synchronous; only `crash` and `raise` apply there."""
    return ctx.failpoint_sync
